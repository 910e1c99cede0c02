"""Every metric pinned on a hand-computed batch, plus properties that must hold for any batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tim_report.analysis import Thresholds, analyze
from tim_report.model import StepBatch
from tim_report.testing import make_batch

# Three tokens in two sequences: δ = trainer - rollout = [-0.1, +0.2 | +3.0]
RO = [-1.0, -0.5, -4.0]
TR = [-1.1, -0.3, -1.0]
D = [t - r for r, t in zip(RO, TR)]
R = [math.exp(d) for d in D]


def tiny() -> StepBatch:
    return StepBatch(rollout_logp=np.array(RO), trainer_logp=np.array(TR), offsets=np.array([0, 2, 3]),
                     mask=np.ones(3, bool), group=np.array(["a", "b"]))


def mean(xs):
    return sum(xs) / len(xs)


def test_hand_computed_batch_pins_every_metric():
    m = analyze(tiny()).metrics
    assert m["tokens"] == 3 and m["sequences"] == 2
    assert m["bias"] == pytest.approx(mean(D))
    assert m["kl_k1"] == pytest.approx(mean([-d for d in D]))
    assert m["kl_k2"] == pytest.approx(mean([d * d / 2 for d in D]))
    assert m["kl_k3"] == pytest.approx(mean([r - 1 - d for r, d in zip(R, D)]))
    assert m["chi2_token"] == pytest.approx(mean([r * r for r in R]) / mean(R) ** 2 - 1)  # self-normalised
    seq_sums = [D[0] + D[1], D[2]]
    ws = [math.exp(s) for s in seq_sums]
    assert m["chi2_seq"] == pytest.approx(mean([w * w for w in ws]) / mean(ws) ** 2 - 1)
    assert m["ess"] == pytest.approx(sum(R) ** 2 / (3 * sum(r * r for r in R)))
    ws = [math.exp(s) for s in seq_sums]
    assert m["ess_seq"] == pytest.approx(sum(ws) ** 2 / (2 * sum(w * w for w in ws)))
    seq_ro, seq_tr = [mean(RO[:2]), RO[2]], [mean(TR[:2]), TR[2]]
    assert m["ppl_rollout"] == pytest.approx(mean([math.exp(-x) for x in seq_ro]))
    assert m["ppl_trainer"] == pytest.approx(mean([math.exp(-x) for x in seq_tr]))
    assert m["log_ppl_diff"] == pytest.approx(mean([a - b for a, b in zip(seq_ro, seq_tr)]))
    assert m["corr_logp"] == pytest.approx(np.corrcoef(RO, TR)[0, 1])
    assert m["spearman_logp"] == pytest.approx(0.5)  # ranks (2, 3, 1) vs (1, 3, 2)
    p_ro, p_tr = [math.exp(x) for x in RO], [math.exp(x) for x in TR]
    assert m["corr_prob"] == pytest.approx(np.corrcoef(p_ro, p_tr)[0, 1])
    dps = [abs(a - b) for a, b in zip(p_tr, p_ro)]
    assert m["abs_dp_mean"] == pytest.approx(mean(dps)) and m["abs_dp_max"] == pytest.approx(max(dps))
    assert m["token_mult_prob_error"] == pytest.approx(mean([math.exp(abs(d)) for d in D]))
    assert m["outside_2x"] == pytest.approx(1 / 3)  # only r = e^3
    assert m["outside_5x"] == pytest.approx(1 / 3)
    assert m["phantom_clip"] == pytest.approx(1 / 3)  # e^-0.1 = 0.905 and e^0.2 = 1.22 are inside [0.8, 1.28]
    assert m["veto_token_fraction"] == 0 and m["veto_seq_fraction"] == 0
    assert m["top1pct_mass"] == pytest.approx(max(R) / sum(R))
    abs_d = [abs(d) for d in D]
    assert m["abs_delta_mean"] == pytest.approx(mean(abs_d))
    assert m["abs_delta_median"] == pytest.approx(0.2)
    assert m["abs_delta_max"] == pytest.approx(3.0)
    assert m["abs_delta_p99"] == pytest.approx(np.percentile(abs_d, 99))
    assert m["thresholds"]["ppo_clip"] == [pytest.approx(0.8), pytest.approx(1.28)]


def test_verl_names_follow_verls_formulas():
    v = analyze(tiny()).verl
    seq_ro, seq_tr = [mean(RO[:2]), RO[2]], [mean(TR[:2]), TR[2]]
    diff = [a - b for a, b in zip(seq_ro, seq_tr)]
    assert v["rollout_corr/kl"] == pytest.approx(mean([-d for d in D]))
    assert v["rollout_corr/chi2_token"] == pytest.approx(mean([r * r for r in R]) - 1)  # not self-normalised
    seq_sums = [D[0] + D[1], D[2]]
    assert v["rollout_corr/chi2_seq"] == pytest.approx(mean([math.exp(2 * s) for s in seq_sums]) - 1)
    assert v["rollout_corr/k3_kl"] == pytest.approx(mean([r - 1 - d for r, d in zip(R, D)]))
    assert v["rollout_corr/training_ppl"] == pytest.approx(mean([math.exp(-x) for x in seq_tr]))
    assert v["rollout_corr/rollout_log_ppl"] == pytest.approx(mean([-x for x in seq_ro]))
    assert v["rollout_corr/log_ppl_diff"] == pytest.approx(mean(diff))
    assert v["rollout_corr/log_ppl_diff_max"] == pytest.approx(max(diff))
    assert v["rollout_corr/ppl_ratio"] == pytest.approx(mean([math.exp(x) for x in diff]))
    assert v["training/rollout_probs_diff_std"] == pytest.approx(
        np.std([abs(math.exp(t) - math.exp(r)) for r, t in zip(RO, TR)], ddof=1))


def test_veto_and_routing():
    b = tiny()
    b.trainer_logp[2] = b.rollout_logp[2] + math.log(1e-5)  # r = 1e-5 < veto 1e-4
    rep = analyze(b)
    assert rep.metrics["veto_token_fraction"] == pytest.approx(1 / 3)
    assert rep.metrics["veto_seq_fraction"] == pytest.approx(0.5)
    routes = dict(zip(rep.breakdowns["by_group"]["name"], rep.breakdowns["by_group"]["route"]))
    assert routes == {"a": "train", "b": "quarantine"}
    assert rep.routing["counts"] == {"train": 1, "train_with_correction": 0, "quarantine": 1}


def test_what_if_counts_what_each_correction_drops():
    rows = {r["id"]: r for r in analyze(tiny()).what_if}
    assert rows["token_tis"]["token_fraction"] == pytest.approx(1 / 3)  # r = e^3 > 2
    assert rows["seq_mask"]["sequence_fraction"] == pytest.approx(0.5)  # seq b: Π r = e^3 > 3
    assert rows["icepop"]["token_fraction"] == pytest.approx(1 / 3)
    assert rows["geo_rs"]["sequence_fraction"] == pytest.approx(1.0)  # both geometric means far from 1


def test_nan_inf_and_positive_logprobs_are_counted_and_excluded():
    b = make_batch(8, 20, seed=3)
    b.rollout_logp[0] = np.nan
    b.trainer_logp[1] = -np.inf
    b.rollout_logp[2] = 0.5
    rep = analyze(b)
    c = rep.data_problems["counts"]
    assert (c["rollout_nan"], c["trainer_inf"], c["rollout_positive"]) == (1, 1, 1)
    assert rep.data_problems["excluded_tokens"] == 3
    assert rep.metrics["tokens"] == b.n_tokens - 3
    assert all(math.isfinite(rep.metrics[k]) for k in ("kl_k3", "ess", "abs_delta_mean"))


def test_unmasked_tokens_do_not_count():
    b = make_batch(8, 20, seed=4)
    b.mask[::2] = False
    b.trainer_logp[::2] = -30.0  # garbage outside the mask must not matter
    rep = analyze(b)
    assert rep.metrics["tokens"] == int(b.mask.sum())
    assert rep.metrics["abs_delta_max"] < 1


def test_standard_errors_accompany_means():
    m = analyze(make_batch(40, 50, seed=5)).metrics
    for k in ("bias", "kl_k1", "kl_k2", "kl_k3", "abs_delta_mean", "abs_dp_mean", "ppl_rollout", "chi2_token"):
        assert m[f"{k}_se"] > 0


def test_percentile_ladder_is_monotone():
    p = analyze(make_batch(20, 50, seed=6)).metrics["percentiles"]
    assert p["q"] == [0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9]
    for name in ("delta", "abs_delta", "k3", "abs_dp"):
        assert p[name] == sorted(p[name])


def test_length_growth_separates_random_walk_from_drift():
    noisy = make_batch(200, 200, noise=0.02, seed=7)
    drift = make_batch(200, 200, noise=0.02, seed=7)
    drift.trainer_logp = drift.trainer_logp - 0.05  # same sign every token: |Σδ| ∝ length
    b_noise = analyze(noisy).breakdowns["length_growth"]["exponent"]
    b_drift = analyze(drift).breakdowns["length_growth"]["exponent"]
    assert 0.3 < b_noise < 0.7
    assert b_drift > 0.85


def test_low_probability_tokens_carry_the_mismatch_in_the_breakdown():
    rows = analyze(make_batch(100, 100, seed=8)).breakdowns["by_probability"]
    low = [r for r in rows if r["p_high"] <= 0.1]
    high = [r for r in rows if r["p_low"] >= 0.9]
    assert min(r["abs_delta_mean"] for r in low) > max(r["abs_delta_mean"] for r in high)
    assert sum(r["token_share"] for r in rows) == pytest.approx(1.0)


def test_ppo_eps_is_configurable():
    b = tiny()
    loose = analyze(b, Thresholds(ppo_eps_low=0.05, ppo_eps_high=0.1)).metrics
    assert loose["phantom_clip"] == pytest.approx(1.0)  # 0.905, 1.22 and e^3 all fall outside [0.95, 1.1]


# ---------------------------------------------------------------- properties

logps = st.lists(st.floats(-15, 0, allow_nan=False), min_size=2, max_size=60)


@st.composite
def batches(draw):
    ro = np.array(draw(logps))
    noise = np.array(draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=len(ro), max_size=len(ro))))
    tr = np.minimum(ro + noise, 0.0)
    cuts = sorted(set(draw(st.lists(st.integers(1, len(ro) - 1), max_size=5))))
    offsets = np.array([0, *cuts, len(ro)])
    return StepBatch(rollout_logp=ro, trainer_logp=tr, offsets=offsets, mask=np.ones(len(ro), bool))


@settings(max_examples=60, deadline=None)
@given(batches())
def test_ess_in_unit_interval_and_k3_nonnegative(b):
    m = analyze(b).metrics
    assert 0 < m["ess"] <= 1 + 1e-12
    assert 0 < m["ess_seq"] <= 1 + 1e-12
    assert m["kl_k3"] >= 0 and m["kl_k2"] >= 0
    assert 0 <= m["outside_5x"] <= m["outside_2x"] <= 1


@settings(max_examples=40, deadline=None)
@given(batches())
def test_identical_logprobs_give_zero_mismatch(b):
    b.trainer_logp = b.rollout_logp.copy()
    m = analyze(b).metrics
    assert m["kl_k1"] == 0 and m["kl_k3"] == 0 and m["abs_delta_max"] == 0
    assert m["ess"] == pytest.approx(1.0) and m["ess_seq"] == pytest.approx(1.0)
    assert m["outside_2x"] == 0 and m["phantom_clip"] == 0


@settings(max_examples=40, deadline=None)
@given(batches(), st.randoms(use_true_random=False))
def test_permuting_sequences_changes_nothing(b, rnd):
    order = list(range(b.n_seqs))
    rnd.shuffle(order)
    sl = [b.tokens_of(i) for i in order]
    perm = StepBatch(
        rollout_logp=np.concatenate([b.rollout_logp[s] for s in sl]),
        trainer_logp=np.concatenate([b.trainer_logp[s] for s in sl]),
        offsets=np.concatenate([[0], np.cumsum([s.stop - s.start for s in sl])]),
        mask=np.ones(b.n_tokens, bool),
    )
    a, p = analyze(b).metrics, analyze(perm).metrics
    for k in ("kl_k1", "kl_k3", "chi2_token", "chi2_seq", "ess", "ess_seq", "ppl_trainer", "abs_delta_median",
              "outside_2x", "top1pct_mass", "corr_logp"):
        if a[k] is None:
            assert p[k] is None
        else:
            assert p[k] == pytest.approx(a[k], rel=1e-9, abs=1e-12), k


def test_token_subset_keeps_positions_and_sequences():
    from tim_report.analysis.tokens import valid_tokens

    tok, _ = valid_tokens(make_batch(6, 12, seed=11))
    keep = np.arange(tok.n) % 3 != 0
    sub = tok.subset(keep)
    np.testing.assert_array_equal(sub.pos, tok.pos[keep])
    np.testing.assert_array_equal(sub.index, tok.index[keep])
    np.testing.assert_allclose(sub.seq_sum(sub.delta), np.bincount(tok.seq[keep], weights=tok.delta[keep], minlength=6))


def test_cluster_standard_error_matches_the_sandwich_formula():
    from tim_report.analysis.stats import cluster_mean_se

    values = np.array([1.0, 2.0, 3.0, 10.0, 11.0, 0.0])
    seq = np.array([0, 0, 0, 1, 1, 2])
    mean = values.mean()
    resid = [sum(values[seq == g]) - mean * (seq == g).sum() for g in range(3)]
    expected = math.sqrt(sum(r * r for r in resid) * 3 / 2) / 6
    assert cluster_mean_se(values, seq) == pytest.approx((mean, expected))


def test_percentile_ladder_matches_numpy():
    from tim_report.analysis.stats import percentile_ladder
    from tim_report.config import PERCENTILES

    x = np.random.default_rng(3).standard_normal(1001) ** 3
    assert percentile_ladder(x) == pytest.approx(list(np.percentile(x, PERCENTILES)), rel=0, abs=0)


@settings(max_examples=30, deadline=None)
@given(batches())
def test_padded_and_flat_layouts_give_the_same_numbers(tmp_path_factory, b):
    from tim_report.io import load
    from tim_report.testing import to_padded

    path = tmp_path_factory.mktemp("padded") / "b.npz"
    np.savez(path, **to_padded(b, dtype=np.float64, pad_logp=-7.0))  # padding values must not matter
    flat, padded = analyze(b).metrics, analyze(load(path)).metrics
    for k in ("tokens", "kl_k1", "kl_k3", "chi2_seq", "ess", "ess_seq", "ppl_trainer", "abs_delta_median", "outside_2x"):
        assert padded[k] == pytest.approx(flat[k], rel=1e-12, abs=1e-15), k


def test_chi2_is_never_negative_and_is_one_over_ess_minus_one():
    """verl's mean r² − 1 goes below 0 when every r < 1; the self-normalised χ² cannot, and equals 1/ESS − 1."""
    b = make_batch(n_seqs=16, mean_len=20, noise=0.01, seed=4)
    b.trainer_logp = b.rollout_logp - 0.05 - 0.01 * np.abs(np.random.default_rng(0).standard_normal(b.n_tokens))
    r = analyze(b)
    assert r.verl["rollout_corr/chi2_token"] < 0  # all r < 1: verl's value is negative
    assert 0 <= r.metrics["chi2_token"] == pytest.approx(1 / r.metrics["ess"] - 1, rel=1e-9)
    assert 0 <= r.metrics["chi2_seq"] == pytest.approx(1 / r.metrics["ess_seq"] - 1, rel=1e-6)
    assert r.metrics["chi2_token_se"] > 0


