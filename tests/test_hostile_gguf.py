"""Hostile GGUF files and cache folders. Issue 38: a `$TIM_REPORT_CACHE` that cannot be written, or fills up while a
conversion writes, is one line naming the cache folder, exit 2, and leaves no staging folder behind. Issue 44: a header
declaring more than its file can hold is refused before gguf's reader builds it; conversions killed, raced, or
tampered with afterwards."""

from __future__ import annotations

import errno
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import one_line_exit_2, run, small_tmpfs
from test_model_path import write_gguf

from tim_report.capture import gguf_cache, model_path
from tim_report.errors import BadInput

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
    left = [p.name for p in (tmp_path / "cache" / "gguf").iterdir()]
    assert all(name.endswith(".lock") for name in left), left  # no staging folder, no half-written model


def test_an_oserror_from_transformers_is_still_the_gguf_s_fault(tmp_path, monkeypatch):
    monkeypatch.setenv("TIM_REPORT_CACHE", str(tmp_path / "cache"))

    def cannot(gguf, out):
        raise OSError("Can't load tokenizer for 'x'")

    monkeypatch.setattr(model_path, "_convert", cannot)
    res = capture(write_gguf(tmp_path / "m.gguf"), tmp_path / "out.npz")
    error_after_notice(res, "m.gguf", "transformers cannot load this GGUF")


# ---- header amplification (issue 44): counts the reader would trust, bounded by the file's size before it runs


def _s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _gguf(path: Path, body: bytes, tensors: int, kvs: int, version: int = 3) -> Path:
    """A raw GGUF: the magic, version and counts, the architecture as its first metadata entry, then `body`."""
    arch = _s("general.architecture") + struct.pack("<I", 8) + _s("llama")
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", version, tensors, kvs + 1) + arch + body)
    return path


def million_tensors(path: Path) -> Path:
    """The red team's 21 MB file: 1,000,000 zero-dimension tensor entries (3.0 GB and a fatal MemoryError before)."""
    body = b"".join(_s(f"t{i}") + struct.pack("<IIQ", 0, 0, 0) for i in range(1_000_000))
    return _gguf(path, body + bytes(64), 1_000_000, 0)


def four_million_bytes(path: Path) -> Path:
    """The red team's 4 MB file: one metadata array of 4,000,000 bytes (2.8 GB and minutes in the reader before)."""
    return _gguf(path, _s("x") + struct.pack("<IIQ", 9, 0, 4_000_000) + bytes(4_000_000), 0, 1)


PEAK = ("import atexit, re, sys; from tim_report.cli import main; atexit.register(lambda: open(sys.argv[1], 'w').write("
        "re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))); "
        "main(sys.argv[2:], prog_name='tim-report')")


@pytest.mark.parametrize("make", [million_tensors, four_million_bytes])
def test_a_header_declaring_more_than_its_file_holds_is_one_line_under_1_gb(tmp_path, make, monkeypatch):
    """capture in a real process (timeout: a hang guard; before, the first ran out of memory, the second past 120 s):
    one line naming the file, exit 2, its own peak resident memory under 1 GB, no cache folder made."""
    gguf = make(tmp_path / "m.gguf")
    peak = tmp_path / "peak"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TIM_REPORT_CACHE": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, "-c", PEAK, str(peak), "capture", "--model", str(gguf), "--prompts",
                          str(PROMPTS), "--rollout", "hf:bf16", "--trainer", "hf:fp32", "-o", str(tmp_path / "o.npz")],
                         capture_output=True, text=True, timeout=60, env=env)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert str(gguf) in lines[0] and "refused before the gguf reader builds them" in lines[0], lines[0]
    assert int(peak.read_text()) < 1_000_000  # KiB
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "cache" / "gguf").exists()


def _array(kind: int, count: int, items: bytes = b"") -> bytes:
    return _s("a") + struct.pack("<IIQ", 9, kind, count) + items


