"""The layers of design §2, checked on the code itself: every import statement, lazy ones included.

    cli ──▶ api ──▶ service ──▶ io · analysis · render · site · capture ──▶ model ──▶ catalogue ──▶ config ──▶ errors

A module may import its own component and the components of lower layers, nothing else: no renderer
imports the analysis, nothing below `cli` imports `cli`, and there is no cycle. The second half runs
the commands under `python -X importtime` to check that heavy packages load only where needed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT

from tim_report.io import save_batch
from tim_report.testing import make_batch

PKG = ROOT / "tim_report"
# component → layer; a module may import components of strictly lower layers, and its own component.
LAYERS = {"errors": 0, "config": 1, "catalogue": 2, "model": 3, "io": 4, "analysis": 4, "render": 4,
          "site": 4, "capture": 4, "testing": 4, "service": 5, "api": 6, "frames": 5, "integrations": 6, "assertions": 6, "cli": 7,
          "pytest_plugin": 7,
          "__main__": 8, "": 9}


def module_files() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = module_files()


def imports_of(name: str, path: Path) -> set[str]:
    """tim_report modules that `name` imports, at any depth of its code (functions included)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_graph_is_read():
    assert len(MODULES) > 40
    assert "tim_report.service.build" in GRAPH["tim_report.cli.build"]  # a lazy import inside a function
    assert "tim_report.model" in GRAPH["tim_report.io.assemble"]


def test_no_import_cycle():
    seen, stack, cycles = {}, [], []

    def visit(m: str) -> None:  # depth-first search; a back edge closes a cycle
        seen[m] = "open"
        stack.append(m)
        for n in sorted(GRAPH[m]):
            if seen.get(n) == "open":
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in seen:
                visit(n)
        stack.pop()
        seen[m] = "done"

    for m in sorted(GRAPH):
        if m not in seen:
            visit(m)
    assert cycles == [], "\n".join(" → ".join(c) for c in cycles)


def test_imports_point_down():
    wrong = []
    for m, targets in GRAPH.items():
        for t in targets:
            cm, ct = component(m), component(t)
            if cm != ct and not LAYERS[ct] < LAYERS[cm]:
                wrong.append(f"{m} → {t}")
    assert wrong == [], "\n".join(sorted(wrong))


def test_only_the_cli_imports_the_cli():
    users = sorted(m for m, targets in GRAPH.items() if any(component(t) == "cli" for t in targets))
    assert all(component(m) in ("cli", "__main__") for m in users), users


def test_no_module_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values() if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


# ---- heavy packages load only where needed ---------------------------------------------------------------


def imported_modules(*args: str, cwd: Path) -> set[str]:
    """Top-level packages a `python -X importtime -m tim_report ...` run imported."""
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "tim_report", *args], cwd=cwd,
                         capture_output=True, text=True)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    names = set()
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "tim_report" in names
    return names


@pytest.fixture(scope="module")
def npz(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("imports") / "x.npz"
    save_batch(make_batch(n_seqs=8, mean_len=16), path)
    return path


@pytest.mark.slow
def test_markdown_build_loads_no_charts_no_templates_no_torch(npz):
    names = imported_modules("build", str(npz), "--format", "md", "-o", "out", cwd=npz.parent)
    assert (npz.parent / "out" / "x" / "report.md").is_file()
    assert names.isdisjoint({"altair", "vl_convert", "torch", "jinja2", "pandas", "transformers"}), \
        names & {"altair", "vl_convert", "torch", "jinja2", "pandas", "transformers"}


@pytest.mark.slow
def test_check_on_npz_loads_no_pandas_no_altair(npz):
    names = imported_modules("check", str(npz), cwd=npz.parent)
    assert names.isdisjoint({"altair", "pandas", "torch", "vl_convert", "jinja2"}), \
        names & {"altair", "pandas", "torch", "vl_convert", "jinja2"}


def test_layer_table_covers_every_component():
    assert {component(m) for m in MODULES} <= set(LAYERS)
    assert np.all(np.diff([LAYERS[k] for k in ("errors", "config", "catalogue", "model", "io", "service", "api", "cli", "__main__")]) > 0)
