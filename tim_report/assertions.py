"""`assert_logprobs_match`: one assertion for kernel and engine test suites, decided by the diagnosis.

A kernel test scores the same tokens twice (a reference model and a patched one, fp32 and bf16) and
must tell rounding from a bug without a tolerance tuned per model. This module turns the two arrays
into a StepBatch (the candidate in the rollout's place, the reference in the trainer's, so that
δ = reference − candidate and the one-sided detectors read "candidate ≥ reference" and "candidate
returns 0.0"), runs the RL diagnosis with the precision's noise band as its noise ceiling, and
passes only numerical noise within that band. The failure message is the verdict in kernel words.

Nothing here imports charts, templates or torch: tensors are read through their own methods, and
the HTML page of a failure is rendered by the pytest plugin, only when asked (`--tim-report-dir`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .analysis import analyze
from .analysis.stats import k3_per_token
from .catalogue.chain import exact_line
from .catalogue.findings import FINDINGS
from .catalogue.numbers import fixed, fmt, plain
from .config import FLOOR_BAND_FACTOR, NOISE_BANDS, POSITIVE_LOGP_TOLERANCE, DiagnosisThresholds, NoiseBand
from .model import BatchReport, StepBatch

PASSING_REGIMES = ("identical", "numerical_noise")
# A last position whose median |δ| is this many times the band's mean, the rest within it, is not noise's shape.
LAST_POSITION_FACTOR = 10.0
ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
           "float8": "fp8", "fp8_e4m3": "fp8", "e4m3": "fp8"}
# What each shape of |δ| along the positions means inside a kernel (a finding's reading is its catalogue entry's `kernel`).
POSITION_READING = {
    "last_position": "only the last position of each sequence disagrees: a loss / logit slicing bug (the last "
                     "token's logits dropped, or an output written one position short)",
    "position_mixing": "each sequence's first position, which attends only to itself, agrees and later ones "
                       "disagree: the error is in how positions mix (rotary embedding, position ids, attention "
                       "mask, KV cache), not in a per-token computation",
    "per_token": "every position disagrees, each sequence's first (which attends only to itself) included: the "
                 "error is in a per-token computation (normalisation, MLP, projections, LM head / softmax), "
                 "not in how positions mix",
}


class LogprobsMismatch(AssertionError):
    """The candidate's log-probs differ from the reference's by more than the precision's numerical noise."""

    def __init__(self, message: str, result: MatchResult):
        super().__init__(message)
        self.result = result


@dataclass
class MatchResult:
    """What `assert_logprobs_match` decided and why; `report` is the full analysis (for the HTML page), None
    when no candidate value could be analysed (regime "invalid")."""

    passed: bool
    regime: str
    band: NoiseBand
    numbers: dict
    findings: list[dict]
    by_position: dict | None
    report: BatchReport | None = field(repr=False)
    message: str = ""


@dataclass
class _Inputs:
    reference: np.ndarray  # [B, L] float64
    candidate: np.ndarray  # [B, L]
    mask: np.ndarray  # [B, L] bool: compared (masked in, reference scored)
    token_ids: np.ndarray | None
    candidate_invalid: int  # masked-in tokens where the candidate is NaN, inf or > 0
    unscored: int  # positions NaN on both sides, skipped


# ---------------------------------------------------------------------------- inputs


def noise_band(precision: str | NoiseBand) -> NoiseBand:
    """The band for a precision name (fp32, tf32, bf16, fp16, fp8 and their torch spellings) or a custom NoiseBand."""
    if isinstance(precision, NoiseBand):
        return precision
    if not isinstance(precision, str):
        raise TypeError(f"precision: expected a name ({', '.join(NOISE_BANDS)}) or a NoiseBand, got {type(precision).__name__}")
    key = ALIASES.get(precision.lower().removeprefix("torch."), precision.lower())
    if key not in NOISE_BANDS:
        raise ValueError(f"precision '{precision}' is unknown: use one of {', '.join(NOISE_BANDS)} or a NoiseBand")
    return NOISE_BANDS[key]


