"""The input gate and the faults of every token (analysis/usable.py, analysis/detectors.py): what each is, says and
weighs.
"""

from __future__ import annotations

from collections.abc import Callable

from ...config import DiagnosisThresholds
from ..numbers import fixed, fmt, pct, times
from .entry import Finding, Side, Words, always, na, nowhere, trainer_if

# Rollout log-probs renormalised by top-p / top-k: lag 0's band cannot judge the sync under it (analysis/lag/findings.py)
PROCESSED = "processed_logprobs"


def _broken_severity(w: Words, dt: DiagnosisThresholds) -> str:
    """error when one side's perplexity is ≥ ppl_ratio_error× the other's (significantly) or the log-probs decorrelate."""
    significant = w["mean_delta_se"] > 0 and abs(w["mean_delta"]) / w["mean_delta_se"] >= dt.z
    low_corr = w["corr_logp"] is not None and w["corr_logp"] < dt.systematic_corr_max
    return "error" if (w["ppl_ratio"] >= dt.ppl_ratio_error and significant) or low_corr else "warn"


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


def _kept_how(w: Words) -> str:
    """How the kept mass was found: measured on the recorded kept sets (and the ratio over them), or read from δ."""
    if not w.get("kept_mass_measured"):
        return f"(exp of mean δ: rollout ≥ trainer on {pct(w['negative_delta_share'])} of tokens)"
    within = "within" if w["renormalised_within_noise"] else "beyond"
    return (f"(measured on the recorded kept sets); over the kept set the ratio is {within} the precision's noise "
            f"(KL k3 {fmt(w['renormalised_kl_k3'])})")


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


def _ratio_range(a: float, b: float) -> str:
    lo, hi = sorted((a, b))
    return f"{fmt(lo, 2)}–{fmt(hi, 2)}"


def _offset(w: Words) -> str:
    return "+1" if w["shift"] == 1 else "−1"


# The input gate: an input problem, not a verdict (it leads the diagnosis; `check` exits 2 on it).
INPUT_PROBLEM = "unusable_input"