def test_numbers_do_not_depend_on_how_many_blas_threads_run():
    """A Ray worker runs with one BLAS thread, a local build with all of them: the same batch must give the same
    bits (OpenBLAS splits a long dot product by thread, which changes the last bits of its sum)."""
    import os
    import subprocess
    import sys

    code = ("from tim_report.analysis import analyze; from tim_report.model import dumps; "
            "from tim_report.testing import make_batch; "
            "print(dumps(analyze(make_batch(n_seqs=1000, mean_len=400, seed=3)).summary_dict()))")
    outs = []
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert outs[0] == outs[1]


@pytest.mark.parametrize("merge_below", [0, 1 << 18], ids=["binary search", "merge"])
def test_the_abs_and_k3_ladders_read_off_the_signed_sort_are_those_of_sorting_them(monkeypatch, merge_below):
    """|x|'s and k3's percentiles come from x's one sort (a binary search over its two sides, or, for fewer values, a
    merge of its two sides): |x|'s exactly as a second sort gives them, k3's as sorting the per-token k3 does."""
    from tim_report.analysis import stats
    from tim_report.analysis.metrics import FOLDS
    from tim_report.analysis.stats import percentile_ladder, sorted_ladders

    monkeypatch.setattr(stats, "MERGE_BELOW", merge_below)

    rng = np.random.default_rng(1)
    cases = [rng.standard_normal(1001), np.round(rng.standard_normal(5000), 1), np.array([0.5]), np.array([-0.5]),
             -np.abs(rng.standard_normal(50)), np.abs(rng.standard_normal(50)), np.array([-0.0, 0.0, -0.0, 1.0, -1.0]),
             np.zeros(10), np.array([-3.0, -2.0, -1.0]), rng.standard_normal(100_001) * 1e-3]
    for x in [*cases, rng.standard_normal(2001) * 30]:  # beyond the ±20 clamp too
        signed, folded = sorted_ladders(np.sort(x), FOLDS)
        assert [v.hex() for v in signed] == [v.hex() for v in percentile_ladder(x)]
        assert [v.hex() for v in folded["abs_delta"]] == [v.hex() for v in percentile_ladder(np.abs(x))]
        assert [v.hex() for v in folded["k3"]] == [v.hex() for v in percentile_ladder(FOLDS["k3"](x))]


