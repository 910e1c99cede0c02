"""GitHub-flavoured markdown building blocks shared by every markdown report: escaping, tables, the size budget.

Every user-provided string (token text, group names, model, engines, device, labels) goes through
`esc`, so it cannot open markup or break a table cell. `assemble` keeps a report within MAX_CHARS,
counted in UTF-16 code units as browsers and GitHub's API count them (an emoji counts twice).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from ..catalogue.numbers import fmt
from ..config import MARKDOWN_MAX_CHARS
from .tables import MARKDOWN, Cell, Column, Section, Table
from .token_text import visible

MAX_CHARS = MARKDOWN_MAX_CHARS
NAME_CHARS = 80  # model, engine, group names in tables

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
_SPECIAL = re.compile(r"([\\`*_\[\]|~#$@!{}=:])")  # = and : too: no "style=", "data:", "http://" survives as such
_SPECIAL_OWN = re.compile(r"([\\`*_\[\]|~#$@!{}])")
# GFM's extended autolinks turn `www.host` and `user@host.tld` in plain text into links, and a backslash escape does not
# stop the e-mail one (it is found after escapes are resolved): `www\.` breaks the first, a zero-width joiner after '@'
# the second (checked with cmark-gfm --extension autolink, GitHub's own renderer).
_WWW = re.compile(r"(?i)(www)\.")
ZWJ = "\u200d"
COLOUR = {"green": "🟢", "amber": "🟡", "red": "🔴", "unknown": "⚪"}


def esc(text: Any, limit: int | None = NAME_CHARS, own: bool = False) -> str:
    """A user-provided string as inert inline text: controls made visible, HTML as entities, markdown escaped.

    `own`: text tim-report wrote itself (verdicts, glossary, rules), where ':' and '=' stay unescaped for
    readability and `backtick spans` stay code (commands and option names).
    """
    if text is None:
        return "—"
    s = shorten(str(text), limit)
    s = _CONTROL.sub(lambda m: visible(m.group(0)) if m.group(0) not in "\u2028\u2029" else "↵", s)
    parts = s.split("`")
    if own and len(parts) % 2 == 1 and len(parts) > 1:  # balanced code spans: literal inside, pipes escaped for tables
        s = "".join(_inline(p, own) if i % 2 == 0 else "`" + p.replace("|", "\\|") + "`" for i, p in enumerate(parts))
    else:
        s = _inline(s, own)
    return s if s.strip() else "∅"


def shorten(s: str, limit: int | None) -> str:
    """`s` within `limit` characters, cut after a word (at a space or a separator: `-`, `_`, `/`, `.`, `,`), never
    inside one, unless a single word runs past half the limit; "…" says it was cut."""
    if limit is None or len(s) <= limit:
        return s
    head = s[: limit - 1]
    at = max(head.rfind(c) for c in " -_/.,;")
    return (head[: at + 1].rstrip() if at >= limit // 2 else head) + "…"


def _inline(s: str, own: bool) -> str:
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = (_SPECIAL_OWN if own else _SPECIAL).sub(r"\\\1", s)
    return _WWW.sub(r"\1\\.", s).replace("@", "@" + ZWJ)


def width(text: str) -> int:
    """Length in UTF-16 code units (emoji count 2), the stricter of the ways GitHub may count."""
    return len(text.encode("utf-16-le")) // 2


def href(path: str, base_url: str | None) -> str:
    """A link target: relative to the page, or absolute under `base_url`. Safe inside (…) of a markdown link."""
    if base_url:
        path = base_url.rstrip("/") + "/" + path
    return quote(path, safe=":/?#[]@!$&'*+,;=%~")


def run_path(run_id: Any, page: str) -> str:
    """The path of a run's page relative to the site root."""
    return quote(str(run_id), safe="") + "/" + page


def table(headers: list[str], rows: list[list[str]], numeric: Iterable[int] = ()) -> str:
    """A GFM table; cells are already escaped. `numeric`: indices of right-aligned columns."""
    num = set(numeric)
    head = "| " + " | ".join(headers) + " |"
    rule = "|" + "|".join("---:" if i in num else "---" for i in range(len(headers))) + "|"
    body = ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def colour(c: str) -> str:
    """A health colour as an emoji and its word (colour is never the only signal)."""
    return f"{COLOUR.get(c, '⚪')} {c}"


