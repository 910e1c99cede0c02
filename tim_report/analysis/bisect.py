"""bisect's statistics: per-site errors reduced as they arrive, multiples of the floor, the first site beyond it.

Pure numpy. Each site keeps log-spaced histograms of its four per-token errors (local, floor, plain, floor plain), so
memory does not grow with the number of tokens; quantiles are read from them (50 bins a decade: ±2.3%). Per prompt it
keeps one number: the prompt's median local error over its median floor (the spread over prompts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..catalogue import bisect as words
from ..config.bisect import BISECT_BEYOND_MEDIAN, BISECT_BEYOND_P99, BISECT_MIN_FLOOR_ROUNDOFFS, BISECT_ROUNDOFF

EDGES = np.logspace(-12, 4, 16 * 50 + 1)  # 50 bins a decade (±2.3%); below 1e-12 counts as zero
SERIES = ("local", "floor", "plain", "floor_plain")


def _hist(x: np.ndarray) -> np.ndarray:
    """Counts: [exactly zero or below 1e-12, each log bin..., at or above the top] (len(EDGES) + 1)."""
    idx = np.searchsorted(EDGES, np.asarray(x, np.float64), side="right")
    return np.bincount(idx, minlength=len(EDGES) + 1)


def quantile(counts: np.ndarray, q: float) -> float | None:
    """The q-quantile read from `_hist` counts: 0 in the zero bin, else the bin's geometric middle."""
    n = int(counts.sum())
    if not n:
        return None
    i = int(np.searchsorted(np.cumsum(counts), q * n, side="left"))
    if i == 0:
        return 0.0
    if i >= len(EDGES):
        return float(EDGES[-1])
    return float(np.sqrt(EDGES[i - 1] * EDGES[i]))


@dataclass
class SiteStats:
    name: str
    kind: str
    layer: int | None
    hists: dict = field(default_factory=lambda: {s: np.zeros(len(EDGES) + 1, np.int64) for s in SERIES})
    prompts: dict = field(default_factory=dict)  # sequence → its median local / median floor (raw)
    flips: dict = field(default_factory=dict)  # "local" / "floor" / "plain" → [flipped, tokens]


class Accumulator:
    """Every site's statistics, fed one capture record at a time (capture.bisect.SiteRecord or the same fields)."""

    def __init__(self) -> None:
        self.sites: dict[str, SiteStats] = {}

    def add(self, name: str, kind: str, layer: int | None, seq: np.ndarray, errs: dict, flips: dict | None = None):
        st = self.sites.get(name)
        if st is None:
            st = self.sites[name] = SiteStats(name, kind, layer)
        for s in SERIES:
            st.hists[s] += _hist(errs[s])
        seq = np.asarray(seq)
        if len(seq):
            order = np.argsort(seq, kind="stable")
            cuts = np.flatnonzero(np.diff(seq[order])) + 1
            for part in np.split(order, cuts):
                st.prompts[int(seq[part[0]])] = (float(np.median(errs["local"][part])),
                                                 float(np.median(errs["floor"][part])))
        for key, f in (flips or {}).items():
            done = st.flips.setdefault(key, [0, 0])
            done[0] += int(np.count_nonzero(f))
            done[1] += int(len(f))


def _q(counts) -> dict:
    return {"median": quantile(counts, 0.5), "p99": quantile(counts, 0.99)}


def _ratio(a, b) -> float | None:
    if a is None or b is None:
        return None
    return float(a / b) if b > 0 else (0.0 if a == 0 else float("inf"))


