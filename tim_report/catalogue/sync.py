"""The weight sync's words: the sync-health line, and the three sync findings' titles, causes and checks (their entries
in catalogue/findings/lag.py, the run's in catalogue/run_words.py; the numbers from analysis/lag/digests.py;
docs/sync.md).
"""

from __future__ import annotations

from typing import Any

from .numbers import pct

Words = dict[str, Any]

ALARM = "exact: the weight digests say so"  # after a sync finding's meaning in `watch`'s alarm line

HEALTH = {"fault": "red", "agree": "green", "unchecked": "grey"}  # a sync-health value → its colour


def health(fault: bool, compared: list[dict], records: dict) -> str:
    """'fault' (a sync finding), 'agree' (every version both sides name has equal digests) or 'unchecked' (no version
    both sides name, or a side's value unusable)."""
    if fault:
        return "fault"
    return "agree" if compared and not records.get("problems") else "unchecked"


def _versions(vs: list[int]) -> str:
    vs = sorted(vs)
    return f"version {vs[0]}" if len(vs) == 1 else "versions " + ", ".join(str(v) for v in vs[:6]) + (" …" if len(vs) > 6 else "")


def _shares(st: dict) -> str:
    """"; since version 4 the engine changed 1.52% of its elements, the trainer 1.52%" where both record it."""
    e = next((r for r in reversed(st["engine"]) if r["changed_share"] is not None), None)
    if e is None:
        return ""
    t = next((r for r in st["trainer"] if r["version"] == e["version"] and r["since"] == e["since"]
              and r["changed_share"] is not None), None)
    trainer = f", the trainer {pct(t['changed_share'])}" if t else ""
    return f"; since version {e['since']} the engine changed {pct(e['changed_share'])} of its elements{trainer}"


def sync_line(st: dict | None) -> str | None:
    """The sync-health line beside the staleness table (page, report.md) and in summary.json: what the digests say."""
    if not st:
        return None
    bad = "; ".join(f"the {side} digest {problem}, so it is not read" for side, problem in st["problems"].items())
    if st["health"] == "fault":
        n = len(st["faults"])
        return f"Sync: the weight digests show {n} fault{'s' if n != 1 else ''} (see the findings above)" + (
            f"; {bad}" if bad else "") + "."
    if st["health"] == "agree":
        dtype = st["engine"][0]["dtype"]
        return (f"Sync: the engine holds the trainer's weights at {_versions([c['version'] for c in st['compared']])} "
                f"({dtype} digests equal){_shares(st)}." + (f" {bad[0].upper()}{bad[1:]}." if bad else ""))
    if bad:
        return f"Sync: not checked: {bad}."
    have = [side for side in ("engine", "trainer") if st[side]]
    versions = {side: [r["version"] for r in st[side]] for side in have}
    said = " and ".join(f"the {side}'s for {_versions(versions[side])}" for side in have)
    return (f"Sync: not checked at this step: it carries {said}, no version with both sides' digests; the run view "
            "compares them across steps.")


TABLE_INTRO = ("The weights as the engine held them when it sampled, and the trainer's cast to the engine's dtype, as "
               "sha256 digests by version (`tim_report.weight_digest`); a changed share counts the elements whose value "
               "changed since the version it names. Equal digests are the same weights bit for bit.")


def agreement(both: bool, differ: bool) -> tuple[str, str]:
    """A version's last cell and its style: the two sides' digests equal, differing, or one side only."""
    if not both:
        return "one side only", ""
    return ("✖ differ", "differs") if differ else ("✓ equal", "agrees")


def digests_cell(records: list[dict]) -> str:
    """'1a2b3c4d5e6f', a digest's first 12 hex digits (several: joined by ', '), '—' without one."""
    return ", ".join(dict.fromkeys(r["digest"][:12] for r in records)) or "—"


def share_cell(records: list[dict]) -> str:
    """'1.52% since v4', '—' without a changed share."""
    r = next((r for r in records if r["changed_share"] is not None), None)
    return f"{pct(r['changed_share'])} since v{r['since']}" if r else "—"


def glance(st: dict | None) -> str | None:
    """'sync: digests equal at v5' for a terminal line when the digests agree (None otherwise: a fault leads itself)."""
    if not st or st["health"] != "agree":
        return None
    versions = [c["version"] for c in st["compared"]]
    return f"sync: {st['engine'][0]['dtype']} digests equal at v{', v'.join(str(v) for v in versions[:3])}"


