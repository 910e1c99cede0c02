"""The run view's words: the run-level findings, the run verdict and the change-point sentences.

A run's steps are diagnosed one by one (catalogue/findings/); this module says what they say together. The
run-level findings (analysis/drift.py measures them) are shapes of the mismatch over steps that users report, each
with the cause it usually has: a jump after an export or weight-format change, a mismatch that grows step over step
until a restart (a stale prefix or KV cache), spikes for a few steps after a resume. docs/report.md explains them.
"""

from __future__ import annotations

from typing import Any

from ..config import SEVERITIES, DiagnosisThresholds
from .findings import FINDINGS, Finding, Words
from .findings.lag import SYNC_ENTRIES
from .numbers import fmt, plain, times

REGIME_WORDS = {"identical": "identical", "numerical_noise": "numerical noise", "staleness": "staleness", "elevated": "elevated",
                "systematic": "systematic", "unknown": "not diagnosed"}


def short(finding_id: str) -> str:
    """A batch finding's short name in a run's sentences ("off-by-one"): its catalogue entry's, never a fallback."""
    return FINDINGS[finding_id].short


def meaning(finding_id: str) -> str:
    """What a batch finding means for a stretch of steps, from its catalogue entry."""
    return FINDINGS[finding_id].meaning


def _n(step: Any) -> str:
    """A step as the sentences write it: 12, or 12.5 for a fractional one."""
    return plain(step) if isinstance(step, float) else str(step)


def _steps(first: Any, last: Any) -> str:
    return f"step {_n(first)}" if first == last else f"steps {_n(first)}–{_n(last)}"


def _explained(w: Words) -> str:
    if w.get("lag_mix"):
        return f"; {lag_change(*w['lag_mix'])}"
    return (f"; every step from there is diagnosed {short(w['explained_by'])}: {meaning(w['explained_by'])}"
            if w.get("explained_by") else "")


def _jump_title(w: Words) -> str:
    stay = f"stayed until step {_n(w['back_step'])}" if w.get("back_step") is not None else "stayed"
    return (f"The mismatch jumped {times(w['ratio'])} from step {_n(w['previous_step'])} to step {_n(w['step'])} and {stay} (median |δ| "
            f"{fmt(w['before'])} → {fmt(w['after'])} nats){_explained(w)}")


def _growth_title(w: Words) -> str:
    grew = (f"The mismatch grew step over step from step {_n(w['first_step'])} to step {_n(w['last_step'])} "
            f"({times(w['ratio'])}, median |δ| {fmt(w['before'])} → {fmt(w['peak'])} nats)")
    if w.get("restart_step") is None:
        return grew + " and is still growing at the last step"
    return grew + f", until step {_n(w['restart_step'])} brought it back to {fmt(w['after'])} nats (a restart)"


def _spike_title(w: Words) -> str:
    where = ", ".join(_steps(a, b) for a, b in w["episodes"])
    return (f"The mismatch spiked {times(w['ratio'])} at {where}, then returned to its level (median |δ| {fmt(w['before'])} → "
            f"{fmt(w['peak'])} nats)")


def _never_title(w: Words) -> str:
    per = " per unit of lr²" if w.get("per_lr") else ""
    thirds = " → ".join(fmt(x, 2) for x in w["thirds"])
    return (f"Never delivered: the KL k3 at lag {fmt(w['lag'])} grew from step {_n(w['first_step'])} to step "
            f"{_n(w['last_step'])} without levelling off ({fmt(w['first_kl_k3'])} → {fmt(w['last_kl_k3'])}; the medians "
            f"of each third of its {fmt(w['steps'])} steps{per} {thirds}): the engine may never have taken an update"
            + ("" if w.get("per_lr") else ", unless a learning-rate warm-up is still under way (give each step its lr "
                                          "to tell them apart)"))


