"""The page templates compiled once, shipped in the package: no process compiles them again.

Jinja2 turns each template into Python source (lexing, parsing, code generation: about 0.2 s of CPU for the package's
templates, in every process that renders a page; a rebuild after one new step pays it too). `templates/compiled.json`
holds that source for each template, written by `python scripts/compile_templates.py` (tests/test_html.py fails while
it is stale); the environment reads it through Jinja2's bytecode-cache hook. Nothing is ever written at run time, so a
read-only install, and parallel builds, are as safe as without it. An entry is used only when its template's source
checksum, the Jinja2 version and the environment's syntax settings are those it was made with; otherwise Jinja2
compiles that template as it always did, so a stale file costs time, never a wrong page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import Environment
from jinja2.bccache import Bucket, BytecodeCache

STORE = Path(__file__).parent / "templates" / "compiled.json"


def settings(env: Environment) -> list:
    """What, beside a template's source, decides the Python Jinja2 makes of it."""
    return [jinja2.__version__, env.block_start_string, env.block_end_string, env.variable_start_string,
            env.variable_end_string, env.comment_start_string, env.comment_end_string, env.line_statement_prefix,
            env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks, env.newline_sequence, env.keep_trailing_newline,
            repr(env.autoescape), env.optimized, sorted(env.extensions)]


def compiled(env: Environment) -> dict[str, Any]:
    """The store for this environment's templates: each one's source checksum and the Python Jinja2 makes of it."""
    checksum = BytecodeCache().get_source_checksum
    templates = {}
    for name in env.list_templates(filter_func=lambda n: n.endswith(".html")):
        source, filename, _ = env.loader.get_source(env, name)  # type: ignore[union-attr]
        templates[name] = {"checksum": checksum(source), "python": env.compile(source, name, filename, raw=True)}
    return {"settings": settings(env), "templates": templates}


class Precompiled(BytecodeCache):
    """A read-only bytecode cache over the store: a template whose entry matches is compiled from its Python (a few
    milliseconds); any other is left to Jinja2."""

    def __init__(self, env: Environment, store: Path = STORE):
        try:
            data = json.loads(store.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        self.templates = data.get("templates", {}) if data.get("settings") == settings(env) else {}

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return json.dumps([name, filename])  # the name finds the entry, the file names the code (tracebacks)

    def load_bytecode(self, bucket: Bucket) -> None:
        name, filename = json.loads(bucket.key)
        entry = self.templates.get(name)
        if entry is not None and entry["checksum"] == bucket.checksum:
            bucket.code = compile(entry["python"], filename or name, "exec")

    def dump_bytecode(self, bucket: Bucket) -> None:
        """Never written at run time (a read-only install, parallel builds): scripts/compile_templates.py writes it."""
