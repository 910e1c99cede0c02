"""The training loop of docs/integrations.md as written, and examples/training_loop/train.py followed live by `watch`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tim_report.service.build import BuildOptions, build

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "tiny-qwen2"


def _docs_block() -> str:
    """The python block under "## A plain PyTorch loop" in docs/integrations.md, as a reader copies it."""
    text = (ROOT / "docs" / "integrations.md").read_text()
    section = text[text.index("## A plain PyTorch loop"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_docs_plain_loop_runs_as_written(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    engine = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16)
    loader = []
    for step in range(3):  # what an RL loop's batch holds: the sequences, the sampler's log-probs, the loss mask
        input_ids = torch.randint(3, 2048, (4, 20))
        response_ids = input_ids[:, -12:]
        with torch.no_grad():
            logits = engine(input_ids=input_ids).logits[:, -13:-1].float()
        sampler = torch.log_softmax(logits, -1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
        loader.append({"input_ids": input_ids, "response_ids": response_ids, "sampler_logprobs": sampler,
                       "loss_mask": torch.ones_like(response_ids), "prompt_index": torch.arange(4) + 4 * step})
    monkeypatch.chdir(tmp_path)
    exec(compile(_docs_block(), "docs/integrations.md", "exec"), {"loader": loader, "model": model})
    result = build([tmp_path / "tim_steps"], tmp_path / "site", BuildOptions(formats=("json",)))
    assert [r["step"] for r in result.rows] == [0, 1, 2]
    assert all(r["tokens"] == 48 for r in result.rows)
    assert all(r["regime"] == "numerical_noise" for r in result.rows), [r["regime"] for r in result.rows]
    assert max(r["abs_delta_median"] for r in result.rows) < 0.05  # bf16 against fp32, aligned: a shift would be ~1 nat


def follow(tmp_path: Path, *train_args: str, steps: int = 9) -> tuple[list[str], dict, str]:
    """examples/training_loop/train.py followed live by `watch`: (the alarm lines, index.json, watch's output)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    run_dir, site = tmp_path / "tim_steps", tmp_path / "site"
    watch = subprocess.Popen([sys.executable, "-m", "tim_report", "watch", str(run_dir), "-o", str(site), "--interval", "0.3"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        train = subprocess.run([sys.executable, str(ROOT / "examples" / "training_loop" / "train.py"), "--out", str(run_dir),
                                "--steps", str(steps), "--tokens", "16", "--pause", "0.2", *train_args],
                               capture_output=True, text=True, env=env, timeout=300)
        assert train.returncode == 0, train.stderr[-2000:]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            doc = json.loads((site / "index.json").read_text()) if (site / "index.json").is_file() else {"runs": []}
            if len(doc["runs"]) == steps:
                break
            time.sleep(0.3)
    finally:
        watch.send_signal(signal.SIGTERM)
        out, _ = watch.communicate(timeout=60)
    assert watch.returncode == 0, out
    assert len(doc["runs"]) == steps, out
    return [line for line in out.splitlines() if line.startswith("alarm:")], doc, out


@pytest.mark.slow
def test_watch_follows_the_example_loop_and_alarms_where_the_bug_starts(tmp_path):
    alarms, doc, out = follow(tmp_path, "--bug-step", "6", "--bug", "shift")
    assert alarms and "step_6" in alarms[0], out  # the first alarm is the step the bug starts at, not before
    assert doc["run"]["since_step"] == 6 and "shift" in doc["run"]["verdict"], doc["run"]
    regimes = {r["step"]: r["regime"] for r in doc["runs"]}
    assert all(regimes[s] in ("numerical_noise", "identical") for s in range(6)) and regimes[8] == "systematic", regimes
    assert np.isfinite([r["kl_k3"] for r in doc["runs"]]).all()


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["skip-sync", "bf16-sync"])
def test_a_weight_sync_that_does_not_arrive_alarms_stale_weights_at_its_first_step(tmp_path, bug):
    """skip-sync: the engine keeps version 5 from step 6 on; bf16-sync: each update arrives as a bf16 delta, where
    Adam's changes at lr 2e-4 (below the bf16 rounding step of every weight above 0.05 in size) are lost. Both claim
    the trainer's version (lag 0)."""
    alarms, doc, out = follow(tmp_path, "--bug-step", "6", "--bug", bug, "--lr", "2e-4")
    assert alarms and alarms[0].startswith("alarm: step_6") and "stale weights" in alarms[0], out
    assert len([a for a in alarms if "stale weights" in a]) == 1, out  # one alarm per event, not one per stale step
    rows = {r["step"]: r for r in doc["runs"]}
    assert all(r["lag_mix"] == {"0": 1.0} for r in rows.values())  # every step claims lag 0
    assert rows[8]["lag_kl_k3"]["0"] > 5 * max(rows[s]["lag_kl_k3"]["0"] for s in range(6))


@pytest.mark.slow
def test_a_clean_asynchronous_loop_with_lag_up_to_3_raises_no_alarm(tmp_path):
    alarms, doc, out = follow(tmp_path, "--async-lag", "3", "--bug-step", "-1")
    assert alarms == [], out
    rows = sorted(doc["runs"], key=lambda r: r["step"])
    assert [list(r["lag_mix"]) for r in rows] == [["0"], ["1"], ["2"]] + [["3"]] * 6
    kl = [r["lag_kl_k3"][str(min(r["step"], 3))] for r in rows]
    assert kl[0] < kl[1] < kl[3]  # the mismatch grows with lag: staleness, not a bug
    assert all("stale_weights" not in r["findings"] for r in rows)
    # the run verdict reads the lag, not a fault: a clean asynchronous run is not "Elevated from step 2"
    assert doc["run"]["regime"] == "staleness" and doc["run"]["verdict"].startswith("Staleness from step 1"), doc["run"]
    assert not [f for f in doc["run"]["findings"] if f["severity"] != "info"], doc["run"]["findings"]
    assert not any("weight sync that stopped" in c["sentence"] for c in doc.get("change_steps") or []), doc["change_steps"]


@pytest.mark.slow
def test_a_prefix_cache_kept_across_syncs_is_named_at_its_first_step(tmp_path):
    """--bug stale-prefix-cache: each step repeats half the previous step's prompts; from step 5 the sync no longer resets
    the engine's prefix cache, so that half is read from KV the previous version computed and answered by the new one.
    `watch` names the stale prefix cache at step 5; before it (the cache reset at every sync) every prompt is computed
    afresh: 0 cached tokens, nothing to compare."""
    alarms, doc, out = follow(tmp_path, "--bug", "stale-prefix-cache", "--bug-step", "5", "--batch", "24", "--lr", "1e-3",
                              steps=8)
    assert alarms and alarms[0].startswith("alarm: step_5") and "stale prefix cache" in alarms[0], out
    rows = {r["step"]: r for r in doc["runs"]}
    assert all("stale_prefix_cache" not in rows[s]["findings"] for s in range(5))
    assert all(rows[s]["findings"][0] == "stale_prefix_cache" for s in range(5, 8)), [rows[s]["findings"] for s in rows]
    steps = {s: json.loads((tmp_path / "site" / rows[s]["id"] / "summary.json").read_text()) for s in (4, 5)}
    assert steps[4]["run"]["available"]["cached_tokens"] and "prefix_cache" not in steps[4]["diagnosis"]
    pc = steps[5]["diagnosis"]["prefix_cache"]
    assert (pc["hit"]["sequences"], pc["miss"]["sequences"]) == (12, 12) and pc["ratio"] > 2


def _check(run_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tim_report", "check", str(run_dir)], capture_output=True, text=True,
                           env=env, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("lag", [1, 2])
def test_a_clean_one_step_off_run_reads_staleness_at_every_step_and_raises_no_alarm(tmp_path, lag):
    """Issue 42: every token at lag 1 (or 2), none at lag 0 to anchor on. Each step reads "staleness" (its lag, not
    "elevated"), the run verdict says so, `watch` raises nothing and `check` passes every step."""
    alarms, doc, out = follow(tmp_path, "--async-lag", str(lag), "--bug-step", "-1", steps=10)
    assert alarms == [], out
    rows = sorted(doc["runs"], key=lambda r: r["step"])
    assert all(r["regime"] == "staleness" for r in rows[lag:]), [(r["step"], r["regime"]) for r in rows]
    assert all((r["lag_reading"] or {}).get("status") != "beyond" for r in rows)
    assert doc["run"]["regime"] == "staleness" and doc["run"]["verdict"].startswith("Staleness from step 1"), doc["run"]
    assert not [f for f in doc["run"]["findings"] if f["severity"] != "info"], doc["run"]["findings"]
    r = _check(tmp_path / "tim_steps")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["skip-sync", "swapped-tensors"])
def test_a_sync_that_stops_in_a_one_step_off_run_is_named_the_engines_weights_at_its_first_step(tmp_path, bug):
    """The sync fails from step 6's sampling on; at lag 1 the trainer meets those tokens at step 7, the first affected
    step: `watch` names the engine's weights there (cause first), once, and the run verdict says stale weights."""
    alarms, doc, out = follow(tmp_path, "--async-lag", "1", "--bug", bug, "--bug-step", "6", steps=10)
    assert alarms and alarms[0].startswith("alarm: step_7: ") and "stale weights" in alarms[0], out
    assert len([a for a in alarms if "stale weights" in a]) == 1, out  # one alarm per event
    assert doc["run"]["regime"] == "systematic" and doc["run"]["since_step"] == 7, doc["run"]
    assert "stale weights" in doc["run"]["verdict"]
    r = _check(tmp_path / "tim_steps")  # the run folder's steps read together say what the index says
    assert r.returncode == 1 and "error stale_weights (the steps read together)" in r.stdout, r.stdout[-2000:]
    assert "step_7: stale weights" in r.stdout


@pytest.mark.slow
def test_an_engine_that_never_took_an_update_is_named_in_the_run_verdict(tmp_path):
    alarms, doc, out = follow(tmp_path, "--async-lag", "1", "--bug", "never-synced", steps=12)
    found = {f["id"]: f for f in doc["run"]["findings"]}
    assert found["never_delivered"]["severity"] == "error", doc["run"]  # the loop records lr: not a warm-up
    assert doc["run"]["regime"] == "systematic" and "Never delivered" in doc["run"]["verdict"]
    assert alarms and "stale weights" in alarms[0], out


@pytest.mark.slow
def test_a_learning_rate_warm_up_stays_quiet(tmp_path):
    """The KL at lag 1 grows for the first five updates as the learning rate does, then levels off: read per unit of
    lr² (the loop records each step's lr), nothing rises."""
    alarms, doc, out = follow(tmp_path, "--async-lag", "1", "--bug-step", "-1", "--lr-warmup", "5", steps=12)
    assert alarms == [], out
    assert doc["run"]["regime"] == "staleness" and not [f for f in doc["run"]["findings"] if f["severity"] != "info"]