RUN_FINDINGS: dict[str, Finding] = {f.id: f for f in (
    Finding(
        "never_delivered", lambda w, dt: "error" if w.get("per_lr") else "warn", _never_title,
        lambda w: f"an engine that never took an update (KL k3 at lag {fmt(w['lag'])} growing {times(w['growth'])})",
        lambda w: ("An engine that never takes an update samples from the first weights at every step while it claims "
                   "each new version, so the KL at a fixed lag grows with the steps since the run began: a LoRA adapter "
                   "or a weight bucket that never loads (verl #7495), an update call that returns success and moves "
                   "nothing (tokenspeed #1373). "
                   + ("Each step's KL was read per unit of its lr², so a learning-rate warm-up does not explain it."
                      if w.get("per_lr") else
                      "A learning-rate warm-up still under way grows the KL the same way, then levels off when it ends: "
                      "give each step its learning rate (meta `lr`) and the KL is read per unit of lr².")),
        lambda w: ("Record the engine's and the trainer's weight digests with each step (save_step's digests, "
                   "docs/staleness.md), or score one step with the first checkpoint and with its labelled one "
                   "(`tim-report rescore STEP --model CKPT_0 --as v0 --model CKPT_N --as vN`): tokens nearest the first "
                   "weights were sampled by an engine that never moved.")),
    Finding(
        "level_jump", lambda w, dt: "info" if w.get("explained_by") or w.get("lag_mix") else "warn", _jump_title,
        lambda w: f"a jump of the mismatch at step {_n(w['step'])} ({times(w['ratio'])} in one step)",
        lambda w: ("The steps from there carry tokens of another lag, and the lag's own mismatch (staleness) grows with "
                   "the lag: the level moved with the lag mix, which importance weights correct." if w.get("lag_mix") else
                   f"The jump is where the {short(w['explained_by'])} finding starts, which the steps from there are "
                   f"diagnosed with ({meaning(w['explained_by'])}): whatever changed at step {_n(w['step'])} brought it in."
                   if w.get("explained_by") else
                   "Something changed for every token at that step: an export or weight-format change (a checkpoint "
                   "converted or re-saved: an HF / safetensors export, a dtype cast, fp8 or int quantisation, tied "
                   "embeddings or a LoRA merge lost on the way), or a weight sync that loaded another model. Drift does "
                   "not move the mismatch this far in one step."),
        lambda w: ("Nothing to fix in the jump itself: each step's lag is read against the run's own history of that "
                   "lag (the index's rows); if the new lag costs too much ESS, lower the maximum lag." if w.get("lag_mix") else
                   f"Follow the `{w['explained_by']}` finding's advice on step {_n(w['step'])}'s page, and look for what "
                   f"changed between step {_n(w['previous_step'])} and step {_n(w['step'])} (code, configuration, checkpoint)."
                   if w.get("explained_by") else
                   f"Compare the weights each side loaded at step {_n(w['step'])} with step {_n(w['previous_step'])} (checksums, "
                   "dtypes, the export or conversion script and its version), and re-score a batch of step "
                   f"{_n(w['step'])} with the checkpoint of step {_n(w['previous_step'])}.")),
    Finding(
        "growing_mismatch", lambda w, dt: "warn" if w.get("restart_step") is not None else "info", _growth_title,
        lambda w: f"a mismatch that grows step over step from step {_n(w['first_step'])} ({times(w['ratio'])})",
        lambda w: ("Something accumulates from step to step and a restart resets it: a prefix cache or KV cache that "
                   "keeps entries computed with older weights across weight syncs, so the share of stale context grows "
                   "with every step." if w.get("restart_step") is not None else
                   "Something accumulates from step to step: a prefix cache or KV cache that keeps entries computed with "
                   "older weights across weight syncs, or the policy sharpening as training goes (lower entropy makes "
                   "the same precision noise larger in log-probs)."),
        lambda w: "Reset the engine's prefix cache on every weight sync (vLLM `reset_prefix_cache()`, SGLang "
                  "`flush_cache`) or run one step with prefix caching off, and check that the engine's weight version "
                  "follows the trainer's at every step."),
    Finding(
        "resume_spikes", lambda w, dt: "warn", _spike_title,
        lambda w: f"spikes of the mismatch for a few steps ({times(w['ratio'])})",
        lambda w: "A short disturbance that fixes itself, as in the first steps after resuming from a checkpoint: the "
                  "engine serving the weights it had before the resume until the first sync, a trainer that restored "
                  "its weights but not its optimiser or learning-rate state, or caches filled before the resume.",
        lambda w: "Check what happened at those steps (a resume, an engine restart, a checkpoint load); sync the "
                  "weights to the engine before the first rollout after a resume and compare the engine's weight version "
                  "with the trainer's on those steps."),
    *SYNC_ENTRIES,  # the weight digests of every step read together (analysis/lag/digests.run_sync_findings)
)}


def make_run_finding(id_: str, evidence: dict, **context: Any) -> dict:
    """A run-level finding as index.json holds it (the same fields as a batch finding)."""
    entry = RUN_FINDINGS[id_]
    w = {**evidence, **context}
    severity = entry.severity(w, DiagnosisThresholds())  # the run findings' rules read their evidence only
    assert severity in SEVERITIES, severity
    return {"id": id_, "severity": severity, "title": entry.title(w), "problem": entry.problem(w), "evidence": evidence,
            "likely_cause": entry.cause(w), "what_to_check": entry.check(w), **({"explained_by": context["explained_by"]}
                                                                                   if context.get("explained_by") else {})}


# ---- the run verdict ---------------------------------------------------------------------------------------

def stretch_why(regime: str, leads: list[tuple[str, int]], steps: int, since_start: bool) -> str:
    """'every step since is diagnosed off-by-one (`shift`): the trainer's log-probs are shifted by one position …'"""
    if not leads:
        return ""
    who = "every step" if since_start else "every step since"
    (top, n), rest = leads[0], leads[1:]
    if n == steps:
        text = f"{who} is diagnosed {short(top)} (`{top}`): {meaning(top)}"
    else:
        text = f"{n} of {steps} steps{'' if since_start else ' since'} are diagnosed {short(top)} (`{top}`): {meaning(top)}"
        if rest:
            text += "; " + ", ".join(f"{k} step{'s' if k != 1 else ''}: {short(i)} (`{i}`)" for i, k in rest[:2])
    return text


