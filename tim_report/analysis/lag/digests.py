"""The exact check of a weight sync: the engine's weight digests against the trainer's (design §12, docs/sync.md).

A step may carry, per side, digests of the weights by version (meta `engine_digest`, `trainer_digest`: model.
digest_records; io/weights.py makes them), each with the share of elements that changed since an earlier version.
Digests are exact, so the three findings are too, and each is an error:

    sync_not_applied      the engine's weights did not change between two versions (the same digest, or a changed
                          share of 0) while the trainer's, in the engine's dtype, did: nothing reached the engine
    updates_rounded_away  the engine's weights changed, in less than ROUNDED_SHARE_RATIO of the trainer's changed
                          share since the same version: part of the update was lost on the way (a delta added in bf16)
    weights_mismatch      at one version the engine's digest is not the trainer's: the engine holds weights the
                          trainer never had at that version (tensors under swapped names, a bucket in the wrong dtype)

`checks` reads records alone, so a step (its own records) and a run (every step's, `run_sync_findings`) are judged by
the same function; a mismatch already explained by one of the first two at that version is not said again.
"""

from __future__ import annotations

from ...catalogue import findings
from ...catalogue import sync as words
from ...catalogue.run_words import make_run_finding
from ...config.sync import ROUNDED_SHARE_RATIO
from ...model import DIGEST_SIDES, digest_records
from ..registry import Scene, detector

SHORT = 12  # hex digits of a digest a sentence shows
SYNC_IDS = ("sync_not_applied", "updates_rounded_away", "weights_mismatch")


def sync_records(meta: dict) -> dict:
    """The digests a step's meta carries, per side, and what was wrong with a side's value (then unknown: no records)."""
    out: dict = {side: [] for side in DIGEST_SIDES}
    problems = {}
    for side in DIGEST_SIDES:
        value = meta.get(f"{side}_digest")
        if value is None:
            continue
        records, problem = digest_records(value)
        if problem:
            problems[side] = problem
        out[side] = records
    return {**out, "problems": problems}


def checks(engine: list[dict], trainer: list[dict]) -> list[tuple[str, dict]]:
    """(finding id, evidence) for each sync fault the two sides' records show, most specific first."""
    out: list[tuple[str, dict]] = []
    dtypes = {r["dtype"] for r in engine} & {r["dtype"] for r in trainer}
    for dtype in sorted(dtypes):
        e = [r for r in engine if r["dtype"] == dtype]
        t = [r for r in trainer if r["dtype"] == dtype]
        stuck = _not_applied(e, t)
        rounded = _rounded_away(e, t, {ev["version"] for ev in stuck})
        explained = {ev["version"] for ev in stuck + rounded}
        out += [("sync_not_applied", ev) for ev in stuck] + [("updates_rounded_away", ev) for ev in rounded]
        out += [("weights_mismatch", ev) for ev in _mismatch(e, t) if ev["version"] not in explained]
    return out


