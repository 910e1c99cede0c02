"""View models: a Report reshaped for display (titles, headline cards, token rows, groups, evidence).

Shared by the HTML page and the markdown report, so both show the same rows; no statistics and no
markup here. Thresholds (the bands, HOT_DIFF) come from the Report or from config.
"""

from __future__ import annotations

from typing import Any

from ..catalogue import findings
from ..catalogue import metrics as catalogue
from ..catalogue.numbers import fixed, fmt, pct, with_se
from ..config import GROUP_TABLE_ROWS, HOT_DIFF
from ..model import model_label
from .token_text import visible

SAMPLES_OPEN = 3  # the worst sequences the run page shows open, each with its largest differences
TOP_TOKENS = 8  # the rows of an open sequence's compact table: its tokens with the largest |diff| (a shorter one: all)
GROUP_ROWS = GROUP_TABLE_ROWS  # by-group rows shown (worst first): all the analysis keeps
ROUTE_ORDER = {"quarantine": 0, "train_with_correction": 1, "train": 2}


def written_by(report) -> str:
    """What wrote the batch, for the page's "framework" row: the framework whose dump it is, or tim-report's own
    capture (a capture's page said "framework —")."""
    meta = report.run.get("meta") or {}
    if meta.get("framework") not in (None, "", "dict"):
        return str(meta["framework"])
    return "tim-report capture" if meta.get("source") == "tim-report capture" else "—"


def title_parts(report) -> dict:
    meta = report.run.get("meta") or {}
    def side(engine_key: str, dtype_key: str) -> str:
        return " ".join(str(meta[k]) for k in (engine_key, dtype_key) if meta.get(k) not in (None, "")) or "?"
    return {
        "model": model_label(meta) or "unknown model",
        "rollout": side("rollout_engine", "rollout_dtype"),
        "trainer": side("trainer_engine", "trainer_dtype"),
        "device": meta.get("device"),
        "step": meta.get("step"),
    }


def banners(report) -> list[str]:
    """The titles of the findings a page says again under its title: those whose catalogue entry says `banner`."""
    return [str(f.get("title")) for f in (report.diagnosis or {}).get("findings") or []
            if getattr(findings.FINDINGS.get(f.get("id")), "banner", False)]


def card(metric: catalogue.Metric, values: dict) -> dict:
    """A headline card: the metric's name, its value as the catalogue writes it, and its reading."""
    level, text = metric.reading(values.get(metric.key))
    if metric.also and values.get(metric.also[0]):
        companion = catalogue.metric(metric.also[0])
        text += f" ({companion.write(values[metric.also[0]])} {metric.also[1]})"
    return {"key": metric.key, "name": metric.name, "value": metric.card(values), "level": level, "reading": text}


def headline(report) -> list[dict]:
    return [card(catalogue.metric(key), report.metrics) for key in catalogue.HEADLINE]


def summary_extra(report) -> list[dict]:
    """The numbers report.md's summary adds under the headline (catalogue.SUMMARY_EXTRA)."""
    return [{"name": catalogue.metric(key).name, "value": catalogue.metric(key).card(report.metrics)}
            for key in catalogue.SUMMARY_EXTRA]


def token_rows(sample: dict, band5: tuple[float, float], band2: tuple[float, float]) -> list[dict]:
    rows = []
    for t in sample["rows"]:
        r, diff = t.get("r"), t.get("diff")
        flags: list[str] = []
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
            "pr": fmt(t.get("p_rollout"), 4), "pt": fmt(t.get("p_trainer"), 4), "r": (r_mark + " " if r_mark else "") + fmt(r, 5),
            "r_cls": r_cls,
        })
    return rows


def samples_view(report, formatted: int | None = None, count: int | None = None) -> list[dict]:
    """The first `count` samples (None: all), each with its marks counted and its largest differences picked; `all`
    and `top` are its rows written out (token_rows), the first `formatted` of them (None: every one; the page draws
    its own from samples.js)."""
    th = report.run.get("thresholds") or {}
    b5, b2 = th.get("band_5x", 5.0), th.get("band_2x", 2.0)
    bands = (1.0 / b5, b5), (1.0 / b2, b2)
    out: list[dict] = []
    for s in report.samples[:count]:
        raw = s["rows"]
        largest = sorted((i for i, t in enumerate(raw) if t.get("diff") is not None),
                         key=lambda i: (-abs(raw[i]["diff"]), i))[:TOP_TOKENS]
        top = largest if len(raw) > TOP_TOKENS else []
        out.append({**s, "all": token_rows({"rows": raw[:formatted]}, *bands), "n_rows": len(raw),
                    "top": token_rows({"rows": [raw[i] for i in top]}, *bands) if formatted is None else [],
                    "top_index": top,  # the page's compact table, by row
                    "open": s["kind"] == "worst" and len(out) < SAMPLES_OPEN,
                    "hot": sum(1 for t in raw if t.get("diff") is not None and abs(t["diff"]) > HOT_DIFF),
                    "out5": sum(1 for t in raw if t.get("r") is not None and not bands[0][0] <= t["r"] <= bands[0][1])})
    return out


