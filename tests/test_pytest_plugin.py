"""The pytest plugin, run as a user's suite would run it: a separate pytest process on a test file of its own.

`-p tim_report.pytest_plugin` loads it from this checkout; installed, the entry point loads it without
(test_html_wheel.py checks that from a built wheel). The entry point has the module's name, so the
two together are harmless.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from tim_report.pytest_plugin import file_name

SUITE = '''
import numpy as np
import pytest
from tim_report import assert_logprobs_match as imported

REF = -np.random.default_rng(0).exponential(2.0, (8, 64))
NOISE = 0.005 * np.sin(np.arange(REF.size)).reshape(REF.shape)

def test_noise_passes(assert_logprobs_match):
    assert_logprobs_match(REF, np.minimum(REF + NOISE, 0), precision="bf16")

def test_temperature_fails(assert_logprobs_match):
    assert_logprobs_match(REF, REF / 0.8, precision="bf16")

def test_imported_function_fails_too():
    candidate = REF.copy()
    candidate[:, -1] = 0.0
    imported(REF, candidate, precision="fp32")

def test_expected_failure_is_not_reported():
    with pytest.raises(AssertionError, match="temperature"):
        imported(REF, REF / 0.8)
'''


def run_suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    suite = tmp_path / "test_suite.py"
    suite.write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tim_report.pytest_plugin",
                           "-rA", str(suite), *args], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_failures_write_their_html_report_next_to_the_output(tmp_path):
    res = run_suite(tmp_path, "--tim-report-dir", "reports")
    out = res.stdout
    assert res.returncode == 1, out[-3000:] + res.stderr[-2000:]
    assert "2 failed, 2 passed" in out
    pages = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert pages == ["test_suite.py_test_imported_function_fails_too.html", "test_suite.py_test_temperature_fails.html"]
    assert out.count("HTML report of the failing comparison: ") == 2
    page = (tmp_path / "reports" / pages[1]).read_text(encoding="utf-8")
    assert page.lower().startswith("<!doctype html>") and "Temperature on one side only" in page
    # the failure output itself is the verdict: regime, finding, the deciding numbers
    assert "log-probs do not match at bf16 precision: systematic" in out and "[temperature]" in out
    assert "only the last position of each sequence disagrees" in out


def test_no_report_without_a_folder_and_the_ini_option(tmp_path):
    res = run_suite(tmp_path, "-k", "temperature")
    assert res.returncode == 1 and "HTML report" not in res.stdout and not (tmp_path / "reports").exists()
    (tmp_path / "pytest.ini").write_text("[pytest]\ntim_report_dir = from-ini\n")
    res = run_suite(tmp_path, "-k", "temperature")
    assert res.returncode == 1
    assert [p.name for p in (tmp_path / "from-ini").iterdir()] == ["test_suite.py_test_temperature_fails.html"]


def test_help_lists_the_option(tmp_path):
    res = run_suite(tmp_path, "--help")
    assert res.returncode == 0 and "--tim-report-dir=DIR" in res.stdout


@pytest.mark.parametrize("nodeid,expected", [
    ("tests/test_k.py::test_a[bf16-x/y]", "tests_test_k.py_test_a_bf16-x_y.html"),
    ("../..::", "test.html"),
])
def test_file_names_are_safe(nodeid, expected):
    assert file_name(nodeid) == expected


def test_long_ids_are_shortened_uniquely():
    a, b = file_name("t.py::test[" + "a" * 300 + "]"), file_name("t.py::test[" + "a" * 299 + "b]")
    assert a != b and len(a) <= 120
