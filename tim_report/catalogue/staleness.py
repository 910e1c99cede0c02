"""The staleness split's words: the verdict's sentence, the per-lag table's labels, and the five lag findings' titles,
causes and checks (their entries are in catalogue/findings.py; the numbers come from analysis/lag/split.py).
"""

from __future__ import annotations

from typing import Any

from ..config import LAG_SUSTAINED
from .numbers import fmt, pct, plain, times

Words = dict[str, Any]


def lag_label(lag: Any) -> str:
    """'0', '3', '−1', 'unknown': a per-lag row's first cell."""
    return "unknown" if lag == "unknown" else fmt(lag).replace("-", "−")


def floor_note(floor: dict) -> str:
    """Lag 0's reading in a few words, beside its row: 'at noise' or '3.2× band'."""
    if floor["within"]:
        return "at noise"
    return f"{fmt(max(floor.get('times_band_kl') or 0.0, floor.get('times_band_abs_delta') or 0.0), 2)}× band"


def table_intro(st: dict) -> str:
    """The sentence over the per-lag table: what a lag is here, where the trainer's version came from."""
    source = {"meta": "the batch's `trainer_version`", "step": "the step number (no `trainer_version` given)",
              "invalid": "nowhere: the batch's `trainer_version` is not an integer version, so no lag is claimed"}
    where = source.get(st["trainer_version_source"] or "", "nowhere: no lag is claimed")
    per = ("per token (the framework records a version per generate call)" if st["per_token_versions"]
           else "per sequence (a sequence of several versions at its oldest)")
    return (f"Lag = trainer version − the version that generated the token, read {per}; the trainer's version "
            f"{fmt(st['trainer_version']) if st['trainer_version'] is not None else '—'} comes from {where}. Lag 0 is "
            "the numerical floor, read against its noise band; the last column is each older lag's KL beyond lag 0's "
            "per-token rate, as a share of all KL k3 (they add up to the staleness share).")


def invalid_trainer_note(value: Any) -> str:
    """The note a page and summary.json carry when meta trainer_version is present but not an integer version."""
    return (f"meta trainer_version {str(value)[:40]!r} is not an integer version: the trainer's version is unknown, "
            "so every lag is unknown (the step is not used in its place)")


def _interval(st: dict) -> str:
    iv = st.get("share_interval")
    return f" (95% interval {pct(iv[0])}–{pct(iv[1])})" if iv else ""


def floor_words(floor: dict | None) -> str:
    """'lag 0 at dense bf16 noise (KL k3 2.1e-4)' or 'lag 0 12× beyond the dense bf16 noise band (KL k3 …)'."""
    if floor is None:
        return "no lag-0 tokens: the floor is not measured"
    kl = fmt(floor["kl_k3"])
    if floor["within"]:
        return f"lag 0 at {floor['band']} noise (KL k3 {kl})"
    far = max(floor.get("times_band_kl") or 0.0, floor.get("times_band_abs_delta") or 0.0)
    return f"lag 0 {times(far)} beyond the {floor['band']} noise band (KL k3 {kl})"


def verdict_sentence(st: dict | None) -> str | None:
    """The verdict's second sentence: which dominates, staleness or numerics, and where lag 0 stands."""
    if st is None:
        return None
    if st["trainer_version"] is None and st["trainer_version_source"] == "invalid":
        return ("Staleness: the batch's trainer_version is not an integer version, so the trainer's version is unknown "
                "and no lag is claimed (the step is not used in its place).")
    if st["trainer_version"] is None:
        return ("Staleness: the batch names weight versions but not the trainer's (no trainer_version, no step), so no "
                "lag is claimed.")
    lags = [r["lag"] for r in st["by_lag"] if isinstance(r["lag"], int) and r["lag"] >= 0]
    if st["share"] is None:
        return (f"Staleness: {floor_words(st['floor'])}, so the staleness share is not defined: the mismatch at "
                f"{lags_words(st)} is read as the lag's, and the run holds each lag against its own history.")
    if lags == [0]:
        return f"Staleness: every token is at lag 0 (synchronous); {floor_words(st['floor'])}."
    if st["floor"] is not None and not st["floor"].get("enough", True):
        return (f"Staleness: lag 0 holds only {fmt(st['floor']['tokens'])} tokens, too few to judge the numerics apart "
                f"from the lag, so the mismatch is read as the lag's; {pct(st['share'])} of KL k3 comes from lag ≥ 1 beyond "
                f"that floor{_interval(st)}.")
    if st["floor"] is not None and not st["floor"]["within"]:
        return (f"Staleness: not split, {floor_words(st['floor'])}: the floor is not numerical noise, so the part beyond "
                "it is not staleness alone (see stale weights).")
    lead = "staleness dominates" if st["dominant"] == "staleness" else "numerics dominate"
    return (f"Staleness: {pct(st['share'])} of KL k3 comes from lag ≥ 1 beyond the lag-0 floor{_interval(st)}, "
            f"{lead}; {floor_words(st['floor'])}.")


