"""Numbers and token text for people: the one place that decides how a value is written on a page.

Display only: rounding and symbols, never statistics.
"""

from __future__ import annotations

import math
from typing import Any

from ..config import TREND_BY_KEY


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
    """A fraction as a percentage (0.0123 → 1.23%)."""
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "—"
    if x == 0:
        return "0%"
    return fmt(100.0 * x, digits) + "%"


def fixed(x: Any, decimals: int = 4) -> str:
    """A fixed number of decimals (ESS, log-probs), — when missing."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.{decimals}f}"


def metric_value(key: str, x: Any) -> str:
    """A headline number of the run view as the tables write it, by its unit (config.TREND_METRICS): ESS to 4
    decimals, shares of tokens in %."""
    unit = TREND_BY_KEY[key].unit if key in TREND_BY_KEY else None
    if unit == "ess":
        return fixed(x, 4)
    return pct(x) if unit == "share" else fmt(x)


def with_se(metrics: dict, key: str) -> str:
    """`metrics[key] ± metrics[key_se]`, or the value alone when it has no standard error."""
    v, se = metrics.get(key), metrics.get(key + "_se")
    return fmt(v) if se is None else f"{fmt(v)} ± {fmt(se, 2)}"


def sig(x: float | None, digits: int = 4) -> float | None:
    """Round to `digits` significant digits (display precision), keeping None / non-finite as None."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


_VISIBLE = {
    " ": "␣",
    "\n": "↵",
    "\t": "⇥",
    "\r": "␍",
    "\u00a0": "⍽",  # no-break space
    "\u200b": "⟨zwsp⟩",
    "\ufeff": "⟨bom⟩",
}


def visible(text: str | None) -> str:
    """Whitespace and control characters as visible symbols (C0 controls → Control Pictures), so ' the',
    'the' and '\\n' can be told apart."""
    if text is None:
        return ""
    out = []
    for ch in str(text):
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 0x20:
            out.append(chr(0x2400 + ord(ch)))
        elif ord(ch) == 0x7F:
            out.append("␡")
        else:
            out.append(ch)
    return "".join(out) if out else "∅"
