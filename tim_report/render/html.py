"""HTML pages: one per run and the index. Jinja2 with autoescape; charts via Altair specs; no statistics here.

Entry points (called from `tim_report.site`):
    render_run(report, notes_md=None, timestamp=None) -> str      site/<run-id>/index.html
    render_index(reports, timestamp=None, index=None) -> str       site/index.html
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup

from .. import glossary
from . import charts as ch
from .tokens import visible
from .vega import javascript_bundle

TOKEN_ROWS_OPEN = 50  # per-token rows shown before the rest are collapsed
GROUP_ROWS = 50  # by-group rows shown (worst first)
HOT_DIFF = 0.5  # rows with |diff| above this many nats are marked
ROUTE_ORDER = {"quarantine": 0, "train_with_correction": 1, "train": 2}
HEADLINE = ("abs_delta_median", "corr_logp", "kl_k3", "ess", "outside_2x", "outside_5x", "phantom_clip", "veto_token_fraction")


def templates_dir() -> Path:
    """Installed: tim_report/templates (force-included in the wheel); from a checkout: the repo's templates/."""
    import tim_report

    pkg = Path(tim_report.__file__).parent
    for cand in (pkg / "templates", pkg.parent / "templates"):
        if (cand / "run.html").is_file():
            return cand
    raise FileNotFoundError(f"tim-report templates not found under {pkg}")


# ---- formatting (display only) -------------------------------------------------------------------