def lags_words(st: dict) -> str:
    """'lag 1', 'lags 1–3', 'lags 1 and 3': the known lags ≥ 1 a batch's tokens are at."""
    lags = sorted(r["lag"] for r in st["by_lag"] if isinstance(r["lag"], int) and r["lag"] >= 1)
    if len(lags) == 1:
        return f"lag {fmt(lags[0])}"
    if lags and lags[-1] - lags[0] == len(lags) - 1:  # distinct and sorted: contiguous (no range of 10¹⁷ built)
        return f"lags {fmt(lags[0])}–{fmt(lags[-1])}"
    return "lags " + ", ".join(fmt(x) for x in lags[:-1]) + f" and {fmt(lags[-1])}" if lags else "lag ≥ 1"


def lag_regime_sentence(st: dict, nums: str) -> str:
    """The verdict of a batch in the staleness regime: its tokens are at lag ≥ 1 with no lag-0 anchor, its mismatch
    beyond noise and no finding points at the engines."""
    lag0 = next((r["tokens"] for r in st["by_lag"] if r["lag"] == 0), 0)
    anchor = (f"lag 0 holds only {fmt(lag0)} tokens, too few to judge the numerics on" if lag0 else
              "no token is at lag 0 to judge the numerics on")
    return (f"Staleness at {lags_words(st)}: the tokens were sampled by older weights than the trainer's ({nums}), and "
            f"no finding points at the engines. {anchor[0].upper()}"
            f"{anchor[1:]}, so this batch alone cannot tell the lag's expected mismatch from an engine that missed a "
            "sync: the run's index holds each lag against its own history, and weight digests settle it.")


LAG_REGIME_CHECK = ("Nothing in the engines is flagged: the mismatch is the lag's, which importance weights against "
                    "the behaviour policy correct (token TIS / MIS with the rollout's log-probs). To rule out a weight "
                    "sync that did not arrive, read this lag's KL against the run's own history (the index, `watch`) or "
                    "record weight digests with each step; if the lag's ESS or clipped share costs too much, lower the "
                    "maximum lag (max off-policy steps, the async buffer's depth) or the learning rate.")


def cost_sentence(st: dict) -> str | None:
    """'What the lag costs: ESS 0.97 over the 1,152 tokens of lag ≥ 1, PPO clips 9.0% of them (lag 0: 0%) and the TIS
    cap 0.17%.' (None without such tokens)."""
    c = st.get("cost")
    if not c:
        return None
    lag0 = f" (lag 0: {pct(c['clipped_lag0'])})" if c.get("clipped_lag0") is not None else ""
    return (f"What the lag costs: token ESS {fmt(c['ess'], 3)} over the {fmt(c['tokens'])} tokens of lag ≥ 1; PPO clips "
            f"{pct(c['clipped'])} of them{lag0} and the TIS cap {pct(c['capped'])}.")


def staleness_check(st: dict | None) -> str | None:
    """What to check when staleness dominates a floor at its noise and no finding leads (None otherwise)."""
    if not st or st.get("dominant") != "staleness" or not (st.get("floor") or {}).get("within"):
        return None
    return ("Nothing in the engines: the mismatch beyond noise is staleness, which importance weights against the "
            "behaviour policy correct (token TIS / MIS with the rollout's log-probs). Check the per-lag rows: if an old "
            "lag's ESS or clipped share costs too much, lower the maximum lag (max off-policy steps, the async buffer's "
            "depth) or the learning rate.")


