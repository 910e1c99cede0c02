"""The run view's numbers: change points and the run verdict over steps, the run's own band (`check --history`,
`watch`) and each lag against the run's own history of it (analysis/trend.py, run_verdict.py, history.py,
lag/history.py): config/__init__.py re-exports every name, config.NAME as before."""

from __future__ import annotations

# ---- change points ----------------------------------------------------------------------------------------

# The position-onset detector's search along a response (analysis/changepoints.py): PELT (ruptures) on a series
# with a weighted L2 cost; the penalty per change is
# CHANGE_POINT_PENALTY · σ̂² · log n, σ̂ the series' own noise (a robust scale of its first differences).
# 2 is the BIC's two parameters (a new level and its position): on pure noise of 200 points about one
# series in twenty shows a spurious change, which the callers' effect-size checks then discard.
CHANGE_POINT_PENALTY = 2.0
CHANGE_POINT_MIN_SIZE = 3  # points in the shortest segment (both searches): a single odd step is an outlier, not a level
# The run view's change points (analysis/shifts.py): a split must stand out of the noise of the two segments
# it separates at this two-sided false-alarm level per metric, Bonferroni-corrected over the positions tried.
# Nine metrics are searched, so a steady run shows a change with probability ≤ 9 · α under the noise model;
# docs/diagnosis.md measures the rate on simulated steady runs (scripts/run_view_matrix.py).
CHANGE_POINT_ALPHA = 1e-3
# Each side's variance (or a count's over-dispersion) is shrunk towards the segment's robust step-to-step scatter
# by this many pseudo-steps: a side of three steps cannot claim a variance of zero.
CHANGE_POINT_PRIOR_DF = 2.0

# ---- the run view (design §7): the trend of each headline metric over steps ------------------------------
# Which metrics the run view follows, and their floors on a change of level: tim_report.catalogue.metrics.

# The run-level findings (analysis/drift.py) read each step's median |δ| (robust to the few wild tokens that move
# KL by decades), in logs. A jump or a spike is a step at least RUN_JUMP_RATIO× the level before it: steady bf16
# runs wander by 10-30% from step to step, a changed weight format or stale weights move every token. A spike lasts
# at most RUN_SPIKE_MAX_STEPS steps (a level lasts longer: CHANGE_POINT_MIN_SIZE); growth rises by
# RUN_GROWTH_MIN_RATIO× or more over at least RUN_GROWTH_MIN_STEPS steps along a line that fits better than any
# single jump. Every move must also stand out of the noise by RUN_FINDING_Z standard errors: the run's own robust
# step-to-step scatter, and each step's sampling error, RUN_MEDIAN_LOG_SE / √tokens (the standard error of the log of
# a median of |δ|: 1.17 / √T for normal δ, 1.5 for the heavier tails of real mismatch).
RUN_JUMP_RATIO = 3.0
RUN_SPIKE_MAX_STEPS = 3
RUN_GROWTH_MIN_RATIO = 2.0
RUN_GROWTH_MIN_STEPS = 5
RUN_FINDING_Z = 5.0
RUN_MEDIAN_LOG_SE = 1.5
# The run verdict (analysis/run_verdict.py): the latest stretch of steps is the one where at least this share of
# the steps has the last step's regime; a finding that leads this share of a stretch's steps explains it. Three in
# four: a detector that misses one small batch in eight must not hide what the other seven say.
RUN_VERDICT_SHARE = 0.75

TREND_LOG_AXIS_SPAN = 10.0  # a panel gets a log axis when its positive values span this factor or more
TREND_POINTS_MAX = 200  # above this many steps the trend draws lines and faint points (no overplotting)
TREND_TABLE_MAX_STEPS = 50  # report.md's step table up to this many steps; longer runs: the HTML index and index.json

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
# fixed lag moves with the policy's speed: on the tiny model's real Adam steps it swings 2-4× within a few steps
# (benchmarks/bench_lag_history.py, docs/calibration.md: 47 clean loop runs of lags 1-3, none beyond read whole, 0.18%
# of 20,000 subsets of them; 2.5 would cut that to 0.08% for a step of delay at lag 2), while a sync that stops at
# lag 1 makes the next step's tokens a lag older, which roughly quadruples it.
LAG_HISTORY_MARGIN = 2.0
# ... and, to open such an event, its value at least LAG_JUMP × the step before's (a sync that stops makes the next
# step's tokens a whole lag older: on the loop at lag 1, 2.5-5.4× the step before, where no clean run of lags 1-3 read
# whole was both 3× above its history and 2× its step before; on subsets of 8-16 sequences a step, 0.18%, all through
# this rule), or less its noise LAG_SUSTAINED × the median (an event that came on slowly: one lag older is under 2× at
# lag ≥ 2; the clean runs' highest read whole was 4.4×, bench_lag_history.py).
LAG_JUMP = 2.0
LAG_SUSTAINED = 5.0
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
# ... and the last third's median at least NEVER_TOTAL × the first's (engines that never took an update grew 5.7-13.9×
# on the loop at lags 1-3 over 20 steps; clean runs at most 2.0×, lr-read warm-ups 1.8×; 0.04-0.06% of clean subsets,
# benchmarks/bench_lag_history.py).
NEVER_TOTAL = 4.0
# A lag is read per unit of lr² only while the learning rate moves smoothly: no step's lr above LR_STEP_MAX× or below
# 1/LR_STEP_MAX× the step's before (a linear warm-up rises by at most 2× a step, from its first step to its second). A
# step schedule (MultiStepLR's ×0.1) or a warm restart moves the lr at once, while a lag's KL holds the updates of the
# steps before it: per lr², the step after a 10× drop read 100× its history (`stale weights`, a false alarm). Such a
# lag is read without the lr, as in a run that gives none.
LR_STEP_MAX = 2.0
# Each metric's floor (the least a band reaches past the median) is in its catalogue entry (catalogue.metrics).
# The most of index.json `check --history` reads: a row is under 1 kB, so 32 MiB holds some 30,000 steps;
# a larger (or endless) file is refused rather than read into memory.
HISTORY_MAX_BYTES = 32 * 1024 * 1024