def steps_read(sentence: str) -> str:
    """The run verdict's own sentence after a sync fault that leads it: what the steps' log-probs say, read one by one."""
    return f"Step by step, the log-probs read: {sentence[:1].lower()}{sentence[1:]}"


def invalid_note(side: str, problem: str) -> str:
    """The note a page and summary.json carry when meta's {side}_digest is present but not digest records."""
    return f"meta {side}_digest {problem}: the {side}'s weight digests are unknown, so the sync is not checked against them"


# ---- the three findings' words ------------------------------------------------------------------------------


def _more(w: Words) -> str:
    n = w.get("versions") or 1
    return f" (and {n - 1} later version{'s' if n > 2 else ''}, to version {w['last_version']})" if n > 1 else ""


def _trainer_moved(w: Words) -> str:
    share = w.get("trainer_changed_share")
    return (f"the trainer's, cast to the engine's dtype, changed {pct(share)} of their elements" if share is not None
            else "the trainer's digest changed")


def not_applied_title(w: Words) -> str:
    return (f"Sync not applied: the engine's weights at version {w['version']} are its weights of version {w['since']}, "
            f"bit for bit (digest {w['engine_digest']}…), while {_trainer_moved(w)}{_more(w)}")


NOT_APPLIED_CAUSE = ("Nothing of the update reached the engine: it goes on sampling with older weights while it claims the "
                     "new version. A weight sync skipped or failed silently (an update call that returns success and "
                     "moves nothing, a LoRA adapter or a weight bucket never loaded, the sync sent to another engine "
                     "replica), or an update sent as a delta that the engine's dtype rounded away entirely.")
NOT_APPLIED_CHECK = ("Log the engine's digest after each sync (`tim_report.weight_digest`) beside the version it reports; "
                     "check that the sync call reached every engine replica and what it returned, that a LoRA adapter "
                     "is reloaded (not only registered), and that the sync sends the weights themselves in the engine's "
                     "dtype, not deltas added in it.")


def rounded_title(w: Words) -> str:
    return (f"Updates rounded away: between versions {w['since']} and {w['version']} the engine's weights changed in "
            f"{pct(w['engine_changed_share'])} of their elements, the trainer's (cast to the engine's dtype) in "
            f"{pct(w['trainer_changed_share'])}: {pct(1 - w['ratio'], 2)} of the changes did not reach the engine{_more(w)}")


ROUNDED_CAUSE = ("The sync arrived but part of the update did not: a change below half a rounding step of the engine's "
                 "dtype is lost when it is added there, so only the largest changes (or those to the smallest weights) "
                 "survive. A sync that sends each update as a delta added to the engine's bf16 weights, or an engine "
                 "that accumulates updates in its own precision, keeps the old policy while claiming the new version; "
                 "a sync that skips some buckets looks the same.")
ROUNDED_CHECK = ("Send the trainer's weights themselves cast to the engine's dtype (from the fp32 master copy), never "
                 "deltas added in the engine's precision; check that every bucket of the sync arrives; compare "
                 "`weight_digest(...).differing(...)` of the two sides to see which tensors lag.")


def mismatch_title(w: Words) -> str:
    holds = (f"; they are the trainer's weights of version {w['holds_version']}" if w.get("holds_version") is not None
             else "")
    replicas = (f" ({w['differing']} of {w['engine_digests']} engine digests)" if (w.get("engine_digests") or 1) > 1
                else "")
    return (f"The engine does not hold the labelled weights: at version {w['version']} its digest {w['engine_digest']}… "
            f"is not the trainer's {w['trainer_digest']}…{replicas}{holds}{_more(w)}")


def mismatch_problem(w: Words) -> str:
    return f"an engine that holds other weights than the trainer's version {w['version']} it is labelled with"


MISMATCH_CAUSE = ("The engine's weights at the version its tokens are labelled with are not the trainer's weights of that "
                  "version, cast to the engine's dtype: a sync that loaded tensors under each other's names or in the "
                  "wrong dtype (a mixed-dtype bucket), a partial sync, an engine replica that missed it, a version "
                  "label that runs ahead of the weights, updates sent as deltas added in the engine's precision, or a "
                  "LoRA adapter merged differently on the two sides.")
MISMATCH_CHECK = ("Digest both sides' weights by tensor and list the ones that differ "
                  "(`engine_digest.differing(trainer_digest)` names them); check the sync's name mapping and each "
                  "bucket's dtype, that every engine replica received the sync, and that the version the engine reports "
                  "is set after its weights are loaded, not before.")