def glance(st: dict | None) -> str | None:
    """'staleness 81% of KL k3 from lag ≥ 1, lag 0 at dense bf16 noise' for a terminal line."""
    if st is None or st["trainer_version"] is None:
        return None
    if st["share"] is None:  # no lag-0 tokens: the lags and their KL, no split
        older = [r for r in st["by_lag"] if isinstance(r["lag"], int) and r["lag"] >= 1]
        if not older:
            return None
        kl = ", ".join(f"{fmt(r['kl_k3'], 2)} at lag {fmt(r['lag'])}" for r in older[:3])
        n0 = next((r["tokens"] for r in st["by_lag"] if r["lag"] == 0), 0)
        return f"KL k3 {kl}; {'only ' + fmt(n0) if n0 else 'no'} lag-0 tokens to judge the numerics on"
    if all(r["lag"] == 0 for r in st["by_lag"]):
        return f"every token at lag 0, {floor_words(st['floor'])}"
    return f"staleness {pct(st['share'])} of KL k3 from lag ≥ 1, {floor_words(st['floor'])}"


def run_glance(reading: dict) -> str:
    """A step the run reads as stale weights: 'systematic: stale weights (KL k3 at lag 1 10.6× the run's own, steps
    1–7)' or '… grown since step 1 without levelling off'."""
    where = f"lag {fmt(reading['lag'])}"
    if reading["status"] == "never":
        return (f"systematic: stale weights (KL k3 at {where} growing since step {fmt(reading['since_step'])} without "
                "levelling off: an engine that never took an update)")
    return (f"systematic: stale weights (KL k3 at {where} {times(reading['times'])} the run's own, {reading['basis']}; "
            f"since step {fmt(reading['since_step'])})")


def climbing_glance(regime: str | None, reading: dict) -> str:
    """'staleness: lag 2 climbing 5.82× its own history since step 10 (a stopped sync climbs on)'."""
    return (f"{(regime or 'not diagnosed').replace('_', ' ')}: lag {fmt(reading['lag'])} climbing "
            f"{times(reading['times'])} its own history since step {fmt(reading['since_step'])} (a stopped sync climbs "
            "on, a faster policy levels off)")


def climbing_short(reading: dict) -> str:
    """A climbing step's note beside its verdict in the runs table: 'lag 2 climbing 5.82×'."""
    return f"lag {fmt(reading['lag'])} climbing {times(reading['times'])}"


def climbing_note(reading: dict) -> str:
    """Said after a run verdict whose last step's lag is climbing: not named yet, not nothing."""
    return (f"The KL at lag {fmt(reading['lag'])} has been climbing above the run's own history since step "
            f"{fmt(reading['since_step'])} ({times(reading['times'])} its median at the last step): a weight sync that "
            "stopped makes it climb on and never come back, a policy that sped up levels off; it is named stale weights "
            f"once it is {plain(LAG_SUSTAINED)}× its history beyond its own noise (weight digests tell at once).")


def unjudged(reading: dict) -> str:
    """A lag with too few earlier steps of its own to be judged against (`check --history`'s line)."""
    return f"lag {fmt(reading['lag'])} not judged yet: too few earlier steps at that lag ({reading['basis']})"


def run_reading(reading: dict | None) -> str | None:
    """A step's lag against the run's own history, for its row and `watch`'s line: None when not judged."""
    if not reading or reading["status"] == "unjudged":
        return None
    per = " per unit of lr²" if reading.get("per_lr") else ""
    lag = f"lag {fmt(reading['lag'])}"
    if reading["status"] == "within":
        return f"{lag} as expected: KL k3 {fmt(reading['kl_k3'], 3)}, {times(reading['times'])} the run's own{per} ({reading['basis']})"
    if reading["status"] == "never":
        return (f"KL k3 at {lag} {fmt(reading['kl_k3'], 3)} has grown since step {fmt(reading['since_step'])} without "
                "levelling off: the engine may never have taken an update")
    if reading["status"] == "climbing":
        return (f"{lag} climbing above the run's own history since step {fmt(reading['since_step'])} (KL k3 "
                f"{fmt(reading['kl_k3'], 3)}, {times(reading['times'])} the median of {reading['basis']}{per})")
    if reading["status"] == "rising":
        return (f"{lag} rising since the run began (KL k3 {fmt(reading['kl_k3'], 3)}, {times(reading['times'])} the median "
                f"of {reading['basis']}{per}): a learning-rate warm-up, or an engine that never took an update; each "
                "step's lr (meta `lr`) or weight digests tell them apart")
    looks = (f" (labelled v{reading['labelled_version']}, they look like v{reading['looks_like_version']} if the engine "
             f"has taken no update since this began: `rescore` with v{reading['looks_like_version']} tells)"
             if reading.get("looks_like_version") is not None else "")
    return (f"KL k3 at {lag} {fmt(reading['kl_k3'], 3)} ± {fmt(reading['kl_k3_se'], 2)} is {times(reading['times'])} the "
            f"run's own{per} (median {fmt(reading['reference'], 3)} of {reading['basis']}): the tokens labelled {lag} "
            f"come from older weights than their label, as when a weight sync stops{looks}")


