"""The diagnosis on faults injected on purpose into the tiny model's real logits (tests/data/faults).

The fixtures are made by scripts/make_fault_fixtures.py; manifest.json holds the truth for each.
docs/diagnosis.md shows the confusion matrix these tests check (scripts/diagnosis_matrix.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "faults"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
CASES = MANIFEST["cases"]
MODEL = ROOT / "models" / "tiny-qwen2"

sys.path.insert(0, str(ROOT / "scripts"))
from diagnosis_matrix import END, START, evaluate, markdown  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return {r["case"]: r for r in evaluate(DATA)}


def test_fixtures_are_small():
    assert sum(p.stat().st_size for p in DATA.iterdir()) <= 2 * 1024 * 1024


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
    if r["expected_findings"] == ["precision_gap"]:
        return
    first = next(iter(r["findings"]))  # findings are ordered by severity, then detector specificity
    assert first in r["expected_findings"], r["findings"]


def test_docs_show_the_current_matrix(rows):
    doc = (ROOT / "docs" / "diagnosis.md").read_text()
    shown = doc.split(START, 1)[1].split(END, 1)[0]
    assert shown == markdown(list(rows.values()), details=False), \
        "docs/diagnosis.md is stale: run python scripts/diagnosis_matrix.py --update-doc"


def _skip_or_fail(reason: str) -> None:
    """Skip locally; in CI (TIM_REPORT_CI=1) a missing model or stale fixtures are failures."""
    if os.environ.get("TIM_REPORT_CI") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.mark.slow
def test_regenerating_a_fixture_matches(tmp_path):
    """The committed fixtures are what the script makes from the committed model."""
    from make_fault_fixtures import sha256

    if not (MODEL / "model.safetensors").exists():
        _skip_or_fail("models/tiny-qwen2 is not present")
    if sha256(MODEL / "model.safetensors") != MANIFEST["model_sha256"]:
        _skip_or_fail("models/tiny-qwen2 differs from the model the fixtures were made with: "
                      "run python scripts/make_fault_fixtures.py && python scripts/diagnosis_matrix.py --update-doc")
    names = ["bf16_s", "shift_next"]
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_fault_fixtures.py"), "--out", str(tmp_path),
                    "--only", *names], check=True, capture_output=True)
    from tim_report.loader import load

    for name in names:
        a, b = load(DATA / f"{name}.npz"), load(tmp_path / f"{name}.npz")
        assert np.array_equal(a.token_ids, b.token_ids) and np.array_equal(a.offsets, b.offsets)
        np.testing.assert_allclose(a.rollout_logp, b.rollout_logp, atol=1e-5)
        np.testing.assert_allclose(a.trainer_logp, b.trainer_logp, atol=1e-3)
