"""The kept sets' words (analysis/kept.py measures them): the sentences around the run page's and report.md's table of
the ratio over the full vocabulary and over the kept set."""

from __future__ import annotations

from .numbers import fixed, fmt, pct

ROWS = (("kl_k3", "KL k3"), ("mean_abs_delta", "mean |δ| (nats)"), ("bias", "bias, mean δ (nats)"))
COLUMNS = ("over the full vocabulary", "over the kept set (renormalised)")


def intro(k: dict) -> str:
    """What the batch's kept sets are: how many tokens carry one, their sizes, the trainer's mass on them, the sampled
    tokens missing from their own set."""
    parts = []
    if k.get("with_set") is not None:
        single = f"{pct(k['singleton_share'])} of them a single token" if k.get("singleton_share") else "none a single token"
        size = f" (median size {fmt(k['size_median'])}, {single})" if k.get("size_median") is not None else ""
        parts.append(f"{fmt(k['with_set'])} of {fmt(k['tokens'])} tokens carry the sampler's kept set, the vocabulary "
                     f"ids its top-k / top-p left{size}")
    if k.get("mass_tokens"):
        parts.append(f"the trainer puts {fixed(k['mass_mean'], 3)} of its probability on the kept set on average "
                     f"(smallest {fixed(k['mass_min'], 3)})")
    if k.get("outside"):
        parts.append(f"{fmt(k['outside'])} sampled tokens are not in their own kept set (a data problem)")
    text = "; ".join(parts) + "."
    if k.get("trainer_support") == "kept":
        text += " The trainer's log-probs are already renormalised over the kept set, as its replay computes them."
    return text[0].upper() + text[1:]


def after(k: dict) -> str | None:
    """The renormalised ratio against the precision's noise ceilings, under the table."""
    kept = k.get("kept")
    if not kept:
        return None
    where = "within" if kept["within_noise"] else "beyond"
    return (f"Over the kept set the ratio is {where} the precision's noise (ceilings KL k3 {fmt(k['noise_kl_max'])}, "
            f"mean |δ| {fmt(k['noise_abs_delta_max'])}): δ over the full vocabulary = δ over the kept set + log(kept "
            "mass), so what truncation moves is the kept mass, and what is left is the engines' own mismatch.")