def _by_version(records: list[dict]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for r in records:
        out.setdefault(r["version"], [])
        if r["digest"] not in out[r["version"]]:
            out[r["version"]].append(r["digest"])
    return out


def _moved(t: list[dict], since: int, version: int) -> dict | None:
    """How the trainer's weights moved from `since` to `version`: its changed share there, or two digests that differ."""
    share = next((r["changed_share"] for r in t if r["version"] == version and r["since"] == since
                  and r["changed_share"] is not None), None)
    if share is not None:
        return {"trainer_changed_share": share} if share > 0 else None
    tv = _by_version(t)
    if since in tv and version in tv and not set(tv[since]) & set(tv[version]):
        return {"trainer_changed_share": None}
    return None


def _not_applied(e: list[dict], t: list[dict]) -> list[dict]:
    """Engine versions whose weights are an earlier version's, bit for bit, while the trainer's moved in between (and
    are not the trainer's of that version)."""
    ev, tv = _by_version(e), _by_version(t)
    seen = {v for v in ev if v in tv and not set(ev[v]) - set(tv[v])}  # the engine holds the trainer's weights there
    out = []
    for r in sorted(e, key=lambda r: r["version"]):  # a changed share of 0 since an earlier version
        if r["changed_share"] == 0 and r["since"] is not None and r["since"] < r["version"]:
            moved = _moved(t, r["since"], r["version"])
            if moved and r["version"] not in seen:
                seen.add(r["version"])
                out.append({"version": r["version"], "since": r["since"], "engine_digest": r["digest"][:SHORT],
                            "engine_changed_share": 0.0, **moved})
    versions = sorted(ev)
    for a, b in zip(versions, versions[1:]):  # the same digest at two versions
        same = set(ev[a]) & set(ev[b])
        moved = _moved(t, a, b)
        if same and moved and b not in seen:
            seen.add(b)
            out.append({"version": b, "since": a, "engine_digest": next(iter(same))[:SHORT],
                        "engine_changed_share": 0.0, **moved})
    return out


def _rounded_away(e: list[dict], t: list[dict], stuck: set[int]) -> list[dict]:
    """Engine versions that changed in less than ROUNDED_SHARE_RATIO of the trainer's changed share since the same
    version, holding other weights than the trainer's there (a share of 0 is sync_not_applied)."""
    out: list[dict] = []
    tv = _by_version(t)
    for r in sorted(e, key=lambda r: r["version"]):
        s = r["changed_share"]
        if s is None or s == 0 or r["since"] is None or r["version"] in stuck or r["version"] in {o["version"] for o in out}:
            continue
        if r["digest"] in tv.get(r["version"], []):  # the trainer's weights of that version: whatever came before
            continue
        ts = next((x["changed_share"] for x in t if x["version"] == r["version"] and x["since"] == r["since"]
                   and x["changed_share"] is not None), None)
        if ts and s < ROUNDED_SHARE_RATIO * ts:
            out.append({"version": r["version"], "since": r["since"], "engine_changed_share": s,
                        "trainer_changed_share": ts, "ratio": s / ts, "threshold": ROUNDED_SHARE_RATIO})
    return out


def _mismatch(e: list[dict], t: list[dict]) -> list[dict]:
    """Versions where an engine digest is not the trainer's; which trainer version it is, where one is."""
    ev, tv = _by_version(e), _by_version(t)
    out = []
    for v in sorted(set(ev) & set(tv)):
        wrong = [d for d in ev[v] if d not in tv[v]]
        if not wrong:
            continue
        holds = sorted(u for u, ds in tv.items() if u != v and wrong[0] in ds)
        out.append({"version": v, "engine_digest": wrong[0][:SHORT], "trainer_digest": tv[v][0][:SHORT],
                    "engine_digests": len(ev[v]), "differing": len(wrong), "holds_version": holds[-1] if holds else None})
    return out


def measured(s: Scene) -> dict | None:
    """summary.json's `sync`: the step's digests per side, the versions both sides name and whether they agree, the
    faults `checks` finds and what a side's value had wrong; None when the step carries no digest at all."""
    return s.once(_measured)


def _measured(s: Scene) -> dict | None:
    rec = sync_records(s.batch.meta)
    if not rec["engine"] and not rec["trainer"] and not rec["problems"]:
        return None
    ev, tv = _by_version(rec["engine"]), _by_version(rec["trainer"])
    compared = [{"version": v, "equal": not [d for d in ev[v] if d not in tv[v]]} for v in sorted(set(ev) & set(tv))]
    faults = checks(rec["engine"], rec["trainer"])
    return {**rec, "compared": compared, "faults": [fid for fid, _ in faults],
            "health": words.health(bool(faults), compared, rec)}


def _raise(s: Scene, id_: str) -> dict | None:
    st = measured(s)
    if not st:
        return None
    mine = [ev for fid, ev in checks(st["engine"], st["trainer"]) if fid == id_]
    if not mine:
        return None
    first = mine[0]
    return findings.make(id_, {**first, "versions": len(mine), "last_version": mine[-1]["version"]}, s.dt)


@detector("sync_not_applied", when_identical=True, section=("sync", measured))
def _sync_not_applied(s: Scene) -> dict | None:
    return _raise(s, "sync_not_applied")


@detector("updates_rounded_away", when_identical=True)
def _updates_rounded_away(s: Scene) -> dict | None:
    return _raise(s, "updates_rounded_away")


@detector("weights_mismatch", when_identical=True)
def _weights_mismatch(s: Scene) -> dict | None:
    return _raise(s, "weights_mismatch")


def run_sync_findings(rows: list[dict]) -> list[dict]:
    """The same checks over every step's digests together (index rows' `weight_digests`): what steps see only when
    read side by side (the engine's digest of version 5 at step 6 against the trainer's at step 5 of a one-step-off
    run) as well as what each step saw, each fault once, at the first version it shows, with how many it spans."""
    engine: dict[str, dict] = {}
    trainer: dict[str, dict] = {}
    for r in rows:
        for rec in r.get("weight_digests") or []:
            side = engine if rec.get("side") == "engine" else trainer
            side.setdefault(repr(sorted(rec.items())), {k: v for k, v in rec.items() if k != "side"})
    grouped: dict[str, list[dict]] = {}
    for fid, ev in checks(list(engine.values()), list(trainer.values())):
        grouped.setdefault(fid, []).append(ev)
    return [make_run_finding(fid, {**evs[0], "versions": len(evs), "last_version": evs[-1]["version"]})
            for fid, evs in grouped.items()]


def sync_alarm(row: dict) -> tuple[str, str] | None:
    """`watch`'s alarm for a step with a sync finding: (its id, the words after the step's cause); None without."""
    fid = next((f for f in row.get("findings") or [] if f in SYNC_IDS), None)
    if fid is None:
        return None
    entry = findings.FINDINGS[fid]
    return fid, f"{entry.short}: {entry.meaning} ({words.ALARM})"


def across_steps(rows: list[dict]) -> list[dict]:
    """The run's sync errors that none of its steps raised itself (`check` on a run folder fails on them too): the
    faults only the steps read side by side show."""
    raised = {f for r in rows for f in r.get("findings") or []}
    return [f for f in run_sync_findings(rows) if f["severity"] == "error" and f["id"] not in raised]


def first_step(finding: dict, rows: list[dict]) -> dict | None:
    """The row of the first step whose engine digest is of the version a run's sync finding names."""
    at = [r for r in rows if r.get("step") is not None and any(
        d.get("side") == "engine" and d.get("version") == finding["evidence"]["version"] for d in r.get("weight_digests") or [])]
    return min(at, key=lambda r: r["step"]) if at else None


def sync_leads(verdict: dict) -> dict:
    """The run verdict with its sync errors first (cause first: exact evidence of what the engine held), their check as
    what to check, and the regime systematic: the digests say the engine sampled other weights, whatever its steps'
    log-probs look like. Unchanged when the steps' own findings lead with a sync finding already."""
    lead = [f for f in verdict["findings"] if f["id"] in SYNC_IDS and f["severity"] == "error"]
    if not lead or verdict["lead"] in SYNC_IDS:  # the steps' own diagnosis already names it first
        return verdict
    rest = verdict["verdict"]
    for f in lead:
        rest = rest.replace(f" {f['title']}.", "")
    rest = words.steps_read(rest)
    return {**verdict, "regime": "systematic", "verdict": " ".join([*(f["title"] + "." for f in lead), rest]),
            "what_to_check": lead[0]["what_to_check"]}
