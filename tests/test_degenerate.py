"""Degenerate batches (constant sides, all-zero sides, one token, one sequence) go through the analysis, a comparison
and every renderer without an exception: no detector divides by zero, no sentence formats a missing number."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tim_report.analysis import analyze
from tim_report.analysis.compare import compare_batches
from tim_report.analysis.run_index import index_summary
from tim_report.catalogue.formats import FORMATS
from tim_report.errors import BadInput
from tim_report.model import StepBatch
from tim_report.render import render

KINDS = ("rollout_zero", "trainer_zero", "both_zero", "rollout_constant", "trainer_constant", "both_constant",
         "one_token", "one_sequence", "equal")


def degenerate(kind: str, n_seqs: int, length: int, seed: int) -> StepBatch:
    rng = np.random.default_rng(seed)
    if kind == "one_token":
        n_seqs, length = 1, 1
    elif kind == "one_sequence":
        n_seqs = 1
    t = n_seqs * length
    real = -rng.exponential(1.0, t)
    other = np.minimum(real + 0.05 * rng.standard_normal(t), 0.0)
    sides = {"rollout": real, "trainer": other}
    for side in ("rollout", "trainer"):
        if kind in (f"{side}_zero", "both_zero"):
            sides[side] = np.zeros(t)
        if kind in (f"{side}_constant", "both_constant"):
            sides[side] = np.full(t, -1.5 if side == "rollout" else -0.7)
    if kind == "equal":
        sides["trainer"] = sides["rollout"].copy()
    return StepBatch(rollout_logp=sides["rollout"], trainer_logp=sides["trainer"],
                     offsets=np.arange(n_seqs + 1, dtype=np.int64) * length, mask=np.ones(t, bool),
                     token_ids=rng.integers(0, 100, t), meta={"source": f"{kind}.npz"})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), n_seqs=st.integers(1, 12), length=st.integers(1, 90), seed=st.integers(0, 10**6))
def test_degenerate_batches_analyse_and_render(kind, n_seqs, length, seed):
    batch = degenerate(kind, n_seqs, length, seed)
    try:
        report = analyze(batch)
    except BadInput:  # nothing usable at all is one line of bad input, never a traceback
        return
    ids = {f["id"] for f in report.diagnosis["findings"]}
    if kind in ("rollout_zero", "trainer_zero") and batch.n_tokens >= 16:
        side = kind.split("_")[0]
        assert "dummy_zero" in ids and next(f for f in report.diagnosis["findings"] if f["id"] == "dummy_zero")[
            "evidence"]["trainer_side"] == (side == "trainer")
        other = "trainer" if side == "rollout" else "rollout"
        assert f"the {other} side" not in report.diagnosis["verdict"]
    files = render("run", report, tuple(FORMATS))
    assert files and all(isinstance(v, str) for v in files.values())
    render("index", index_summary([report]), tuple(FORMATS))
    render("compare", compare_batches(degenerate("equal", n_seqs, length, seed), batch, after_report=report),
           tuple(FORMATS))
