"""assert_logprobs_match: clean noise of every precision passes, each fault fails with the finding that names
it, bad input is a ValueError / TypeError (never an AssertionError), and nothing heavy is imported.

The same assertion on the real tiny model (bf16, fp16, RMSNorm, RoPE, fused cross-entropy, temperature)
runs in test_kernel_examples.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

import tim_report
from tim_report.assertions import LogprobsMismatch, MatchResult, compare_logprobs, noise_band
from tim_report.config import NOISE_BANDS, NoiseBand
from tim_report.io import load


def logprobs(n_seqs: int = 8, length: int = 96, seed: int = 0) -> np.ndarray:
    """Per-token log-probs shaped like sampled text: most tokens likely, a long tail of unlikely ones."""
    rng = np.random.default_rng(seed)
    confident = rng.random((n_seqs, length)) < 0.6
    return np.maximum(-np.where(confident, rng.exponential(0.05, confident.shape), rng.exponential(2.5, confident.shape)), -25)


def with_noise(ref: np.ndarray, mean_abs: float, seed: int = 1) -> np.ndarray:
    """ref plus symmetric noise of exactly this mean |δ|, larger on unlikely tokens (as precision noise is)."""
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal(ref.shape) * (1 + np.sqrt(-ref))
    return np.minimum(ref + raw * (mean_abs / np.abs(raw).mean()), 0.0)


def failure(ref, cand, **kw) -> str:
    with pytest.raises(LogprobsMismatch) as e:
        tim_report.assert_logprobs_match(ref, cand, **kw)
    assert isinstance(e.value, AssertionError) and not e.value.result.passed
    return str(e.value)


# ---------------------------------------------------------------------------- passes


@pytest.mark.parametrize("precision", list(NOISE_BANDS))
def test_noise_of_each_precision_passes(precision):
    ref = logprobs()
    r = tim_report.assert_logprobs_match(ref, with_noise(ref, 0.3 * NOISE_BANDS[precision].abs_delta_mean_max),
                                         precision=precision)
    assert isinstance(r, MatchResult) and r.passed and r.regime in ("identical", "numerical_noise")
    assert r.message == "" and r.numbers["tokens"] == ref.size


def test_identical_passes_and_fp32_noise_is_identical():
    ref = logprobs()
    assert tim_report.assert_logprobs_match(ref, ref.copy(), precision="fp32").regime == "identical"
    assert tim_report.assert_logprobs_match(ref, with_noise(ref, 1e-7), precision="fp32").regime == "identical"


@settings(max_examples=60, deadline=None)
@given(precision=st.sampled_from(sorted(NOISE_BANDS)), n_seqs=st.integers(1, 24), length=st.integers(1, 160),
       fraction=st.floats(0.0, 0.4), seed=st.integers(0, 10**6))
def test_clean_noise_within_the_band_never_fails(precision, n_seqs, length, fraction, seed):
    ref = logprobs(n_seqs, length, seed)
    cand = with_noise(ref, fraction * NOISE_BANDS[precision].abs_delta_mean_max, seed + 1)
    tim_report.assert_logprobs_match(ref, cand, precision=precision)


def test_torch_tensors_of_any_dtype_and_one_dimension():
    torch = pytest.importorskip("torch")
    ref = logprobs(1, 200)[0]
    cand = torch.tensor(with_noise(ref, 0.005)).to(torch.bfloat16)  # bf16 rounding of the log-probs themselves
    r = tim_report.assert_logprobs_match(torch.tensor(ref), cand, precision="bfloat16")
    assert r.passed and r.band.name == "bf16" and r.numbers["sequences"] == 1


def test_nan_on_both_sides_is_unscored_and_mask_selects():
    ref = logprobs()
    cand = with_noise(ref, 0.01)
    ref[:, :3] = cand[:, :3] = np.nan  # score_logprobs leaves padding and prompt NaN on both sides
    cand[:, -1] = 0.0  # outside the mask: never compared
    mask = np.ones(ref.shape, bool)
    mask[:, -1] = False
    r = tim_report.assert_logprobs_match(ref, cand, mask)
    assert r.passed and r.numbers["unscored_skipped"] == 3 * ref.shape[0]
    assert r.numbers["tokens"] == ref.size - 4 * ref.shape[0]


def test_custom_band_and_aliases():
    assert noise_band("torch.float16") is NOISE_BANDS["fp16"] and noise_band("BF16") is NOISE_BANDS["bf16"]
    ref = logprobs()
    tight = NoiseBand("bf16-measured", 2e-3, 1e-5, "our own fp32-vs-bf16 baseline")
    msg = failure(ref, with_noise(ref, 0.01), precision=tight)
    assert "bf16-measured band: our own fp32-vs-bf16 baseline" in msg


# ---------------------------------------------------------------------------- failures name the fault


def test_last_position_dropped():
    ref = logprobs()
    ref[:, -1] -= 1.0  # sampled tokens the model gives p < 1/2 (most are, on the tiny model)
    cand = ref.copy()
    cand[:, -1] = 0.0  # a kernel that never wrote the last position
    msg = failure(ref, cand, precision="fp32", name="ce")
    assert msg.startswith("ce: log-probs do not match at fp32 precision: systematic")
    assert "[dummy_zero]" in msg and "only the last position of each sequence disagrees" in msg


def test_last_position_written_wrong_without_zeros():
    ref = logprobs()
    cand = ref.copy()
    cand[:, -1] = np.minimum(ref[:, -1] - np.linspace(0.5, 3, ref.shape[0]), 0)  # garbage, not placeholders
    msg = failure(ref, cand, precision="bf16")
    assert "[last_position]" in msg and "loss / logit slicing bug" in msg


def test_temperature_left_in():
    ref = logprobs()
    msg = failure(ref, with_noise(ref, 0.01) / 0.85, precision="bf16")
    assert "[temperature]" in msg and "softmax temperature" in msg and "T_candidate / T_reference" in msg


def test_off_by_one():
    ref = logprobs(16, 64)
    cand = np.roll(ref, 1, axis=1)
    assert "[shift]" in failure(ref, cand, precision="bf16")


def test_truncated_vocabulary_reads_as_processed():
    ref = logprobs()
    cand = np.minimum(ref + np.random.default_rng(2).uniform(0.02, 0.1, ref.shape), 0.0)  # candidate ≥ reference
    msg = failure(ref, cand)
    assert "[processed_logprobs]" in msg and "part of the vocabulary" in msg


def test_position_mixing_bug():
    ref = logprobs()
    cand = with_noise(ref, 0.002)
    cand[:, 1:] = with_noise(ref[:, 1:], 0.3, seed=5)  # the first position (attends to itself) is right
    msg = failure(ref, cand, precision="bf16")
    assert "how positions mix (rotary embedding" in msg


def test_size_beyond_the_band_alone_fails_with_its_numbers():
    ref = logprobs()
    msg = failure(ref, with_noise(ref, 1e-3), precision="fp32")
    assert "elevated (beyond fp32 noise)" in msg
    assert "nats > 1e-5 ✗" in msg and "fp32 band:" in msg
    assert len(msg.splitlines()) <= 8


def test_broken_candidate_values_fail_without_warnings():
    ref = logprobs()
    cand = with_noise(ref, 0.01)
    cand[0, 5] = np.nan
    assert "[candidate_invalid]" in failure(ref, cand)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # suites run with -W error: exp() overflow must not leak out
        msg = failure(ref, ref * 1000 - 2000)
    assert "systematic" in msg


# ---------------------------------------------------------------------------- the real-logit fault fixtures

FAULTS = ROOT / "tests" / "data" / "faults"
CASES = json.loads((FAULTS / "manifest.json").read_text())["cases"]


def padded(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Flat tokens with CSR offsets as [sequences, longest] rows, NaN after each sequence's end (unscored)."""
    lengths = np.diff(offsets)
    out = np.full((lengths.shape[0], int(lengths.max())), np.nan)
    out[np.arange(out.shape[1])[None, :] < lengths[:, None]] = values
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_fault_fixtures_pass_exactly_when_they_are_noise(case):
    """The diagnosis's fixtures (tiny-model logits, faults injected where the truth is known) through the assertion:
    the rollout is the candidate, the trainer the reference, as assert_logprobs_match places them."""
    b = load(FAULTS / CASES[case]["file"])
    precision = "fp16" if case.startswith("fp16") else "bf16"
    r = compare_logprobs(padded(b.trainer_logp, b.offsets), padded(b.rollout_logp, b.offsets),
                         padded(b.mask.astype(float), b.offsets) == 1, precision=precision)
    assert r.passed == (CASES[case]["regime"] in ("identical", "numerical_noise")), r.message
    ids = {f["id"] for f in r.findings}
    # the assertion takes two arrays: no shadow pass, turn index or weight versions to find those findings from
    assert set(CASES[case]["findings"]) - {"precision_gap", "turn_boundary", "mixed_policy_versions"} <= ids, r.message


