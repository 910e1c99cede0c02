"""The numbers where the team already looks: `Report.scalars()`, `tim-report export --tensorboard` read back with
TensorBoard's own event reader, and the logger snippets of docs/watch.md run as they are written."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import ROOT, skip_or_fail, wandb_history

import tim_report
from tim_report.catalogue.metrics import HEADLINE, SCALARS, SUMMARY_EXTRA
from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.testing import make_batch, write_prime_rl_run

JUMP = 8


def needs_tensorboard() -> None:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        skip_or_fail("tensorboard is not installed (pip install -e \".[tensorboard]\")")


def event_accumulator(path: Path):
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        skip_or_fail("tensorboard is not installed (pip install -e \".[tensorboard]\")")
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_scalars_are_the_catalogues_metrics_as_flat_floats():
    report = tim_report.analyze(make_batch(n_seqs=16, mean_len=32))
    got = report.scalars()
    assert list(got) == [f"tim/{k}" for k in SCALARS]
    assert set(HEADLINE) | set(SUMMARY_EXTRA) <= {k.removeprefix("tim/") for k in got}
    assert all(type(v) is float and math.isfinite(v) for v in got.values())
    assert got["tim/kl_k3"] == report.metrics["kl_k3"] and got["tim/tokens"] == report.metrics["tokens"]
    assert set(report.scalars(prefix="mismatch.")) == {f"mismatch.{k}" for k in SCALARS}
    report.metrics["corr_logp"], report.metrics["kl_k3"] = float("nan"), None  # NaN policy: left out, not logged
    assert "tim/corr_logp" not in report.scalars() and "tim/kl_k3" not in report.scalars()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    write_prime_rl_run(tmp / "run", steps=14, n_seqs=8, mean_len=24, noise=lambda s: 0.01 if s < JUMP else 0.05)
    r = CliRunner().invoke(main, ["build", str(tmp / "run"), "-o", str(tmp / "site"), "--format", "json"])
    assert r.exit_code == 0, r.output
    return tmp / "site"


def test_export_tensorboard_reads_back_with_tensorboards_reader(site, tmp_path):
    needs_tensorboard()
    r = CliRunner().invoke(main, ["export", str(site), "--tensorboard", str(tmp_path / "tb")])
    assert r.exit_code == 0, r.output
    acc = event_accumulator(tmp_path / "tb")
    doc = json.loads((site / "index.json").read_text())
    rows = doc["runs"]
    assert "tim/kl_k3" in acc.Tags()["scalars"] and "tim/ess" in acc.Tags()["scalars"]
    for key in ("kl_k3", "ess", "abs_delta_median", "tokens"):
        events = acc.Scalars(f"tim/{key}")
        assert [e.step for e in events] == [r["step"] for r in rows]
        assert [e.value for e in events] == pytest.approx([r[key] for r in rows], rel=1e-6)  # stored as float32
    changes = acc.Tensors("tim/change_points/text_summary")
    assert [e.step for e in changes] == [c["step"] for c in doc["change_steps"]] and changes[0].step == JUMP
    assert changes[0].tensor_proto.string_val[0].decode() == doc["change_steps"][0]["sentence"]
    verdict = acc.Tensors("tim/run_verdict/text_summary")
    assert verdict[0].tensor_proto.string_val[0].decode() == doc["run"]["verdict"] and verdict[0].step == 13
    assert r.output.startswith("14 steps: ")


def test_export_bad_input_is_one_line(tmp_path):
    r = CliRunner().invoke(main, ["export", str(tmp_path / "nope"), "--tensorboard", str(tmp_path / "tb")])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "no such folder" in r.output
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.json").write_text("{not json")
    r = CliRunner().invoke(main, ["export", str(tmp_path / "site"), "--tensorboard", str(tmp_path / "tb")])
    assert r.exit_code == 2 and "is not valid JSON" in r.output and not (tmp_path / "tb").exists()
    r = CliRunner().invoke(main, ["export", str(tmp_path / "site")])
    assert r.exit_code == 2 and "--tensorboard" in r.output


# ---- the docs' logger snippets, run as written -------------------------------------------------------------------

def snippet(heading: str) -> str:
    """The first python block after the paragraph starting with `heading` in docs/watch.md."""
    doc = (ROOT / "docs" / "watch.md").read_text(encoding="utf-8")
    m = re.search(re.escape(heading) + r".*?```python\n(.*?)```", doc, re.DOTALL)
    assert m, heading
    return m.group(1)


@pytest.fixture
def step_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_batch(make_batch(n_seqs=8, mean_len=24), tmp_path / "step_7.npz")
    return tim_report.analyze(tim_report.load(tmp_path / "step_7.npz")).scalars()


def test_tensorboard_snippet(step_file, tmp_path):
    needs_tensorboard()
    exec(snippet("**TensorBoard**"), {})
    acc = event_accumulator(tmp_path / "tb" / "tim")
    assert sorted(acc.Tags()["scalars"]) == sorted(step_file)
    assert acc.Scalars("tim/kl_k3")[0].step == 7
    assert acc.Scalars("tim/kl_k3")[0].value == pytest.approx(step_file["tim/kl_k3"], rel=1e-6)


def test_wandb_snippet(step_file, tmp_path, monkeypatch):
    try:
        import wandb
    except ImportError:
        skip_or_fail("wandb is not installed (pip install -e '.[wandb]')")
    monkeypatch.setenv("WANDB_SILENT", "true")
    try:
        exec(snippet("**Weights & Biases**"), {})
    finally:
        wandb.teardown()  # W&B reads its settings once per process: the next test's environment must count
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    logged = [h for h in wandb_history(str(run_file)) if "tim/kl_k3" in h]
    assert len(logged) == 1 and logged[0]["_step"] == 7
    assert {k: v for k, v in logged[0].items() if k.startswith("tim/")} == pytest.approx(step_file, rel=1e-12)


def test_mlflow_snippet(step_file, tmp_path):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        skip_or_fail("mlflow is not installed (pip install -e '.[mlflow]')")
    from mlflow.tracking._tracking_service import utils

    try:
        exec(snippet("**MLflow**"), {})
    finally:  # the snippet sets the process's tracking URI; later tests name theirs in MLFLOW_TRACKING_URI
        vars(utils)["_tracking_uri"] = None  # MLflow's own global, which MlflowClient() reads before the environment
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (found,) = client.search_runs(["0"])
    assert found.info.run_name == "rl-mismatch"
    for key, value in step_file.items():
        (m,) = client.get_metric_history(found.info.run_id, key)
        assert m.step == 7 and m.value == pytest.approx(value, rel=1e-12)