def floor_band(reference, floor, mask=None) -> NoiseBand:
    """A band measured instead of assumed: the reference scored a second time under another batch composition
    (`floor`, same shape) disagrees with itself by mean |φ| and KL k3 κ; a candidate passes within FLOOR_BAND_FACTOR
    × mean |φ| and its square × κ (KL grows with the square of the log-ratio). Never tighter than the fp32 band, so a
    bit-identical reference does not fail every candidate on rounding."""
    ref, fl = _array(reference, "reference").astype(np.float64), _array(floor, "floor").astype(np.float64)
    if fl.shape != ref.shape:
        raise ValueError(f"floor has shape {_shape(floor)}, the reference {_shape(reference)}")
    m = np.isfinite(ref) & np.isfinite(fl) & (np.ones(ref.shape, bool) if mask is None else _array(mask, "mask", "biuf").astype(bool))
    if not m.any():
        raise ValueError("floor: no position where both the reference and the floor are finite")
    phi = ref[m] - fl[m]
    k3 = float(k3_per_token(phi).mean())
    fp32 = NOISE_BANDS["fp32"]
    return NoiseBand("measured floor", max(FLOOR_BAND_FACTOR * float(np.abs(phi).mean()), fp32.abs_delta_mean_max),
                     max(FLOOR_BAND_FACTOR ** 2 * k3, fp32.kl_k3_max),
                     f"the reference against itself under another batch composition: mean |φ| {fmt(float(np.abs(phi).mean()))}, "
                     f"KL k3 {fmt(k3)} over {int(m.sum())} tokens, times {plain(FLOOR_BAND_FACTOR)} (KL: its square)")


