"""The chain's view (each link's numbers and share, shared by the HTML page and report.md) and a bitwise-identical
batch's words, said in place of the charts it would draw empty. No statistics: the Report's numbers, written."""

from __future__ import annotations

from ..catalogue.chain import link_words, path_label
from ..catalogue.numbers import fmt, pct
from ..model import SIDE_KINDS
from .md import esc, table

COLUMNS = ["link", "compares", "mean δ", "mean |δ|", "max |δ|", "KL k3", "tokens differing", "share"]


def chain_view(report) -> dict | None:
    """The chain section: its path, the sides, one row per link and the end-to-end row; None without a chain."""
    ch = report.chain
    if not ch:
        return None
    if not ch.get("available"):
        return {"available": False, "reason": ch.get("reason")}

    def row(x: dict, share: str, what: str | None = None) -> list[str]:
        return [x["label"], what or link_words(x["from"], x["to"])[0], fmt(x["bias"]), fmt(x["abs_mean"]), fmt(x["abs_max"]),
                fmt(x["kl_k3"]), f"{fmt(x['differing'])} ({pct(x['differing_share'])})", share]

    rows = [row(x, pct(x["share"]) if x["share"] is not None else "—") for x in ch["links"]]
    end = ch["end_to_end"]
    return {"available": True, "path": path_label(ch["sides"]), "tokens": fmt(ch["tokens"]), "leading": ch["leading"],
            "sides": [(n, SIDE_KINDS.get(n, "a side of the batch's own")) for n in ch["sides"]],
            "columns": COLUMNS, "rows": rows, "end": row(end, "100%" if ch["additivity"]["shares"] is not None else "—",
                                                        "end to end: the links' sum"),
            "rule": ch["rule"], "without": ch.get("tokens_without_every_side") or 0,
            "left_out": sorted((ch.get("left_out") or {}).items())}


def bitwise_identical(report) -> str | None:
    """The sentence a batch whose two sides agree on every bit gets instead of its (empty) charts, or None."""
    m = report.metrics
    if not m.get("tokens") or m.get("abs_delta_max") != 0:
        return None
    return (f"Rollout and trainer are bitwise identical: all {fmt(m['tokens'])} tokens of {fmt(m.get('sequences'))} "
            "sequences have the same log-prob on both sides (0 tokens differ, max |δ| = 0, KL k3 = 0, ESS = 1). The ratio and |Δp| "
            "histograms would be one bar at r = 1, so none is drawn; `tim-report check --exact` gates on staying so.")


def bitwise_md(report) -> str:
    """report.md's line for a bitwise-identical batch ('' otherwise)."""
    text = bitwise_identical(report)
    return f"✅ **{esc(text, None, own=True)}**" if text else ""


def chain_md(report) -> str:
    """report.md's chain section ('' without a chain)."""
    v = chain_view(report)
    if v is None:
        return ""
    if not v["available"]:
        return f"## The chain\n\n{esc(v['reason'], None, own=True)}"
    lines = [f"## The chain: {esc(v['path'])}", "",
             f"Each link compares two adjacent sides over the {v['tokens']} tokens every side scores (δ = later − "
             f"earlier). Rule: {esc(v['rule'], None, own=True)}.", "",
             table([esc(c) for c in v["columns"]], [[esc(c, None) for c in r] for r in [*v["rows"], v["end"]]],
                   numeric=range(2, len(v["columns"]))), "",
             "Sides: " + "; ".join(f"**{esc(n)}**: {esc(what, None)}" for n, what in v["sides"]) + "."]
    if v["without"]:
        lines += ["", f"{fmt(v['without'])} valid tokens lack a side and are out of the chain's numbers."]
    lines += [f"\n- {esc(n)} left out: {esc(why, None)}" for n, why in v["left_out"]]
    return "\n".join(lines)
