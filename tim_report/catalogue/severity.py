"""Severity by consequence, and the side at fault, in words.

`analysis/consequence.py` measures what a systematic finding does to training on the batch (bias, shares of tokens
clipped or capped because of it, sequence-level weights) and which side is off; `weigh` turns that into the finding's
severity and sentences. The rule per finding is its catalogue entry's `consequence`: "weighed" findings are an
`error` only when their consequence is material (else a `warn` that says why it is small and when it would stop
being small); "stated" ones carry their consequence and side, "sided" ones their side. The words of a side the
finding's own evidence names are its entry's (`Finding.side`), as are the glance's few words and place (`glance`,
`place`). docs/diagnosis.md ("Severity by consequence") has the rule and its numbers.
"""

from __future__ import annotations

from typing import Any

from .findings import FINDINGS
from .numbers import fmt, pct

# Each catalogue entry's `consequence` says which rule it follows. Error only when material: the whole-batch faults
# whose shape alone used to decide "Do not train"; every warn / error finding of STATED says what it does to training
# and which side it is on; SIDED ones say their side only (staleness is the rollout's: older weights sampled).
WEIGHED = tuple(i for i, f in FINDINGS.items() if f.consequence == "weighed")
STATED = WEIGHED + tuple(i for i, f in FINDINGS.items() if f.consequence == "stated")
SIDED = tuple(i for i, f in FINDINGS.items() if f.consequence == "sided")


def weigh(finding: dict, consequence: dict | None, side: dict, band: str) -> dict:
    """The finding with its consequence and side attached; an immaterial `error` of a WEIGHED finding is a `warn`."""
    f = dict(finding)
    if consequence is not None:
        f["consequence"] = {k: _plain(v) for k, v in consequence.items()}
        if f["id"] in WEIGHED and f["severity"] == "error" and not consequence["material"]:
            f["severity"] = "warn"
        f["consequence_text"] = consequence_text(consequence, band, f["id"] in WEIGHED)
    f["side"] = {k: _plain(v) for k, v in side.items()}
    rule = FINDINGS[f["id"]].side
    f["side_text"] = side_text(side, rule.why if rule is not None and side["basis"] == rule.basis else "")
    return f


def _plain(v: Any) -> Any:
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        return v.item()
    return v


def _nats(x: float) -> str:
    return ("+" if x > 0 else "") + fmt(x, 2).replace("-", "−") + " nats"


def consequence_text(c: dict, band: str, weighed: bool = True) -> str:
    """'Material: …' or 'Small: … would start to matter at …', in the units a trainer acts on."""
    lo, hi = c["ppo_clip"]
    shares = (f"PPO [{fmt(lo)}, {fmt(hi)}] clips {pct(c['ppo_clip_share'])} of tokens and the {fmt(c['cap'])}× cap "
              f"(token TIS, IcePop) touches {pct(c['outside_cap_share'])} because of it")
    bias = (f"per-token bias {_nats(c['bias'])} ({pct(c['bias_share_of_band'], 2)} of the {band} band's mean |δ| "
            f"{fmt(c['band_abs_delta'])})" if c.get("bias_share_of_band") is not None else f"per-token bias {_nats(c['bias'])}")
    weights = (f"a sequence's weight from the bias alone is {fmt(c['seq_weight_mean'], 2)} at the mean length "
               f"({fmt(round(c['mean_length']))} tokens) and {fmt(c['seq_weight_p90'], 2)} at p90 ({fmt(round(c['p90_length']))})")
    if c["material"]:
        why = {"tokens": f"PPO clips {pct(c['ppo_clip_share'])} of tokens and the {fmt(c['cap'])}× cap touches "
                         f"{pct(c['outside_cap_share'])} because of it ({pct(c['token_share_material'])} is the line)",
               "bias": f"the per-token bias {_nats(c['bias'])} is {fmt(abs(c['bias']) / c['band_abs_delta'], 2)}× the "
                       f"{band} band's mean |δ| {fmt(c['band_abs_delta'])}",
               "spread": f"mean |δ| {fmt(c['abs_delta_mean'])} is {fmt(c['abs_delta_mean'] / c['band_abs_delta'], 2)}× "
                         f"the {band} band's {fmt(c['band_abs_delta'])}"}
        rest = "" if "tokens" in c["material_by"] else f"; {shares}"
        return f"Material: {'; '.join(why[r] for r in c['material_by'])}{rest}; {weights}."
    text = (f"{'Small' if weighed else 'Effect'}: {bias}; {shares} (material from "
            f"{pct(c['token_share_material'])}); {weights}.")
    length = c.get("cap_length")
    if length is None:
        return text
    cap = f"a sequence-level weight leaves [{fmt(1 / c['cap'])}, {fmt(c['cap'])}] from {fmt(round(length))} tokens on"
    if length > c["p90_length"]:
        return f"{text} It stops being small at longer sequences: {cap}."
    return (f"{text} With sequence-level importance sampling it already matters: {cap}, under this batch's p90 "
            "length (token-level PPO and TIS do not see it; prefer token-level or geometric-mean corrections).")


