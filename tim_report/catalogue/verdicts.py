"""The words of a batch's verdict: the regimes, the verdict sentence and its default advice, the band reading, the
message that blocks training on a broken batch, and compare's "why" (which findings differ between two batches).

The findings themselves (severity rules and words) are in catalogue/findings/; the verdict is led by the first
of them that is not info (analysis/diagnosis.py chooses it).
"""

from __future__ import annotations

import math

from . import staleness as lag_words
from .findings import INPUT_PROBLEM
from .numbers import fmt, pct, plain, sci

# ---- the verdict of a batch ----------------------------------------------------------------------------

# In order of concern: `staleness` is a mismatch beyond noise that is the lag's (tokens sampled by older weights, no
# lag-0 tokens to judge the numerics on, no finding): expected, corrected by importance weights (docs/staleness.md).
REGIMES = ("identical", "numerical_noise", "staleness", "elevated", "systematic")

DEFAULT_CHECK = {
    "identical": "Nothing to fix. If you expected a precision or engine difference, check that the two sides "
                 "really ran different engines / dtypes (the batch may hold the same array twice).",
    "numerical_noise": "Nothing is broken. If clipping or ESS still hurt, use an importance-sampling correction "
                       "(see the what-if table) or narrow the precision gap (fp16 rollout and training, fp32 LM head){gap}.",
    "staleness": lag_words.LAG_REGIME_CHECK,
    "elevated": "Beyond the noise published for bf16/fp16 engines, with no specific fault detected: compare engine "
                "versions, attention backends, KV-cache dtype, fp32 LM head and quantisation{gap}; read the worst sequences.",
    "systematic": "Check that both sides load the same weights (same step), see the same prompt tokens and chat "
                  "template, and apply the same temperature and sampling processing.",
}
# How the advice above points at the precision gap: measure it, or read it when the batch has a shadow pass.
GAP_HINT = {False: "; capture with `tim-report capture --shadow` to split precision from the rest",
            True: "; the precision gap β (from this batch's shadow pass) splits precision from the rest"}


def _article(name: str) -> str:
    return "an" if name[0] in "AEIOM" else "a"


def verdict(regime: str, metrics: dict, lead: dict | None, band: str, has_shadow: bool,
            floor: dict | None = None, lagged: dict | None = None) -> tuple[str, str]:
    """(one plain sentence naming the regime and the finding that leads it, what to check). With a `floor` (the
    staleness split's lag-0 reading) the regime was judged on lag 0's tokens: the sentence says so; in the staleness
    regime `lagged` (the split) says which lags the tokens are at."""
    nums = (f"KL k3 {fmt(metrics['kl_k3'], missing='n/a')}, mean |δ| {fmt(metrics['abs_delta_mean'], missing='n/a')} nats, "
            f"log-prob correlation {fmt(metrics.get('corr_logp'), missing='n/a')}")
    title = lead["title"][0].lower() + lead["title"][1:] if lead else None
    if lead is not None and lead["id"] == INPUT_PROBLEM:
        n = lead["evidence"]["usable_tokens"]
        text = (f"{lead['title']}. No verdict is drawn: the numbers below describe only the {fmt(n)} usable "
                f"token{'' if n == 1 else 's'}.")
    elif regime == "identical":
        text = f"Identical: no token's log-prob differs beyond float rounding (max |δ| {fmt(metrics['abs_delta_max'])})."
    elif regime == "numerical_noise":
        size = ("the size bf16/fp16 engine differences produce" if band == "dense bf16"
                else f"within the noise published for {_article(band)} {band} model")
        text = f"Numerical noise: the mismatch is {size} ({nums})."
        if floor is not None and lead is None:
            text = (f"Numerical noise at lag 0: the {fmt(floor['tokens'])} tokens sampled with the trainer's own weights "
                    f"disagree {'by ' if band == 'dense bf16' else ''}{size} (KL k3 {fmt(floor['kl_k3'])}, mean |δ| "
                    f"{fmt(floor['mean_abs_delta'])} nats); the batch as a whole ({nums}) is beyond that by the lag: staleness.")
    elif regime == "staleness":
        text = lag_words.lag_regime_sentence(lagged or {"by_lag": []}, nums)
    elif regime == "elevated":
        text = f"Elevated: beyond numerical noise but not clearly broken ({nums})" + (f"; {title}." if title else ".")
    else:
        text = (f"Systematic: {title}; {nums}." if title else
                f"Systematic: the two sides do not score the same model or context ({nums}).")
    return text, (lead or {}).get("what_to_check") or DEFAULT_CHECK[regime].format(gap=GAP_HINT[has_shadow])