def _array(x, name: str, kinds: str = "fiu") -> np.ndarray:
    """A numpy copy of an array-like or a torch tensor (read through its own methods: no torch import here)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        x = (x.double() if x.is_floating_point() else x).numpy()
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: not an array or tensor ({e})") from None
    if a.dtype.kind not in kinds:
        raise TypeError(f"{name}: expected numbers, got dtype {a.dtype}")
    if a.ndim not in (1, 2):
        raise ValueError(f"{name}: expected [tokens] or [sequences, tokens], got shape {a.shape}")
    return a.reshape(1, -1) if a.ndim == 1 else a


def _inputs(reference, candidate, mask, token_ids) -> _Inputs:
    ref, cand = _array(reference, "reference", "fiu").astype(np.float64), _array(candidate, "candidate", "fiu").astype(np.float64)
    if ref.shape != cand.shape:
        raise ValueError(f"shapes differ: reference {_shape(reference)} vs candidate {_shape(candidate)}")
    if ref.size == 0:
        raise ValueError("no log-probs: reference and candidate are empty")
    m = np.ones(ref.shape, bool) if mask is None else _array(mask, "mask", "biuf")
    if m.shape != ref.shape:
        raise ValueError(f"mask has shape {_shape(mask)}, the log-probs {_shape(reference)}")
    if m.dtype.kind == "f" and not np.isin(m, (0.0, 1.0)).all():
        raise ValueError("mask: expected booleans or 0 / 1, got other values")
    m = m.astype(bool)
    ids = None if token_ids is None else _array(token_ids, "token_ids", "iu")
    if ids is not None and ids.shape != ref.shape:
        raise ValueError(f"token_ids has shape {_shape(token_ids)}, the log-probs {_shape(reference)}")
    ref_ok, cand_ok = np.isfinite(ref), np.isfinite(cand)
    unscored = m & ~ref_ok & ~cand_ok  # NaN on both sides: not scored (score_logprobs' padding and prompt)
    m &= ~unscored
    if not m.any():
        raise ValueError("nothing to compare: the mask selects no token, or every log-prob is NaN / inf")
    if (m & ~ref_ok).any():
        raise ValueError(f"reference has {int((m & ~ref_ok).sum())} NaN / inf log-probs where the candidate has "
                         "values: the reference must be finite wherever it is compared")
    if (ref[m] > POSITIVE_LOGP_TOLERANCE).any():
        raise ValueError(f"reference has {int((ref[m] > POSITIVE_LOGP_TOLERANCE).sum())} values above 0: pass "
                         "log-probs (log p ≤ 0), not losses or logits")
    bad = m & (~cand_ok | (cand > POSITIVE_LOGP_TOLERANCE))
    return _Inputs(ref, cand, m, ids, int(bad.sum()), int(unscored.sum()))


def _shape(x) -> tuple:
    return tuple(getattr(x, "shape", np.shape(x)))


def _batch(inp: _Inputs, band: NoiseBand, name: str) -> StepBatch:
    b, length = inp.reference.shape
    return StepBatch(
        rollout_logp=inp.candidate.ravel(), trainer_logp=inp.reference.ravel(),
        offsets=np.arange(b + 1, dtype=np.int64) * length, mask=inp.mask.ravel(),
        token_ids=None if inp.token_ids is None else inp.token_ids.ravel().astype(np.int64),
        meta={"model": name, "rollout_engine": "candidate", "trainer_engine": "reference",
              "rollout_dtype": band.name, "source": "assert_logprobs_match"},
        notes=["assert_logprobs_match: the rollout columns are the candidate, the trainer columns the reference "
               "(δ = reference − candidate); one row of the input is one sequence"])


# ---------------------------------------------------------------------------- the decision


def _by_position(inp: _Inputs, band: NoiseBand) -> dict | None:
    """Mean |δ| at each sequence's first, middle and last compared positions, and what that pattern means."""
    m = inp.mask & np.isfinite(inp.candidate) & (inp.candidate <= POSITIVE_LOGP_TOLERANCE)
    counts = m.sum(1)
    rows = np.flatnonzero(counts >= 3)
    if rows.shape[0] < 3:
        return None
    d = np.abs(inp.reference - inp.candidate)[rows]
    mr = m[rows]
    first_col = mr.argmax(1)
    last_col = mr.shape[1] - 1 - mr[:, ::-1].argmax(1)
    r = np.arange(rows.shape[0])
    mid = mr.copy()
    mid[r, first_col] = mid[r, last_col] = False
    groups = {"first": d[r, first_col], "middle": d[mid], "last": d[r, last_col]}
    out = {k: float(v.mean()) for k, v in groups.items()}
    lim = band.abs_delta_mean_max
    # one token per sequence at the ends: their medians (heavy-tailed |δ| of a handful of sequences), the
    # middle's mean with two standard errors of slack
    first, last = (float(np.median(groups[k])) for k in ("first", "last"))
    middle_beyond = out["middle"] - 2 * float(groups["middle"].std(ddof=1) / np.sqrt(groups["middle"].shape[0])) > lim
    reading = None
    if last > lim and out["middle"] <= lim and first <= lim:
        reading = "last_position"
        out["last_only_median"] = last
    elif bool((first_col == 0).all()) and middle_beyond:  # the first compared position is a sequence's start
        reading = "position_mixing" if first <= lim else "per_token"
    return {**out, "band": lim, "reading": reading}


def _own_findings(inp: _Inputs, numbers: dict, band: NoiseBand, by_position: dict | None) -> list[dict]:
    """What the assertion adds to the diagnosis: broken candidate values, a size beyond the band, and a shape
    noise does not have (one position of every sequence an order of magnitude beyond the band, the rest within)."""
    out = []
    if inp.candidate_invalid:
        out.append({"id": "candidate_invalid", "severity": "error",
                    "title": f"{inp.candidate_invalid} candidate log-probs are NaN, inf or above 0 where the reference has values",
                    "reading": "the kernel produced values that are not log-probs (overflow, an unwritten buffer, a sign error)"})
    ad, kl = numbers["abs_delta_mean"], numbers["kl_k3"]
    if ad - 2 * numbers["abs_delta_mean_se"] > band.abs_delta_mean_max or kl - 2 * numbers["kl_k3_se"] > band.kl_k3_max:
        out.append({"id": "beyond_band", "severity": "error",
                    "title": f"The difference is larger than {band.name} rounding produces",
                    "reading": f"mean |δ| {fmt(ad)} nats and KL k3 {fmt(kl)} against the {band.name} band of "
                               f"{plain(band.abs_delta_mean_max)} and {plain(band.kl_k3_max)} (with two standard errors of slack)"})
    if by_position and by_position.get("last_only_median", 0.0) > LAST_POSITION_FACTOR * band.abs_delta_mean_max:
        out.append({"id": "last_position", "severity": "error",
                    "title": f"The last position of each sequence disagrees (median |δ| {fmt(by_position['last_only_median'])} "
                             f"nats) while the others are within the {band.name} band",
                    "reading": POSITION_READING["last_position"]})
    return out


