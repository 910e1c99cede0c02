"""Detectors that say *where* the mismatch sits, not only how large it is (issue 13).

    first_token            the first response token disagrees far more than the rest (temperature / BOS / boundary)
    position_onset         the mismatch level rises at one response position (fp8 KV cache, a context cap)
    turn_boundary          the first tokens after each tool / environment span disagree (chat template not
                           prefix-preserving, tool output tokenised differently by the two sides)
    mixed_policy_versions  sequences from several weight versions: part of the mismatch is staleness

Like `detectors.py`, each returns a finding or None, needs a large effect (a ratio in
`DiagnosisThresholds`) and a significant one (z ≥ `z`), so clean bf16 / fp16 noise stays silent.
The significance tests are rank tests over sequences or turns (a first token's percentile among its
own sequence's later tokens is uniform under noise), which hold for the heavy-tailed |δ| of real text.
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import findings
from ..config import DETECTOR_MAX_TOKENS, KERNEL_POW2_MIN, KERNEL_TILE, ONSET_MAX_POINTS, DiagnosisThresholds
from ..model import StepBatch, version_int
from .changepoints import change_points
from .detectors import _thin, numeric_rest, rest
from .registry import Scene, detector
from .tokens import Tokens

CHUNK = 1 << 20  # tokens per slice of the first-token pass


def _flat_index(tok: Tokens, which) -> np.ndarray:
    """`tok.index[which]` (a slice or an index array) without making the full index when every token is valid."""
    if tok.valid_index is not None:
        return tok.valid_index[which]
    return np.asarray(which) if not isinstance(which, slice) else np.arange(*which.indices(tok.n))


def _rank_z(u: np.ndarray) -> float:
    """z of the mean of n percentile ranks against 1/2 (each uniform under the null: variance ≤ 1/12)."""
    return float((u.mean() - 0.5) * math.sqrt(12 * u.shape[0])) if u.shape[0] else 0.0


def detect_first_token(tok: Tokens, dt: DiagnosisThresholds) -> dict | None:
    """The first response token's |δ| far above the rest of its sequence's, in most sequences.

    In slices of CHUNK tokens, so a 16M-token batch needs no full-size temporaries beyond |δ| itself."""
    if tok.n < dt.min_tokens:
        return None
    starts = tok.starts
    at_zero = _flat_index(tok, starts) == tok.batch_offsets[tok.seq[starts]]  # the sequence's first valid token is position 0
    first_idx = starts[at_zero]
    a0 = np.full(tok.n_seqs, np.nan)
    a0[tok.seq[first_idx]] = tok.abs_delta[first_idx]
    n_later = tok.counts - (~np.isnan(a0))
    has = ~np.isnan(a0) & (n_later > 0)
    if int(has.sum()) < dt.min_localise_sequences:
        return None
    # each first token's percentile among its own sequence's later tokens: over an even subsample of at most
    # DETECTOR_MAX_TOKENS tokens (the first tokens themselves always exact), in slices of CHUNK
    step = max(1, -(-tok.n // DETECTOR_MAX_TOKENS))
    below, seen, rest_sum = np.zeros(tok.n_seqs), np.zeros(tok.n_seqs), np.zeros(tok.n_seqs)
    for lo in range(0, tok.n, CHUNK * step):
        part = slice(lo, lo + CHUNK * step, step)
        ad, seq = tok.abs_delta[part], tok.seq[part]
        later = _flat_index(tok, part) != tok.batch_offsets[seq]
        ad, seq = ad[later], seq[later]
        ref = a0[seq]
        below += np.bincount(seq, weights=(ad < ref) + 0.5 * (ad == ref), minlength=tok.n_seqs)
        seen += np.bincount(seq, minlength=tok.n_seqs)
        rest_sum += np.bincount(seq, weights=ad, minlength=tok.n_seqs)
    has &= seen > 0
    if int(has.sum()) < dt.min_localise_sequences:
        return None
    u = below[has] / seen[has]
    z = _rank_z(u)
    first_abs = a0[has]
    rest_mean = float(rest_sum[has].sum() / seen[has].sum())
    ratio = float(first_abs.mean()) / rest_mean if rest_mean > 0 else math.inf
    if ratio < dt.first_token_ratio or z < dt.z:
        return None
    first_sum = float(a0[~np.isnan(a0)].sum())
    total = first_sum + float(rest_sum.sum()) * step  # Σ|δ| of the later tokens, scaled up from the subsample
    share = first_sum / total if total > 0 else 0.0
    sample = _thin(np.flatnonzero(has[tok.seq]), DETECTOR_MAX_TOKENS)
    sample = sample[_flat_index(tok, sample) != tok.batch_offsets[tok.seq[sample]]]
    return findings.make(
        "first_token", {"abs_delta_first_mean": float(first_abs.mean()), "abs_delta_first_median": float(np.median(first_abs)),
                        "abs_delta_rest_mean": rest_mean, "abs_delta_rest_median": float(np.median(np.abs(tok.delta[sample]))),
                        "ratio": ratio, "mean_delta_first": float(tok.delta[first_idx][has[tok.seq[first_idx]]].mean()),
                        "share_of_abs_delta": share, "rank_mean": float(u.mean()), "z": z, "sequences": int(has.sum()),
                        "every_nth_token": step, "threshold_ratio": dt.first_token_ratio}, dt)


def detect_position_onset(tok: Tokens, dt: DiagnosisThresholds, explained_by: str | None = None) -> dict | None:
    """A rise of the mismatch at one response position: PELT (`changepoints.py`) on the per-position mean log|δ| finds
    where, and the sequences that run across that position decide whether (`_onset_test`).

    `explained_by`: a finding that already says where the mismatch starts (`turn_boundary`: the context
    changes at the first tool span), which makes this one `info`."""
    if tok.n < dt.min_tokens:
        return None
    step = max(1, -(-tok.n // DETECTOR_MAX_TOKENS))  # an even subsample of at most DETECTOR_MAX_TOKENS tokens
    idx = np.arange(0, tok.n, step)
    pos = (_flat_index(tok, idx) - tok.batch_offsets[tok.seq[idx]]).astype(np.int64)
    ad = np.abs(tok.delta[idx])
    la = np.log(np.maximum(ad, dt.identical_atol))
    counts = np.bincount(pos)
    positions = np.flatnonzero(counts >= dt.onset_min_tokens)
    if positions.shape[0] < 2 * dt.onset_min_positions:
        return None
    sums = np.bincount(pos, weights=la)
    # PELT's cost is per pair of points: long responses are binned to at most ONSET_MAX_POINTS points first
    width = -(-positions.shape[0] // ONSET_MAX_POINTS)
    cuts = np.arange(0, positions.shape[0], width)
    w = np.add.reduceat(counts[positions], cuts)
    values = np.add.reduceat(sums[positions], cuts) / w
    min_size = max(1, -(-dt.onset_min_positions // width))
    if _widest_level_gap(values, w, min_size) < math.log(dt.onset_ratio):
        return None  # no two segments can differ by the ratio: skip the search (and ruptures' 2-3 s import)
    scanned = pos <= positions[-1]
    seq = tok.seq[idx]
    best = None
    for cp in change_points(values, w, min_size=min_size):
        if math.exp(cp.after - cp.before) < dt.onset_ratio:
            continue
        onset = int(positions[cuts[cp.index]])
        if width > 1:  # the exact position: the best single split within a bin either side of the binned one
            lo, hi = cuts[max(cp.index - 1, 0)], min(cuts[cp.index] + width + 1, positions.shape[0] - 1)
            onset = int(positions[_best_split(sums[positions], counts[positions], lo, hi)])
        test = _onset_test(ad[scanned], la[scanned], pos[scanned], seq[scanned], onset)
        if (test is not None and test["ratio"] >= dt.onset_ratio and test["typical_ratio"] >= dt.onset_ratio
                and test["z"] >= dt.z and test["sequences"] >= dt.min_localise_sequences
                and (best is None or test["ratio"] > best["ratio"])):
            best = test
    if best is None:
        return None
    boundary = kernel_boundary(best["position"])
    return findings.make(
        "position_onset",
        {**best, "kernel_boundary": boundary, "positions_scanned": int(positions.shape[0]),
         "min_tokens_per_position": dt.onset_min_tokens, "every_nth_token": step, "threshold_ratio": dt.onset_ratio,
         "explained_by_other_finding": explained_by is not None},
        dt, explained_by=explained_by)


def _onset_test(ad: np.ndarray, la: np.ndarray, pos: np.ndarray, seq: np.ndarray, onset: int) -> dict | None:
    """The rise at `onset` measured within the sequences that run across it, so a change of which sequences are
    still running (short answers end, long ones go on) cannot pass for one: the mean and the typical |δ| (geometric
    mean) before and after on their tokens, and a paired test over those sequences (each one's mean log|δ| after
    minus before: t = mean / standard error, with as many sequences as cross the onset).

    The per-position search alone fired on clean real data (SmolLM2, vLLM bf16 against hf fp32: "3.14× from
    position 56" while its mean |δ| went 0.0297 → 0.0315): tokens are not independent draws, a sequence's tokens
    share its content, and the sequences left after a position are not those before it."""
    after = pos >= onset
    seqs, first = np.unique(seq, return_inverse=True)
    n_after = np.bincount(first, weights=after, minlength=seqs.shape[0])
    n_before = np.bincount(first, minlength=seqs.shape[0]) - n_after
    crosses = (n_after > 0) & (n_before > 0)
    k = int(crosses.sum())
    if k < 2:
        return None
    sum_after = np.bincount(first, weights=la * after, minlength=seqs.shape[0])
    sum_before = np.bincount(first, weights=la * ~after, minlength=seqs.shape[0])
    d = (sum_after / np.maximum(n_after, 1) - sum_before / np.maximum(n_before, 1))[crosses]
    sd = float(d.std(ddof=1))
    z = float(d.mean() / (sd / math.sqrt(k))) if sd > 0 else (math.inf if d.mean() > 0 else 0.0)
    on = crosses[first]
    b, a = ad[on & ~after], ad[on & after]
    mean_b, mean_a = float(b.mean()), float(a.mean())
    typical_b, typical_a = float(np.exp(la[on & ~after].mean())), float(np.exp(la[on & after].mean()))
    return {"position": onset, "abs_delta_mean_before": mean_b, "abs_delta_mean_after": mean_a,
            "abs_delta_median_before": float(np.median(b)), "abs_delta_median_after": float(np.median(a)),
            "abs_delta_typical_before": typical_b, "abs_delta_typical_after": typical_a,
            "ratio": mean_a / mean_b if mean_b > 0 else math.inf,
            "typical_ratio": typical_a / typical_b if typical_b > 0 else math.inf, "z": z, "sequences": k,
            "tokens_before": int(b.shape[0]), "tokens_after": int(a.shape[0])}


def kernel_boundary(position: int) -> int | None:
    """The tile or power-of-two boundary `position` sits on or one past (96 for 97, 128 for 128 or 129), else None.

    Response positions count from 0, so an onset at 97 is the first token after 96 + 1 tokens of context from the
    response's start: a kernel that changes path at a block size (split-KV decode, a KV-cache page, chunked prefill)
    switches on there."""
    for b in (position, position - 1):
        if b >= KERNEL_POW2_MIN and (b % KERNEL_TILE == 0 or b & (b - 1) == 0):
            return b
    return None


def _widest_level_gap(values: np.ndarray, w: np.ndarray, m: int) -> float:
    """The largest difference between the weighted means of two segments of at least `m` points, bounded above.

    Any segment of ≥ m points splits into pieces of m to 2m − 1 points, and its mean is a convex combination of
    theirs, so the means of those short windows bracket every segment's mean."""
    cw, cs = np.concatenate([[0.0], np.cumsum(w)]), np.concatenate([[0.0], np.cumsum(values * w)])
    hi, lo = -math.inf, math.inf
    for length in range(m, min(2 * m - 1, values.shape[0]) + 1):
        means = (cs[length:] - cs[:-length]) / (cw[length:] - cw[:-length])
        hi, lo = max(hi, float(means.max())), min(lo, float(means.min()))
    return hi - lo


def _best_split(sums: np.ndarray, counts: np.ndarray, lo: int, hi: int) -> int:
    """The index k in (lo, hi] that best splits the weighted series in two levels (least squares, whole series)."""
    cw, cs = np.cumsum(counts, dtype=np.float64), np.cumsum(sums)
    k = np.arange(max(lo, 1), hi + 1)
    left_w, left_s = cw[k - 1], cs[k - 1]
    right_w, right_s = cw[-1] - left_w, cs[-1] - left_s
    gain = left_s ** 2 / left_w + right_s ** 2 / np.maximum(right_w, 1e-300)
    return int(k[np.argmax(gain)])


def detect_turn_boundary(tok: Tokens, turn: np.ndarray | None, dt: DiagnosisThresholds) -> dict | None:
    """The first tokens of every turn after the first (right after a tool span) disagree far more than the rest."""
    if turn is None or tok.n < dt.min_tokens:
        return None
    t = np.asarray(turn)[tok.index]
    n = tok.n
    new_run = np.ones(n, bool)
    new_run[1:] = (tok.seq[1:] != tok.seq[:-1]) | (t[1:] != t[:-1])
    starts = np.flatnonzero(new_run)
    run = np.cumsum(new_run) - 1
    offset = np.arange(n) - starts[run]
    head = (offset < dt.turn_head_tokens) & (t >= 1)
    body = offset >= dt.turn_head_tokens
    runs = np.unique(run[head])
    if runs.shape[0] < dt.min_localise_sequences or int(body.sum()) < dt.min_tokens:
        return None
    ad = tok.abs_delta
    ref = np.sort(ad[body])
    pct = (np.searchsorted(ref, ad[head], "left") + np.searchsorted(ref, ad[head], "right")) / (2.0 * ref.shape[0])
    # one rank per turn: the largest of its h head percentiles, raised to h (uniform under the null, as the max of
    # h uniforms is Beta(h, 1)), so a turn whose first token alone is off counts as fully as one whose whole head is
    firsts = np.flatnonzero(np.diff(np.concatenate([[-1], run[head]])))
    h = np.diff(np.append(firsts, pct.shape[0]))
    u = np.maximum.reduceat(pct, firsts) ** h
    z = _rank_z(u)
    body_mean = float(ad[body].mean())
    ratio = float(ad[head].mean()) / body_mean if body_mean > 0 else math.inf
    if ratio < dt.turn_ratio or z < dt.z:
        return None
    after = t >= 1
    by_offset = [float(ad[after & (offset == k)].mean()) for k in range(2 * dt.turn_head_tokens)
                 if (after & (offset == k)).any()]
    affected = [int(k) for k in np.unique(t[head])
                if body_mean > 0 and ad[head & (t == k)].mean() >= dt.turn_ratio * body_mean]
    return findings.make(
        "turn_boundary",
        {"abs_delta_head_mean": float(ad[head].mean()), "abs_delta_rest_mean": body_mean, "ratio": ratio,
         "abs_delta_by_offset": by_offset, "turns_affected": affected, "turn_starts": int(runs.shape[0]),
         "head_tokens": dt.turn_head_tokens, "rank_mean": float(u.mean()), "z": z,
         "abs_delta_turn0_mean": float(ad[t == 0].mean()) if (t == 0).any() else None, "threshold_ratio": dt.turn_ratio}, dt)


def _version_key(v: str):
    n = version_int(v)
    return (0, n, v) if n is not None else (1, 0, v)


def detect_mixed_versions(batch: StepBatch, tok: Tokens, dt: DiagnosisThresholds) -> dict | None:
    """Sequences generated by several policy weight versions (slime/miles `weight_versions`, verl min/max steps)."""
    if batch.weight_version is None:
        return None
    per_seq = [[v for v in str(joined).split(",") if v] for joined in batch.weight_version]
    distinct = sorted({v for vs in per_seq for v in vs}, key=_version_key)
    if len(distinct) <= 1:
        return None
    numeric = all(version_int(v) is not None for v in distinct)
    evidence: dict = {"versions": len(distinct), "values": ", ".join(distinct[:10]) + (", …" if len(distinct) > 10 else ""),
                      "threshold_spread": dt.versions_spread_warn}
    spread = None
    if numeric:
        newest, oldest = int(distinct[-1]), int(distinct[0])
        spread = newest - oldest
        stale = np.array([bool(vs) and min(int(v) for v in vs) < newest for vs in per_seq])
        abs_sum, counts = tok.seq_sum_of("abs_delta"), tok.counts  # per sequence: no 16M-token mask per side
        n_stale, n_new = int(counts[stale].sum()), int(counts[~stale].sum())
        evidence.update(oldest=oldest, newest=newest, spread=spread, stale_sequence_share=float(stale.mean()),
                        abs_delta_mean_newest=float(abs_sum[~stale].sum()) / n_new if n_new else None,
                        abs_delta_mean_stale=float(abs_sum[stale].sum()) / n_stale if n_stale else None)
    return findings.make("mixed_policy_versions", evidence, dt)


# ---------------------------------------------------------------- registered: where it sits, on the tokens without
# placeholders, and only when no whole-batch fault (an off-by-one, a one-sided transformation) explains the mismatch


@detector("first_token")
def _first_token(s: Scene) -> dict | None:
    return None if s.whole_batch_fault() else detect_first_token(s.once(numeric_rest), s.dt)


@detector("turn_boundary")
def _turn_boundary(s: Scene) -> dict | None:
    return None if s.whole_batch_fault() else detect_turn_boundary(s.once(numeric_rest), s.batch.turn, s.dt)


@detector("position_onset")
def _position_onset(s: Scene) -> dict | None:
    if s.whole_batch_fault():
        return None
    return detect_position_onset(s.once(numeric_rest), s.dt, "turn_boundary" if "turn_boundary" in s.found else None)


@detector("mixed_policy_versions", when_identical=True)  # said even when nothing differs
def _mixed_versions(s: Scene) -> dict | None:
    return detect_mixed_versions(s.batch, s.once(rest), s.dt)
