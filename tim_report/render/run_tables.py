"""The run page's tables that the HTML page and report.md both show, as view models (render/tables.py): built once
from the Report, drawn by templates/_table.html and by md.write_table.

The sentences around them stay with each format (a bold name in markdown, a link in HTML); the columns and cells are
here. No statistics: the numbers come from the Report and are only formatted.
"""

from __future__ import annotations

from ..catalogue import kept as kept_words
from ..catalogue import rescore as weight_words
from ..catalogue import staleness as lag_words
from ..catalogue import sync as sync_words
from ..catalogue.numbers import fixed, fmt, pct
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
    # at phone width (420 px) the correction and what it touches stay, unscrolled; its rule and source on a wider screen
    columns = (Column("correction"), *(Column(h, wide_only=True) for h in ("level", "action", "rule", "as in")),
               *(Column(h, numeric=True, wrap=True) for h in ("tokens affected", "sequences affected")))
    rows = tuple(Row((Cell(text(w.get("name"))), Cell(text(w.get("level"))), Cell(text(w.get("action"))),
                      Cell(text(w.get("rule")), own=True, long=True), Cell(text(w.get("source")), own=True, long=True),
                      Cell(pct(w.get("token_fraction"))), Cell(pct(w.get("sequence_fraction")))))
                 for w in report.what_if or [])
    return Table(columns, rows)


def probability_table(report) -> Table:
    """|δ| by the rollout probability of the sampled token."""
    wide = {"tokens", "mean δ", "mean k3", "share of Σ|δ|"}  # left out at phone width: the rest fits 420 px unscrolled
    columns = (Column("p_rollout"), *(Column(h, numeric=True, wrap=True, wide_only=h in wide) for h in (
        "tokens", "share", "mean |δ| ± s.e.", "mean δ", "mean k3", "share of Σ|δ|", "share of Σk3")))
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


def lag_table(report) -> Table | None:
    """The staleness split, one row per lag (0, 1, …, negative, unknown) and the staleness share (None: no versions)."""
    st = report.staleness
    if not st:
        return None
    floor = st.get("floor") or {}
    # left out at phone width, so that the rest fits a 420 px screen unscrolled: the lag's KL, cost and excess stay
    wide = {"tokens", "share", "mean δ", "mean |δ|", "over TIS cap"}
    columns = (Column("lag"), *(Column(h, numeric=True, wide_only=h in wide) for h in (
        "tokens", "share", "KL k3", "mean δ", "mean |δ|", "ESS", "PPO-clipped", "over TIS cap", "KL beyond lag 0")))

    def part(r: dict) -> Cell:
        if r["lag"] == 0:
            return Cell(f"floor {pct(st['floor_share'])}" if st.get("floor_share") is not None else "floor")
        return Cell(pct(r.get("excess_share")) if r.get("excess_share") is not None else "—")

    def note(r: dict) -> str | None:
        return lag_words.floor_note(floor) if r["lag"] == 0 and floor else None

    rows = tuple(Row((Cell(lag_words.lag_label(r["lag"]), note=note(r)), Cell(fmt(r["tokens"])), Cell(pct(r["share"])),
                      Cell(fmt(r["kl_k3"])), Cell(fmt(r["mean_delta"])), Cell(fmt(r["mean_abs_delta"])),
                      Cell(fixed(r.get("ess"), 4)), Cell(pct(r["clipped"])), Cell(pct(r["capped"])), part(r)),
                     cls="lead" if r["lag"] == 0 else "")
                 for r in st["by_lag"])
    after = (lag_words.verdict_sentence(st) or "", lag_words.cost_sentence(st) or "")
    return Table(columns, rows, after=tuple(a for a in after if a))