def run_verdict_sentence(regime: str, first: Any, last: Any, since_start: bool, share: tuple[int, int], why: str,
                         earlier: list[tuple[str, Any, Any, int]], exceptions: list[tuple[Any, str]]) -> str:
    """'Systematic from step 12: every step since is diagnosed off-by-one (`shift`): …; steps 0–11 numerical noise.'"""
    name = REGIME_WORDS.get(regime, regime)
    k, n = share
    head = name[0].upper() + name[1:]
    if since_start:
        head += " at every step" if k == n else f" at {k} of {n} steps"
    else:
        head += f" from step {_n(first)}"
    parts = [why] if why else []
    if exceptions:
        parts.append("except " + ", ".join(f"step {_n(s)} ({REGIME_WORDS.get(r, r)})" for s, r in exceptions[:3])
                     + (f" and {len(exceptions) - 3} more" if len(exceptions) > 3 else ""))
    if earlier:
        if len(earlier) == 1:
            r, a, b, _ = earlier[0]
            parts.append(f"{_steps(a, b)} {REGIME_WORDS.get(r, r)}")
        else:
            parts.append("before: " + ", ".join(f"{c} step{'s' if c != 1 else ''} {REGIME_WORDS.get(r, r)}"
                                                for r, _, _, c in earlier))
    return head + (": " + "; ".join(parts) if parts else "") + "."


def lag_change(before: tuple | None, after: tuple | None) -> str:
    """A change point at a step whose lag mix changed: 'the lag mix changed (lag 1 → lags 2, 3) …'."""
    def mix(key: tuple | None) -> str:
        if not key:
            return "no versions"
        return ("lag " if len(key) == 1 else "lags ") + ", ".join(str(k) for k in key)

    return (f"the lag mix changed at that step ({mix(before)} → {mix(after)}): staleness grows with the lag, which is "
            "not a change of regime; each lag is held to the run's own history of that lag")


# ---- the run view: change points ---------------------------------------------------------------------------

CHANGE_ADVICE = {
    True: "look for what changed at that step: a weight sync that stopped or failed, a prefix or KV-cache setting, an "
          "engine, kernel or dtype change, a restart",
    False: "something that landed at that step narrowed the gap (a fix, a restart, a cache flush); if nothing did, check "
           "that both sides still score what they should",
}


def change_clause(name: str, before: str, after: str, up: bool, ratio: float | None) -> str:
    """'KL k3 is 33.6× higher (0.000146 → 0.00491)': one metric's change of level."""
    if ratio:
        size = f"{times(ratio)} higher" if up else f"{times(1 / ratio)} lower"
    else:
        size = "higher" if up else "lower"
    return f"{name} is {size} ({before} → {after})"


def run_change(kind: str, f: dict) -> str:
    """What a run-level finding `f` says about a change point: at its jump, where the jump is undone, inside or at the
    end (a restart) of a growth, at a spike."""
    ev = f["evidence"]
    if kind == "jump":
        return (f"{f['problem']}, too abrupt for drift: look for an export or weight-format change at that step, a "
                "weight sync that failed or loaded other weights, an engine, kernel or dtype change")
    if kind == "undone":
        return f"the jump of step {_n(ev['step'])} is undone: what changed there was reverted"
    if kind == "growth":
        return (f"part of the step-over-step growth of the mismatch since step {_n(ev['first_step'])} (the run verdict "
                "says what usually grows so)")
    if kind == "restart":
        return (f"a restart ended the growth of the mismatch since step {_n(ev['first_step'])}: a stale prefix or KV cache "
                "that the restart flushed")
    where = ", ".join(_steps(a, b) for a, b in ev["episodes"])
    return f"the spike of the mismatch at {where}, not a new level (as after a resume; see the run verdict)"


def change_sentence(step: str, clauses: list[str], worse: bool, after: tuple[str, int, int] | None = None,
                    gone: tuple[str, int, int] | None = None, run_finding: str | None = None,
                    lag_moved: str | None = None, since: str | None = None) -> str:
    """One step's change of level, then what the steps after it say: the finding most of them are diagnosed with
    (`after`: id, steps with it, steps), or the one that the steps before had and these have not (`gone`), or a
    change of the lag mix at that step (`lag_moved`, lag_change's words), or a run-level finding at that step; generic
    advice only when none does. `since`: the step the finding of `after` began at, when the steps before this one
    already had it (the level moved again within it)."""
    joined = clauses[0] if len(clauses) == 1 else ", ".join(clauses[:-1]) + " and " + clauses[-1]
    if after is not None:
        fid, k, n = after
        every = "every step from there is" if k == n else f"{k} of the {n} steps from there are"
        why = f"from step {since or step} {meaning(fid)} ({every} diagnosed {short(fid)}; a step's page says what to check)"
    elif gone is not None:
        fid, k, n = gone
        why = f"the {short(fid)} finding of the steps before ({k} of {n}) is gone from step {step}"
    elif lag_moved is not None:
        why = lag_moved
    elif run_finding is not None:
        why = run_finding
    else:
        why = CHANGE_ADVICE[worse]
    return f"From step {step}, {joined}: {why}."
