"""The wheel: build it, install it in a fresh venv, render a report from the installed templates, and use the
pytest plugin its entry point registers."""

from __future__ import annotations

import importlib.util
import os
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
from tim_report.render.pages import templates_dir
from tim_report.service.build import BuildOptions, build
from tim_report.io import save_batch
from tim_report.testing import make_batch
here = Path(tim_report.__file__).resolve().parent
assert here.is_relative_to(Path(sys.prefix).resolve()), (here, sys.prefix)
assert templates_dir() == here / "render" / "templates", templates_dir()
out = Path(sys.argv[1])
save_batch(make_batch(8, 16), out / "w.npz")
build([out / "w.npz"], out / "site", BuildOptions())
page = (out / "site" / "w" / "index.html").read_text(encoding="utf-8")
assert 'src="../assets/vega.js"' in page and 'id="glossary"' in page and 'id="about"' in page, page[:500]
assert "window.vegaEmbed=" in (out / "site" / "assets" / "vega.js").read_text(encoding="utf-8")
assert "vegaEmbed(" in (out / "site" / "assets" / "tim.js").read_text(encoding="utf-8")
print("OK", here)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv with the wheel built from this checkout installed (dependencies from here)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
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
    return py


def clean_env() -> dict:
    """This environment without PYTHONPATH, so the venv imports the installed wheel, not a checkout."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_wheel_renders_from_installed_templates(installed, tmp_path):
    res = subprocess.run([str(installed), "-c", SCRIPT, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                         env=clean_env())
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK" in res.stdout


SUITE = """
import numpy as np
REF = -np.random.default_rng(0).exponential(2.0, (8, 64))

def test_bug(assert_logprobs_match):
    assert_logprobs_match(REF, REF / 0.8, precision="bf16")
"""


@pytest.mark.parametrize("extra", [[], ["-p", "tim_report.pytest_plugin"]])
def test_installed_wheel_registers_the_pytest_plugin(installed, tmp_path, extra):
    """The entry point alone makes the fixture and --tim-report-dir available; -p on top of it is harmless."""
    (tmp_path / "test_k.py").write_text(SUITE)
    res = subprocess.run([str(installed), "-m", "pytest", "-p", "no:cacheprovider", *extra, "test_k.py",
                          "--tim-report-dir", "out"], cwd=tmp_path, capture_output=True, text=True, env=clean_env())
    assert res.returncode == 1 and "1 failed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    assert "[temperature]" in res.stdout
    assert "plugins: " in res.stdout and "tim-report-" in res.stdout  # registered by the distribution's entry point
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["test_k.py_test_bug.html"]
