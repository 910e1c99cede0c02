"""View models: a Report reshaped for display (titles, headline cards, token rows, groups, evidence).

Shared by the HTML page and the markdown report, so both show the same rows; no statistics and no
markup here. Thresholds (the bands, HOT_DIFF) come from the Report or from config.
"""

from __future__ import annotations

from typing import Any

from ..catalogue import findings
from ..catalogue import metrics as catalogue
from ..catalogue.numbers import fixed, fmt, pct, with_se
from ..config import HOT_DIFF
from .token_text import visible

SAMPLES_OPEN = 3  # the worst sequences the run page shows open, each with its largest differences
TOP_TOKENS = 8  # the rows of an open sequence's compact table: its tokens with the largest |diff| (a shorter one: all)
GROUP_ROWS = 50  # by-group rows shown (worst first)
ROUTE_ORDER = {"quarantine": 0, "train_with_correction": 1, "train": 2}


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


def samples_view(report) -> list[dict]:
    th = report.run.get("thresholds") or {}
    b5, b2 = th.get("band_5x", 5.0), th.get("band_2x", 2.0)
    out: list[dict] = []
    for s in report.samples:
        rows = token_rows(s, (1.0 / b5, b5), (1.0 / b2, b2))
        largest = sorted((i for i, t in enumerate(s["rows"]) if t.get("diff") is not None),
                         key=lambda i: (-abs(s["rows"][i]["diff"]), i))[:TOP_TOKENS]
        out.append({**s, "all": rows,
                    "top": [rows[i] for i in largest] if len(rows) > TOP_TOKENS else [],
                    "open": s["kind"] == "worst" and len(out) < SAMPLES_OPEN,
                    "hot": sum(1 for r in rows if "hot" in r["cls"]), "out5": sum(1 for r in rows if r["r_cls"] == "o5")})
    return out


def groups_view(report) -> dict:
    g = report.breakdowns.get("by_group") or {}
    names = g.get("name") or []
    idx = sorted(range(len(names)), key=lambda i: (ROUTE_ORDER.get(g["route"][i], 3), -(g["abs_delta_mean"][i] or 0.0), i))
    cols = ("name", "sequences", "tokens", "abs_delta_mean", "k3_mean", "clipped_fraction", "vetoed_tokens", "min_ratio", "route")
    rows = [{c: g[c][i] for c in cols} for i in idx[:GROUP_ROWS]]
    routes = set(g.get("route") or [])
    return {"unit": g.get("unit", "group"), "rows": rows, "total": len(names), "hidden": max(len(names) - GROUP_ROWS, 0),
            "uniform": routes.pop() if len(routes) == 1 and len(names) > 1 else None}


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