@pytest.mark.parametrize("selection", [True, False])
def test_ladders_by_selection_or_by_sort_are_the_same_bits(monkeypatch, selection):
    """Which of the two a CPU runs faster decides (stats.selection_wins); the ladders must not depend on it, nor the
    charts' counts (read off the sorts, or binned token by token beside a selection)."""
    from tim_report.analysis import metrics, stats
    from tim_report.model import dumps

    b = make_batch(n_seqs=300, mean_len=60, noise=0.02, seed=8)
    b.trainer_logp[::7] = b.rollout_logp[::7]  # ties at δ = 0
    b.trainer_logp[::11] = b.rollout_logp[::11] - 30.0  # beyond the clamp
    b.trainer_logp[3::13] = np.log(np.exp(b.rollout_logp[3::13]) + 1e-9)  # |Δp| near the lowest bins
    report = analyze(b)
    expected = dumps([report.metrics, report.distributions])
    for module in (stats, metrics):
        monkeypatch.setattr(module, "selection_wins", lambda n: selection)
    report = analyze(b)
    assert dumps([report.metrics, report.distributions]) == expected
    x = np.round(np.random.default_rng(2).standard_normal(4001), 2)
    from tim_report.config import PERCENTILES
    assert [v.hex() for v in stats.percentile_ladder(x)] == [v.hex() for v in np.percentile(x, PERCENTILES)]


def test_the_selection_probe_answers_once_per_process():
    from tim_report.analysis import stats

    assert stats.selection_wins(10) is False  # below the probe's size: one sort, no probe
    first = stats.selection_wins(1 << 24)
    assert stats.selection_wins(1 << 24) is first and stats._selection_probe.cache_info().misses == 1
