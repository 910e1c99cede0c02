"""The loop example's sync faults, planted for real and checked exactly (issue 42, docs/sync.md):
examples/training_loop/train.py --digests saves both sides' weight digests each step, and each fault that touches the
weights is an exact error finding at the first step that trains on a batch its engine sampled, synchronously and one
step off; a clean run raises none."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from helpers import run

pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]
SYNC = ("sync_not_applied", "updates_rounded_away", "weights_mismatch")


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("train_example", ROOT / "examples" / "training_loop" / "train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module.main


def loop(train, tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "steps"
    train(["--steps", "4", "--batch", "8", "--tokens", "8", "--digests", "--out", str(out), *args])
    return out


def failing(output: str) -> dict[int, set[str]]:
    """Each failing step of `check`'s output and the findings it names."""
    out: dict[int, set[str]] = {}
    for m in re.finditer(r"step_(\d+): error (\w+):", output):
        out.setdefault(int(m.group(1)), set()).add(m.group(2))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("lag", [0, 1])
@pytest.mark.parametrize("bug, finding, extra", [
    ("skip-sync", "sync_not_applied", ()),
    ("never-synced", "sync_not_applied", ()),
    ("bf16-sync", "updates_rounded_away", ("--lr", "1e-5")),
    ("swapped-tensors", "weights_mismatch", ()),
])
def test_each_planted_sync_fault_is_an_exact_error_from_its_first_step(train, tmp_path, bug, finding, extra, lag):
    steps = loop(train, tmp_path, "--bug", bug, "--bug-step", "2", "--async-lag", str(lag), *extra)
    res = run("check", steps)
    first = (1 if bug == "never-synced" else 2) + lag  # the first step that trains on a batch the faulty engine sampled
    found = failing(res.output)
    assert res.exit_code == 1, res.output
    assert sorted(found) == list(range(first, 4)), res.output
    assert all(ids & set(SYNC) == {finding} for ids in found.values()), found


@pytest.mark.slow
@pytest.mark.parametrize("lag", [0, 1])
def test_a_clean_loop_raises_no_sync_finding(train, tmp_path, lag):
    steps = loop(train, tmp_path, "--bug-step", "-1", "--async-lag", str(lag))
    res = run("check", steps)
    assert res.exit_code == 0, res.output
    assert not any(f in res.output for f in SYNC)
    assert len(re.findall(r"sync: bf16 digests equal at v\d", res.output)) == 4


@pytest.mark.slow
def test_a_one_step_off_sync_fault_leads_the_run_verdict(train, tmp_path):
    from tim_report.service.build import BuildOptions, build

    steps = loop(train, tmp_path, "--bug", "skip-sync", "--bug-step", "2", "--async-lag", "1")
    build([steps], tmp_path / "site", BuildOptions(formats=("json", "md")))
    verdict = json.loads((tmp_path / "site" / "index.json").read_text())["run"]
    assert verdict["regime"] == "systematic" and verdict["lead"] == "sync_not_applied", verdict["verdict"]
    assert verdict["verdict"].startswith("Systematic from step 3: every step since is diagnosed sync not applied")
    assert "sync_not_applied" in [f["id"] for f in verdict["findings"]]