def side_text(side: dict, why: str = "") -> str:
    """'Side: the trainer (…)' or 'Side: undetermined (…): about N tokens would decide it'. `why`: the words of the
    side the finding's own evidence names (its entry's `side`); without them the sampler test decided."""
    who = side["side"]
    if who != "undetermined":
        return f"Side: the {who} ({why or _sampler_words(side, who)})."
    if why:
        return f"Side: undetermined: {why}."
    numbers = (f"log mean ratio {fmt(side.get('log_mean_ratio'), 2)}, log mean inverse ratio "
               f"{fmt(side.get('log_mean_inverse'), 2)} over {fmt(side.get('tokens'))} tokens")
    if side.get("tokens_to_decide"):
        return (f"Side: undetermined on {fmt(side['tokens'])} tokens ({numbers}; z = {fmt(side.get('z'), 2)} of the 5 the "
                f"sampler test needs): about {fmt(_round(side['tokens_to_decide']))} tokens would decide it.")
    return (f"Side: undetermined ({numbers}): neither side's mean ratio is 1, as when a constant offset or a processed "
            "side moves both; no token count decides it: re-score a few tokens by hand on each side.")


def _sampler_words(side: dict, who: str) -> str:
    sampler = "rollout" if who == "trainer" else "trainer"
    key = "log_mean_ratio" if sampler == "rollout" else "log_mean_inverse"
    other = "log_mean_inverse" if sampler == "rollout" else "log_mean_ratio"
    return (f"the {sampler}'s log-probs are the sampler's, log mean ratio {fmt(side.get(key), 2)} ≈ 0, and the {who}'s "
            f"are not, {fmt(side.get(other), 2)}, z = {fmt(side.get('z'), 2)}")


def _round(n: int) -> int:
    """About N tokens: two significant digits."""
    digits = max(0, len(str(int(n))) - 2)
    return int(round(n, -digits))


# ---- one line a person reads at a glance: the regime, the leading finding, its side and place ----------------

GLANCE_MAX = 160  # characters before the numbers


def place(finding: dict, env: str | None = None) -> str | None:
    """Where the finding sits (its entry's `place`: a position, turns, every position), and the environment; None
    for a finding that has no place (the input gate)."""
    entry = FINDINGS.get(str(finding.get("id")))
    where = entry.place(finding.get("evidence") or {}) if entry is not None else "every position"
    if where is None:
        return None
    return f"{where}, env {env}" if env else where


def _short(lead: dict) -> str:
    """The leading finding in a few words: its entry's `glance` of its evidence, else its short name."""
    entry = FINDINGS.get(str(lead.get("id")))
    if entry is None:
        return str(lead.get("id"))
    if entry.glance is None:
        return entry.short or entry.id
    try:
        return entry.glance(lead.get("evidence") or {})
    except (KeyError, TypeError):
        return str(lead.get("id"))


def glance(regime: str | None, lead: dict | None, env: str | None = None) -> str:
    """'systematic: off-by-one (…), error, side undetermined, every position' (≤ GLANCE_MAX characters)."""
    words = (regime or "not diagnosed").replace("_", " ")
    if lead is None:
        return words + (f", most of it in env {env}" if env else "")
    short = _short(lead)
    c = lead.get("consequence") or {}
    sev = lead.get("severity", "")
    if c and not c.get("material") and lead["id"] in WEIGHED:
        sev += ", small"
    parts = [f"{words}: {short} ({sev})"]
    if lead.get("side"):
        parts.append(side_short(lead["side"]))
    where = place(lead, env)
    if where is not None:
        parts.append(where)
    text = ", ".join(parts)
    return text if len(text) <= GLANCE_MAX else text[:GLANCE_MAX - 1] + "…"


def side_short(side: dict) -> str:
    """'trainer side', 'side undetermined (~40,000 tokens would decide)'."""
    if side.get("side") in ("rollout", "trainer"):
        return f"{side['side']} side"
    if side.get("tokens_to_decide"):
        return f"side undetermined (~{fmt(_round(side['tokens_to_decide']))} tokens would decide)"
    return "side undetermined"
