"""How a number is written, for every layer: pages, markdown, sentences in the analysis, terminal lines.

    fmt(x)        3 significant digits, compact exponents (1.2e-4), more digits just under 1 (0.99987), — when missing
    pct(x)        a share as a percentage (0.0123 → 1.23%)
    fixed(x, n)   n decimals (ESS 0.9997, log-probs −1.2345)
    sci(x)        a threshold as the literature writes it (1e-4, 4e-4, 0.3)
    plain(x)      every digit a threshold needs (0.0001, 0.28, 2), as Python's `g` with compact exponents
    times(x)      a multiple, 3 significant digits as fmt (33.6×, 1.5×, 0.333×): every × in a sentence
    with_se(m, k) `m[k] ± m[k_se]`
    sig(x, n)     rounded to n significant digits as a float (chart data)

Display only: rounding and symbols, never statistics.
"""

from __future__ import annotations

import math
from typing import Any


def fmt(x: Any, digits: int = 3, missing: str = "—") -> str:
    """A number for people: `digits` significant digits, compact exponents (1.2e-4), `missing` for None or NaN."""
    if x is None:
        return missing
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if not isinstance(x, float):
        return str(x)
    if not math.isfinite(x):
        return missing if math.isnan(x) else ("∞" if x > 0 else "−∞")
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
    """A fraction as a percentage with `digits` significant digits (0.0123 → 1.23%)."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "—"
    if x == 0:
        return "0%"
    v = 100.0 * x
    if not math.isfinite(v):  # a fraction no batch has (a forged row): written as a number, not a crash
        return fmt(x)
    if abs(v) >= 1:  # never an exponent for a whole percentage: 100%, not 1e2%
        digits = max(digits, math.floor(math.log10(abs(v))) + 1)
    return fmt(v, digits) + "%"


def fixed(x: Any, decimals: int = 4) -> str:
    """A fixed number of decimals (ESS, log-probs), — when missing."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.{decimals}f}"


def sci(x: float) -> str:
    """A threshold as the literature writes it: 1e-4, 4e-4, 0.3 (exponents for small values)."""
    if x == 0 or abs(x) > 1e-2:
        return f"{x:g}"
    mant, exp = f"{x:.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"


def plain(x: float) -> str:
    """A threshold with every digit it has (0.0001, 0.28, 2, 1e-5): Python's `g`, exponents compact."""
    return fmt(float(x), 6)


def times(x: Any) -> str:
    """A multiple ("33.6×"): fmt's 3 significant digits and a ×, one rule for every sentence that says how many
    times one number is another (a jump, a ratio of perplexities, an arm's change); — alone when missing."""
    written = fmt(x)
    return written if written == "—" else written + "×"


def with_se(metrics: dict, key: str) -> str:
    """`metrics[key] ± metrics[key_se]`, or the value alone when it has no standard error."""
    v, se = metrics.get(key), metrics.get(key + "_se")
    return fmt(v) if se is None else f"{fmt(v)} ± {fmt(se, 2)}"


def sig(x: float | None, digits: int = 4) -> float | None:
    """Round to `digits` significant digits (display precision), keeping None / non-finite as None."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")
