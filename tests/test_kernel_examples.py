"""examples/kernel_test on the tiny model: the correct variants pass, the four bugs fail with the finding
that names them, and each failure writes its HTML page (the pattern docs/kernel-tests.md shows)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import CI, ROOT

EXAMPLE = ROOT / "examples" / "kernel_test" / "test_tiny_qwen2_kernels.py"
pytestmark = pytest.mark.skipif(not (ROOT / "models" / "tiny-qwen2" / "model.safetensors").exists() and not CI,
                                reason="models/tiny-qwen2 not present")

PASS = ["test_bf16_matches_fp32", "test_fp16_matches_fp32", "test_rmsnorm_bf16_accumulation", "test_fused_cross_entropy",
        "test_rope_shifted_alike_for_queries_and_keys", "test_rmsnorm_eps_outside_sqrt_is_below_bf16_noise"]
# bug → what its failure message must say (the finding, and the kernel reading that names the bug)
FAIL = {
    "test_bug_rmsnorm_eps_outside_sqrt": ["at fp32 precision: elevated", "per-token computation (normalisation"],
    "test_bug_rope_positions_shifted_by_one": ["how positions mix (rotary embedding",
                                               "first position, which attends only to itself, agrees"],
    "test_bug_fused_cross_entropy_drops_last_token": ["at fp32 precision: elevated", "[dummy_zero]",
                                                      "only the last position of each sequence disagrees"],
    "test_bug_softmax_temperature_left_in": ["systematic", "[temperature]", "softmax temperature"],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kernel_test")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tim_report.pytest_plugin",
                          "-n", "0", str(EXAMPLE), "--tim-report-dir", str(tmp / "reports"), "--junitxml", str(tmp / "junit.xml"),
                          "-q"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert (tmp / "junit.xml").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    cases = {}
    for case in ET.parse(tmp / "junit.xml").getroot().iter("testcase"):
        failed = case.find("failure")
        cases[case.get("name")] = None if failed is None else failed.get("message", "") + failed.text
    return res, cases, tmp / "reports"


def test_the_correct_variants_pass(run):
    res, cases, _ = run
    assert res.returncode == 1, res.stdout[-3000:]
    assert set(cases) == set(PASS) | set(FAIL)
    assert {name: cases[name] for name in PASS} == dict.fromkeys(PASS), "a correct variant failed"


@pytest.mark.parametrize("name", list(FAIL))
def test_each_bug_fails_with_the_finding_that_names_it(run, name):
    _, cases, reports = run
    message = cases[name]
    assert message is not None, f"{name} passed"
    assert "LogprobsMismatch" in message
    for words in FAIL[name]:
        assert words in message, f"{name}: {words!r} not in\n{message}"
    page = reports / f"examples_kernel_test_test_tiny_qwen2_kernels.py_{name}.html"
    assert page.is_file() and "<!DOCTYPE html>" in page.read_text(encoding="utf-8")[:100]


def test_only_failures_write_pages(run):
    _, _, reports = run
    assert len(list(Path(reports).iterdir())) == len(FAIL)