# ---- the five findings' words ------------------------------------------------------------------------------


def stale_title(w: Words) -> str:
    if w.get("rescored_lag") is not None:  # a rescore alone named it: no lag-0 floor beyond its band
        return (f"Stale weights: rescored, the tokens labelled lag {fmt(w['rescored_lag'])} (v{w['labelled_version']}) "
                f"look like v{w['rescored_looks_like_version']}: {w['rescored_nearest']}'s KL k3 against the rollout "
                f"{fmt(w['nearest_kl_k3'])}, v{w['labelled_version']}'s {fmt(w['labelled_kl_k3'])} "
                f"({times(w['labelled_kl_k3'] / w['nearest_kl_k3'] if w['nearest_kl_k3'] > 0 else None)}, over "
                f"{fmt(w['tokens'])} tokens)")
    like = ""
    if w.get("looks_like_lag") is not None:
        like = f"; they look like lag {fmt(w['looks_like_lag'])}'s tokens (KL k3 {fmt(w['looks_like_kl_k3'])})"
    elif w.get("older_kl_k3_low") is not None:
        like = (f"; the older lags do not rise with their lag either (KL k3 {fmt(w['older_kl_k3_low'])} to "
                f"{fmt(w['older_kl_k3_high'])}): one old version may have sampled every bucket")
    if w.get("rescored_looks_like_version") is not None:  # a rescore of checkpoints measured it: no inference from KL
        like = (f"; rescored, they are labelled v{w['labelled_version']} and look like "
                f"v{w['rescored_looks_like_version']}")
    return (f"Stale weights: tokens labelled lag 0 disagree {times(w['times_band'])} beyond the {w['band']} noise band "
            f"(KL k3 {fmt(w['kl_k3'])}, mean |δ| {fmt(w['mean_abs_delta'])} over {fmt(w['tokens'])} tokens){like}")


def stale_problem(w: Words) -> str:
    if w.get("rescored_lag") is not None:
        return (f"an engine that did not hold the weights its tokens are labelled with (labelled v{w['labelled_version']}, "
                f"rescored they look like v{w['rescored_looks_like_version']})")
    return (f"an engine that did not hold the weights its tokens are labelled with (lag 0 {times(w['times_band'])} "
            "beyond its noise band)")


STALE_CAUSE = ("The tokens the batch labels as sampled by the trainer's own version disagree with it beyond what its "
               "precision produces: the engine did not hold the weights it claims. A weight sync not applied or applied "
               "late, a sync that rounds the update away (an fp32 trainer's small Adam steps fall below the bf16 rounding "
               "step, so a bf16 engine keeps the old weights), or a stale KV / prefix cache reused across the sync.")
STALE_CHECK = ("Compare a checksum of the engine's weights with the trainer's after each sync; log the version the "
               "engine reports with each sample; score a saved step with the current checkpoint and an older one "
               "(`tim-report rescore`); flush the prefix cache on sync; sync in the engine's precision only after "
               "accumulating the update in fp32.")


def order_title(w: Words) -> str:
    return (f"Version order: the tokens labelled lag {fmt(w['newer_lag'])} disagree with the trainer {times(w['ratio'])} "
            f"more than those labelled lag {fmt(w['older_lag'])} (KL k3 {fmt(w['newer_kl_k3'])} against "
            f"{fmt(w['older_kl_k3'])}, z {fmt(w['z'], 2)}): they were sampled by older weights than their label says")


ORDER_CAUSE = ("Staleness grows with the lag: tokens of a newer version sit closer to the trainer than older ones. Here "
               "a newer bucket is the farther one, so its tokens came from weights older than their label: an engine "
               "that stopped taking updates while its version counter went on (a sync that returned success and moved "
               "nothing), or a version read before the sync landed.")
ORDER_CHECK = ("Log the version the engine reports with each sample next to the one the trainer assigns; compare weight "
               "digests of the engine and the trainer after each sync; score the step with the labelled checkpoint and "
               "an older one (`tim-report rescore`).")