def _cell(c: Cell, base_url: str | None) -> str:
    limit = None if c.long else NAME_CHARS
    if c.links:
        body = ", ".join(f"[{esc(r)}]({href(run_path(r, 'index.html'), base_url)})" for r in c.links)
    elif c.keep:
        body = " → ".join(esc(p, limit) for p in c.keep)
    else:
        body = esc(c.text, limit, own=c.own) if c.text else ""
    if c.link is not None:
        body = f"[{body}]({href(run_path(c.link, 'index.html'), base_url)})"
        if c.twin:
            body += f" ([md]({href(run_path(c.link, 'report.md'), base_url)}))"
    if c.note:
        body += " " + esc(c.note, limit)
    marks = [m for m in (colour(c.health) if c.health else "", c.icon) if m]
    return " ".join([*marks, body] if body else marks)


def _header(c: Column) -> str:
    """A column's header: a user's string escaped as any; our words with only what breaks a table cell escaped."""
    return esc(c.header) if c.user else c.header.replace("\\", "\\\\").replace("|", "\\|")


def write_table(t: Table, base_url: str | None = None, rows: int | None = None) -> str:
    """A view model's table as GFM (its first `rows` rows when given)."""
    columns = t.columns_in(MARKDOWN)
    return table([_header(c) for c in columns],
                 [[_cell(c, base_url) for c in t.cells_in(r, MARKDOWN)] for r in t.rows[:rows]],
                 numeric=[i for i, c in enumerate(columns) if c.numeric])


def pieces(parts: tuple[tuple[str, bool], ...]) -> str:
    """A sentence of our words and user strings, each escaped as what it is."""
    return "".join(esc(text, None, own=ours) if ours else esc(text, None) for text, ours in parts)


def write_section(s: Section, base_url: str | None = None, body: str | None = None) -> str:
    """A view model's section: its heading, intro, tables (each with its sub-heading and lines) and warning;
    `body` in place of the tables when the caller writes them its own way."""
    blocks = [f"## {s.title}", esc(s.intro, None, own=True) if s.intro else ""]
    if body is not None:
        blocks.append(body)
    else:
        for t in s.tables:
            if t.title:
                blocks.append(f"### {esc(t.title, None)}")
            blocks.append(write_table(t, base_url))
            if t.after:
                blocks.append("\n".join(f"- {esc(line, None, own=True)}" for line in t.after))
    if s.warning:
        blocks.append("⚠️ " + pieces(s.warning))
    return "\n\n".join(b for b in blocks if b)


def details(summary: str, body: str) -> str:
    """A collapsed block: GitHub renders the markdown inside when blank lines surround it."""
    return f"<details>\n<summary>{summary}</summary>\n\n{body}\n\n</details>"


def fold(block: str) -> str:
    """A section collapsed under its heading (a PR comment keeps only the verdict and the headline numbers on its first
    screen); a block already collapsed, or without a heading, stays as it is."""
    first, _, rest = block.partition("\n\n")
    if not first.startswith("#") or block.startswith("<details>"):
        return block
    title = re.sub(r"\\(.)", r"\1", first.lstrip("#").strip())  # <summary> shows text as written: no markdown escapes
    return details(title, rest.strip())


def assemble(core: list[str], sections: list[tuple[str, str]], html_link: str, limit: int | None = None) -> str:
    """Join the blocks, dropping whole sections from the bottom up until the text fits in `limit` (MAX_CHARS)."""
    limit = MAX_CHARS if limit is None else limit
    kept = list(sections)
    dropped: list[str] = []
    while True:
        blocks = core + [s for _, s in kept]
        if dropped:
            blocks.append(f"> ✂️ Left out to stay under {fmt(limit)} characters: {', '.join(dropped)}. "
                          f"Everything is in the {html_link}.")
        text = "\n\n".join(blocks) + "\n"
        if width(text) <= limit or not kept:
            break
        name, _ = kept.pop()
        dropped.insert(0, name)
    if width(text) > limit:  # the core alone is too long: cut at a block boundary, never exceed
        note = f"\n\n> ✂️ Cut at {fmt(limit)} characters. Everything is in the {html_link}.\n"
        budget = limit - width(note)
        cut = text
        while width(cut) > budget:  # dropping k code points drops at least k UTF-16 units
            cut = cut[: len(cut) - (width(cut) - budget)]
        i = cut.rfind("\n\n")
        text = (cut[:i] if i > 0 else "") + note
    return text