@pytest.mark.parametrize("body, tensors, kvs, phrase", [
    (_s("x" * 4) + struct.pack("<I", 8) + struct.pack("<Q", 1 << 40), 0, 1, "past the end"),  # a string of 1 TiB
    (struct.pack("<Q", 1 << 62), 0, 1, "past the end"),  # a key's length past the file
    (_array(8, 10**12), 0, 1, "past the end"),  # an array of 10¹² strings
    (_array(0, 200_000) + bytes(200_000), 0, 1, "refused before the gguf reader"),  # 200,000 bytes in a 200 KB file
    (_array(9, 3, b"".join(struct.pack("<IQ", 9, 1) for _ in range(3)) + bytes(64)), 0, 1, "nests metadata arrays"),
    (_s("k") + struct.pack("<I", 77) + bytes(16), 0, 1, "unknown type 77"),
    (b"", 1 << 60, 0, "past the end"),  # 2⁶⁰ tensors declared
])
def test_each_header_count_is_checked_against_the_file_before_the_reader(tmp_path, monkeypatch, body, tensors, kvs,
                                                                         phrase):
    import gguf

    def never(*a, **k):
        raise AssertionError("gguf's reader ran on a header the walk should have refused")

    monkeypatch.setattr(gguf, "GGUFReader", never)
    path = _gguf(tmp_path / "m.gguf", body, tensors, kvs)
    with pytest.raises(BadInput) as err:
        model_path.read_header(path)
    assert phrase in str(err.value) and "\n" not in str(err.value), err.value


def test_an_old_gguf_version_is_named(tmp_path):
    with pytest.raises(BadInput, match="is GGUF version 1; the gguf package reads versions 2 and 3"):
        model_path.read_header(_gguf(tmp_path / "m.gguf", b"", 0, 0, version=1))


def test_a_real_models_header_fits_its_budget():
    """SmolLM2-135M's header (147,204 array elements in 98 MB) passes the walk and reads as before."""
    from helpers import smollm2_gguf

    from tim_report.capture.gguf_header import check_header

    check_header(smollm2_gguf())


def test_a_tiny_gguf_with_a_small_header_still_reads(tmp_path):
    header = model_path.read_header(write_gguf(tmp_path / "m.gguf"))
    assert header["architecture"] == "llama" and header["tensors"] == 1


# ---- the cache attacked (issue 44): conversions killed and raced, a full and a read-only cache, a tampered folder

SLOW_CONVERT = """
import sys, time
from pathlib import Path
from tim_report.capture import gguf_cache, model_path
def convert(gguf, out):
    with open(sys.argv[2], "a") as log:
        log.write(str(out) + "\\n")
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"w" * int(sys.argv[3]))
    Path(sys.argv[2] + ".started").touch()
    end = time.monotonic() + float(sys.argv[4])
    while time.monotonic() < end and not Path(sys.argv[2] + ".go").exists():
        time.sleep(0.05)
model_path._convert = convert
print(model_path.resolve_model(sys.argv[1], notice=lambda line: print(line, file=sys.stderr, flush=True)))
"""


