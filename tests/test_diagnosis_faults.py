"""The diagnosis on faults injected on purpose into the tiny model's real logits (tests/data/faults).

The fixtures are made by scripts/make_fault_fixtures.py; manifest.json holds the truth for each.
docs/diagnosis.md shows the confusion matrix these tests check (scripts/diagnosis_matrix.py, run
here as a user would run it).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, skip_or_fail

from tim_report.analysis import analyze
from tim_report.io import load

DATA = ROOT / "tests" / "data" / "faults"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
CASES = MANIFEST["cases"]
MODEL = ROOT / "models" / "tiny-qwen2"
MATRIX = ROOT / "scripts" / "diagnosis_matrix.py"


@pytest.fixture(scope="module")
def rows():
    out = subprocess.run([sys.executable, str(MATRIX), "--json"], capture_output=True, text=True, check=True).stdout
    return {r["case"]: r for r in json.loads(out)}


def test_fixtures_are_small():
    assert sum(p.stat().st_size for p in DATA.iterdir()) <= 2 * 1024 * 1024


def test_every_fixture_is_checked(rows):
    assert {c for c, r in rows.items() if not r.get("derived_from")} == set(CASES) and len(CASES) >= 20


def test_derived_faults_the_gate_and_the_blame(rows):
    """Faults made from a fixture by changing its arrays: 65% NaN and probabilities are unusable input (they read ok
    and identical), trainer zeros and a swapped broken side are blamed on the side at fault."""
    derived = {c: r for c, r in rows.items() if r.get("derived_from")}
    assert {"trainer_nan_65", "probabilities", "trainer_zeros", "rollout_reinit"} <= set(derived)
    for case, r in derived.items():
        assert r["regime"] == r["expected_regime"], (case, r["verdict"])
        alarms = [f for f, sev in r["findings"].items() if sev != "info"]
        assert (alarms[:1] == r["expected_findings"][:1]) if r["expected_findings"] else not alarms, (case, r["findings"])


def test_the_side_at_fault_is_named(rows):
    sided = {c: r for c, r in rows.items() if r["expected_side"]}
    assert len(sided) >= 10
    assert {c: r["side"] for c, r in sided.items()} == {c: r["expected_side"] for c, r in sided.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_regime(rows, case):
    r = rows[case]
    assert r["regime"] == r["expected_regime"], r["verdict"]


@pytest.mark.parametrize("case", list(CASES))
def test_expected_findings_fire(rows, case):
    r = rows[case]
    missing = [f for f in r["expected_findings"] if f not in r["findings"]]
    assert not missing, (missing, r["findings"])


@pytest.mark.parametrize("case", [c for c, v in CASES.items() if v["regime"] in ("identical", "numerical_noise")])
def test_clean_cases_have_no_warning(rows, case):
    assert not [f for f, sev in rows[case]["findings"].items() if sev in ("warn", "error")]


@pytest.mark.parametrize("case", [c for c, v in CASES.items() if v["findings"]])
def test_the_expected_finding_leads(rows, case):
    """The verdict names the injected fault, not a side effect of it."""
    r = rows[case]
    alarms = [f for f, sev in r["findings"].items() if sev != "info"]  # ordered by severity, then specificity
    if alarms:
        assert alarms[0] in r["expected_findings"], r["findings"]
    else:  # an injection that is context, not a fault (the precision gap of a shadow pass): clean, and reported
        assert r["regime"] == "numerical_noise" and set(r["expected_findings"]) <= set(r["findings"]), r


def test_docs_show_the_current_matrix():
    res = subprocess.run([sys.executable, str(MATRIX), "--check-doc"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_regenerating_fixtures_matches(tmp_path):
    """The committed fixtures are what the script makes from the committed model.

    fp32 cases must match to rounding. bf16 matmuls differ between CPUs (AVX512-BF16 / AMX kernels
    or emulation) by up to a few hundredths of a nat, so a bf16 case must give the same tokens and
    the same diagnosis, with the trainer within bf16 noise of the committed one.
    """
    if not (MODEL / "model.safetensors").exists():
        skip_or_fail("models/tiny-qwen2 is not present")
    if _sha256(MODEL / "model.safetensors") != MANIFEST["model_sha256"]:
        skip_or_fail("models/tiny-qwen2 differs from the model the fixtures were made with: "
                     "run python scripts/make_fault_fixtures.py && python scripts/diagnosis_matrix.py --update-doc")
    fp32, bf16 = "top_p_0.9", "shift_next"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_fault_fixtures.py"), "--out", str(tmp_path),
                    "--only", fp32, bf16], check=True, capture_output=True)
    for name in (fp32, bf16):
        a, b = load(DATA / f"{name}.npz"), load(tmp_path / f"{name}.npz")
        assert np.array_equal(a.token_ids, b.token_ids) and np.array_equal(a.offsets, b.offsets)
        np.testing.assert_allclose(a.rollout_logp, b.rollout_logp, atol=1e-5)
    np.testing.assert_allclose(load(DATA / f"{fp32}.npz").trainer_logp, load(tmp_path / f"{fp32}.npz").trainer_logp, atol=1e-4)
    a, b = load(DATA / f"{bf16}.npz"), load(tmp_path / f"{bf16}.npz")
    assert np.abs(a.trainer_logp - b.trainer_logp).mean() < 0.02
    da, db = analyze(a).diagnosis, analyze(b).diagnosis
    assert da["regime"] == db["regime"] and [f["id"] for f in da["findings"]] == [f["id"] for f in db["findings"]]
