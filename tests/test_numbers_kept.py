"""summary.json's numbers, held to what they were before the analysis became one pass (issue 45).

tests/data/numbers_before.json.gz holds every number of summary.json for each fixture (the examples, the fault
fixtures, the real-model fixtures) and for one synthetic batch of 2.2M tokens with excluded and clamped tokens (the
paths only large batches take: two lanes, selection, the detectors' thinning, chunked passes), as the analysis of
commit 3f1b4ed computed them, before issue 45's speed work. Sharing per-token arrays, summing in another order and
reading order statistics off one sort may move the last bits of a number; they must never move what a page prints
(three significant digits, more near 1): every number agrees to a relative 1e-6 (or 1e-12 absolute, for values that
are zero up to rounding), every count exactly. A number added since is not held; one that disappears fails.

`pytest tests/test_numbers_kept.py --update-numbers` rewrites the file from the current code: only for a change that
is meant to change the numbers (a new definition), never for a speed change, and say so in the commit.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tim_report.analysis import analyze
from tim_report.io import LoadOptions, load
from tim_report.model import dumps
from tim_report.testing import make_batch

ROOT = Path(__file__).resolve().parents[1]
BEFORE = ROOT / "tests" / "data" / "numbers_before.json.gz"
FIXTURES = sorted([*ROOT.glob("examples/*.npz"), *ROOT.glob("examples/*.pt"), *ROOT.glob("tests/data/faults/*.npz"),
                   *ROOT.glob("tests/data/real/*.npz"), *ROOT.glob("tests/data/real_model/*.npz")])
KEYS = {"smollm2_clean.npz": {"rollout": "rollout_vllm_bf16", "trainer": "trainer_hf_fp32"}}  # several sides: name two
RTOL, ATOL = 1e-6, 1e-12


def large_batch():
    """2.2M tokens: above the two-lane, selection and detector-thinning sizes; some tokens NaN, some masked out, some
    log-ratios beyond the ±20 clamp."""
    b = make_batch(n_seqs=4300, mean_len=512, noise=0.02, seed=45)
    b.rollout_logp[::997] = np.nan
    b.mask[::1013] = False
    b.trainer_logp[5::100_003] = -40.0
    return b


def numbers(obj):
    """The numbers of a JSON value, its structure kept (strings dropped: the words are other tests' business); a list
    of objects with ids (findings, what-if rows) by id, so that one added since is a new key, not a shifted list."""
    if isinstance(obj, dict):
        return {k: v for k, v in ((k, numbers(v)) for k, v in obj.items()) if v is not None}
    if isinstance(obj, list) and obj and all(isinstance(v, dict) and isinstance(v.get("id"), str) for v in obj):
        return {v["id"]: numbers(v) for v in obj}
    if isinstance(obj, list):
        return [numbers(v) for v in obj]
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        return None
    return obj


def summary_numbers(batch) -> dict:
    return numbers(json.loads(dumps(analyze(batch).summary_dict())))


def differences(old, new, path: str = "") -> list[str]:
    """Where `new` does not hold `old`'s numbers (to RTOL / ATOL; integers exactly)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{path}: was an object"]
        return [d for k, v in old.items() for d in (differences(v, new[k], f"{path}/{k}") if k in new
                                                      else [f"{path}/{k}: missing"])]
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [f"{path}: was a list of {len(old)}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}/{i}")]
    if old is None or new is None:
        return [] if old is new else [f"{path}: {old} → {new}"]
    if isinstance(old, int) and isinstance(new, int):
        return [] if old == new else [f"{path}: {old} → {new}"]
    if math.isclose(float(old), float(new), rel_tol=RTOL, abs_tol=ATOL):
        return []
    return [f"{path}: {old!r} → {new!r}"]


def cases() -> dict:
    return {p.relative_to(ROOT).as_posix(): p for p in FIXTURES}


def read(path: Path):
    return load(path, LoadOptions(keys=KEYS.get(path.name, {})))


@pytest.fixture(scope="module")
def before(request) -> dict:
    if request.config.getoption("--update-numbers"):
        found = {name: summary_numbers(read(path)) for name, path in cases().items()}
        found["large"] = summary_numbers(large_batch())
        BEFORE.write_bytes(gzip.compress(json.dumps(found, sort_keys=True).encode(), mtime=0))
    return json.loads(gzip.decompress(BEFORE.read_bytes()))


def test_every_fixtures_summary_numbers_are_kept_to_their_printed_digits(before):
    problems = []
    for name, path in cases().items():
        if name not in before:
            continue  # a fixture added since: no number of it to hold
        found = differences(before[name], summary_numbers(read(path)), name)
        problems += found[:5] + ([f"{name}: … and {len(found) - 5} more"] if len(found) > 5 else [])
    assert not problems, "\n".join(problems)
    assert len(set(before) & set(cases())) >= 40  # the fixtures are still there to be held


@pytest.mark.slow
def test_a_large_batchs_summary_numbers_are_kept_to_their_printed_digits(before):
    found = differences(before["large"], summary_numbers(large_batch()), "large")
    assert not found, "\n".join(found[:40])
