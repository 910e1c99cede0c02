"""A table as both formats show it: its title, intro sentence, columns and formatted cells, and no markup.

A view model (render/index_views.py for the index) builds a `Section` of `Table`s once; the HTML pages draw it with the one macro
in templates/_table.html and markdown writes it with `md.write_table`. Cells hold text already formatted
(catalogue.numbers) and say what it is (a health colour, a link to a run's page, small print), never how a format
shows it: the HTML badge and markdown's 🟢 come from one `health` field. Text is never escaped here: each writer
escapes it for its format.
"""

from __future__ import annotations

from dataclasses import dataclass

HTML = "html"
MARKDOWN = "md"
BOTH = frozenset({HTML, MARKDOWN})


@dataclass(frozen=True)
class Cell:
    text: str = ""
    health: str | None = None  # a health colour shown before the text (a badge; an emoji and the word)
    icon: str = ""  # a mark before the text, for markdown, where colour alone says nothing (the verdict's ✅ ⚠️ ❌)
    link: str | None = None  # the run whose page the text links to
    twin: bool = False  # markdown: also link that run's report.md
    links: tuple[str, ...] = ()  # several runs, each its own link (the text is then their ids, comma-separated)
    keep: tuple[str, ...] = ()  # the text as pieces joined by " → ", each kept on one line in HTML
    note: str | None = None  # small print after the text (a step number, a device)
    note_below: bool = False  # HTML: the note on a line of its own
    warn: str | None = None  # HTML: a warning line under the text, with `tip` as its hover text
    tip: str | None = None  # HTML: hover text (the cell's, or the warning's)
    cls: str = ""  # HTML: the cell's class
    head: bool = False  # HTML: a row header (<th>)
    style: str = ""  # HTML: the class of a span around the text (a route)
    long: bool = False  # markdown: not cut at NAME_CHARS (a path, a reason)
    own: bool = False  # words tim-report wrote (`code spans` stay code)


@dataclass(frozen=True)
class Column:
    header: str
    numeric: bool = False  # right-aligned
    wrap: bool = False  # HTML: the header may wrap (a metric's name)
    formats: frozenset[str] = BOTH  # where the column shows: HTML lays some cells out on two lines, GitHub cannot
    user: bool = False  # the header is a user's string (a dtype), not our words
    wide_only: bool = False  # HTML: left out at phone width (what is kept must read there without sideways scroll)


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    cls: str = ""  # HTML: the row's class


@dataclass(frozen=True)
class Table:
    """One table; `title` is a sub-heading (one of a section's several tables), `after` the lines that follow it
    (our words, `code` spans allowed)."""

    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    cls: str = ""  # HTML: the table's class besides "data"
    title: str = ""
    after: tuple[str, ...] = ()

    def shown(self, fmt: str) -> list[int]:
        """The indices of the columns `fmt` shows."""
        return [i for i, c in enumerate(self.columns) if fmt in c.formats]

    def columns_in(self, fmt: str) -> list[Column]:
        return [self.columns[i] for i in self.shown(fmt)]

    def cells_in(self, row: Row, fmt: str) -> list[Cell]:
        return [row.cells[i] for i in self.shown(fmt)]


@dataclass(frozen=True)
class Section:
    """A section of a page: its title, its intro sentence (our words, `code` spans allowed), its tables, and a warning
    after them as (text, ours) pieces: a user's string (a run id) is escaped as one, never read as markup."""

    id: str
    short: str  # its name in the page's contents and in report.md's note of what it left out
    title: str
    intro: str
    tables: tuple[Table, ...]
    warning: tuple[tuple[str, bool], ...] = ()
    changes: tuple[dict, ...] = ()  # the trend's change points: step, run, sentence, worse
    quiet: str = ""  # the trend: why there is no change point
    quiet_small: bool = False  # HTML: that sentence as small print (too few steps) or plain (a steady run)


def text(value) -> str:
    """A value as a cell's text; a missing one as —."""
    return "—" if value is None else str(value)


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"