def fmt(x: Any, digits: int = 3) -> str:
    """A number for people: 3 significant digits, compact exponents (1.2e-4), — when missing."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if not isinstance(x, float):
        return str(x)
    if not math.isfinite(x):
        return "—" if math.isnan(x) else ("∞" if x > 0 else "−∞")
    if x == 0:
        return "0"
    if 0.99 < abs(x) < 1:  # correlations, ESS: show how far from 1
        digits = max(digits, 2 - math.floor(math.log10(1 - abs(x))))
    s = f"{x:.{digits}g}"
    if "e" in s:
        mant, exp = s.split("e")
        s = f"{mant}e{int(exp)}"
    return s


def pct(x: Any, digits: int = 3) -> str:
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "—"
    if x == 0:
        return "0%"
    return fmt(100.0 * x, digits) + "%"


def fixed(x: Any, decimals: int = 4) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.{decimals}f}"


def with_se(metrics: dict, key: str) -> str:
    v, se = metrics.get(key), metrics.get(key + "_se")
    return fmt(v) if se is None else f"{fmt(v)} ± {fmt(se, 2)}"


# ---- view models ----------------------------------------------------------------------------------

def title_parts(report) -> dict:
    meta = report.run.get("meta") or {}
    def side(engine_key: str, dtype_key: str) -> str:
        return " ".join(str(meta[k]) for k in (engine_key, dtype_key) if meta.get(k) not in (None, "")) or "?"
    return {
        "model": meta.get("model") or meta.get("model_name") or "unknown model",
        "rollout": side("rollout_engine", "rollout_dtype"),
        "trainer": side("trainer_engine", "trainer_dtype"),
        "device": meta.get("device"),
        "step": meta.get("step"),
    }


def headline(report) -> list[dict]:
    m = report.metrics
    out = []
    for key in HEADLINE:
        entry = glossary.BY_KEY[key]
        v = m.get(key)
        level, text = glossary.reading(key, v)
        if key in ("outside_2x", "outside_5x", "phantom_clip"):
            shown = pct(v)
        elif key == "veto_token_fraction":
            shown = pct(v)
            if m.get("veto_seq_fraction"):
                text += f" ({pct(m['veto_seq_fraction'])} of sequences)"
        elif key == "abs_delta_median":
            shown = fmt(v) + " nats"
        elif key == "corr_logp":
            shown = fixed(v, 6) if v is not None else "—"
        elif key == "ess":
            shown = fixed(v, 4) if v is not None else "—"
        else:
            shown = with_se(m, key)
        out.append({"key": key, "name": entry["name"], "value": shown, "level": level, "reading": text})
    return out


def token_rows(sample: dict, band5: tuple[float, float], band2: tuple[float, float]) -> list[dict]:
    rows = []
    for t in sample["rows"]:
        r, diff = t.get("r"), t.get("diff")
        flags = []
        r_cls = ""
        r_mark = ""
        if r is not None:
            if r < band5[0] or r > band5[1]:
                r_cls, r_mark = "o5", ("▲" if r > 1 else "▼")
            elif r < band2[0] or r > band2[1]:
                r_cls, r_mark = "o2", ("△" if r > 1 else "▽")
        hot = diff is not None and abs(diff) > HOT_DIFF
        if hot:
            flags.insert(0, "●")
        if not t.get("mask", True):
            flags.append("m")
        if not t.get("valid", True):
            flags.append("✗")
        cls = " ".join(c for c in ("hot" if hot else "", "off" if not t.get("mask", True) else "") if c)
        rows.append({
            "cls": cls, "pos": t["pos"], "token": visible(t.get("token")), "flag": "".join(flags),
            "ro": fixed(t.get("rollout_logp")), "tr": fixed(t.get("trainer_logp")), "diff": fmt(diff),
            "pr": fmt(t.get("p_rollout"), 4), "pt": fmt(t.get("p_trainer"), 4), "r": (r_mark + " " if r_mark else "") + fmt(r, 5), "r_cls": r_cls,
        })
    return rows


def samples_view(report) -> list[dict]:
    th = report.run.get("thresholds") or {}
    b5, b2 = th.get("band_5x", 5.0), th.get("band_2x", 2.0)
    out = []
    for s in report.samples:
        rows = token_rows(s, (1.0 / b5, b5), (1.0 / b2, b2))
        out.append({**s, "head": rows[:TOKEN_ROWS_OPEN], "more": rows[TOKEN_ROWS_OPEN:],
                    "hot": sum(1 for r in rows if "hot" in r["cls"]), "out5": sum(1 for r in rows if r["r_cls"] == "o5")})
    return out


def groups_view(report) -> dict:
    g = report.breakdowns.get("by_group") or {}
    names = g.get("name") or []
    idx = sorted(range(len(names)), key=lambda i: (ROUTE_ORDER.get(g["route"][i], 3), -(g["abs_delta_mean"][i] or 0.0), i))
    cols = ("name", "sequences", "tokens", "abs_delta_mean", "k3_mean", "clipped_fraction", "vetoed_tokens", "min_ratio", "route")
    rows = [{c: g[c][i] for c in cols} for i in idx[:GROUP_ROWS]]
    return {"unit": g.get("unit", "group"), "rows": rows, "total": len(names), "hidden": max(len(names) - GROUP_ROWS, 0)}


def flat_metrics(report) -> list[dict]:
    m = report.metrics
    out = []
    for k in sorted(m):
        v = m[k]
        if isinstance(v, (dict, list)) or k.endswith("_se"):
            continue
        base = k.removesuffix("_mean").removesuffix("_max").removesuffix("_median")
        entry = glossary.BY_KEY.get(k) or glossary.BY_KEY.get(base)
        out.append({"key": k, "value": with_se(m, k), "name": entry["name"] if entry and entry["key"] == k else ""})
    return out


def percentile_rows(report) -> dict:
    p = report.metrics.get("percentiles") or {}
    qs = p.get("q") or []
    rows = [{"name": name, "values": [fmt(v) for v in p[key]]}
            for key, name in (("delta", "δ"), ("abs_delta", "|δ|"), ("k3", "k3 per token"), ("abs_dp", "|Δp|")) if key in p]
    return {"q": [fmt(float(q)) for q in qs], "rows": rows}


def kv_items(d: Any) -> list[tuple[str, str]]:
    """A flat (name, value) list from a small dict of evidence; nested values are shown one level deep."""
    if not isinstance(d, dict):
        return []
    out = []
    for k in sorted(d):
        v = d[k]
        if isinstance(v, dict):
            out += [(f"{k}.{k2}", fmt(v2) if not isinstance(v2, (dict, list)) else str(v2)) for k2, v2 in sorted(v.items())]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            continue  # shown as a table by kv_tables
        elif isinstance(v, list):
            out.append((k, ", ".join(fmt(x) for x in v[:12]) + (" …" if len(v) > 12 else "")))
        else:
            out.append((k, fmt(v)))
    return out


def kv_tables(d: Any) -> list[tuple[str, list[str], list[list[str]]]]:
    """Lists of dicts inside a small evidence dict (e.g. β by probability bucket) as (name, columns, rows)."""
    if not isinstance(d, dict):
        return []
    out = []
    for k in sorted(d):
        v = d[k]
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            cols = list(v[0])
            out.append((k, cols, [[fmt(x.get(c)) for c in cols] for x in v]))
    return out


def render_notes(notes_md: str | None) -> Markup | None:
    """The author's markdown narrative; raw HTML in it is escaped, unsafe link schemes are dropped."""
    if not notes_md:
        return None
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table").enable("strikethrough")
    return Markup(md.render(notes_md))


