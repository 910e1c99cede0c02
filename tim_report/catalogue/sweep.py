"""The words of a length sweep (analysis/sweep.py measures): how the mismatch grows with the generation length."""

from __future__ import annotations

from ..config import SWEEP_SLACK_SE
from .numbers import fixed, fmt

LINEAR = {"abs_sum": 1.0, "kl_seq": 1.0}  # linear growth of |Σδ| (drift) and of the summed KL (a constant per-token KL)
NOTES = {"abs_sum": "0.5 is a random walk of independent per-token noise, 1 is drift that accumulates linearly",
         "kl_seq": "1 is the same per-token KL at every length; above 1 the per-token KL grows with position"}


def growth(key: str, fit: dict) -> str:
    """'super-linear (b = 1.42 ± 0.08; …)': the exponent against linear growth, or 'not resolved' within its error."""
    b, se = fit["exponent"], fit["exponent_se"]
    if se is None:
        return f"b = {fixed(b, 2)} from two lengths, no error to judge it by (capture three lengths or more); {NOTES[key]}"
    ref = LINEAR[key]
    shape = ("linear" if abs(b - ref) <= SWEEP_SLACK_SE * se else "super-linear" if b > ref else "sub-linear")
    if key == "abs_sum" and shape == "sub-linear" and abs(b - 0.5) <= SWEEP_SLACK_SE * se:
        shape = "sub-linear, as a random walk"
    return f"{shape} (b = {fixed(b, 2)} ± {fmt(se, 2)}; {NOTES[key]})"
