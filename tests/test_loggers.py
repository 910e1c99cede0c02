"""`watch --log-to`: a run followed into TensorBoard, W&B (offline) and MLflow (a local store), each read back with the
logger's own reader: TensorBoard's EventAccumulator, W&B's own record schema over its offline run file, MLflow's
client. The numbers read back are the site's index.json rows, at their training steps, and the alarm is at the jump.
"""

from __future__ import annotations

import glob
import json
import os

import pytest
from helpers import one_line_exit_2, run, skip_or_fail, wandb_history

from tim_report.testing import write_prime_rl_run

STEPS, JUMP = 8, 5


def _need(module: str):
    try:
        return __import__(module)
    except ImportError:
        skip_or_fail(f"{module} is not installed (pip install -e '.[wandb,mlflow,tensorboard]')")


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """An 8-step prime-rl run whose mismatch jumps 6× at step 5, followed once by `watch` into all three loggers."""
    for module in ("wandb", "mlflow", "tensorboard", "sqlalchemy", "alembic"):
        _need(module)
    tmp = tmp_path_factory.mktemp("loggers")
    write_prime_rl_run(tmp, steps=STEPS, n_seqs=8, mean_len=24, noise=lambda s: 0.01 if s < JUMP else 0.06)
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp), "WANDB_SILENT": "true",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import wandb

    wandb.teardown()  # W&B reads its settings once per process: this environment must count
    try:
        res = run("watch", str(tmp / "token_exports"), "-o", str(tmp / "site"), "--once", "--interval", "0.1",
                  "--log-to", f"tensorboard={tmp / 'tb'}", "--log-to", "wandb=tim-test", "--log-to", "mlflow=tim-test")
    finally:
        wandb.teardown()
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp / "site" / "index.json").read_text())["runs"]
    return tmp, {r["step"]: r for r in rows}, res.output


def test_tensorboard_holds_every_step_and_the_alarm(watched):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tmp, rows, _ = watched
    acc = EventAccumulator(str(tmp / "tb"))
    acc.Reload()
    kl = {e.step: e.value for e in acc.Scalars("tim/kl_k3")}
    assert kl == pytest.approx({s: r["kl_k3"] for s, r in rows.items()}, rel=1e-6)
    assert min(e.step for e in acc.Scalars("tim/alarm")) == JUMP


def test_wandb_offline_run_holds_every_step_and_the_alarm(watched):
    tmp, rows, _ = watched
    files = glob.glob(str(tmp / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    history = wandb_history(files[0])
    kl = {h["tim/step"]: h["tim/kl_k3"] for h in history if "tim/kl_k3" in h}
    assert kl == pytest.approx({s: r["kl_k3"] for s, r in rows.items()}, rel=1e-9)
    alarms = [h for h in history if h.get("tim/alarm") == 1]
    assert alarms and min(h["tim/step"] for h in alarms) == JUMP
    assert all(isinstance(h["tim/alarm_text"], str) and h["tim/alarm_text"] for h in alarms)


def test_mlflow_run_holds_every_step_and_the_alarm(watched):
    from mlflow.tracking import MlflowClient

    tmp, rows, _ = watched
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tim-test")
    (found,) = client.search_runs([exp.experiment_id])
    kl = {m.step: m.value for m in client.get_metric_history(found.info.run_id, "tim/kl_k3")}
    assert kl == pytest.approx({s: r["kl_k3"] for s, r in rows.items()}, rel=1e-9)
    assert min(m.step for m in client.get_metric_history(found.info.run_id, "tim/alarm")) == JUMP
    texts = [v for k, v in found.data.tags.items() if k.startswith("tim/alarm/")]
    assert texts and all(t.startswith("step ") for t in texts)
    assert found.info.status == "FINISHED"


def test_every_logger_gets_what_report_scalars_gives(watched):
    """The same scalars everywhere: MLflow and TensorBoard lacked `tim/corr_logp` and `tim/chi2_token`, which the
    index row did not carry although `report.scalars()` gives them."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import tim_report

    tmp, rows, _ = watched
    want = tim_report.analyze(tim_report.load(tmp / "token_exports" / f"step_{JUMP}")).scalars()
    assert {"tim/corr_logp", "tim/chi2_token"} <= set(want)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    (found,) = client.search_runs([client.get_experiment_by_name("tim-test").experiment_id])
    logged = {k: [m.value for m in client.get_metric_history(found.info.run_id, k) if m.step == JUMP] for k in want}
    assert all(len(v) == 1 for v in logged.values()), logged
    assert {k: v[0] for k, v in logged.items()} == pytest.approx(want, rel=1e-9)
    acc = EventAccumulator(str(tmp / "tb"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {*want, "tim/alarm"}


@pytest.mark.parametrize("verbose", [False, True])
def test_mlflow_own_log_lines_only_with_verbose(tmp_path, verbose):
    """MLflow printed its INFO lines ("Creating initial MLflow database tables...") into watch's terminal."""
    import subprocess
    import sys

    from helpers import ROOT

    _need("mlflow")
    write_prime_rl_run(tmp_path, steps=2, n_seqs=4, mean_len=12)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "tim_report", "watch", str(tmp_path / "token_exports"), "-o",
                          str(tmp_path / "site"), "--once", "--interval", "0.05", "--format", "json", "--log-to", "mlflow",
                          *(["--verbose"] if verbose else [])], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert ("INFO mlflow" in res.stderr) is verbose, res.stderr


@pytest.mark.parametrize("spec, phrase", [("slack", "unknown logger 'slack'"), ("tensorboard", "tensorboard needs a log folder")])
def test_a_bad_logger_is_one_line(tmp_path, spec, phrase):
    res = run("watch", str(tmp_path / "run"), "-o", str(tmp_path / "site"), "--once", "--log-to", spec)
    one_line_exit_2(res, "--log-to", phrase)
    assert not (tmp_path / "site").exists()


def test_a_logger_not_installed_is_one_line(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now raises ImportError
    (tmp_path / "run").mkdir()  # a run folder that exists: the logger is the one problem
    res = run("watch", str(tmp_path / "run"), "-o", str(tmp_path / "site"), "--once", "--log-to", "wandb")
    one_line_exit_2(res, "wandb is not installed", '-e ".[wandb]"')