def blocked_message(problem: str, terminal: bool = False) -> str:
    """Said first when an error finding makes the batch untrainable whatever the correction (the page's words point
    at its routes table; a terminal line has none)."""
    if terminal:
        return f"Do not train on this batch: no importance-sampling correction fixes {problem}; fix the bug first."
    return (f"Do not train on this batch: no importance-sampling correction fixes {problem}. "
            "Fix the bug first; the routes below only show what a correction would do with these ratios.")


def band_reading(kl: float, band: str, lo: float, hi: float, where: str, dense: tuple[str, str] | None) -> str:
    """'KL k3 3e-3 is typical for an MoE bf16 model (1e-3 to 0.1); for a dense bf16 model it would be high.'"""
    text = f"KL k3 {fmt(kl, 2)} is {where} for {_article(band)} {band} model ({sci(lo)} to {sci(hi)}: the KL band table)"
    if dense is not None:
        text += f"; for a {dense[0]} model it would be {dense[1]}"
    return text + "."


# ---- compare: why the two sides differ ---------------------------------------------------------------------

def _regime_words(regime: str | None) -> str:
    return (regime or "not diagnosed").replace("_", " ")


def _titles(fs: list[dict]) -> str:
    return "; ".join(f"{f['title']} ({f['severity']})" for f in fs)


def compare_why(regime_before: str | None, regime_after: str | None, appeared: list[dict], gone: list[dict],
                changed: list[dict], same: list[dict]) -> str:
    """'After: systematic (before: numerical noise). New in after: Off-by-one: … (error).' The findings that differ
    between the two sides first (new, gone, changed severity), then the ones they share; warn and error findings."""
    if regime_before == regime_after:
        head = f"Both sides are {_regime_words(regime_after)}."
    else:
        worse = REGIMES.index(regime_after) > REGIMES.index(regime_before) if {regime_before, regime_after} <= set(REGIMES) else None
        head = (f"After is {_regime_words(regime_after)}, before was {_regime_words(regime_before)}"
                + (" (worse)." if worse else " (better)." if worse is False else "."))
    parts = [head]
    if appeared:
        parts.append(f"New in after: {_titles(appeared)}.")
    if gone:
        parts.append(f"Gone from after: {_titles(gone)}.")
    if changed:
        parts.append("Changed severity: " + "; ".join(f"{f['title']} ({f['before']} → {f['after']})" for f in changed) + ".")
    if same:
        parts.append(f"On both sides: {_titles(same)}.")
    if not (appeared or gone or changed):
        parts.append("No finding differs between the two sides: the difference is one of size (the metrics below)."
                     if regime_before == regime_after else
                     "No finding differs between the two sides: the regime moved with the size of the mismatch (the metrics "
                     "below).")
    return " ".join(parts)


def geo_rs_note(rejected: float, low: float, high: float, noise_sd: float, median_len: float, tis_share: float) -> str:
    """Beside a Geometric RS row that rejects most sequences of a batch whose noise alone explains it."""
    return (f"Geometric RS would reject {pct(rejected)} of the sequences. Its band [{plain(low)}, {plain(high)}] lets a "
            f"sequence's mean δ stray only {fmt(math.log(high), 2)} nats from 0, while this batch's per-token δ (s.d. "
            f"{fmt(noise_sd, 2)} nats) averaged over a median {fmt(median_len)} tokens strays about "
            f"{fmt(noise_sd / math.sqrt(median_len), 2)} by noise alone: the band is tighter than this precision's noise "
            f"for sequences this short, and the rate says that, not that the sequences are broken. Widen the band for "
            f"this precision or use a token-level correction (Token TIS truncates {pct(tis_share)} of the tokens here).")