# ---- environment and pages ------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def environment(path: str | None = None) -> Environment:
    env = Environment(loader=FileSystemLoader(path or str(templates_dir())), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False}
    env.filters.update(fmt=fmt, pct=pct, fixed=fixed, visible=visible)
    env.globals.update(glossary=glossary.GLOSSARY, conventions=glossary.CONVENTIONS, health=glossary.health, kv_items=kv_items, kv_tables=kv_tables)
    return env


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tim-report")
    except Exception:  # pragma: no cover - running from a bare checkout
        return "dev"


def _vega(charts: list) -> Markup | None:
    return Markup(javascript_bundle()) if charts else None


def run_context(report, notes_md: str | None = None, timestamp: str | None = None) -> dict:
    charts = ch.run_charts(report)
    th = report.run.get("thresholds") or {}
    return {
        "r": report, "t": title_parts(report), "m": report.metrics, "headline": headline(report),
        "health_colour": glossary.health(report.metrics.get("ess")), "charts": charts,
        "chart_specs": [{"id": c["id"], "spec": c["spec"]} for c in charts],
        "groups": groups_view(report), "samples": samples_view(report), "metrics_table": flat_metrics(report),
        "percentiles": percentile_rows(report), "notes": render_notes(notes_md), "th": th,
        "hot_diff": HOT_DIFF, "token_rows_open": TOKEN_ROWS_OPEN, "timestamp": timestamp, "version": _version(),
        "vega_js": _vega(charts), "diagnosis": report.diagnosis,
    }


def render_run(report, notes_md: str | None = None, timestamp: str | None = None) -> str:
    return environment().get_template("run.html").render(**run_context(report, notes_md, timestamp))


def trend_points(index: dict) -> list[dict]:
    """The trend chart's points from the index summary, rounded for display."""
    tr = index.get("trend") or {}
    return [{**p, "value": ch.sig(p["value"], 6)} for p in tr.get("points") or []]


def render_index(reports: list, timestamp: str | None = None, index: dict | None = None) -> str:
    """site/index.html from the index summary (analyze.runs.index_summary; computed here when not given)."""
    if index is None:
        from ..analysis.runs import index_summary

        index = index_summary(reports)
    tr = index.get("trend")
    charts = [{"id": "trend", "spec": ch.trend_chart(trend_points(index), [m["name"] for m in tr["metrics"]])}] if tr else []
    return environment().get_template("index.html").render(
        rows=index["runs"], ix=index, charts=charts, chart_specs=charts, vega_js=_vega(charts), timestamp=timestamp,
        version=_version())