ENTRIES = (
    Finding(
        "unusable_input", always("error"),
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
        short="unusable input", meaning="the batches cannot be measured (too few usable tokens, or probabilities saved as log-probs)",
        place=nowhere),
    Finding(
        "shift", always("error"),
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
        kernel_evidence=lambda w: (f"mean |δ| {na(w['mean_abs_diff_same_position'])} at the same position, "
                                   f"{na(w['mean_abs_diff_shifted'])} one position over"),
        short="off-by-one", meaning="the trainer's log-probs are shifted by one position against the rollout's",
        consequence="weighed",
        side=Side(lambda e: "undetermined", "alignment", "an off-by-one puts the two arrays on different tokens, so which one "
                  "is shifted is in the token ids each side scored, not in the log-probs"),
        glance=lambda e: f"off-by-one (trainer matches the rollout at t{'+1' if e.get('shift') == 1 else '−1'})",
        evidence_names={"pairs": ("pairs compared", "count"), "mean_abs_diff_same_position": ("mean |δ| aligned", "num"),
                        "mean_abs_diff_shifted": ("mean |δ| shifted", "num"), "shift": ("offset (positions)", "num")}),
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
                                   f"{na(w['mean_other_side_logp'])} there"),
        short="placeholder zeros", meaning="placeholder 0.0 log-probs on one side sit inside the loss mask",
        consequence="weighed", side=Side(lambda e: trainer_if(e.get("trainer_side")), "zeros",
                                         "its log-probs are the exact 0.0 placeholders"),
        glance=lambda e: f"{fmt(e.get('tokens'))} placeholder 0.0 log-probs",
        evidence_names={"all_exact_zero": ("every value 0.0", "bool"), "exact_zero_tokens": ("exact zeros", "count"),
                        "in_runs_share": ("share in contiguous runs", "share"),
                        "mean_other_side_logp": ("other side's mean log-prob", "num"),
                        "trainer_side": ("on the trainer side", "bool")}),
    Finding(
        PROCESSED, lambda w, dt: "info" if w["declared_in_meta"] else "error",
        lambda w: (f"Truncated sampling ({w['declared']}): the rollout's log-probs are renormalised over each token's kept "
                   f"set, the trainer's are not; the trainer's mass on the kept set is {fixed(w['kept_mass'], 3)} "
                   + _kept_how(w)) if w["declared_in_meta"] else
                  ("Rollout log-probs are renormalised (top-p / top-k): rollout ≥ trainer on "
                   f"{pct(w['negative_delta_share'])} of tokens"),
        lambda w: (f"rollout log-probs renormalised by truncated sampling ({w['declared']}; kept mass "
                   f"{fixed(w['kept_mass'], 3)})" if w["declared_in_meta"] else
                   f"rollout log-probs renormalised by top-p / top-k (rollout ≥ trainer on {pct(w['negative_delta_share'])} "
                   "of tokens)"),
        lambda w: ("The rollout log-probs are the sampler's processed ones (after top-k / top-p), normalised over the kept "
                   "set, while the trainer scores the full vocabulary, so δ = log(kept mass) + the engines' own mismatch: "
                   "truncation alone moves δ below 0, expected, not a pipeline bug.") if w["declared_in_meta"] else
                  ("The rollout engine returned log-probs of the distribution after top-p / top-k (and min-p) truncation, "
                   "renormalised over the kept tokens (e.g. vLLM `logprobs_mode='processed_logprobs'`), while the trainer "
                   "scores the full distribution: δ = log(kept mass) ≤ 0, and 0 exactly where only one token was kept."),
        lambda w: ("Nothing to fix in this capture. To train on such a batch, score the trainer over the kept set: "
                   "renormalise its log-probs over each token's kept set (vLLM `return_sampling_mask` returns it; prime-rl "
                   "replays it by default, miles and SkyRL behind a flag), or return raw log-probs from the engine. "
                   "Against the full vocabulary every importance ratio is biased by the kept mass.") if w["declared_in_meta"]
                  else ("Return raw log-probs from the engine (vLLM `logprobs_mode='raw_logprobs'` / `'raw_logits'` with "
                        "matching temperature), or score the trainer over the same kept set (vLLM `return_sampling_mask`, "
                        "prime-rl's replay); exp(min δ) shows the smallest kept mass (≈ top_p)."),
        kernel=("the candidate's log-softmax runs over part of the vocabulary: top-k / top-p truncation left in, or "
                "vocabulary chunks missing from the log-sum-exp"),
        kernel_evidence=lambda w: (f"candidate ≥ reference on {pct(w['negative_delta_share'])} of tokens, "
                                   f"mean δ {na(w['mean_delta'])}"),
        short="processed log-probs", meaning="the rollout's log-probs are renormalised by top-p / top-k", leads_as_info=True,
        consequence="weighed", offset=True,
        side=Side(lambda e: "rollout" if e.get("declared_in_meta") else None, "declared",
                  "the batch declares the rollout's sampling processing"),
        glance=lambda e: (f"truncated sampling (kept mass {fixed(e.get('kept_mass'), 3)})" if e.get("declared_in_meta") else
                          f"processed log-probs (rollout ≥ trainer on {pct(e.get('negative_delta_share'))})"),
        evidence_names={"declared_in_meta": ("declared in the batch's meta", "bool"),
                        "kept_mass": ("kept mass (trainer's, geometric mean)", "num"),
                        "kept_mass_measured": ("measured on the kept sets", "bool"),
                        "kept_mass_min": ("smallest kept mass", "num"),
                        "renormalised_kl_k3": ("KL k3 over the kept set", "num"),
                        "renormalised_abs_delta_mean": ("mean |δ| over the kept set", "num"),
                        "renormalised_within_noise": ("over the kept set within noise", "bool"),
                        "implied_min_kept_mass": ("exp(min δ)", "num"), "min_delta": ("min δ (nats)", "num"),
                        "negative_delta_share": ("rollout ≥ trainer", "share"),
                        "rollout_exact_zero_share": ("rollout exact zeros", "share"),
                        "rollout_exact_zero_trainer_below": ("of them, trainer below", "count"),
                        "tokens_compared": ("tokens compared", "count")}),
    Finding(
        "temperature", always("error"),
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
        short="one-sided temperature", meaning="a temperature is applied on one side only", consequence="weighed",
        side=Side(lambda e: trainer_if(e.get("trainer_off")), "sampler",
                  "the other side's log-probs are the sampler's: their mean importance ratio is 1"),
        glance=lambda e: ("one-sided temperature (T_rollout / T_trainer "
                          f"{_ratio_range(e['temperature_ratio'], e['temperature_ratio_far'])})"),
        evidence_names={"temperature_ratio": ("T_rollout / T_trainer, fitted", "num"),
                        "temperature_ratio_far": ("T_rollout / T_trainer, far end", "num"),
                        "inverse_ratio": ("T_trainer / T_rollout, fitted", "num"),
                        "slope": ("slope of δ on the log-prob", "num"), "r2": ("R²", "num"),
                        "fit_coverage": ("least share the fit recovers", "share"),
                        "fitted_on_trainer": ("fitted on the trainer side", "bool"),
                        "trainer_off": ("the trainer is off", "bool"), "tokens_fitted": ("tokens fitted", "count")}),
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
        kernel_evidence=lambda w: (f"perplexity candidate {na(w['ppl_rollout'])} vs reference {na(w['ppl_trainer'])}, "
                                   f"log-prob correlation {na(w['corr_logp'])}"),
        short="one side broken", meaning="one side scores another model or context", consequence="weighed",
        side=Side(lambda e: trainer_if(e.get("trainer_broken")), "broken",
                  "it is the side that does not score the sampled model"),
        glance=lambda e: f"another model or context (perplexity {fmt(e.get('ppl_ratio'), 3)}× apart)",
        evidence_names={"constant_value": ("constant value", "num"), "ppl_rollout": ("rollout perplexity", "num"),
                        "ppl_trainer": ("trainer perplexity", "num"), "trainer_broken": ("the trainer is off", "bool")}),
)