def _numbers(report: BatchReport, inp: _Inputs) -> dict:
    m = report.metrics
    return {"tokens": int(report.diagnosis["evidence"]["tokens"]), "sequences": int((inp.mask.sum(1) > 0).sum()),
            "abs_delta_mean": m["abs_delta_mean"], "abs_delta_mean_se": m.get("abs_delta_mean_se") or 0.0,
            "abs_delta_max": m["abs_delta_max"], "kl_k3": m["kl_k3"], "kl_k3_se": m.get("kl_k3_se") or 0.0,
            "corr_logp": m.get("corr_logp"), "candidate_invalid": inp.candidate_invalid, "unscored_skipped": inp.unscored}


# ---------------------------------------------------------------------------- the message


def _g(x) -> str:
    return "n/a" if x is None else f"{fmt(x)}"


def _kernel_words(text: str) -> str:
    for a, b in (("rollout", "candidate"), ("trainer", "reference"), ("Rollout", "Candidate"), ("Trainer", "Reference")):
        text = text.replace(a, b)
    return text


def _headline(result: MatchResult) -> str:
    band = result.band
    if result.regime == "systematic":
        return "systematic (the two do not compute the same function)"
    if result.regime == "elevated":
        return f"elevated (beyond {band.name} noise)"
    own = {"candidate_invalid": "the candidate returns values that are not log-probs",
           "last_position": "the last position of each sequence disagrees", "beyond_band": f"beyond {band.name} noise"}
    return next((own[f["id"]] for f in result.findings if f["id"] in own), result.regime.replace("_", " "))


def _decided_by(n: dict, band: NoiseBand) -> str:
    def vs(x: float, se: float, lim: float, unit: str = "") -> str:
        if x <= lim:
            return f"{_g(x)}{unit} ≤ {plain(lim)}"
        return f"{_g(x)}{unit} > {plain(lim)} " + ("✗" if x - 2 * se > lim else f"(within 2 SE, ± {_g(2 * se)})")

    corr = "n/a" if n["corr_logp"] is None else f"{fixed(n['corr_logp'], 6)}"
    return (f"  Decided by: mean |δ| {vs(n['abs_delta_mean'], n['abs_delta_mean_se'], band.abs_delta_mean_max, ' nats')}, "
            f"KL k3 {vs(n['kl_k3'], n['kl_k3_se'], band.kl_k3_max)} ({band.name} band, 2 SE of slack), log-prob "
            f"correlation {corr}; {n['tokens']} tokens in {n['sequences']} sequences; δ = reference − candidate.")


def _message(result: MatchResult, name: str | None) -> str:
    lines = [f"{name + ': ' if name else ''}log-probs do not match at {result.band.name} precision: {_headline(result)}."]
    for f in result.findings:
        if f["id"] == "beyond_band":
            continue  # its numbers are the "Decided by" line
        entry = FINDINGS.get(f["id"])  # None for this module's own checks (beyond_band, last_position)
        ev = entry.kernel_evidence(f.get("evidence") or {}) if entry is not None and entry.kernel_evidence else ""
        reading = f.get("reading") or (entry.kernel if entry is not None else "")
        lines.append(f"  - {_kernel_words(f['title'])} [{f['id']}]" + (f" ({ev})" if ev else "")
                     + (f": {reading}." if reading else "."))
    p = result.by_position
    if p is not None and p["reading"] and not any(f["id"] == "last_position" for f in result.findings):
        lines.append(f"  - By position, mean |δ| first {_g(p['first'])}, middle {_g(p['middle'])}, last {_g(p['last'])} "
                     f"nats: {POSITION_READING[p['reading']]}.")
    lines.append(_decided_by(result.numbers, result.band))
    lines.append(f"  {result.band.name} band: {result.band.source}.")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the assertion


