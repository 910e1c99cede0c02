"""The run page's tables that the HTML page and report.md both show, as view models (render/tables.py): built once
from the Report, drawn by templates/_table.html and by md.write_table.

The sentences around them stay with each format (a bold name in markdown, a link in HTML); the columns and cells are
here. No statistics: the numbers come from the Report and are only formatted.
"""

from __future__ import annotations

from ..catalogue.numbers import fmt, pct
from .tables import Cell, Column, Row, Table, text
from .views import env_view, topk_view

TOPK_FIRST = {"by_probability": "p_rollout", "by_position": "position"}  # each top-k table's first column


def _numeric(*headers: str) -> tuple[Column, ...]:
    return tuple(Column(h, numeric=True) for h in headers)


def env_table(report) -> Table | None:
    """The batch's environments, worst KL k3 first."""
    v = env_view(report)
    if v is None:
        return None
    columns = (Column("environment"), *_numeric("seqs", "tokens", "mean |δ|", "KL k3", "share of Σk3", "PPO-clipped", "vetoed",
                                                "min r"))
    rows = tuple(Row((Cell(x["name"], cls="name"), Cell(fmt(x["sequences"])), Cell(fmt(x["tokens"])), Cell(fmt(x["abs_delta_mean"])),
                      Cell(fmt(x["k3_mean"])), Cell(pct(x["k3_share"])), Cell(pct(x["clipped_fraction"])),
                      Cell(fmt(x["vetoed_tokens"])), Cell(fmt(x["min_ratio"])))) for x in v["rows"])
    return Table(columns, rows)


def what_if_table(report) -> Table:
    """What each published correction would do to this batch (its rule and source are our words)."""
    columns = (Column("correction"), Column("level"), Column("action"), Column("rule"), Column("as in"),
               *_numeric("tokens affected", "sequences affected"))
    rows = tuple(Row((Cell(text(w.get("name"))), Cell(text(w.get("level"))), Cell(text(w.get("action"))),
                      Cell(text(w.get("rule")), own=True, long=True), Cell(text(w.get("source")), own=True, long=True),
                      Cell(pct(w.get("token_fraction"))), Cell(pct(w.get("sequence_fraction")))))
                 for w in report.what_if or [])
    return Table(columns, rows)


def probability_table(report) -> Table:
    """|δ| by the rollout probability of the sampled token."""
    columns = (Column("p_rollout"), *_numeric("tokens", "share", "mean |δ| ± s.e.", "mean δ", "mean k3", "share of Σ|δ|",
                                              "share of Σk3"))
    rows = tuple(Row((Cell(text(b.get("bucket"))), Cell(fmt(b.get("tokens"))), Cell(pct(b.get("token_share"))),
                      Cell(f"{fmt(b.get('abs_delta_mean'))} ± {fmt(b.get('abs_delta_se'), 2)}"), Cell(fmt(b.get("delta_mean"))),
                      Cell(fmt(b.get("k3_mean"))), Cell(pct(b.get("abs_delta_share"))), Cell(pct(b.get("k3_share")))))
                 for b in (report.breakdowns or {}).get("by_probability") or [])
    return Table(columns, rows)


def topk_tables(report) -> dict[str, Table]:
    """The whole distribution's two bucket tables, by rollout probability and by position (none without top-k)."""
    v = topk_view(report)
    if v is None or not v["available"]:
        return {}
    columns = _numeric("tokens", *v["columns"])
    return {name: Table((Column(first), *columns), tuple(Row((Cell(r[0]), *[Cell(x) for x in r[1:]])) for r in v[name]))
            for name, first in TOPK_FIRST.items()}
