"""Where and how the mismatch sits (analysis/localise.py, analysis/detectors.py): a position, a turn, a version mix,
its growth with length, the low-probability tail.
"""

from __future__ import annotations

from ...config import CONFIDENT_GAP, CONFIDENT_P, DiagnosisThresholds
from ..numbers import fixed, fmt, pct, plain, times
from .entry import Finding, Side, Words, always, na, nowhere


def _drift_severity(w: Words, dt: DiagnosisThresholds) -> str:
    """warn only when the per-token bias is itself beyond noise and no other finding explains it, else info."""
    bias, se = w["bias_per_token"], w["bias_se"]
    material = abs(bias) >= dt.noise_kl_max and se > 0 and abs(bias) / se >= dt.z and not w["explained_by_other_finding"]
    return "warn" if material else "info"


def _boundary_words(w: Words) -> str:
    """'97 = 96 + 1, one past a multiple of 32' / '128, a power of two'."""
    b, p = w["kernel_boundary"], w["position"]
    kind = " and ".join(k for k, yes in (("a multiple of 32", b % 32 == 0), ("a power of two", b & (b - 1) == 0)) if yes)
    return f"{p} = {b} + 1, one past {kind}" if p == b + 1 else f"{p} is {kind}"


def _kernel_hint(w: Words) -> str:
    return (f"Kernel-boundary hint: {_boundary_words(w)}, where attention and decode kernels change block (FlashAttention "
            "tiles of 64 / 128 rows, split-KV decode, 16-token KV-cache pages, chunked prefill), so look first at a "
            "kernel that takes another path past that length.")