def negative_title(w: Words) -> str:
    return (f"Negative lag: {fmt(w['tokens'])} tokens ({pct(w['share'])}) were generated by a version newer than the "
            f"trainer's ({fmt(w['trainer_version'])}, from {w['trainer_version_source']}), by up to "
            f"{fmt(-w['min_lag'])} versions")


NEGATIVE_CAUSE = ("A token cannot be generated by weights the trainer has not made yet: the versions are mislabelled. "
                  "A resume that restarted the version counter on one side, a trainer version read from the step number "
                  "where the two count differently, or a rollout server ahead of the trainer.")
NEGATIVE_CHECK = ("Set the trainer's version explicitly (`meta[\"trainer_version\"]`, `save_step(trainer_version=...)` "
                  "or `--meta trainer_version=N`) and check how the engine's version counter is restored on resume.")


def span_title(w: Words) -> str:
    return (f"{fmt(w['sequences'])} sequences span more than {fmt(w['threshold'])} weight versions (up to "
            f"{fmt(w['max_versions'])} in one sequence)")


SPAN_CAUSE = ("Partial rollouts resumed across several weight syncs: one response was generated by three or more "
              "versions, so its early tokens are older than the lag knob says.")
SPAN_CHECK = ("Bound how often a partial rollout may be resumed (slime / miles `--partial-rollout`, AReaL's max "
              "staleness) or drop sequences whose oldest version is beyond the lag bound.")


def ess_title(w: Words) -> str:
    return (f"ESS collapses at lag {fmt(w['lag'])}: its {fmt(w['tokens'])} tokens ({pct(w['share'])}) have token ESS "
            f"{fmt(w['ess'], 2)}, and PPO clips {pct(w['clipped'])} of them")


ESS_CAUSE = ("The weights moved far between the version that sampled these tokens and the trainer's: their importance "
             "weights are dominated by a few tokens, so the bucket teaches little and its variance is large (VCPO, "
             "arXiv 2602.17616, finds ESS predicts collapse from lag 2).")
ESS_CHECK = ("Lower the maximum lag (max off-policy steps, the async buffer's depth), or the learning rate; correct with "
             "a truncated importance weight against the behaviour policy rather than dropping the tokens.")


def idle_title(w: Words) -> str:
    return (f"Idle correction: the trainer logged a PPO clip fraction of {pct(w['logged'])}, while these ratios would "
            f"clip {pct(w['expected'])} of tokens (KL k3 {fmt(w['kl_k3'])}, the floor {fmt(w['floor_kl_k3'])})")


IDLE_CAUSE = ("The clip never fired although the rollout and the trainer disagree far above the floor: the ratio PPO "
              "clips is taken against old log-probs recomputed by the trainer itself (r ≡ 1 on the first minibatch), "
              "so neither staleness nor the engine mismatch is corrected (SkyRL #1850: staleness 4, clip fraction 0).")
IDLE_CHECK = ("Use the rollout engine's log-probs as the behaviour policy in the ratio (or add a TIS / MIS correction "
              "between rollout and trainer), and log the clip fraction of that ratio.")


def cache_intro(pc: dict) -> str:
    """The sentence over the prefix-cache table: what a hit is, and how many there were."""
    return (f"A hit is a sequence whose prompt the rollout engine served, in part or whole, from its prefix cache "
            f"(`cached_tokens` > 0: {fmt(pc['hit']['sequences'])} of {fmt(pc['hit']['sequences'] + pc['miss']['sequences'])} "
            f"sequences, {fmt(pc['cached_tokens'])} prompt tokens in all); a miss computed its prompt afresh. The same "
            "engine, precision and step: a cache kept across a weight update shows as hits that disagree beyond the "
            "misses.")


def cache_sentence(pc: dict) -> str:
    """The line under the table: the hits' mean |δ| against the misses', and what the finding needs."""
    if pc.get("z") is None:
        side = "hit" if not pc["hit"]["tokens"] else "miss"
        return f"Every sequence is a {'miss' if side == 'hit' else 'hit'}: no {side} to compare with."
    ratio = f"{times(pc['ratio'])} the misses'" if pc.get("ratio") is not None else "against none"
    return (f"Mean |δ| of the hits: {ratio} (z = {fmt(pc['z'], 2)}); a stale cache is named from z ≥ "
            f"{fmt(pc['threshold_z'])} and {times(pc['threshold_ratio'])}, with {fmt(pc['min_sequences'])} sequences "
            "on each side.")
