"""What to do with the batch: per-group routing, and what common corrections would drop (design §4)."""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import verdicts
from ..catalogue.numbers import pct, plain
from ..config import GEO_RS_NOTE_SHARE, SAFETY_BOUND, Thresholds
from .tokens import Tokens

ROUTES = ("train", "train_with_correction", "quarantine")


def routing(groups: dict, th: Thresholds) -> dict:
    """Any vetoed token → quarantine; PPO-clipped fraction above the threshold → train_with_correction."""
    vetoed = np.asarray(groups["vetoed_tokens"]) > 0
    clipped = np.asarray(groups["clipped_fraction"]) > th.route_clip_fraction
    route = np.where(vetoed, "quarantine", np.where(clipped, "train_with_correction", "train"))
    counts = {r: int((route == r).sum()) for r in ROUTES}
    total = max(len(route), 1)
    return {
        "unit": groups["unit"],
        "rules": {
            "quarantine": f"any token with r < {plain(th.veto)} (veto)",
            "train_with_correction": f"more than {pct(th.route_clip_fraction)} of tokens outside the PPO clip range "
                                     f"[{plain(th.ppo_clip[0])}, {plain(th.ppo_clip[1])}]",
            "train": "otherwise",
        },
        "thresholds": {"veto": th.veto, "clip_fraction": th.route_clip_fraction,
                       "ppo_clip": list(th.ppo_clip)},
        "counts": counts,
        "fractions": {r: counts[r] / total for r in ROUTES},
        "routes": route.tolist(),
    }


def blocked_by_bug(diagnosis: dict) -> dict | None:
    """When the diagnosis found an error, no correction makes the batch trainable: the routes are still what
    the thresholds compute (what a correction would do), but the first thing to say is to fix the bug."""
    errors = [f for f in diagnosis.get("findings", []) if f["severity"] == "error"]
    if not errors:
        return None
    return {"findings": [f["id"] for f in errors], "message": verdicts.blocked_message(errors[0]["problem"])}


def what_if(tok: Tokens, th: Thresholds) -> list[dict]:
    """Fraction of tokens / sequences each correction would truncate, mask or reject on this batch."""
    log_r = tok.log_r
    present = tok.present
    seq_sum = np.clip(tok.seq_sum_of("delta"), -SAFETY_BOUND, SAFETY_BOUND)

    def seq_fraction_from_tokens(hit: np.ndarray) -> float:
        return float((np.bincount(tok.seq[hit], minlength=tok.n_seqs)[present] > 0).mean())

    rows = []
    hit = log_r > math.log(th.tis_token_cap)
    rows.append(_row("token_tis", f"Token TIS, cap {plain(th.tis_token_cap)}", "token", "truncate",
                     f"weights r > {plain(th.tis_token_cap)} are clipped to {plain(th.tis_token_cap)}", "verl rollout_is=token",
                     float(hit.mean()), seq_fraction_from_tokens(hit)))
    seq_hit = (seq_sum > math.log(th.seq_mask_cap))[present]
    rows.append(_row("seq_mask", f"Sequence mask, cap {plain(th.seq_mask_cap)}", "sequence", "mask",
                     f"sequences whose product ratio Π r > {plain(th.seq_mask_cap)} are masked",
                     "TRL vllm_importance_sampling_mode=sequence_mask", _token_share(tok, seq_hit, present),
                     float(seq_hit.mean())))
    hit = (log_r < math.log(th.icepop_low)) | (log_r > math.log(th.icepop_high))
    rows.append(_row("icepop", f"IcePop [{plain(th.icepop_low)}, {plain(th.icepop_high)}]", "token", "mask",
                     f"tokens with r outside [{plain(th.icepop_low)}, {plain(th.icepop_high)}] are masked", "OpenRLHF IcePop",
                     float(hit.mean()), seq_fraction_from_tokens(hit)))
    geo = tok.seq_mean_of("delta")
    seq_hit = (geo < math.log(th.geo_low)) | (geo > math.log(th.geo_high))
    rows.append(_row("geo_rs", f"Geometric RS [{plain(th.geo_low)}, {plain(th.geo_high)}]", "sequence", "reject",
                     f"sequences whose geometric-mean ratio exp(mean δ) is outside [{plain(th.geo_low)}, {plain(th.geo_high)}] "
                     "are rejected",
                     "verl rollout_rs=geometric (Geo-RS)", _token_share(tok, seq_hit, present), float(seq_hit.mean())))
    _explain_geo_rs(rows[-1], tok, th, rows[0]["token_fraction"])
    hit = tok.delta < math.log(th.veto)
    rows.append(_row("veto", f"Veto, r < {plain(th.veto)}", "sequence", "reject",
                     f"sequences holding any token with r < {plain(th.veto)} are rejected", "verl rollout_token_veto_threshold",
                     _token_share(tok, np.bincount(tok.seq[hit], minlength=tok.n_seqs)[present] > 0, present),
                     seq_fraction_from_tokens(hit)))
    return rows


def _explain_geo_rs(row: dict, tok: Tokens, th: Thresholds, tis_share: float) -> None:
    """A note beside Geometric RS when it rejects most sequences and the batch's own noise, averaged over a median
    sequence, already strays past its band: the band, not the batch, is what that rate measures."""
    lengths = tok.counts[tok.present]
    if row["sequence_fraction"] < GEO_RS_NOTE_SHARE or not len(lengths) or len(tok.delta) < 2:
        return
    sd, median_len = float(np.std(tok.delta)), float(np.median(lengths))
    if sd / math.sqrt(median_len) > math.log(th.geo_high):
        row["note"] = verdicts.geo_rs_note(row["sequence_fraction"], th.geo_low, th.geo_high, sd, median_len, tis_share)


def _token_share(tok: Tokens, seq_hit: np.ndarray, present: np.ndarray) -> float:
    """Fraction of valid tokens that sit in the hit sequences."""
    counts = tok.counts[present]
    return float(counts[seq_hit].sum() / counts.sum())


def _row(id_, name, level, action, rule, source, token_fraction, seq_fraction) -> dict:
    return {"id": id_, "name": name, "level": level, "action": action, "rule": rule, "source": source,
            "token_fraction": token_fraction, "sequence_fraction": seq_fraction}
