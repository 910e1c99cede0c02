"""The pytest plugin: `assert_logprobs_match` as a fixture, and the HTML report of a failing comparison.

Registered by entry point (`pytest11`), so it is active in every pytest session of every project that
installs tim-report: importing it must cost nothing. Nothing heavy is imported here; the assertion
module is imported when a test asks for the fixture, and the renderer only when a comparison failed
and `--tim-report-dir DIR` asked for its page.

    def test_kernel(assert_logprobs_match):              # or: from tim_report import assert_logprobs_match
        assert_logprobs_match(reference, candidate, precision="bf16")

    pytest --tim-report-dir reports/                     # a failure writes reports/<test id>.html
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SECTION = "tim-report"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("tim-report", "tim-report log-prob assertions")
    group.addoption("--tim-report-dir", metavar="DIR", default=None,
                    help="write the HTML report of every failing assert_logprobs_match to DIR/<test id>.html")
    parser.addini("tim_report_dir", "default for --tim-report-dir", default="")


def report_dir(config) -> Path | None:
    """The folder failing comparisons are written to, or None (relative paths: from where pytest was started)."""
    value = config.getoption("--tim-report-dir") or config.getini("tim_report_dir")
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


@pytest.fixture
def assert_logprobs_match() -> Callable[..., Any]:
    """`tim_report.assert_logprobs_match`, imported when a test asks for it."""
    from .assertions import assert_logprobs_match as fn

    return fn


@pytest.fixture
def tim_report_dir(request) -> Path | None:
    """The --tim-report-dir folder (None when not given), for tests that write reports of their own."""
    return report_dir(request.config)


def file_name(nodeid: str) -> str:
    """A portable file name for a test id: unsafe characters replaced, long ids shortened with a hash."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("._") or "test"
    if len(safe) > 120:
        safe = safe[:100] + "-" + hashlib.sha256(nodeid.encode()).hexdigest()[:12]
    return safe + ".html"


def _mismatch(excinfo: Any) -> Any:
    """The LogprobsMismatch a test failed with, if any (the assertion module is loaded when one was raised)."""
    mod = sys.modules.get("tim_report.assertions")
    if mod is None or excinfo is None:
        return None
    return excinfo.value if isinstance(excinfo.value, mod.LogprobsMismatch) else None


def write_report(error, folder: Path, nodeid: str) -> Path:
    """Render the failing comparison's page with the run-page renderer and write it to folder."""
    from .api import Report

    if error.result.report is None:
        raise ValueError("nothing to render: no candidate value could be analysed")
    page = Report(**vars(error.result.report)).to_html()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(nodeid)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    error = _mismatch(call.excinfo)
    folder = report_dir(item.config) if error is not None else None
    if folder is None:
        return
    try:
        path = write_report(error, folder, item.nodeid)
        rep.sections.append((SECTION, f"HTML report of the failing comparison: {path}"))
    except Exception as e:  # the test has failed already; a report that cannot be written must not hide why
        rep.sections.append((SECTION, f"could not write the HTML report to {folder}: {type(e).__name__}: {e}"))