def compare_logprobs(reference, candidate, mask=None, *, precision: str | NoiseBand = "bf16", token_ids=None,
                     name: str | None = None, floor=None, exact: bool = False, atol: float = 0.0) -> MatchResult:
    """The decision `assert_logprobs_match` makes, returned instead of raised."""
    band = floor_band(reference, floor, mask) if floor is not None else noise_band(precision)
    inp = _inputs(reference, candidate, mask, token_ids)
    if exact:
        return _exact(inp, band, name, atol)
    if inp.candidate_invalid == int(inp.mask.sum()):
        return _nothing_valid(inp, band, name)
    dt = DiagnosisThresholds(noise_kl_max=band.kl_k3_max, noise_abs_delta_max=band.abs_delta_mean_max,
                             min_usable_tokens=1,  # a test compares the tokens it gave, however few
                             set_by_caller=frozenset({"noise_kl_max", "noise_abs_delta_max"}))  # the precision's band, not a model class's
    with np.errstate(all="ignore"), warnings.catch_warnings():  # a broken side overflows exp(): not the user's warning
        warnings.simplefilter("ignore", RuntimeWarning)
        report = analyze(_batch(inp, band, name or "assert_logprobs_match"), run_id=name or "logprobs-match",
                         diagnosis_thresholds=dt)
    diag = report.diagnosis
    numbers = _numbers(report, inp)
    by_position = _by_position(inp, band)
    findings = ([f for f in diag["findings"] if f["severity"] in ("warn", "error")]
                + _own_findings(inp, numbers, band, by_position))
    passed = diag["regime"] in PASSING_REGIMES and not findings
    result = MatchResult(passed, diag["regime"], band, numbers, findings, by_position, report)
    if not passed:
        result.message = _message(result, name)
    return result


def _exact(inp: _Inputs, band: NoiseBand, name: str | None, atol: float) -> MatchResult:
    """The exact gate: every compared token equal (|δ| ≤ atol; a NaN candidate differs), else the count, the share,
    max |δ| and the first differing token. The analysis still runs, for the HTML page of a failure."""
    if not atol >= 0 or atol == float("inf"):
        raise ValueError(f"atol: {atol} is not a finite number ≥ 0")
    ref, cand = inp.reference[inp.mask], inp.candidate[inp.mask]
    d = np.abs(ref - cand)
    differs = ~(d <= atol)
    count, n = int(differs.sum()), int(ref.size)
    finite = d[np.isfinite(d)]
    first = None
    if count:
        row, col = (int(x[int(np.argmax(differs))]) for x in np.nonzero(inp.mask))
        ids = inp.token_ids
        i = int(np.argmax(differs))
        first = {"sequence": row, "position": col, "token": f"[{int(ids[row, col])}]" if ids is not None else "",
                 "logp": {"candidate": float(cand[i]), "reference": float(ref[i])}, "delta": float(ref[i] - cand[i])}
    gate = {"atol": float(atol), "tokens": n, "sides": ["candidate", "reference"], "passed": count == 0,
            "differing": count, "share": count / n, "max_abs": float(finite.max()) if finite.size else 0.0,
            "first": first, "first_link": None, "first_link_token": None}
    report = None
    if inp.candidate_invalid < int(inp.mask.sum()):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            report = analyze(_batch(inp, band, name or "assert_logprobs_match"), run_id=name or "logprobs-match")
    numbers = {"tokens": n, "sequences": int((inp.mask.sum(1) > 0).sum()), "exact": gate}
    regime = "identical" if count == 0 else (report.diagnosis["regime"] if report is not None else "invalid")
    result = MatchResult(count == 0, regime, band, numbers, [], None, report)
    if count:
        result.message = f"{name + ': ' if name else ''}log-probs are not identical: {exact_line(gate)}."
    return result


