"""Red team, round two: what a command reads is bounded, and a site is published only once nothing can fail.

Families: special files as `capture --prompts` (a real FIFO, /dev/zero) and a prompt file larger than capture reads;
a JSON line within the old 1 GiB cap whose parse would take gigabytes; an `.npz` string column of 10⁹ characters an
element under `check --no-limits` (which drops metric limits, never memory bounds); `build > /dev/full`, which
exited 2 having already published the site; and builds racing into one fresh folder, which took the marker's own
temporary file for a stranger's.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT

from tim_report.io import save_batch
from tim_report.io.limits import JSON_PARSE_FACTOR, Limits
from tim_report.site.layout import MARKER
from tim_report.testing import make_batch

TOOL = [sys.executable, "-m", "tim_report"]


def bounded(args: list[str], limit: int = 3 << 30, timeout: int = 120) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that may not map more than `limit` bytes, under a timeout (a FIFO must not hang it)."""
    code = (f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
            "from tim_report.cli import main; sys.exit(main(sys.argv[1:], prog_name='tim-report'))")
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def one_line_2(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "MemoryError" not in res.stderr


# ---- capture --prompts: special files and size ----------------------------------------------------------------

def capture(prompts: Path | str, out: Path) -> subprocess.CompletedProcess:
    return bounded(["capture", "--model", ROOT / "models" / "tiny-qwen2", "--prompts", prompts, "--rollout", "hf:fp32",
                    "--trainer", "hf:fp32", "-o", out], timeout=300)


def test_capture_refuses_a_fifo_as_prompts_instead_of_hanging(tmp_path):
    fifo = tmp_path / "prompts.fifo"
    os.mkfifo(fifo)
    one_line_2(capture(fifo, tmp_path / "b.npz"), "prompts.fifo", "FIFO", "regular")


def test_capture_refuses_dev_zero_as_prompts(tmp_path):
    one_line_2(capture("/dev/zero", tmp_path / "b.npz"), "/dev/zero", "character device")


def test_a_prompt_file_is_bounded_and_deep_json_is_one_line(tmp_path):
    from tim_report.capture.prompts import read_prompts
    from tim_report.config import PROMPTS_MAX_BYTES
    from tim_report.errors import BadInput

    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(PROMPTS_MAX_BYTES + 10)  # sparse: 64 MiB of NULs on no disk
    with pytest.raises(BadInput, match="is larger than 64 MiB"):
        read_prompts(big)
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(BadInput, match="nests deeper"):
        read_prompts(deep)


# ---- JSON lines within the byte bound --------------------------------------------------------------------------

@pytest.mark.parametrize("max_tokens", [None, 1000, 10**9])
def test_a_json_lines_parse_stays_within_the_byte_limit(max_tokens):
    """The line cap times what a byte of JSON parses into is within the byte limit every format has. The old cap
    (1 GiB by default) let a 0.7 GiB line parse into ~11 GB: a MemoryError traceback."""
    limits = Limits(max_tokens) if max_tokens else Limits()
    assert limits.max_line_bytes * JSON_PARSE_FACTOR <= limits.max_bytes
    assert limits.max_line_bytes >= 64_000  # still a sample of the longest context


def test_a_json_line_over_the_cap_is_one_line_in_bounded_memory(tmp_path):
    """A 110 MB line of floats (each `0.5,` becomes a 24-byte float and an 8-byte slot: ~0.9 GB parsed) under a 1.2 GB
    address-space limit: refused by its length, before it is parsed (the old cap parsed it: a MemoryError)."""
    path = tmp_path / "batch.jsonl"
    n = 110_000_000 // 4
    with open(path, "wb") as f:
        f.write(b'{"rollout_log_probs": [' + b"0.5," * (n - 1) + b'0.5], "old_log_probs": []}\n')
    res = bounded(["check", path], limit=int(1.2 * (1 << 30)))
    one_line_2(res, "line 1 is longer than 100,000,000 bytes")


# ---- string columns under check --no-limits ---------------------------------------------------------------------

def test_a_string_column_of_a_billion_characters_is_refused_under_no_limits(tmp_path):
    """`S1000000000`, one element: 1 GB (deflated to ~1 MB) that became 1.9 GB once read and converted. --no-limits
    drops metric limits only: the string width is refused before the member is read."""
    b = make_batch(n_seqs=2, mean_len=4)
    save_batch(b, tmp_path / "ok.npz")
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|S1000000000", "fortran_order": False, "shape": (1,)})
    with zipfile.ZipFile(tmp_path / "ok.npz") as zin, zipfile.ZipFile(tmp_path / "wide.npz", "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename != "token_text.npy":
                zout.writestr(info.filename, zin.read(info))
        with zout.open("token_text.npy", "w", force_zip64=True) as member:
            member.write(buf.getvalue())
            chunk = bytes(1 << 24)
            for _ in range(1_000_000_000 // len(chunk)):
                member.write(chunk)
            member.write(bytes(1_000_000_000 % len(chunk)))
    assert (tmp_path / "wide.npz").stat().st_size < 20_000_000
    res = bounded(["check", tmp_path / "wide.npz", "--no-limits"], limit=int(1.5 * (1 << 30)))
    one_line_2(res, "'token_text' holds strings of 1,000,000,000 characters each")


# ---- publish only when nothing can fail ---------------------------------------------------------------------------

@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_build_into_dev_full_publishes_nothing(tmp_path):
    save_batch(make_batch(n_seqs=4, mean_len=8), tmp_path / "a.npz")
    site = tmp_path / "site"
    with open("/dev/full", "w") as full:
        res = subprocess.run([*TOOL, "build", str(tmp_path / "a.npz"), "-o", str(site)], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "tim-report: error: cannot write to standard output (No space left on device)"], res.stderr
    assert not (site / "index.html").exists() and not (site / "a").exists() and not (site / MARKER).exists()
    assert [p.name for p in site.iterdir()] in ([], [".tim-report.lock"]) if site.exists() else True


def test_the_markers_own_temporary_file_is_not_a_strangers(tmp_path):
    """What a build racing into the same fresh folder sees while another replaces the marker: its temporary file
    (`.tim-report.json.<pid>.<64 random bits>.tmp`) and no marker yet. 4 of 48 racing builds were refused for it."""
    save_batch(make_batch(n_seqs=4, mean_len=8), tmp_path / "a.npz")
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{MARKER}.4242.0123456789abcdef.tmp").write_text(json.dumps({"tool": "tim-report", "written": []}))
    res = subprocess.run([*TOOL, "build", str(tmp_path / "a.npz"), "-o", str(site), "--format", "json"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    (site / "thesis.txt").write_text("a stranger's file is still refused")
    (site / MARKER).unlink()
    res = subprocess.run([*TOOL, "build", str(tmp_path / "a.npz"), "-o", str(site), "--format", "json"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 2 and "was not written by tim-report" in res.stderr


def test_builds_racing_into_one_fresh_folder_all_succeed(tmp_path):
    """Real processes, started together into one folder that does not exist yet."""
    save_batch(make_batch(n_seqs=4, mean_len=8), tmp_path / "a.npz")
    site = tmp_path / "site"
    procs = [subprocess.Popen([*TOOL, "build", str(tmp_path / "a.npz"), "-o", str(site), "--format", "json",
                               "--run-id", f"r{i}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for i in range(8)]
    errors = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(code == 0 for code, _ in errors), errors
    assert {f"r{i}" for i in range(8)} <= set(json.loads((site / MARKER).read_text())["written"])