def converting(gguf: Path, log: Path, cache: Path, size: int = 1000, pause: float = 1.0) -> subprocess.Popen:
    """A real process converting `gguf` with a stand-in conversion that logs each call, then pauses `pause` s (or until
    a file `<log>.go` appears)."""
    return subprocess.Popen([sys.executable, "-c", SLOW_CONVERT, str(gguf), str(log), str(size), str(pause)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TIM_REPORT_CACHE": str(cache)})


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)


def test_a_conversion_killed_mid_way_is_cleaned_up_by_the_rerun(tmp_path):
    gguf = write_gguf(tmp_path / "m.gguf")
    log, cache = tmp_path / "log", tmp_path / "cache"
    first = converting(gguf, log, cache, pause=60)
    wait_for(Path(f"{log}.started"), first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    root = cache / "gguf"
    assert [p.name for p in root.glob(".*.staging-*")]  # the killed conversion's half-written folder
    second = converting(gguf, log, cache, pause=0)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    final = Path(out.strip())
    assert sorted(p.name for p in final.iterdir()) == ["config.json", "model.safetensors", gguf_cache.MARKER]
    assert not list(root.glob(".*.staging-*"))  # gone at once, not after a day
    assert len(log.read_text().splitlines()) == 2


def test_two_processes_converting_one_file_convert_it_once(tmp_path):
    gguf = write_gguf(tmp_path / "m.gguf")
    log, cache = tmp_path / "log", tmp_path / "cache"
    first = converting(gguf, log, cache, pause=60)
    wait_for(Path(f"{log}.started"), first)
    second = converting(gguf, log, cache, pause=0)
    said = second.stderr.readline()  # the second says it waits, while the first still converts
    Path(f"{log}.go").touch()
    (out1, err1), (out2, err2) = first.communicate(timeout=60), second.communicate(timeout=60)
    err2 = said + err2
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    assert out1 == out2 and len(log.read_text().splitlines()) == 1  # one conversion; the second reused it
    assert "waiting for another process converting m.gguf" in err2 and "converting m.gguf once" not in err2, err2
    assert not list((cache / "gguf").glob(".*.staging-*"))


def test_a_full_cache_is_one_line_and_leaves_nothing_half_written(tmp_path, monkeypatch):
    """A real 64 KiB file system as the cache, a conversion writing 1 MiB into it."""
    gguf = write_gguf(tmp_path / "m.gguf")
    with small_tmpfs(tmp_path / "cache", "64k") as cache:
        monkeypatch.setenv("TIM_REPORT_CACHE", str(cache))
        monkeypatch.setattr(model_path, "_convert", lambda _g, out: (out / "model.safetensors").write_bytes(b"w" * (1 << 20)))
        error_after_notice(capture(gguf, tmp_path / "o.npz"), str(cache / "gguf"), "No space left on device")
        assert [p.name for p in (cache / "gguf").iterdir() if not p.name.endswith(".lock")] == []
        assert not (tmp_path / "o.npz").exists()


def test_a_read_only_cache_is_one_line_and_a_read_only_cache_holding_the_model_is_used(tmp_path, monkeypatch):
    gguf = write_gguf(tmp_path / "m.gguf")
    with small_tmpfs(tmp_path / "cache", "4m") as cache:
        monkeypatch.setenv("TIM_REPORT_CACHE", str(cache))
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
        one_line_exit_2(capture(gguf, tmp_path / "o.npz"), str(cache / "gguf"), "cannot write the GGUF cache here",
                        "Read-only file system")
        subprocess.run(["mount", "-o", "remount,rw", str(cache)], check=True)
        monkeypatch.setattr(model_path, "_convert", lambda _g, out: (out / "config.json").write_text("{}"))
        final = model_path.resolve_model(str(gguf))
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
        model_path._RESOLVED.clear()
        assert model_path.resolve_model(str(gguf)) == final  # reused without a write


@pytest.mark.parametrize("tamper, phrase", [
    (lambda f: (f / "config.json").write_text("[]"), "config.json's content differs"),
    (lambda f: (f / "config.json").write_text('{"auto_map": {"AutoModel": "evil.Model"}}'), "config.json is not the 2-byte"),
    (lambda f: (f / "evil.py").write_text("import os"), "evil.py was added"),
    (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    (lambda f: (f / "model.safetensors").write_bytes(b"v" * (1 << 20)), "model.safetensors's content differs"),
    (lambda f: (f / "model.safetensors").write_bytes(b"w"), "model.safetensors is not the 1048576-byte file"),
    (lambda f: (f / gguf_cache.MARKER).write_text('{"name": "x"}'), "does not list its files"),
], ids=["config", "custom-code", "added", "missing", "weights", "weights-size", "marker"])
def test_a_cache_folder_changed_after_its_marker_is_refused_naming_the_file(tmp_path, monkeypatch, tamper, phrase):
    monkeypatch.setenv("TIM_REPORT_CACHE", str(tmp_path / "cache"))

    def convert(_gguf, out):
        (out / "config.json").write_text("{}")
        (out / "tokenizer.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"w" * (1 << 20))

    monkeypatch.setattr(model_path, "_convert", convert)
    monkeypatch.setattr(gguf_cache, "HASH_ALWAYS_BYTES", 1 << 10)  # the weights: hashed only when touched
    gguf = write_gguf(tmp_path / "m.gguf")
    final = model_path.resolve_model(str(gguf))
    model_path._RESOLVED.clear()
    assert model_path.resolve_model(str(gguf)) == final  # unchanged: reused
    tamper(final)
    model_path._RESOLVED.clear()
    res = capture(gguf, tmp_path / "o.npz")
    one_line_exit_2(res, str(final), "was changed after tim-report wrote it", phrase, "remove the folder and run again")