def _nothing_valid(inp: _Inputs, band: NoiseBand, name: str | None) -> MatchResult:
    """Every compared candidate value is NaN, inf or above 0: a broken kernel, with nothing to analyse."""
    n = inp.candidate_invalid
    f = {"id": "candidate_invalid", "severity": "error", "title": f"All {n} compared candidate log-probs are NaN, inf or above 0",
         "reading": "the kernel produced no log-prob at all (overflow, an unwritten buffer, a sign error)"}
    message = (f"{name + ': ' if name else ''}log-probs do not match at {band.name} precision: the candidate returns "
               f"values that are not log-probs.\n  - {f['title']} [candidate_invalid]: {f['reading']}.")
    numbers = {"tokens": int(inp.mask.sum()), "sequences": int((inp.mask.sum(1) > 0).sum()), "candidate_invalid": n,
               "unscored_skipped": inp.unscored}
    return MatchResult(False, "invalid", band, numbers, [f], None, None, message)


def assert_logprobs_match(reference, candidate, mask=None, *, precision: str | NoiseBand = "bf16", token_ids=None,
                          name: str | None = None, floor=None, exact: bool = False, atol: float = 0.0) -> MatchResult:
    """Pass when candidate and reference log-probs of the same tokens differ by numerical noise of `precision`.

    `reference`, `candidate`: per-token log-probs, [tokens] or [sequences, tokens], numpy arrays, lists or
    torch tensors (any dtype or device). `mask`: True where a token is compared; positions that are NaN on
    both sides (unscored, as `score_logprobs` leaves them) are skipped. `precision`: fp32, tf32, bf16,
    fp16, fp8 (the band in `config.NOISE_BANDS`) or a `NoiseBand`. `floor`: the reference scored a second time
    under another batch composition (same shape): the band is then measured from it (`floor_band`) instead of
    `precision`'s. `token_ids` label the HTML report. `exact=True` passes only when no compared token differs (by
    more than `atol` nats, default 0: bitwise), whatever the band, and names the first that does (docs/chain.md).
    Raises `LogprobsMismatch` (an AssertionError) whose message is the verdict, its findings with their
    evidence and the numbers that decided it; `ValueError` / `TypeError` for inputs that cannot be compared.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this frame
    result = compare_logprobs(reference, candidate, mask, precision=precision, token_ids=token_ids, name=name, floor=floor,
                              exact=exact, atol=atol)
    if not result.passed:
        raise LogprobsMismatch(result.message, result)
    return result


class LayersMismatch(AssertionError):
    """assert_layers_match failed; `.summary` holds every site's numbers (summary.json's content)."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


def assert_layers_match(reference_model, candidate_model, input_ids, attention_mask=None, *, precision: str = "bf16",
                        floor_model=None) -> dict:
    """Pass when every site of the candidate (embedding, each layer's norms, attention, MLP / router, residual output,
    final norm, logits, log-probs) is within its floor: the same site of the reference's weights in `precision` with
    stock modules, each run on the reference's input for that site. Raises `LayersMismatch` naming the first site
    beyond its floor and what that kind of site usually means; returns the summary (`tim_report.bisect_models`)."""
    __tracebackhide__ = True
    from .service.bisect import bisect_models  # torch: only when asked for

    summary = bisect_models(reference_model, candidate_model, input_ids, attention_mask, precision, floor_model)
    first = summary.get("first")
    if first:
        message = f"{summary['verdict']} What it usually means: {first['meaning']}."
        flips = first.get("flips", {}).get("local")
        if flips:
            message += f" {flips['tokens']} of {flips['of']} tokens route to another expert set."
        raise LayersMismatch(message, summary)
    return summary
