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
)
