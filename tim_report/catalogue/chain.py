"""The chain's words: what each link between two sides compares, what moves it, and the sentence that names the
link carrying the mismatch. The numbers come from analysis/chain.py; docs/chain.md explains the rule."""

from __future__ import annotations

from typing import Any

from .numbers import fmt, pct

# What a link compares and what usually moves it, by the kinds of its two sides (the later side's kind names the
# pipeline stage that differs). A pair not listed is read as "a side of your own".
LINKS: dict[tuple[str, str], tuple[str, str, str]] = {
    # (from, to): (what it compares, its likely cause, what to check)
    ("rollout", "recompute"): (
        "the sampler against the same engine re-scoring its tokens",
        "sampler-side: the engine returned processed log-probs (after temperature, top-p / top-k renormalisation), "
        "or its decode and prefill paths differ (batch-variant kernels, the prefix cache, an in-flight weight update "
        "between sampling and scoring)",
        "the engine's log-prob mode (vLLM `logprobs_mode` raw vs processed), the sampling parameters, prefix caching "
        "and the weight-update path; the trainer is not the cause"),
    ("recompute", "trainer"): (
        "the rollout engine's re-score against the trainer",
        "engine against trainer: precision, kernels (attention backend, fused MoE, LM head in bf16), weights not "
        "synced, a different context or chat template",
        "that both load the same weights, see the same prompt tokens, and the precision of each side (capture "
        "--shadow splits precision off)"),
    ("recompute", "shadow"): (
        "the rollout engine's re-score against the trainer's weights in the rollout's precision",
        "engine against trainer at one precision: kernels, weights, context",
        "attention backend, fused kernels, weight sync and the prompt tokens of both sides"),
    ("rollout", "trainer"): (
        "the sampler against the trainer (no engine re-score to split them)",
        "sampler or engine against trainer: the two cannot be told apart without the engine re-scoring its own "
        "tokens",
        "capture with `--recompute` (or save the engine's re-score as `recompute_logp`) to split the sampler from "
        "the engine"),
    ("rollout", "shadow"): (
        "the sampler against the trainer's weights in the rollout's precision (α)",
        "everything but precision: engine, kernels, weights, context",
        "engine versions, attention backend, weight sync, prompt tokens"),
    ("shadow", "trainer"): (
        "the trainer's weights in two precisions (β)",
        "precision alone",
        "align precision (fp16 both sides, fp32 LM head, same attention kernels)"),
    ("trainer", "train"): (
        "the trainer's no-grad recompute against its own training forward",
        "the trainer's own nondeterminism: dropout left on, non-deterministic kernels, a different micro-batch "
        "composition or padding between the two passes, or weights that moved between them",
        "model.eval() / dropout, deterministic kernels, the log-prob micro-batch size against the actor's (verl "
        "#6280), and that no optimizer step ran between the two passes"),
}
GENERIC = ("one side against the next", "whatever differs between these two sides",
           "how the two sides of this link were computed")


def link_words(a: str, b: str) -> tuple[str, str, str]:
    """(what the link compares, its likely cause, what to check); a link into `train` reads as the trainer's own
    forward, one from `recompute` into any trainer side as engine against trainer."""
    if (a, b) in LINKS:
        return LINKS[(a, b)]
    if b == "train":
        return LINKS[("trainer", "train")]
    if a == "recompute" and b in ("trainer", "shadow"):
        return LINKS[("recompute", "trainer")]
    return GENERIC


def label(a: str, b: str) -> str:
    return f"{a} → {b}"


def path_label(sides: list[str]) -> str:
    return " → ".join(sides)


def finding_title(w: dict[str, Any]) -> str:
    if w["share"] is None:
        return (f"Along the chain {w['path']}, the links cancel end to end; the {w['leading']} link differs most "
                f"(mean δ² {fmt(w['leading_mean_sq'])})")
    return (f"The {w['leading']} link carries {pct(w['share'])} of the end-to-end mismatch along {w['path']} "
            f"(KL k3 {fmt(w['leading_kl_k3'])} on that link, {fmt(w['end_kl_k3'])} end to end)")


def finding_problem(w: dict[str, Any]) -> str:
    return f"the mismatch of the {w['leading']} link ({link_words(w['from'], w['to'])[0]})"


def finding_cause(w: dict[str, Any]) -> str:
    what, cause, _ = link_words(w["from"], w["to"])
    return f"This link compares {what}. Likely: {cause}."


def finding_check(w: dict[str, Any]) -> str:
    return "Check " + link_words(w["from"], w["to"])[2] + "."


def verdict_sentence(chain: dict) -> str | None:
    """The sentence the verdict gains with a chain: which link carries the end-to-end mismatch."""
    lead = chain.get("leading")
    if not chain.get("available"):
        return None
    path = path_label(chain["sides"])
    if lead is None:
        return f"Along the chain {path} no token differs on any link."
    link = next(x for x in chain["links"] if x["label"] == lead)
    if link["share"] is None:
        return f"Along the chain {path} the links cancel end to end; the {lead} link differs most."
    return (f"Along the chain {path}, the {lead} link ({link_words(link['from'], link['to'])[0]}) carries "
            f"{pct(link['share'])} of the end-to-end mismatch.")


def exact_line(gate: dict) -> str:
    """The exact gate in one line: that it held, or how many tokens differ and the first one (check, the assertion)."""
    path = path_label(gate["sides"])
    within = f" by more than atol {fmt(gate['atol'])}" if gate["atol"] > 0 else ""
    if gate["passed"]:
        return (f"exact: no token of {fmt(gate['tokens'])} differs{within} along {path}"
                + ("" if within else " (bitwise equal)"))
    n, first = gate["differing"], gate["first"]
    text = (f"exact: {fmt(n)} of {fmt(gate['tokens'])} token{'s' if gate['tokens'] != 1 else ''} "
            f"differ{'s' if n == 1 else ''}{within} ({pct(gate['share'])}), max |δ| {fmt(gate['max_abs'])}; "
            f"first at {_token(first)}")
    if gate["first_link"]:
        text += f"; tokens start to differ on the {gate['first_link']} link"
        if gate["first_link_token"] != first:
            text += f" (first at {_token(gate['first_link_token'])})"
    return text


def _token(where: dict) -> str:
    sides = ", ".join(f"{n} {fmt(v, 9)}" for n, v in where["logp"].items())
    token = f", token {where['token']!r}" if where["token"] else ""
    return f"sequence {where['sequence']}, position {where['position']}{token} (δ {fmt(where['delta'])}; {sides})"