ENTRIES = (
    Finding(
        "first_token", always("warn"),
        lambda w: (f"The first response token carries {pct(w['share_of_abs_delta'])} of the mismatch: its |δ| is "
                   f"{times(w['ratio'])} the rest's"),
        lambda w: (f"a first response token that disagrees {times(w['ratio'])} more than the rest (a BOS, template or "
                   "first-step sampling difference)"),
        lambda w: "Something differs for the first generated token only: a temperature or logit processor applied to the "
                  "first step alone, a BOS token one side adds and the other does not, or a prompt/response boundary "
                  "tokenised differently (the chat template's generation prompt, a trailing space or newline merged into "
                  "the first response token).",
        lambda w: "Compare the last prompt tokens and the first response token id on both sides (`tim-report inspect`), "
                  "check that both sides add BOS the same way and that the first sampling step uses the same temperature.",
        short="first token", meaning="the first response token disagrees far more than the rest", consequence="stated",
        glance=lambda e: f"first token off ({fmt(e.get('ratio'), 3)}× the rest)", place=lambda e: "position 0",
        evidence_names={"share_of_abs_delta": ("share of Σ|δ|", "share"),
                        "abs_delta_first_mean": ("mean |δ| at position 0", "num"),
                        "abs_delta_first_median": ("median |δ| at position 0", "num"),
                        "abs_delta_rest_median": ("median |δ| elsewhere", "num"),
                        "mean_delta_first": ("mean δ at position 0", "num")}),
    Finding(
        "turn_boundary", always("warn"),
        lambda w: (f"The first tokens after each tool / environment span disagree: their |δ| is {times(w['ratio'])} the rest's "
                   f"(turns {', '.join(map(str, w['turns_affected'])) or 'none alone'})"),
        lambda w: f"a different context after each tool call (the first tokens of a turn disagree {times(w['ratio'])} more)",
        lambda w: "The two sides see a different context after a tool call: the chat template is not prefix-preserving "
                  "(re-rendering the history changes earlier turns, e.g. dropped reasoning or whitespace), or the tool / "
                  "environment response is tokenised differently by the engine (token-in) and the trainer (text "
                  "re-tokenised).",
        lambda w: "Compare the token ids around a tool response on both sides; keep the rollout's token ids for the trainer "
                  "(token-in-token-out) instead of re-applying the chat template to the conversation text.",
        short="turn boundary", meaning="the first tokens after each tool span disagree", consequence="stated",
        glance=lambda e: f"context differs after tool calls ({fmt(e.get('ratio'), 3)}× the rest)",
        place=lambda e: "turn starts" + (f" ({', '.join(map(str, e['turns_affected'][:4]))}"
                                         + ("…" if len(e["turns_affected"]) > 4 else "") + ")"
                                         if e.get("turns_affected") else ""),
        evidence_names={"abs_delta_by_offset": ("mean |δ| by offset in the turn", "num"),
                        "abs_delta_head_mean": ("mean |δ| at turn heads", "num"),
                        "abs_delta_turn0_mean": ("mean |δ| in turn 0", "num"),
                        "head_tokens": ("head tokens per turn", "count"), "turn_starts": ("turn starts", "count"),
                        "turns_affected": ("turns affected", "num")}),
    Finding(
        "position_onset", lambda w, dt: "info" if w["explained_by_other_finding"] else "warn",
        lambda w: (f"The mismatch switches on at response position {w['position']}: mean |δ| "
                   f"{fmt(w['abs_delta_mean_before'])} → {fmt(w['abs_delta_mean_after'])} nats ({times(w['ratio'])}) in the "
                   f"{w['sequences']} sequences that run past it"
                   + (f", where the {w['explained_by']} finding starts" if w.get("explained_by") else "")
                   + (f"; {_boundary_words(w)}: a kernel-boundary hint" if w.get("kernel_boundary") else "")),
        lambda w: f"a mismatch that switches on at response position {w['position']} ({times(w['ratio'])} from there on)",
        lambda w: (_kernel_hint(w) + " " if w.get("kernel_boundary") else "")
                  + "A second error source switches on part-way through the response: a quantised (fp8) KV cache or a "
                  "sliding / chunked attention window that starts to matter at that length, a RoPE scaling or position "
                  "limit, prefill vs decode kernels that differ beyond a chunk size, or a context the trainer truncated.",
        lambda w: f"Look at what happens at position {w['position']} plus the prompt length: the engine's KV-cache dtype, "
                  "chunked prefill size, sliding window and max model length, and the trainer's max sequence length / "
                  "truncation.",
        short="position onset", meaning="the mismatch switches on part-way through the responses", consequence="stated",
        glance=lambda e: f"mismatch switches on ({fmt(e.get('ratio'), 3)}×)",
        place=lambda e: f"from position {e.get('position')}",
        evidence_names={"abs_delta_mean_before": ("mean |δ| before", "num"), "abs_delta_mean_after": ("mean |δ| after", "num"),
                        "abs_delta_median_before": ("median |δ| before", "num"),
                        "abs_delta_median_after": ("median |δ| after", "num"), "position": ("position", "count"),
                        "positions_scanned": ("positions scanned", "count"), "tokens_before": ("tokens before", "count"),
                        "tokens_after": ("tokens after", "count"), "kernel_boundary": ("kernel boundary", "count")}),
    Finding(
        "mixed_policy_versions", lambda w, dt: "warn" if w.get("spread") is not None and w["spread"] >= dt.versions_spread_warn else "info",
        lambda w: (f"This batch mixes {w['versions']} policy weight versions ({w['values']}"
                   + (f", {w['spread']} versions apart" if w.get("spread") is not None else "")
                   + "): part of its mismatch is staleness (off-policy samples), not precision"),
        lambda w: f"sequences from {w['versions']} policy weight versions (staleness, not precision)",
        lambda w: "Asynchronous or partial rollouts: some sequences (or turns) were generated by older weights than the "
                  "trainer's, so r mixes the policy update with the precision difference.",
        lambda w: "Read the mismatch of the newest-version sequences alone for the precision part; bound the staleness "
                  "(max off-policy steps) or correct for it with importance sampling against the behaviour policy.",
        short="mixed policy versions", meaning="the batches mix policy weight versions (staleness)", banner=True,
        consequence="sided", side=Side(lambda e: "rollout", "stale", "older policy weights sampled part of the batch"),
        glance=lambda e: f"{e.get('versions')} policy versions mixed",
        evidence_names={"versions": ("versions", "count"), "values": ("versions seen", "num"), "oldest": ("oldest", "count"),
                        "newest": ("newest", "count"), "spread": ("versions apart", "count"),
                        "stale_sequence_share": ("stale sequences", "share"),
                        "abs_delta_mean_newest": ("mean |δ|, newest version", "num"),
                        "abs_delta_mean_stale": ("mean |δ|, older versions", "num")}),
    Finding(
        "drift_with_length", _drift_severity,
        lambda w: f"|Σδ| grows as length^{fixed(w['exponent'], 2)} (a random walk would be length^0.5)",
        lambda w: f"a mismatch that accumulates with length (|Σδ| ∝ length^{fixed(w['exponent'], 2)})",
        lambda w: (f"A consequence of the {w['explained_by']} finding: its signed bias adds up along each sequence. "
                   if w.get("explained_by") else "")
                  + "The per-token mismatch has a consistent sign (or grows along the sequence), so sequence-level ratios "
                  "drift with length instead of averaging out: a temperature / processing difference, a KV-cache or "
                  "RoPE precision issue, or, when the bias is tiny, just the KL of the noise summed over long sequences.",
        lambda w: "Look at the by-position table: growing |δ| with position points at KV-cache dtype / RoPE / long-context "
                  "kernels; a flat but signed δ points at a one-sided transformation. Prefer token-level or geometric "
                  "corrections over sequence-product ratios for long sequences.",
        kernel="the error accumulates along the sequence: KV cache, rotary embedding or long-range attention",
        kernel_evidence=lambda w: (f"|Σδ| ∝ length^{fixed(w['exponent'], 2)} ± {fixed(w['exponent_se'], 2)}, "
                                   f"bias {na(w['bias_per_token'])} nats/token"),
        short="drift with length", meaning="the mismatch accumulates with length", consequence="stated", offset=True,
        glance=lambda e: f"|Σδ| grows as length^{fmt(e.get('exponent'), 2)}",
        evidence_names={"bias_per_token": ("bias per token (nats)", "num"), "exponent": ("exponent", "num"),
                        "z_vs_random_walk": ("z against a random walk", "num"),
                        "expected_seq_log_ratio_at_p90_length": ("expected Σδ at the p90 length", "num")}),
    Finding(
        "low_prob_tail", always("info"),
        lambda w: (f"Tokens with p < {fmt(w['tail_p'], 6)} are {pct(w['token_share'])} of tokens and carry "
                   f"{pct(w['k3_share'])} of the KL"),
        lambda w: f"a mismatch concentrated on tokens with p < {fmt(w['tail_p'], 6)} ({pct(w['k3_share'])} of the KL)",
        lambda w: "Low-probability tokens sit where small logit errors change log p most (the softmax tail); precision "
                  "noise concentrates there, and so do the tokens that importance-sampling corrections clip.",
        lambda w: ("Expected for numerical noise. If the mismatch matters, look at the probability-bucket table; an fp32 "
                   "LM head / fp16 rollout narrows the tail most." if w.get("regime") in (None, "identical", "numerical_noise")
                   else f"This batch is {w['regime'].replace('_', ' ')}, beyond numerical noise: the tail is not only noise "
                        "here, so read the findings above first; the probability-bucket table shows where the rest sits."),
        short="low-probability tail", meaning="the mismatch sits on unlikely tokens", reads_regime=True,
        glance=lambda e: "mismatch on unlikely tokens",
        evidence_names={"abs_delta_mean_tail": ("mean |δ| in the tail", "num"),
                        "abs_delta_mean_rest": ("mean |δ| elsewhere", "num"), "k3_share": ("share of the KL", "share"),
                        "tail_p": ("tail: p below", "num")}),
    Finding(
        "spliced_tokens", always("warn"),
        lambda w: (f"{fmt(w['count'])} tokens the engine sampled with p ≥ {plain(CONFIDENT_P)} are put more than "
                   f"{plain(CONFIDENT_GAP)} nats lower by the trainer: 1 in {fmt(round(1 / w['rate']))} tokens, where the "
                   f"clean rate expects {fmt(w['expected'], 2)} (p = {fmt(w['p_value'], 2)})"),
        lambda w: f"{fmt(w['count'])} tokens spliced in or garbled after sampling (confident disagreements)",
        lambda w: ("The engine was confident of these tokens and the trainer, reading the same ids, is not: the ids the "
                   "engine returned are not what it scored. A token spliced into the output after sampling, a detokenize / "
                   "retokenize round trip that split or merged a token, or a corrupt KV block (inference-atlas #192: "
                   "`carrierhed`, `groupipse`, a number replaced by a word, about 1 in 8,000 tokens of long generations, "
                   "present in the sampled token ids). Precision noise moves no likely token this far."
                   + (f" {fmt(w['rollout_nonfinite'])} rollout log-probs are also NaN or inf (data problems)."
                      if w.get("rollout_nonfinite") else "")),
        lambda w: (f"Decode the tokens at {w['where']} with their neighbours and look for a stray word; compare the "
                   "engine's token ids with its text re-tokenized; rerun the prompts at temperature 0 with speculative "
                   "decoding, async scheduling and prefix caching off, one at a time. Mask such tokens out of the loss "
                   "until the engine is fixed."),
        short="spliced tokens", meaning="a few tokens the engine was sure of are far less likely to the trainer",
        place=nowhere, glance=lambda e: f"{fmt(e.get('count'))} spliced or garbled tokens",
        evidence_names={"count": ("confident disagreements", "count"), "rate": ("per token", "num"),
                        "expected": ("expected at the clean rate", "num"), "p_value": ("Poisson p", "num"),
                        "sequences": ("in sequences", "count"), "where": ("first at", "text"),
                        "rollout_nonfinite": ("non-finite rollout log-probs", "count")}),
)
