"""The run's own band (`check --history`, `watch`) and each lag against the run's own history of it
(analysis/history.py, analysis/lag/history.py): config/__init__.py re-exports every name, config.NAME as before."""

from __future__ import annotations

# ---- `check --history`: the run's own band ----------------------------------------------------------------

# A new step is held to the rolling median of the run's previous steps, read from the site's index.json.
# The window is short enough to follow a run that drifts slowly (the run view's change points report
# drifts; this gate catches a step that jumps) and long enough that a median of it ignores a few odd steps.
HISTORY_WINDOW = 10
# With fewer earlier steps than this the median is the noise of one or two batches: the gate says so in
# one line and does not fail (a run's first steps are its noisiest: warm-up, changing lengths).
HISTORY_MIN_STEPS = 5
# Band = median + max(margin × median, floor) for the higher-is-worse metrics, and for ESS (lower is
# worse) the same on its deficit 1 − ESS. A healthy run's step-to-step variation of these numbers is
# tens of percent (a new sample of prompts each step); the faults the diagnosis knows multiply them
# tenfold or more. Doubling within one step is therefore the default alarm.
HISTORY_MARGIN = 1.0
# `watch`'s stale-weights alarm (analysis/lag/history.py): a step's lag-0 KL k3 beyond (1 + HISTORY_MARGIN) × the run's
# lag-0 median by more than this many of its own standard errors (two: the z of the diagnosis's noise tests).
FLOOR_Z = 2.0
# A lag L ≥ 1 is held to the run's own history of that lag (analysis/lag/history.py, docs/staleness.md): a step whose
# KL k3 at lag L is beyond (1 + LAG_HISTORY_MARGIN) × the median of the earlier clean steps at lag L, by more than
# FLOOR_Z of its own standard errors, is an engine that does not hold the weights its labels say. A clean run's KL at a
# fixed lag moves with the policy's speed: on the tiny model's real Adam steps it swings 2-3× within a few steps
# (benchmarks/bench_lag_history.py measures the false alarms), while a sync that stops at lag 1 makes the next step's
# tokens a lag older, which roughly quadruples it.
LAG_HISTORY_MARGIN = 2.0
# Earlier clean steps of a lag needed before it is judged (a one-step-off run judges its lag from its fifth step).
LAG_HISTORY_MIN_STEPS = 3
# A lag ≥ 1 is in its first rise while its steps set new highs, one step at a time allowed below the high by at most
# this factor (a warm-up, or an engine that never took an update: the KL grows from the run's start); such steps are
# not judged one by one (the median of a rising history would flag every step of a warm-up), the run's growth is
# (NEVER_*). A flat series sets new highs ever more rarely: two steps in a row below the high end the rise.
RISE_KEEP = 0.7
# An engine that never took an update (analysis/lag/history.never_delivered): over at least NEVER_MIN_STEPS steps of
# one lag, each third's median KL k3 (per lr² where each step gives its `lr`) at least NEVER_GROWTH × the third before.
NEVER_MIN_STEPS = 9
NEVER_GROWTH = 1.5
# Each metric's floor (the least a band reaches past the median) is in its catalogue entry (catalogue.metrics).
# The most of index.json `check --history` reads: a row is under 1 kB, so 32 MiB holds some 30,000 steps;
# a larger (or endless) file is refused rather than read into memory.
HISTORY_MAX_BYTES = 32 * 1024 * 1024
