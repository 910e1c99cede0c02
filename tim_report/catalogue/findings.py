"""The finding catalogue: for each thing the diagnosis can find, its severity rule and its words.

A finding is one detector plus one entry here. The detector (analysis/detectors.py, localise.py, usable.py, and
the measurements that carry a finding: precision_gap.py, floor.py, routes.py) registers with `@detector(id)`
(analysis/registry.py), measures, decides whether its fault is there, and hands its evidence (the numbers, as
summary.json keeps them) and a few words of context to `make`, which returns the finding: id, severity, title (a
sentence for the page), problem (a noun phrase, for sentences built around it: "no correction fixes {problem}"),
likely cause and what to check. The entry also holds the finding's step words (the run view's sentences) and
where else a page shows it (`banner`). The diagnosis runs the detectors in this catalogue's order, which is also
the order findings of one severity are listed in. The verdict's words are in catalogue/verdicts.py, the run
view's (run-level findings, the run verdict, change-point sentences) in catalogue/run_words.py. docs/diagnosis.md
explains each detector.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import FLOOR_CLIP_WARN, ROUTING_EXPLAINS_WARN, SEVERITIES, DiagnosisThresholds
from . import chain
from .numbers import fixed, fmt, pct, times

Words = dict[str, Any]  # a finding's evidence and its context, by name
Text = Callable[[Words], str]


@dataclass(frozen=True)
class Finding:
    """One finding: its severity rule and its words. A batch finding also has its step words (a run's sentences are
    made of them: "from step 12 {meaning} (every step from there is diagnosed {short})") and says where else a page
    shows it; the run-level findings (catalogue/run_words.py) have neither."""

    id: str
    severity: Callable[[Words, DiagnosisThresholds], str]
    title: Text
    problem: Text
    cause: Text
    check: Text
    short: str = ""             # its short name in a run's sentences ("off-by-one")
    meaning: str = ""           # what it means for a stretch of steps ("the trainer's log-probs are shifted by one …")
    banner: bool = False        # said again under the page's title: it is about what the batch is, not its numbers
    reads_regime: bool = False  # its words read the regime, known once every detector ran: made again with it
    leads_as_info: bool = False  # as info it still leads the verdict when nothing worse does (it explains the mismatch)
    kernel: str = ""            # what it means inside a kernel or an engine (assert_logprobs_match says it)
    kernel_evidence: Text | None = None  # the two or three numbers that carry it, as the candidate / reference
    # severity by consequence (catalogue/severity.py): "weighed" (an error only when material on the batch), "stated"
    # (its consequence and side said), "sided" (its side said), or "" (neither)
    consequence: str = ""


def _always(level: str) -> Callable[[Words, DiagnosisThresholds], str]:
    return lambda w, dt: level


def _floor_share(share: float | None) -> str:
    """The floor's KL against the mismatch's: a share, or a multiple when the mismatch lies inside the floor."""
    if share is None:
        return ""
    if share > 1:
        return f", {times(share)} the mismatch's: the mismatch is within the trainer's own noise"
    return f", {pct(share)} of the mismatch's"


def _broken_severity(w: Words, dt: DiagnosisThresholds) -> str:
    """error when one side's perplexity is ≥ ppl_ratio_error× the other's (significantly) or the log-probs decorrelate."""
    significant = w["mean_delta_se"] > 0 and abs(w["mean_delta"]) / w["mean_delta_se"] >= dt.z
    low_corr = w["corr_logp"] is not None and w["corr_logp"] < dt.systematic_corr_max
    return "error" if (w["ppl_ratio"] >= dt.ppl_ratio_error and significant) or low_corr else "warn"


def _drift_severity(w: Words, dt: DiagnosisThresholds) -> str:
    """warn only when the per-token bias is itself beyond noise and no other finding explains it, else info."""
    bias, se = w["bias_per_token"], w["bias_se"]
    material = abs(bias) >= dt.noise_kl_max and se > 0 and abs(bias) / se >= dt.z and not w["explained_by_other_finding"]
    return "warn" if material else "info"


def _broken_title(w: Words) -> str:
    if w["broken_side_basis"] == "constant":
        return (f"The {w['broken_side']} side's log-probs are all {fmt(w['constant_value'])}: it never scored these tokens "
                f"(perplexity {times(w['ppl_ratio'])} apart)")
    if w["ppl_ratio"] < w["threshold_ppl_ratio_warn"]:
        return (f"Log-prob correlation is only {fixed(w['corr_logp'], 2)}: the two sides do not score the same model or "
                f"context" + _blamed(w))
    low_corr = w["corr_logp"] is not None and w["corr_logp"] < w["threshold_corr"]
    return (f"The {w['higher']} side's perplexity is {times(w['ppl_ratio'])} the other's on the same tokens"
            + (f" (log-prob correlation {fixed(w['corr_logp'], 2)})" if low_corr else "") + _blamed(w))


def _blamed(w: Words) -> str:
    """Which side is off, when the sampler identity says it (the higher perplexity alone is not said twice)."""
    if w["broken_side_basis"] != "sampler":
        return ""
    sampler = "trainer" if w["broken_side"] == "rollout" else "rollout"
    return (f"; the tokens were sampled from the {sampler}'s distribution (mean importance ratio ≈ 1 on that side), so the "
            f"{w['broken_side']} side is the one that is off")


def _broken_problem(w: Words) -> str:
    if w["broken_side_basis"] == "constant":
        return f"{w['broken_side']} log-probs that are all {fmt(w['constant_value'])} (that side never scored the tokens)"
    if w["ppl_ratio"] >= w["threshold_ppl_ratio_warn"] or w["broken_side_basis"] == "sampler":
        return (f"the {w['broken_side']} side scoring another model or context (perplexity {times(w['ppl_ratio'])} apart)")
    return f"the two sides scoring different models or contexts (log-prob correlation only {fixed(w['corr_logp'], 2)})"


def _between(a: float, b: float, write: Callable[[float], str]) -> str:
    """'between 0.52 and 0.81': a range low to high, whichever end the fit gives first."""
    lo, hi = sorted((a, b))
    return f"between {write(lo)} and {write(hi)}"


def _temperature_range(w: Words) -> str:
    return "T_rollout / T_trainer " + _between(w["temperature_ratio"], w["temperature_ratio_far"], lambda x: fixed(x, 2))


def _temperature_how(w: Words) -> str:
    ratio, far = w["temperature_ratio"], w["temperature_ratio_far"]
    look = "flatter" if ratio > 1 else "sharper"
    if w["sampler_side"] == "rollout":
        return (f"the rollout's log-probs are those of the distribution it sampled from (their mean importance ratio is 1), "
                f"and the trainer's are {'sharper' if ratio > 1 else 'flatter'}: the trainer scores at another temperature "
                f"than the rollout sampled at (e.g. the rollout sampled at T {_between(ratio, far, lambda x: fmt(x, 2))} "
                "while the trainer scored at T=1, without dividing its logits by T)")
    if w["sampler_side"] == "trainer":
        return (f"the trainer's log-probs are those of the distribution the tokens were sampled from (the mean inverse "
                f"ratio is 1) and the rollout's, {look}, are not: the engine returned log-probs at another temperature "
                f"than it sampled at (e.g. it sampled at T {_between(1 / ratio, 1 / far, lambda x: fmt(x, 2))}, the trainer "
                "divided its logits by that T, and the engine returned raw log-probs)")
    return (f"the rollout's log-probs are {look}, as if at a temperature {_temperature_range(w)} times the trainer's "
            f"(e.g. rollout sampled and scored at T={fmt(ratio, 2)} or further from 1 while the trainer used T=1, or "
            f"the trainer divided logits by T={fmt(1 / ratio, 2)} or further from 1 and the rollout returned raw log-probs)")


def _whose(sides: list[str]) -> str:
    return "both sides'" if len(sides) == 2 else f"the {sides[0]} side's"


def _unusable_parts(w: Words) -> list[str]:
    """What makes the input unusable: probabilities on a side, too small a usable share, too few tokens."""
    parts = []
    if w["probability_sides"]:
        parts.append(f"{_whose(w['probability_sides'])} values look like probabilities, not log-probs (all in [0, 1], most "
                     "above 0)")
    if w["usable_share"] < w["min_usable_share"]:
        why = "; ".join(f"{name} {side} log-probs on {pct(w[f'{side}_{kind}'] / w['masked_tokens'])}"
                        for side in ("rollout", "trainer") for kind, name in (("nan", "NaN"), ("inf", "inf"), ("positive", "positive"))
                        if w[f"{side}_{kind}"] and not w[f"{side}_probabilities"])
        if why or not w["probability_sides"]:  # else the probabilities are why
            parts.append(f"only {pct(w['usable_share'])} of the {fmt(w['masked_tokens'])} masked tokens are usable"
                         + (f" ({why})" if why else "") + f", below the {pct(w['min_usable_share'])} a verdict needs")
    elif w["usable_tokens"] < w["min_usable_tokens"]:
        parts.append(f"only {fmt(w['usable_tokens'])} usable tokens, below the {fmt(w['min_usable_tokens'])} a verdict needs")
    return parts


def _boundary_words(w: Words) -> str:
    """'97 = 96 + 1, one past a multiple of 32' / '128, a power of two'."""
    b, p = w["kernel_boundary"], w["position"]
    kind = " and ".join(k for k, yes in (("a multiple of 32", b % 32 == 0), ("a power of two", b & (b - 1) == 0)) if yes)
    return f"{p} = {b} + 1, one past {kind}" if p == b + 1 else f"{p} is {kind}"


def _kernel_hint(w: Words) -> str:
    return (f"Kernel-boundary hint: {_boundary_words(w)}, where attention and decode kernels change block (FlashAttention "
            "tiles of 64 / 128 rows, split-KV decode, 16-token KV-cache pages, chunked prefill), so look first at a "
            "kernel that takes another path past that length.")


def _na(x: Any) -> str:
    return fmt(x, missing="n/a")


def _offset(w: Words) -> str:
    return "+1" if w["shift"] == 1 else "−1"


# The input gate: an input problem, not a verdict (it leads the diagnosis; `check` exits 2 on it).
INPUT_PROBLEM = "unusable_input"

FINDINGS: dict[str, Finding] = {f.id: f for f in (
    Finding(
        "unusable_input", _always("error"),
        lambda w: "Unusable input: " + "; ".join(_unusable_parts(w)),
        lambda w: "an input that cannot be measured (" + "; ".join(_unusable_parts(w)) + ")",
        lambda w: ("The exporter saved probabilities (exp of the log-probs) or ratios where log-probs belong. "
                   if w["probability_sides"] else "")
                  + ("The excluded tokens are not a sample of the batch: NaN / inf log-probs come from a forward pass "
                     "that overflowed (fp16 / bf16 logits), a side that never scored those tokens (placeholders), or a "
                     "loader that read the wrong array, so the few tokens left cannot stand for the rest."
                     if w["usable_share"] < w["min_usable_share"] or not w["probability_sides"] else ""),
        lambda w: "Fix the input before reading any number: check which array each side was read from "
                  "(`tim-report inspect FILE`), that both hold log-probs (≤ 0; `torch.log_softmax`, not `softmax`), and "
                  "where the NaN / inf come from (`torch.isfinite` on the logits). The limits are the diagnosis "
                  "thresholds min_usable_share and min_usable_tokens (`check --set`).",
        short="unusable input", meaning="the batches cannot be measured (too few usable tokens, or probabilities saved as log-probs)"),
    Finding(
        "shift", _always("error"),
        lambda w: f"Off-by-one: trainer log-probs match the rollout's at position t{_offset(w)}",
        lambda w: f"an off-by-one between the two sides (the trainer's log-probs line up with the rollout's at t{_offset(w)})",
        lambda w: f"trainer_logp[t] is the log-prob of the token at t{_offset(w)}: logits and labels are aligned with one "
                  "slice too many or too few (logits[:, :-1] vs labels[:, 1:]), or one side follows a shifted convention "
                  "(OpenRLHF drops the first position, AReaL rolls by −1) and the loader assumed the other.",
        lambda w: "Check the logits/labels slicing in the trainer's log-prob computation and the alignment the loader "
                  "assumed (`tim-report inspect FILE`); override the keys or fix the export so both arrays index the same "
                  "token.",
        kernel=("an output is aligned one position off: logits and labels sliced once too often or not at all "
                "(logits[:, :-1] against labels[:, 1:])"),
        kernel_evidence=lambda w: (f"mean |δ| {_na(w['mean_abs_diff_same_position'])} at the same position, "
                                   f"{_na(w['mean_abs_diff_shifted'])} one position over"),
        short="off-by-one", meaning="the trainer's log-probs are shifted by one position against the rollout's",
        consequence="weighed"),
    Finding(
        "dummy_zero", lambda w, dt: "error" if w["tokens"] >= dt.dummy_error_count else "warn",
        lambda w: (f"{fmt(w['tokens'])} masked-in tokens have {w.get('side', 'rollout')} log-prob exactly 0.0 (placeholder values)"
                   + (f"; every {w.get('side', 'rollout')} log-prob is 0.0" if w.get("all_exact_zero") else "")),
        lambda w: f"placeholder {w.get('side', 'rollout')} log-probs of exactly 0.0 on {fmt(w['tokens'])} masked-in tokens",
        lambda w: ("Tokens the engine did not sample (tool / environment output, padding, prompt) carry a placeholder "
                   "log-prob of 0.0 but are inside the loss mask, so the trainer's real log-prob is compared with p = 1."
                   if w.get("side", "rollout") == "rollout" else
                   "The trainer's log-probs were never recomputed on these tokens: an array initialised with zeros (or a "
                   "masked-out recompute, `old_log_probs` left at its default) is compared with the rollout's real "
                   "log-probs as if the trainer gave p = 1."),
        lambda w: ("Mask tool and environment tokens out of the loss (`response_mask` / `loss_mask`), and check the padding "
                   "value of the rollout log-prob array; if every rollout log-prob is 0, the engine returned processed "
                   "log-probs of greedy decoding." if w.get("side", "rollout") == "rollout" else
                   "Check that the trainer's log-prob pass ran on this batch (recompute of `old_log_probs` enabled, its "
                   "output written back before the dump) and that its mask covers every trained token."),
        kernel=("the candidate returns exactly 0.0 (p = 1) where the reference gives p < 1/2: positions the kernel "
                "never wrote (a zero-initialised output, an ignore_index, a loop bound one short)"),
        kernel_evidence=lambda w: (f"{w['tokens']} tokens in {w['sequences']} sequences, "
                                   f"{'candidate' if w['trainer_side'] else 'reference'} mean log-prob "
                                   f"{_na(w['mean_other_side_logp'])} there"),
        short="placeholder zeros", meaning="placeholder 0.0 log-probs on one side sit inside the loss mask",
        consequence="weighed"),
    Finding(
        "processed_logprobs", lambda w, dt: "info" if w["declared_in_meta"] else "error",
        lambda w: (f"Rollout log-probs are renormalised by truncated sampling ({w['declared']}), as the batch declares: "
                   f"rollout ≥ trainer on {pct(w['negative_delta_share'])} of tokens") if w["declared_in_meta"] else
                  ("Rollout log-probs are renormalised (top-p / top-k): rollout ≥ trainer on "
                   f"{pct(w['negative_delta_share'])} of tokens"),
        lambda w: (f"rollout log-probs renormalised by the truncated sampling the batch declares ({w['declared']})"
                   if w["declared_in_meta"] else
                   f"rollout log-probs renormalised by top-p / top-k (rollout ≥ trainer on {pct(w['negative_delta_share'])} "
                   "of tokens)"),
        lambda w: ("The batch's meta says the rollout log-probs are the sampler's processed ones (after top-k / top-p) "
                   "while the trainer scores the full distribution, so δ = log(kept mass) ≤ 0 by construction: expected, "
                   "not a pipeline bug.") if w["declared_in_meta"] else
                  ("The rollout engine returned log-probs of the distribution after top-p / top-k (and min-p) truncation, "
                   "renormalised over the kept tokens (e.g. vLLM `logprobs_mode='processed_logprobs'`), while the trainer "
                   "scores the full distribution: δ = log(kept mass) ≤ 0, and 0 exactly where only one token was kept."),
        lambda w: ("Nothing to fix in this capture. In training, the same setup biases importance ratios: use raw "
                   "log-probs on the rollout side or apply the same truncation in the trainer.") if w["declared_in_meta"] else
                  ("Return raw log-probs from the engine (vLLM `logprobs_mode='raw_logprobs'` / `'raw_logits'` with matching "
                   "temperature), or apply the same truncation in the trainer; exp(min δ) shows the smallest kept mass "
                   "(≈ top_p)."),
        kernel=("the candidate's log-softmax runs over part of the vocabulary: top-k / top-p truncation left in, or "
                "vocabulary chunks missing from the log-sum-exp"),
        kernel_evidence=lambda w: (f"candidate ≥ reference on {pct(w['negative_delta_share'])} of tokens, "
                                   f"mean δ {_na(w['mean_delta'])}"),
        short="processed log-probs", meaning="the rollout's log-probs are renormalised by top-p / top-k", leads_as_info=True,
        consequence="weighed"),
    Finding(
        "temperature", _always("error"),
        lambda w: (f"Temperature on one side only: the rollout's log-probs are "
                   f"{'flatter' if w['temperature_ratio'] > 1 else 'sharper'} than the trainer's "
                   f"({_temperature_range(w)})"
                   + {"rollout": "; the trainer is off (the rollout's are the sampler's)",
                      "trainer": "; the rollout is off (the trainer's are the sampler's)"}.get(w["sampler_side"] or "", "")),
        lambda w: f"a temperature applied on one side only ({_temperature_range(w)})",
        lambda w: ("Sampling temperature is applied on one side only: " + _temperature_how(w) + ". Tempered log-probs "
                   "satisfy log p_T = log p / T − log Z_T, so δ = (T−1)·rollout_logp + per-position constant."),
        lambda w: "Make both sides use the same temperature: divide the trainer's logits by the rollout temperature "
                  "(verl/TRL do this), and check whether the engine returns log-probs before or after temperature "
                  "(vLLM `logprobs_mode` raw vs processed).",
        kernel=("a softmax temperature or logit scale is left in one side (logits divided by T before the "
                "log-softmax), or the final norm / LM head scales the logits"),
        kernel_evidence=lambda w: (f"slope of δ on the {'reference' if w.get('fitted_on_trainer') else 'candidate'}'s "
                                   f"log-prob {fixed(w['slope'], 3)} ± {fixed(w['slope_se'], 3)} over {w['tokens']} tokens"),
        short="one-sided temperature", meaning="a temperature is applied on one side only", consequence="weighed"),
    Finding(
        "one_side_broken", _broken_severity, _broken_title, _broken_problem,
        lambda w: (f"The {w['broken_side']} side's log-probs were never computed: an output initialised to "
                   f"{fmt(w['constant_value'])} and not filled, or a recompute step that was skipped and its placeholder "
                   "exported.") if w["broken_side_basis"] == "constant" else
                  (f"The {w['broken_side']} side is not scoring the same model or context: different or stale weights (wrong "
                   "checkpoint, weight sync not applied, LoRA not merged, quantisation), a different prompt / chat "
                   "template, truncated context, or a different tokenizer."),
        lambda w: "Compare weight checksums / the step of both sides, the exact prompt token ids each side saw, the "
                  "tokenizer and chat template, and any quantisation; re-score a few sequences with both sides by hand.",
        kernel=("the two do not compute the same function: a wrong formula in a kernel, wrong weights, or a mask / "
                "position bug"),
        kernel_evidence=lambda w: (f"perplexity candidate {_na(w['ppl_rollout'])} vs reference {_na(w['ppl_trainer'])}, "
                                   f"log-prob correlation {_na(w['corr_logp'])}"),
        short="one side broken", meaning="one side scores another model or context", consequence="weighed"),
    Finding(
        "first_token", _always("warn"),
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
        short="first token", meaning="the first response token disagrees far more than the rest", consequence="stated"),
    Finding(
        "turn_boundary", _always("warn"),
        lambda w: (f"The first tokens after each tool / environment span disagree: their |δ| is {times(w['ratio'])} the rest's "
                   f"(turns {', '.join(map(str, w['turns_affected'])) or 'none alone'})"),
        lambda w: f"a different context after each tool call (the first tokens of a turn disagree {times(w['ratio'])} more)",
        lambda w: "The two sides see a different context after a tool call: the chat template is not prefix-preserving "
                  "(re-rendering the history changes earlier turns, e.g. dropped reasoning or whitespace), or the tool / "
                  "environment response is tokenised differently by the engine (token-in) and the trainer (text "
                  "re-tokenised).",
        lambda w: "Compare the token ids around a tool response on both sides; keep the rollout's token ids for the trainer "
                  "(token-in-token-out) instead of re-applying the chat template to the conversation text.",
        short="turn boundary", meaning="the first tokens after each tool span disagree", consequence="stated"),
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
        short="position onset", meaning="the mismatch switches on part-way through the responses", consequence="stated"),
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
        consequence="sided"),
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
                                   f"bias {_na(w['bias_per_token'])} nats/token"),
        short="drift with length", meaning="the mismatch accumulates with length", consequence="stated"),
    Finding(
        "low_prob_tail", _always("info"),
        lambda w: (f"Tokens with p < {fmt(w['tail_p'], 6)} are {pct(w['token_share'])} of tokens and carry "
                   f"{pct(w['k3_share'])} of the KL"),
        lambda w: f"a mismatch concentrated on tokens with p < {fmt(w['tail_p'], 6)} ({pct(w['k3_share'])} of the KL)",
        lambda w: "Low-probability tokens sit where small logit errors change log p most (the softmax tail); precision "
                  "noise concentrates there, and so do the tokens that importance-sampling corrections clip.",
        lambda w: ("Expected for numerical noise. If the mismatch matters, look at the probability-bucket table; an fp32 "
                   "LM head / fp16 rollout narrows the tail most." if w.get("regime") in (None, "identical", "numerical_noise")
                   else f"This batch is {w['regime'].replace('_', ' ')}, beyond numerical noise: the tail is not only noise "
                        "here, so read the findings above first; the probability-bucket table shows where the rest sits."),
        short="low-probability tail", meaning="the mismatch sits on unlikely tokens", reads_regime=True),
    Finding(
        "precision_gap", _always("info"),
        lambda w: (f"Precision alone (β) explains {pct(w['beta_share_sq'])} of the log-ratio (Σβ²/(Σα²+Σβ²)); PPO clips "
                   f"{pct(w['clip_fraction_beta'])} of tokens on β alone") if w["beta_share_sq"] is not None else
                  "Precision gap (β) is zero",
        lambda w: "the precision gap β between the trainer's weights in two precisions",
        lambda w: "β = trainer − shadow compares the trainer's own weights in two precisions, so it is pure numerical "
                  "precision; clipping on β alone (precision-only clipping) throws away gradient although the policy has "
                  "not moved.",
        lambda w: "If β dominates and clips a material share, align precision (fp16 both sides, fp32 LM head, same "
                  "attention kernels) rather than hunting a bug; if α dominates, the difference is engine / weights / context.",
        short="precision gap", meaning="precision alone explains part of the gap"),
    Finding(
        "trainer_floor", lambda w, dt: "warn" if w["clip_fraction"] >= FLOOR_CLIP_WARN else "info",
        lambda w: (f"The trainer's own floor: scoring the same tokens under another batch composition moves its log-probs "
                   f"by KL k3 {fmt(w['kl_k3'])}" + _floor_share(w["kl_share"])
                   + f"; PPO clips {pct(w['clip_fraction'])} of tokens on that alone"),
        lambda w: "the trainer's own noise floor (the same tokens scored twice by the trainer)",
        lambda w: ("Batch composition (micro-batch size, padding, sequence order) changes the reduction order of the "
                   "trainer's kernels, so its log-probs move by rounding alone. A mismatch at or below this floor is not "
                   "the rollout engine's doing"
                   + (f", and the clip band {fmt(w['clip_band'][0])}–{fmt(w['clip_band'][1])} sits inside the floor: "
                      f"{pct(w['clip_fraction'])} of tokens cross it on the trainer's noise alone ({pct(w['clipped_explained'])} "
                      "of the clipped tokens)." if w["clip_inside_floor"] else ".")),
        lambda w: ("Judge the rollout mismatch against this floor, not against zero. If the floor clips tokens, make the "
                   "log-prob micro-batch size equal the actor's (verl #6280) or use batch-invariant kernels before "
                   "tightening the clip or TIS thresholds; a floor near the mismatch means a rollout-side fix cannot help "
                   "much."),
        short="trainer floor", meaning="the trainer's own noise (another batch composition) crosses the clip band"),
    Finding(
        "routing_flips", lambda w, dt: "warn" if (w["kl_explained"] or 0) >= ROUTING_EXPLAINS_WARN else "info",
        lambda w: ("Routing is identical on both sides on every token and layer: routing replay (R3) or one routes "
                   "array recorded twice, so routing explains none of the mismatch") if w["identical"] else
                  (f"Routing: {pct(w['any_flip_share'])} of tokens go to other experts in at least one layer "
                   f"({pct(w['decision_flip_share'])} of the {w['layers']}-layer top-{w['k']} decisions); their KL k3 is "
                   f"{fmt(w['kl_k3_flipped'])} against {fmt(w['kl_k3_unflipped'])}, so routing explains "
                   f"{pct(w['kl_explained'])} of the KL"),
        lambda w: "tokens routed to different experts on the two sides",
        lambda w: ("A token whose router picks other experts is scored by other weights: near-tied router logits flip "
                   "under bf16 rounding or another kernel, and the flip moves the log-prob far more than rounding "
                   "alone. No precision fix of the rest removes it."),
        lambda w: ("If routing explains much of the KL, replay the rollout's routes in the trainer (routing replay, R3) "
                   "or keep the router in fp32; look at the layers with the most flips (the page's table)."),
        short="routing flips", meaning="tokens are routed to different experts on the two sides"),
    Finding(
        "routes_unusable", _always("warn"),
        lambda w: f"The routed-experts arrays cannot be compared: {w['reason']}",
        lambda w: "routed-experts arrays that do not line up with the tokens",
        lambda w: ("A routes array should hold [tokens, layers, k] expert ids for exactly the tokens of the log-probs; an "
                   "empty or misaligned one was cut, padded or taken from another batch, and one holding ids no expert "
                   "has (negative, or beyond 2³¹ − 1) was not written as expert indices."),
        lambda w: "Check where the dump takes its routed experts (response-only vs whole sequence, padding) and that "
                  "both sides record the same tokens.",
        short="routes unusable", meaning="the routed-experts arrays do not line up with the tokens"),
    Finding("chain_link", _always("info"), chain.finding_title, chain.finding_problem, chain.finding_cause,
            chain.finding_check, short="chain link", meaning="one link of the chain carries the mismatch"),
)}


def make(id_: str, evidence: dict, dt: DiagnosisThresholds, **context: Any) -> dict:
    """A finding as summary.json holds it: the detector's evidence (numbers made plain JSON) and the catalogue's words.

    `context` are words the sentences need that are not evidence (the declared sampling, which finding explains
    this one, which side is higher)."""
    entry = FINDINGS[id_]
    ev = {k: _plain(v) for k, v in evidence.items()}
    w = {**ev, **context}
    severity = entry.severity(w, dt)
    assert severity in SEVERITIES, severity
    return {"id": id_, "severity": severity, "title": entry.title(w), "problem": entry.problem(w), "evidence": ev,
            "likely_cause": entry.cause(w), "what_to_check": entry.check(w)}


def _plain(v: Any) -> Any:
    """numpy scalars as Python numbers (the evidence is JSON)."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        v = v.item()
    if isinstance(v, bool):
        return int(v)
    return v