def site_summary(st: SiteStats, min_floor: float) -> dict:
    local, floor = _q(st.hists["local"]), _q(st.hists["floor"])
    used = {k: (max(v, min_floor) if v is not None else None) for k, v in floor.items()}
    mult = {k: _ratio(local[k], used[k]) for k in local}
    per_prompt = sorted(_ratio(a, max(b, min_floor)) or 0.0 for a, b in st.prompts.values())
    plain, floor_plain = _q(st.hists["plain"]), _q(st.hists["floor_plain"])
    beyond = bool((mult["median"] or 0) > BISECT_BEYOND_MEDIAN or (mult["p99"] or 0) > BISECT_BEYOND_P99)
    out = {"name": st.name, "kind": st.kind, "layer": st.layer, "tokens": int(st.hists["local"].sum()),
           "local": local, "floor": floor, "floor_used": used, "multiple": mult,
           "prompts": {"n": len(per_prompt), "min": per_prompt[0] if per_prompt else None,
                       "median": float(np.median(per_prompt)) if per_prompt else None,
                       "max": per_prompt[-1] if per_prompt else None},
           "plain": plain, "floor_plain": floor_plain,
           "plain_multiple": {k: _ratio(plain[k], max(floor_plain[k], min_floor) if floor_plain[k] is not None else None)
                              for k in plain},
           "beyond": beyond}
    if st.flips:
        out["flips"] = {k: {"tokens": v[0], "of": v[1], "rate": v[0] / v[1] if v[1] else None} for k, v in st.flips.items()}
    return out


def summarise(acc: Accumulator, precision: str, labels: dict | None = None, rounding_only: bool = False,
              replay: bool = True, floor_is_candidate: bool = False) -> dict:
    """summary.json's content: every site in forward order, the first beyond its floor (None when clean), the verdict.
    `replay` False: saved states, where every error is the plain forward's. `floor_is_candidate`: the candidate is the
    floor setup itself (no patch, the same attention implementation), said beside the verdict.

    `rounding_only`: the candidate is meant to differ from the floor by rounding only (a kernel patch that claims the
    same function), said beside a clean verdict."""
    min_floor = BISECT_ROUNDOFF[precision] * BISECT_MIN_FLOOR_ROUNDOFFS
    sites = [site_summary(st, min_floor) for st in acc.sites.values()]
    first_i = next((i for i, s in enumerate(sites) if s["beyond"]), None)
    first = None
    if first_i is not None:
        first = dict(sites[first_i])
        layers = sorted({s["layer"] for s in sites[:first_i] if s["layer"] is not None})
        first["within_before"] = _before(sites[:first_i], layers)
        first["meaning"] = words.meaning(first["kind"])
        first["index"] = first_i
    largest = max(sites, key=lambda s: s["multiple"]["median"] or 0.0) if sites else None
    prompts = max((s["prompts"]["n"] for s in sites), default=0)
    return {"kind": "bisect", "schema": 1, "precision": precision, "labels": labels or {},
            "thresholds": {"median": BISECT_BEYOND_MEDIAN, "p99": BISECT_BEYOND_P99, "min_floor": min_floor},
            "prompts": prompts, "tokens": sites[0]["tokens"] if sites else 0,
            "first_site": first["name"] if first else None, "first": first,
            "beyond": [s["name"] for s in sites if s["beyond"]],
            "verdict": words.verdict(first, precision, largest, rounding_only, floor_is_candidate),
            "floor_is_candidate": floor_is_candidate,
            "replay": replay,
            "method": (words.METHOD if replay else words.METHOD_STATES).format(median=f"{BISECT_BEYOND_MEDIAN:g}",
                                                                               p99=f"{BISECT_BEYOND_P99:g}"),
            "sites": sites}


def _before(sites: list[dict], layers: list[int]) -> str | None:
    """The sites before the first one, said short: "layers 0–4", "layers 0–2 and this layer's input_layernorm"."""
    if not sites:
        return None
    done = [n for n in layers if any(s["layer"] == n and s["kind"] == "layer" for s in sites)]
    parts = []
    if done:
        parts.append(f"layer {done[0]}" if len(done) == 1 else f"layers {done[0]}–{done[-1]}")
    partial = [s["name"].split(f"layers.{s['layer']}.", 1)[-1] for s in sites
               if s["layer"] is not None and s["layer"] not in done]
    if partial:
        parts.append(f"this layer's {', '.join(partial)}")
    return " and ".join(parts) if parts else "the embedding"