def groups_view(report) -> dict:
    g = report.breakdowns.get("by_group") or {}
    names = g.get("name") or []
    idx = sorted(range(len(names)), key=lambda i: (ROUTE_ORDER.get(g["route"][i], 3), -(g["abs_delta_mean"][i] or 0.0), i))
    cols = ("name", "sequences", "tokens", "abs_delta_mean", "k3_mean", "clipped_fraction", "vetoed_tokens", "min_ratio", "route")
    rows = [{c: g[c][i] for c in cols} for i in idx[:GROUP_ROWS]]
    routes = set(g.get("route") or [])
    total = g.get("units", len(names))  # the analysis keeps the worst rows (breakdowns.worst_units)
    return {"unit": g.get("unit", "group"), "rows": rows, "total": total, "hidden": max(total - GROUP_ROWS, 0),
            "uniform": _uniform_route(report, routes, total)}


def _uniform_route(report, kept: set, total: int) -> str | None:
    """The one route every unit takes (from the routing's counts: the table keeps only the worst rows)."""
    counts = (report.routing or {}).get("counts") or {}
    if counts:
        return next((r for r, c in counts.items() if c == total and total > 1), None)
    return kept.pop() if len(kept) == 1 and total > 1 else None


def env_view(report) -> dict | None:
    """The per-environment table, worst KL k3 first, and how far the worst environment sits from the batch."""
    e = report.breakdowns.get("by_env")
    if not e or not e.get("name"):
        return None
    cols = ("name", "sequences", "tokens", "token_share", "abs_delta_mean", "k3_mean", "k3_share", "k3_vs_batch",
            "clipped_fraction", "vetoed_tokens", "min_ratio")
    rows = sorted(({c: e[c][i] for c in cols} for i in range(len(e["name"]))), key=lambda x: -(x["k3_mean"] or 0.0))
    return {"rows": rows, "worst": rows[0], "several": len(rows) > 1}


def flat_metrics(report) -> list[dict]:
    m = report.metrics
    out = []
    for k in sorted(m):
        v = m[k]
        if isinstance(v, (dict, list)) or k.endswith("_se"):
            continue
        entry = catalogue.BY_KEY.get(k)
        out.append({"key": k, "value": with_se(m, k), "name": entry.name if entry else ""})
    return out


def percentile_rows(report) -> dict:
    p = report.metrics.get("percentiles") or {}
    qs = p.get("q") or []
    rows = [{"name": name, "values": [fmt(v) for v in p[key]]}
            for key, name in (("delta", "δ"), ("abs_delta", "|δ|"), ("k3", "k3 per token"), ("abs_dp", "|Δp|")) if key in p]
    return {"q": [fmt(float(q)) for q in qs], "rows": rows}


BAND_DECIDES = ("numerical_noise", "elevated")  # the regimes the precision band tells apart


def band_helps(diagnosis: Any) -> bool:
    """Whether the noise-band paragraph helps the verdict: where the band is what tells noise from elevated, not
    above an identical batch or a systematic one that a finding or the correlation decided."""
    return isinstance(diagnosis, dict) and bool(diagnosis.get("band")) and diagnosis.get("regime") in BAND_DECIDES


def flagged_note(cell: dict) -> str:
    """' + 2 with a finding': an engine pair's or precision cell's runs left out of its means (a bug, not the engines)."""
    return f" + {len(cell['with_findings'])} with a finding" if cell.get("with_findings") else ""


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


def topk_view(report) -> dict | None:
    """The whole-distribution section: two cards, the bounds line and the two bucket tables; None without a topk section."""
    t = report.topk
    if not t:
        return None
    if not t.get("available"):
        return {"available": False, "reason": t.get("reason"), "how_to_get": t.get("how_to_get")}
    cards = [{**card(catalogue.metric("top1_differ"), t), "value": pct(t.get("top1_differ")) + " ± " + pct(t.get("top1_differ_se"))},
             card(catalogue.metric("kl_union"), t)]

    def rows(name: str) -> list[list[str]]:
        return [[b["bucket"], fmt(b["tokens"]), pct(b["top1_differ"]), fmt(b["kl_union_mean"]), pct(b["kl_union_share"]),
                 fmt(b["k3_mean"]), pct(b["k3_share"])] for b in t.get(name) or []]

    outside = t.get("mass_outside_topk") or {}
    return {
        "available": True, "cards": cards, "k": t.get("k") or {}, "tokens": t.get("tokens"),
        "differ_count": t.get("top1_differ_count"), "k3": with_se(t, "kl_k3_sampled"), "lower": with_se(t, "kl_lower"),
        "tv": (fmt(t.get("tv_lower")), fmt(t.get("tv_upper"))), "hidden": fmt(t.get("hidden_tv")),
        "outside": (pct(outside.get("rollout")), pct(outside.get("trainer"))), "unresolved": pct(t.get("unresolved_mass")),
        "loose": bool(t.get("loose")), "without": t.get("tokens_without_topk") or 0,
        "columns": ["top-1 differs", "mean KL (top-k)", "share of ΣKL", "mean k3 (sampled)", "share of Σk3"],
        "by_probability": rows("by_probability"), "by_position": rows("by_position"),
    }
