"""A newcomer's second hour (issue 44): what they ran from elsewhere than the repository root, and the errors that
pointed at the wrong thing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_tiny_models_versions_are_found_from_any_folder(tmp_path):
    """docs/staleness.md points to `tim_report.testing.train_versions`: run from another folder it tried
    "models/tiny-qwen2" as a hub id, ten retries, then a traceback. The model is found from the package's place, and
    a folder that is no model is one line saying where the tiny model comes from."""
    code = ("from pathlib import Path; from tim_report.errors import BadInput; "
            "from tim_report.testing import TINY_MODEL, model_folder, train_versions\n"
            "assert Path(TINY_MODEL).is_absolute() and model_folder(TINY_MODEL) == TINY_MODEL\n"
            "try:\n    train_versions('models/tiny-qwen2')\nexcept BadInput as exc:\n    print(exc)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("models/tiny-qwen2: no model folder here") and "ships with the repository" in res.stdout


def test_a_captures_own_page_says_what_wrote_it():
    """The page of a batch `tim-report capture` wrote said "framework —"."""
    from tim_report.analysis import analyze
    from tim_report.io import load
    from tim_report.render import RenderOptions, render

    page = render("run", analyze(load(ROOT / "examples" / "vllm-bf16__hf-fp32.npz")), ("html",), RenderOptions())
    assert "<th>framework<td>tim-report capture · " in page["index.html"]