def test_a_candidate_with_no_log_prob_at_all_is_a_kernel_failure():
    ref = logprobs()
    with pytest.raises(LogprobsMismatch, match="All 768 compared candidate log-probs are NaN") as e:
        tim_report.assert_logprobs_match(ref, np.full(ref.shape, np.nan))
    assert e.value.result.regime == "invalid" and e.value.result.report is None


def test_float_masks_of_zeros_and_ones():
    ref = logprobs()
    mask = np.ones(ref.shape)
    mask[:, :4] = 0.0
    assert tim_report.assert_logprobs_match(ref, ref, mask).numbers["tokens"] == ref.size - 4 * ref.shape[0]
    with pytest.raises(ValueError):
        tim_report.assert_logprobs_match(ref, ref, mask * 0.5)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("ref,cand,kw,err", [
    (np.zeros((2, 3)) - 1, np.zeros((2, 4)) - 1, {}, ValueError),
    (np.zeros(0), np.zeros(0), {}, ValueError),
    (np.full(5, np.nan), np.full(5, np.nan), {}, ValueError),
    (np.zeros((2, 2, 2)) - 1, np.zeros((2, 2, 2)) - 1, {}, ValueError),
    (np.array([-1.0, np.nan]), np.array([-1.0, -2.0]), {}, ValueError),
    (np.array([-1.0, 2.0]), np.array([-1.0, -2.0]), {}, ValueError),
    (np.zeros(4) - 1, np.zeros(4) - 1, {"precision": "int4"}, ValueError),
    (np.zeros(4) - 1, np.zeros(4) - 1, {"precision": 16}, TypeError),
    (np.array(["a", "b"]), np.zeros(2) - 1, {}, TypeError),
    (np.zeros(4) - 1, np.zeros(4) - 1, {"mask": np.ones(3, bool)}, ValueError),
    (np.zeros(4) - 1, np.zeros(4) - 1, {"mask": np.zeros(4, bool)}, ValueError),
    (np.zeros(4) - 1, np.zeros(4) - 1, {"token_ids": np.zeros(4)}, TypeError),
])
def test_bad_input_is_not_an_assertion_failure(ref, cand, kw, err):
    with pytest.raises(err) as e:
        tim_report.assert_logprobs_match(ref, cand, **kw)
    assert not isinstance(e.value, AssertionError)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------- imports


def imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return {m.split(".")[0] for m in out.stdout.split()}


HEAVY = {"altair", "jinja2", "vl_convert", "torch", "transformers", "markdown_it"}


def test_a_passing_and_a_failing_call_import_no_charts_no_templates_no_torch():
    names = imported_after(
        "import numpy as np, tim_report\n"
        "a = -np.random.default_rng(0).exponential(2, (8, 64))\n"
        "tim_report.assert_logprobs_match(a, a + 1e-3 * np.sin(np.arange(a.size)).reshape(a.shape))\n"
        "try:\n    tim_report.assert_logprobs_match(a, a / 0.8)\nexcept AssertionError as e:\n    assert 'temperature' in str(e)\n"
        "else:\n    raise SystemExit('no failure')")
    assert "tim_report" in names and names.isdisjoint(HEAVY), names & HEAVY


def test_the_pytest_plugin_imports_nothing_heavy():
    names = imported_after("import tim_report.pytest_plugin")
    assert names.isdisjoint(HEAVY | {"numpy"}), names & (HEAVY | {"numpy"})
