"""Hostile GGUF cache folders (issue 38, red team): a `$TIM_REPORT_CACHE` that cannot be written, or fills up while a
conversion writes, is one line naming the cache folder, exit 2, and leaves no staging folder behind."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from helpers import one_line_exit_2, run
from test_model_path import write_gguf

from tim_report.capture import model_path

REPO = Path(__file__).resolve().parent.parent
PROMPTS = REPO / "examples" / "prompts.jsonl"


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(model_path, "_RESOLVED", {})


def error_after_notice(res, *phrases: str) -> None:
    """Exit 2 and, after the conversion's one notice line, one error line naming what is wrong; no traceback."""
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert len(lines) == 2 and lines[0].startswith("tim-report: converting "), res.stderr
    assert lines[1].startswith("tim-report: error: ") and all(p in lines[1] for p in phrases), lines[1]


def capture(model: Path, out: Path):
    return run("capture", "--model", model, "--prompts", PROMPTS, "--rollout", "hf:bf16", "--trainer", "hf:fp32",
               "-o", out)


def test_a_cache_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TIM_REPORT_CACHE", str(blocker))
    res = capture(write_gguf(tmp_path / "m.gguf"), tmp_path / "out.npz")
    one_line_exit_2(res, str(blocker / "gguf"), "cannot write the GGUF cache", "TIM_REPORT_CACHE")
    assert not (tmp_path / "out.npz").exists()


def test_a_cache_that_fills_up_is_one_line_naming_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TIM_REPORT_CACHE", str(tmp_path / "cache"))

    def full(gguf, out):
        (out / "model.safetensors").write_bytes(b"x" * 10)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(model_path, "_convert", full)
    res = capture(write_gguf(tmp_path / "m.gguf"), tmp_path / "out.npz")
    error_after_notice(res, str(tmp_path / "cache" / "gguf"), "No space left on device")
    assert not list((tmp_path / "cache" / "gguf").iterdir())  # no staging folder, no half-written model


def test_an_oserror_from_transformers_is_still_the_gguf_s_fault(tmp_path, monkeypatch):
    monkeypatch.setenv("TIM_REPORT_CACHE", str(tmp_path / "cache"))

    def cannot(gguf, out):
        raise OSError("Can't load tokenizer for 'x'")

    monkeypatch.setattr(model_path, "_convert", cannot)
    res = capture(write_gguf(tmp_path / "m.gguf"), tmp_path / "out.npz")
    error_after_notice(res, "m.gguf", "transformers cannot load this GGUF")