def weights_table(report) -> Table | None:
    """Which weights sampled each lag bucket (`rescore`): the nearest candidate and what the bucket reads, then every
    candidate's KL k3 against the rollout, the nearest marked ▶ and those tied with it = (left out at phone width,
    where the reading must show unscrolled); None when no checkpoint was rescored."""
    w = report.rescore
    if not w or not w["by_lag"]:
        return None
    names = [c["side"] for c in w["candidates"]]
    columns = (Column("lag"), Column("labelled"), Column("nearest"), Column("reads"),
               Column("tokens", numeric=True, wide_only=True),
               *(Column(n, numeric=True, user=True, wide_only=True) for n in names))

    def kl(r: dict, name: str) -> Cell:
        mark = "▶ " if r["nearest"] == name else "= " if name in r["tied"] else ""
        return Cell(mark + fmt(next(x["kl_k3"] for x in r["by_side"] if x["side"] == name)))

    rows = tuple(Row((Cell(lag_words.lag_label(r["lag"]) if w["versions"] else "every token"),
                      Cell(weight_words.version(r["labelled_version"])),
                      Cell(r["nearest"] or " = ".join(r["tied"])),
                      Cell(weight_words.short_reading(r), cls="warntext" if r["as_labelled"] is False else ""),
                      Cell(fmt(r["tokens"])), *(kl(r, n) for n in names)))
                 for r in w["by_lag"])
    return Table(columns, rows)


def cache_table(report) -> Table | None:
    """The mismatch of prefix-cache hits against misses, one row each (None: the batch does not say what was cached)."""
    pc = (report.diagnosis or {}).get("prefix_cache")
    if not pc:
        return None
    # at phone width only the sequences and the tested mean |δ| stay, so that the table fits a 420 px screen unscrolled
    columns = (Column("prompt"), *(Column(h, numeric=True, wide_only=h in ("tokens", "KL k3 ± s.e.", "mean δ"))
                                   for h in ("sequences", "tokens", "KL k3 ± s.e.", "mean |δ| ± s.e.", "mean δ")))

    def se(g: dict, key: str) -> str:
        return f"{fmt(g[key])} ± {fmt(g[key + '_se'], 2)}" if g.get(key + "_se") is not None else fmt(g[key])

    rows = tuple(Row((Cell(label), Cell(fmt(g["sequences"])), Cell(fmt(g["tokens"])), Cell(se(g, "kl_k3")),
                      Cell(se(g, "mean_abs_delta")), Cell(fmt(g["mean_delta"]))))
                 for label, g in (("cache hit", pc["hit"]), ("miss", pc["miss"])))
    return Table(columns, rows, after=(lag_words.cache_sentence(pc),))


def sync_table(report) -> Table | None:
    """The weight digests by version, the engine's beside the trainer's, and whether they agree (None: no digest)."""
    st = getattr(report, "sync", None)
    if not st:
        return None
    # at phone width the version, the two digests and whether they agree stay; the changed shares are wide-only
    columns = (Column("version", numeric=True), Column("engine digest"), Column("trainer digest"),
               *(Column(h, numeric=True, wide_only=True) for h in ("engine changed", "trainer changed")), Column("digests"))
    versions = sorted({r["version"] for side in ("engine", "trainer") for r in st[side]})
    faulty = {v for v in versions if any(not c["equal"] for c in st["compared"] if c["version"] == v)}
    rows = []
    for v in versions:
        e = [r for r in st["engine"] if r["version"] == v]
        t = [r for r in st["trainer"] if r["version"] == v]
        both = bool(e and t)
        word, style = sync_words.agreement(both, v in faulty)
        rows.append(Row((Cell(fmt(v)), Cell(sync_words.digests_cell(e)), Cell(sync_words.digests_cell(t)),
                         Cell(sync_words.share_cell(e)), Cell(sync_words.share_cell(t)), Cell(word, style=style))))
    return Table(columns, tuple(rows), after=(st["line"],))


def kept_table(report) -> Table | None:
    """The ratio over the full vocabulary and over the kept set, row by row (None: no trainer mass on kept sets)."""
    k = (report.diagnosis or {}).get("kept_sets")
    if not k or not k.get("kept"):
        return None
    columns = (Column("ratio"), *_numeric(*kept_words.COLUMNS))
    rows = tuple(Row((Cell(name), Cell(fmt(k["full"][key])), Cell(fmt(k["kept"][key])))) for key, name in kept_words.ROWS)
    return Table(columns, rows, after=tuple(a for a in (kept_words.after(k),) if a))
