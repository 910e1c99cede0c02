"""What the sampler kept and what one side alone did (analysis/kept.py, duplicates.py, head.py, lag/alignment.py): the
sampler's kept sets, identical completions in a group, an LM head in fp32 on one side only, version arrays out of
line with the loss mask.
"""

from __future__ import annotations

from ..numbers import fmt, pct
from .entry import Finding, always, nowhere

ENTRIES = (
    Finding(
        "sampled_outside_kept", always("warn"),
        lambda w: (f"{fmt(w['tokens'])} sampled tokens ({pct(w['share'])} of those with a kept set) are not in their own "
                   "kept set"),
        lambda w: f"{fmt(w['tokens'])} sampled tokens outside their own kept set (a data problem)",
        lambda w: ("The kept set recorded for a token should hold the token the sampler drew from it. One that does not "
                   "is a data problem in the capture or transport of the sets: the engine's approximate top-k / top-p "
                   "pivot (SkyRL #2083), sets shifted by one position against the tokens, or sets of another request."
                   + (" The trainer renormalises over these sets, so it scores each such token −inf (an infinite ratio)."
                      if w["trainer_renormalised"] else "")),
        lambda w: ("Check the kept sets against the sampled ids where they are captured (each set must contain its token), "
                   "that sets and tokens are aligned position for position (no prompt token, no shift), and repair or drop "
                   "the sets of these tokens before a trainer replays them."),
        short="tokens outside their kept set", meaning="sampled tokens are missing from their own kept set",
        place=nowhere,
        evidence_names={"share": ("share of tokens with a kept set", "share"),
                        "tokens_with_set": ("tokens with a kept set", "count"),
                        "trainer_renormalised": ("the trainer renormalises over the sets", "bool")}),
    Finding(
        "identical_completions", always("warn"),
        lambda w: (f"Identical completions within groups: {fmt(w['groups_with_copies'])} of {fmt(w['groups'])} groups "
                   f"({pct(w['group_share'])}) hold copies, {fmt(w['copies'])} completions repeat another, "
                   f"{fmt(w['pairs'])} identical pairs where the sampler's own probabilities expect "
                   f"{fmt(w['expected_pairs'])}" + _reward_words(w)),
        lambda w: f"identical completions in {fmt(w['groups_with_copies'])} groups (a seed shared across a group)",
        lambda w: ("Completions of one prompt repeat each other far more often than independent samples of these "
                   "probabilities can: the group was sampled with one seed shared by its requests (tt-metal #53077, "
                   "torchtitan #3474), or copied after sampling. GRPO centres each reward on its group's mean, so a "
                   "group of copies has no reward spread and gives its completions no advantage."),
        lambda w: ("Give every completion of a group its own seed (vLLM `SamplingParams(n=G)`, or a seed offset per "
                   "request), and check that groups are not duplicated between sampling and the trainer."),
        short="identical completions", meaning="completions within a group are copies of one another (a shared seed)",
        place=nowhere,
        evidence_names={"groups": ("groups of two or more", "count"), "groups_with_copies": ("groups with copies", "count"),
                        "group_share": ("share of groups", "share"), "groups_all_identical": ("groups all alike", "count"),
                        "copies": ("completions that repeat another", "count"), "copy_share": ("share of completions", "share"),
                        "pairs": ("identical pairs", "count"), "expected_pairs": ("pairs the sampling expects", "num"),
                        "p_value": ("Poisson tail", "num"),
                        "reward_std_with_copies": ("reward std, groups with copies", "num"),
                        "reward_std_others": ("reward std, other groups", "num")}),
    Finding(
        "lm_head_one_side", lambda w, dt: "warn" if w["beyond_noise"] else "info",
        lambda w: (f"LM head in fp32 on the {w['side']} side only, both bodies in {w['body_dtype']}: the other side's head "
                   f"rounds its logits to {w['body_dtype']} alone"
                   + (f", and the mismatch is beyond the precision's noise (KL k3 {fmt(w['kl_k3'])}, token "
                      f"multiplicative error {fmt(w['token_mult_prob_error'])})" if w["beyond_noise"] else
                      f"; the mismatch stays within the precision's noise here (KL k3 {fmt(w['kl_k3'])})")),
        lambda w: f"an LM head in fp32 on the {w['side']} side only",
        lambda w: ("An fp32 LM head takes the bf16 rounding out of the logits only when both sides keep it: with bodies "
                   "of the same precision the two heads otherwise round to the same grid, and one fp32 head leaves the "
                   "other's rounding unmatched, which makes the multiplicative error worse (NeMo-RL #3936)."),
        lambda w: ("Keep the LM head in fp32 on both sides or on neither: NeMo-RL pairs `policy.megatron_cfg.fp32_lm_head` "
                   "with `NRL_VLLM_FP32_LM_HEAD=1` for vLLM; `capture --lm-head-fp32 both`."),
        short="one-sided fp32 LM head", meaning="the LM head is kept in fp32 on one side only",
        evidence_names={"fp32_side_is_trainer": ("fp32 head on the trainer side", "bool"),
                        "body_dtype": ("both bodies", "text"), "beyond_noise": ("beyond the precision's noise", "bool"),
                        "token_mult_prob_error": ("token multiplicative error", "num")}),
    Finding(
        "versions_misaligned", always("warn"),
        lambda w: (f"The per-token version array is shifted by one position against the loss mask: "
                   f"{fmt(w['spans_first_unknown'] if w['direction'] == 1 else w['spans_last_unknown'])} of {fmt(w['spans'])} "
                   f"trained spans ({pct(w['late_share'] if w['direction'] == 1 else w['early_share'])}) have an unknown "
                   f"version at their {'first' if w['direction'] == 1 else 'last'} token alone"),
        lambda w: "a version array one position off the loss mask (a data problem)",
        lambda w: ("Per-token versions aligned with the tokens (AReaL writes −1 on the tokens no engine generated) were "
                   "saved beside a loss mask aligned with the next-token targets, or the other way round: each span's "
                   + ("first token carries the version of the token before it" if w["direction"] == 1 else
                      "last token carries the version of the token after it")
                   + ", so the lag of every span edge is wrong (AReaL #1736 fixed this off-by-one)."),
        lambda w: ("Align the version array with the loss mask before saving (roll it by one position, as AReaL #1736 "
                   "does), then check that every trained token has a version."),
        short="versions off by one", meaning="the per-token version array is one position off the loss mask",
        place=nowhere,
        evidence_names={"spans": ("trained spans", "count"), "spans_first_unknown": ("first token alone unknown", "count"),
                        "spans_last_unknown": ("last token alone unknown", "count"),
                        "late_share": ("share, first token", "share"), "early_share": ("share, last token", "share"),
                        "interior_unknown_share": ("unknown inside the spans", "share"), "direction": ("+1 late, −1 early", "num")}),
)


def _reward_words(w: dict) -> str:
    """The reward spread of the groups with copies beside the others' (what their advantage is made of)."""
    if w.get("reward_std_with_copies") is None:
        return ""
    others = w.get("reward_std_others")
    return (f"; their reward std is {fmt(w['reward_std_with_copies'])}"
            + (f" against {fmt(others)} in the other groups" if others is not None else ""))
