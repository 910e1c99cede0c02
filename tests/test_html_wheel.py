"""The templates ship inside the wheel: build it, install it in a fresh venv, render a report from the installed copy."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

SCRIPT = r"""
import sys, tim_report
from pathlib import Path
from tim_report.render.html import templates_dir
from tim_report.build import BuildOptions, build
from tim_report.io import save_batch
from tim_report.testing import make_batch
here = Path(tim_report.__file__).resolve().parent
assert here.is_relative_to(Path(sys.prefix).resolve()), (here, sys.prefix)
assert templates_dir() == here / "templates", templates_dir()
out = Path(sys.argv[1])
save_batch(make_batch(8, 16), out / "w.npz")
build([out / "w.npz"], out / "site", BuildOptions())
page = (out / "site" / "w" / "index.html").read_text(encoding="utf-8")
assert "window.vegaEmbed=" in page and 'id="glossary"' in page, page[:500]
print("OK", here)
"""


def test_wheel_renders_from_installed_templates(tmp_path):
    dist = tmp_path / "dist"
    # offline when hatchling is installed here; otherwise build fetches it into an isolated env
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-isolation"]
    res = subprocess.run([sys.executable, "-m", "build", "--wheel", *isolation, "--outdir", str(dist), str(ROOT)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    wheel = next(dist.glob("tim_report-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    py = env_dir / "bin" / "python"
    site_dir = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
    # the dependencies (numpy, torch, jinja2, altair, vl-convert...) come from this interpreter's site-packages;
    # a plain path line does not run its .pth files, so the editable checkout stays out of the way
    (site_dir / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                    "--target", str(site_dir), str(wheel)], check=True, capture_output=True, text=True)
    res = subprocess.run([str(py), "-c", SCRIPT, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK" in res.stdout
