"""Before/after comparison of two step batches. Pure numpy: renderers only reshape what this returns.

`compare_batches(before, after)` returns a JSON-able dict (compare.json is this dict serialised):

    labels        {"before": str, "after": str}
    runs          one small summary per side (tokens, sequences, regime, verdict, engines)
    why           what differs: the regimes and the warn / error findings new in after, gone, changed in severity
                  or shared, and the sentence compare.md and the page lead with
    metrics       rows {key, name, before, after, change, relative_change, better, direction, tolerance}
    distributions ratio histograms of both sides on the SAME bins, |Δp| histograms (fixed bins)
    per_token     when both batches cover the same tokens: the change of |δ| per token, counts of
                  tokens that got better / worse, the most improved / worsened tokens, per-sequence
                  change; otherwise {"available": False, "reason": ...}

Which metrics, in which order, and which way is better: the catalogue (catalogue.metrics.COMPARE, each entry's
ideal); "same" means the change is within the noise (2 combined standard errors, where the metric has them) or
below 1% of the larger distance from the ideal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..catalogue import metrics as catalogue
from ..catalogue import verdicts
from ..catalogue.numbers import fmt, pct, plain
from ..config import COMPARE_REL_TOL, COMPARE_SE_TOL, COMPARE_TOKEN_TOL, Thresholds
from ..model import SCHEMA_VERSION, BatchReport, StepBatch, model_label
from .histograms import ratio_bins
from .stats import finite
from .tokens import Tokens, valid_tokens

TOP_TOKENS = 20  # most improved / most worsened tokens kept
TOP_SEQS = 10  # most improved / most worsened sequences kept
MAX_SEQ_POINTS = 2000  # per-sequence scatter points kept (evenly spaced rows)


def metric_row(metric: catalogue.Metric, mb: dict, ma: dict) -> dict:
    """One metric before and after: the change, and whether it is better, worse or the same (within the noise: 2
    combined standard errors where the metric has them, or 1% of the larger distance from the ideal value)."""
    key = metric.key
    b, a = mb.get(key), ma.get(key)
    row = {"key": key, "name": metric.name, "before": b, "after": a, "better": metric.better,
           "better_text": metric.better_text, "change": None, "relative_change": None, "direction": "n/a", "tolerance": None}
    fb, fa = finite(b), finite(a)
    if fb is None or fa is None:
        return row
    row["change"] = fa - fb
    row["relative_change"] = (fa - fb) / abs(fb) if fb != 0 else (0.0 if fa == fb else None)
    if metric.ideal is None:
        row["direction"] = "same" if fa == fb else "changed"
        return row
    gb, ga = abs(fb - metric.ideal), abs(fa - metric.ideal)  # distance from the ideal: smaller is better
    tol = COMPARE_REL_TOL * max(gb, ga)
    se_b, se_a = finite(mb.get(key + "_se")), finite(ma.get(key + "_se"))
    if se_b is not None and se_a is not None:
        tol = max(tol, COMPARE_SE_TOL * math.hypot(se_b, se_a))
    row["tolerance"] = tol
    if abs(ga - gb) <= tol:
        row["direction"] = "same"
    else:
        row["direction"] = "better" if ga < gb else "worse"
    return row


def run_summary(report: BatchReport, label: str) -> dict:
    meta = report.run.get("meta") or {}
    diag = report.diagnosis or {}
    return {
        "label": label, "id": report.run.get("id"), "source": report.run.get("source"),
        "model": model_label(meta),
        "rollout": " ".join(str(meta[k]) for k in ("rollout_engine", "rollout_dtype") if meta.get(k) not in (None, "")) or None,
        "trainer": " ".join(str(meta[k]) for k in ("trainer_engine", "trainer_dtype") if meta.get(k) not in (None, "")) or None,
        "step": meta.get("step"), "tokens": report.metrics.get("tokens"), "sequences": report.metrics.get("sequences"),
        "regime": diag.get("regime"), "verdict": diag.get("verdict"),
        "findings": [{"id": f.get("id"), "severity": f.get("severity"), "title": f.get("title")} for f in diag.get("findings", [])],
        "excluded_tokens": (report.data_problems or {}).get("excluded_tokens", 0),
    }


def what_differs(before: dict, after: dict) -> dict:
    """The regimes and the warn / error findings of the two sides (run_summary's), the differences first: what
    compare.md and the page lead with, so "systematic" comes with why."""
    def alarms(side: dict) -> dict[str, dict]:
        return {f["id"]: f for f in side.get("findings") or [] if f.get("severity") in ("warn", "error")}

    fb, fa = alarms(before), alarms(after)
    appeared = [fa[i] for i in fa if i not in fb]
    gone = [fb[i] for i in fb if i not in fa]
    changed = [{"id": i, "title": fa[i]["title"], "before": fb[i]["severity"], "after": fa[i]["severity"]}
               for i in fa if i in fb and fa[i]["severity"] != fb[i]["severity"]]
    same = [fa[i] for i in fa if i in fb and fa[i]["severity"] == fb[i]["severity"]]
    rb, ra = before.get("regime"), after.get("regime")
    return {"regime": {"before": rb, "after": ra, "changed": rb != ra}, "appeared": appeared, "gone": gone,
            "changed": changed, "same": same, "sentence": verdicts.compare_why(rb, ra, appeared, gone, changed, same)}


# ---- distributions on shared bins -----------------------------------------------------------------

def shared_ratio_histograms(tb: Tokens, ta: Tokens, th: Thresholds) -> dict:
    """Both sides' log r histograms on one set of symlog bins (the constant and range follow both batches)."""
    bins = ratio_bins([tb.log_r, ta.log_r], th.band_5x)
    def side(tok: Tokens) -> dict:
        counts = bins.counts(tok.log_r)
        return {"counts": counts.astype(int).tolist(), "fraction": (counts / tok.n).tolist(),
                "density": bins.density(counts).tolist(), "exact_one": int((tok.log_r == 0).sum())}

    return {
        "x": "log_r", "symlog_constant": bins.c, "edges": bins.edges.tolist(),
        "before": side(tb), "after": side(ta),
        "bands": {"2x": [-math.log(th.band_2x), math.log(th.band_2x)], "5x": [-math.log(th.band_5x), math.log(th.band_5x)]},
    }


def shared_abs_dp(rb: BatchReport, ra: BatchReport) -> dict | None:
    """|Δp| histograms: the analysis already bins both on fixed log-spaced edges, so they overlay as they are."""
    hb, ha = (rb.distributions or {}).get("abs_dp"), (ra.distributions or {}).get("abs_dp")
    if not hb or not ha or hb.get("edges") != ha.get("edges"):
        return None

    def side(h: dict) -> dict:
        total = sum(h["counts"]) + h.get("zero", 0)
        return {"counts": h["counts"], "fraction": [n / total if total else 0.0 for n in h["counts"]], "zero": h.get("zero", 0)}

    return {"edges": hb["edges"], "before": side(hb), "after": side(ha)}


# ---- per-token change -----------------------------------------------------------------------------

def same_tokens(before: StepBatch, after: StepBatch) -> tuple[bool, str]:
    """Whether the two batches are over the same tokens, and how that was decided (or why not)."""
    if before.n_seqs != after.n_seqs:
        return False, f"different numbers of sequences ({fmt(before.n_seqs)} vs {fmt(after.n_seqs)})"
    if before.n_tokens != after.n_tokens or not np.array_equal(before.offsets, after.offsets):
        return False, (f"different sequence lengths ({fmt(before.n_tokens)} vs {fmt(after.n_tokens)} tokens)"
                       if before.n_tokens != after.n_tokens else "same number of tokens but different sequence lengths")
    if before.token_ids is not None and after.token_ids is not None:
        diff = int(np.count_nonzero(np.asarray(before.token_ids) != np.asarray(after.token_ids)))
        if diff:
            return False, f"token ids differ at {fmt(diff)} of {fmt(before.n_tokens)} positions (different samples)"
        return True, "same sequence lengths and token ids"
    return True, "same sequence lengths (token ids absent on at least one side, so only the shape was compared)"


@dataclass
class _Paired:
    """The tokens valid on both sides, in batch order: each side's Tokens restricted to them."""

    before: StepBatch
    after: StepBatch
    tb: Tokens  # before's valid tokens that are valid after too
    ta: Tokens  # after's, the same positions

    @property
    def index(self) -> np.ndarray:
        return self.tb.index

    @cached_property
    def change(self) -> np.ndarray:
        """|δ after| − |δ before| per token: negative is better."""
        return np.abs(self.ta.delta) - np.abs(self.tb.delta)

    def text(self, k: int) -> str | None:
        """Token k's text from the first side that has text (or a decoder), else its id as [id]."""
        for src in (self.after, self.before):
            if src.token_text is not None or src.decoder is not None:
                return src.token_strings(slice(k, k + 1))[0]
        for src in (self.after, self.before):
            if src.token_ids is not None:
                return src.token_strings(slice(k, k + 1))[0]
        return None

    def token_row(self, j: int) -> dict:
        k = int(self.index[j])
        tid = self.after.token_ids if self.after.token_ids is not None else self.before.token_ids
        tb, ta = self.tb, self.ta
        return {"sequence": int(tb.seq[j]), "position": int(k - self.before.offsets[tb.seq[j]]), "token": self.text(k),
                "token_id": int(tid[k]) if tid is not None else None,
                "diff_before": float(tb.delta[j]), "diff_after": float(ta.delta[j]), "abs_change": float(self.change[j]),
                "rollout_before": float(tb.rollout[j]), "rollout_after": float(ta.rollout[j]),
                "trainer_before": float(tb.trainer[j]), "trainer_after": float(ta.trainer[j])}


def _extreme(values: np.ndarray, mask: np.ndarray, k: int) -> list[int]:
    """Indices of the k smallest `values` where `mask`, smallest first; ties by position (deterministic)."""
    cand = np.flatnonzero(mask)
    if cand.size > k:
        cand = cand[np.argpartition(values[cand], k - 1)[:k]]
    return [int(j) for j in cand[np.lexsort((cand, values[cand]))]]


def per_token_change(before: StepBatch, after: StepBatch, tb: Tokens, ta: Tokens, tol: float = COMPARE_TOKEN_TOL,
                     top: int = TOP_TOKENS, top_seqs: int = TOP_SEQS) -> dict:
    """Over the same tokens: how many got better / worse, the extremes, and the same per sequence."""
    same, how = same_tokens(before, after)
    if not same:
        return {"available": False, "reason": f"The batches are not over the same tokens: {how}. "
                                              "Only the aggregate metrics and distributions are compared."}
    vb, va = tb.valid_mask(), ta.valid_mask()
    notes = []
    only_one = int(np.count_nonzero(vb ^ va))
    if only_one:
        notes.append(f"{fmt(only_one)} tokens are valid (masked in, finite) on one side only and are left out of the per-token change.")
    if not (vb & va).any():
        return {"available": False, "reason": "No token is valid on both sides."}
    pair = _Paired(before, after, tb.subset(va[tb.index]), ta.subset(vb[ta.index]))
    change = pair.change
    n = int(change.shape[0])
    better, worse = change < -tol, change > tol
    return {
        "available": True, "how": how, "notes": notes, "tolerance": tol, "tokens_compared": n,
        "counts": {"better": int(better.sum()), "worse": int(worse.sum()), "same": int(n - better.sum() - worse.sum())},
        "fractions": {"better": float(better.mean()), "worse": float(worse.mean()),
                      "same": float(1.0 - better.mean() - worse.mean())},
        "abs_delta_change_mean": float(change.mean()),
        "abs_delta_change_se": float(change.std(ddof=1) / math.sqrt(n)) if n > 1 else None,
        "abs_delta_change_median": float(np.median(change)),
        "rollout_changed": int(np.count_nonzero(np.abs(pair.ta.rollout - pair.tb.rollout) > tol)),
        "trainer_changed": int(np.count_nonzero(np.abs(pair.ta.trainer - pair.tb.trainer) > tol)),
        "most_improved": [pair.token_row(j) for j in _extreme(change, better, top)],
        "most_worsened": [pair.token_row(j) for j in _extreme(-change, worse, top)],
        "sequences": _sequence_change(pair, better, worse, tol, top_seqs),
    }


def _sequence_change(pair: _Paired, better: np.ndarray, worse: np.ndarray, tol: float, top: int) -> dict:
    """Mean |δ| per sequence before and after, over the tokens compared."""
    tb, ta = pair.tb, pair.ta
    seq_ids = np.flatnonzero(tb.present)
    mb, ma = tb.seq_mean(np.abs(tb.delta)), ta.seq_mean(np.abs(ta.delta))
    cnt = tb.counts[seq_ids]
    sch = ma - mb
    s_better, s_worse = sch < -tol, sch > tol
    n_better, n_worse = tb.seq_count_of(better)[seq_ids], tb.seq_count_of(worse)[seq_ids]

    def seq_row(j: int) -> dict:
        return {"sequence": int(seq_ids[j]), "tokens": int(cnt[j]), "abs_delta_mean_before": float(mb[j]),
                "abs_delta_mean_after": float(ma[j]), "change": float(sch[j]),
                "tokens_better": int(n_better[j]), "tokens_worse": int(n_worse[j])}

    pick = np.arange(seq_ids.size)
    if pick.size > MAX_SEQ_POINTS:
        pick = np.linspace(0, seq_ids.size - 1, MAX_SEQ_POINTS).astype(np.int64)
    return {
        "compared": int(seq_ids.size),
        "counts": {"better": int(s_better.sum()), "worse": int(s_worse.sum()),
                   "same": int(seq_ids.size - s_better.sum() - s_worse.sum())},
        "most_improved": [seq_row(j) for j in _extreme(sch, s_better, top)],
        "most_worsened": [seq_row(j) for j in _extreme(-sch, s_worse, top)],
        "points": {"sequence": seq_ids[pick].astype(int).tolist(), "before": mb[pick].tolist(), "after": ma[pick].tolist()},
    }


# ---- entry point ----------------------------------------------------------------------------------

def compare_batches(before: StepBatch, after: StepBatch, before_report: BatchReport | None = None,
                    after_report: BatchReport | None = None, labels: tuple[str, str] = ("before", "after"),
                    thresholds: Thresholds | None = None) -> dict:
    """Compare two batches (analysing them first when their Reports are not given)."""
    from . import analyze

    th = thresholds or Thresholds()
    rb = before_report or analyze(before, th, run_id=labels[0])
    ra = after_report or analyze(after, th, run_id=labels[1])
    tb, _ = valid_tokens(before)
    ta, _ = valid_tokens(after)
    rows = [metric_row(catalogue.metric(k), rb.metrics, ra.metrics) for k in catalogue.COMPARE
            if k in rb.metrics or k in ra.metrics]
    directed = [r for r in rows if r["better"] is not None]
    tally = {d: sum(1 for r in directed if r["direction"] == d) for d in ("better", "worse", "same", "n/a")}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "tim-report/compare",
        "labels": {"before": labels[0], "after": labels[1]},
        "runs": {"before": run_summary(rb, labels[0]), "after": run_summary(ra, labels[1])},
        "why": what_differs(run_summary(rb, labels[0]), run_summary(ra, labels[1])),
        "metrics": rows,
        "tally": tally,
        "rules": {"relative_tolerance": COMPARE_REL_TOL, "se_tolerance": COMPARE_SE_TOL, "token_tolerance": COMPARE_TOKEN_TOL,
                  "same": f"'same' when the change is within {plain(COMPARE_SE_TOL)} combined standard errors (where the metric "
                          f"has them) or under {pct(COMPARE_REL_TOL)} of the larger value (distance from the ideal value)."},
        "distributions": {"ratio": shared_ratio_histograms(tb, ta, th), "abs_dp": shared_abs_dp(rb, ra)},
        "per_token": per_token_change(before, after, tb, ta),
    }
