"""`watch`: follow a live run folder, rebuilding its site each time a step is complete, and raising alarms.

Plain polling, not file-system events: a run folder usually sits on NFS, Lustre or a shared volume written by other
machines, where inotify/FSEvents see nothing, and a poll of `stat()` works the same on every file system. A step is
taken only once it is complete (`Poller`):

- every one of its files is settled: the same size, mtime and inode on two polls in a row, and not empty;
- no file of it has a temporary name (`*.tmp`, `*.part`, a hidden `.name`, ...): a writer that saves to a temporary
  name and renames it into place (tim-report's own `save_step`, `torch.save` to a temp file) is seen only after the
  rename;
- a step folder has its framework's completion marker (the dump's `marker`: prime-rl's `STABLE`, written when every
  rank has flushed), once any step of the run has one (io.discover.completion_marker);
- it has as many files (ranks) as `--ranks` declares, else as many as the most any earlier complete step had.

A round rebuilds the site from the complete steps with `service.build.build` (the per-step cache keeps the unchanged
steps' folders as they are; the index is rewritten; the publish is all or nothing), then reports what the site did not
hold before it: a step outside the run's own band (`check --history`'s rule, analysis/history.py) and a new change
point (the run view's, analysis/trend.py). Each is one line and, with an alarm command, one run of it.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.history import check_history
from ..analysis.lag.history import has_lag, lag_changed, lag_key, same_lag
from ..catalogue import staleness as lag_words
from ..catalogue.findings.lag import ENGINE_CAUSES, LAG_ALARMS, STALE
from ..catalogue.numbers import fmt
from ..config import HISTORY_MARGIN, HISTORY_WINDOW
from ..errors import BadInput
from ..io import Source
from ..io.discover import completion_marker, scan
from ..site.index_json import read_rows
from ..site.layout import INDEX_JSON
from ..site.publish import check_target
from .build import BuildOptions, BuildResult, build

TEMP_NAME = re.compile(r"(^[.#~])|([.~](tmp|temp|part|partial|incomplete|swp|crdownload)$)|(~$)|(\.tmp\.)", re.IGNORECASE)
ALARM_TIMEOUT = 60.0  # seconds an alarm command may run before it is stopped: a hung notifier must not stop the watch


@dataclass
class WatchOptions:
    build: BuildOptions = field(default_factory=BuildOptions)
    interval: float = 5.0  # seconds between polls; a step is taken at the earliest one poll after its last write
    ranks: int | None = None  # --ranks: the files (ranks) every step has; None: as many as earlier steps had
    history_window: int = HISTORY_WINDOW
    history_margin: float = HISTORY_MARGIN


@dataclass
class Alarm:
    """A step outside the run's band ("band"), a new change point ("change_point"), or the first step that is not
    bitwise identical in a run whose steps were ("identity"), as one line and as data.

    `row` is the index row of the alarm's step (None when the site has no row at that step): its regime, leading
    finding and side are the cause the line says first and the alarm command is told."""

    kind: str
    step: int | float | None
    run_id: str
    metrics: list[str]
    value: float | None  # the first metric's value at the step
    line: str
    row: dict | None = None

    def env(self, site: Path) -> dict[str, str]:
        """What an alarm command is told, as environment variables (never as shell text)."""
        row = self.row or {}
        return {"TIM_REPORT_ALARM": self.kind, "TIM_REPORT_STEP": "" if self.step is None else str(self.step),
                "TIM_REPORT_RUN_ID": self.run_id, "TIM_REPORT_METRIC": self.metrics[0] if self.metrics else "",
                "TIM_REPORT_METRICS": ",".join(self.metrics), "TIM_REPORT_VALUE": "" if self.value is None else repr(self.value),
                "TIM_REPORT_MESSAGE": self.line, "TIM_REPORT_SITE": str(site),
                "TIM_REPORT_REGIME": str(row.get("regime") or ""),
                "TIM_REPORT_FINDING": str((row.get("findings") or [""])[0]),
                "TIM_REPORT_SIDE": str(row.get("side") or ""), "TIM_REPORT_GLANCE": str(row.get("glance") or ""),
                "TIM_REPORT_PAGE": f"{self.run_id}/index.html"}


@dataclass
class Round:
    """What one poll did: the build (None when no step changed), the new rows, the alarms, and notes to print."""

    result: BuildResult | None = None
    new_rows: list[dict] = field(default_factory=list)
    alarms: list[Alarm] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


Stat = tuple[int, int, int]  # size, mtime_ns, inode


def _stat(path: Path) -> Stat | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def temporary(path: Path) -> bool:
    """A name writers give a file before renaming it into place."""
    return TEMP_NAME.search(path.name) is not None


class Poller:
    """Which steps of a run folder are complete; call `poll()` once per interval (settling needs two polls)."""

    def __init__(self, run_dir: Path, format_hint: str | None = None, ranks: int | None = None):
        self.run_dir, self.hint, self.declared = run_dir, format_hint, ranks
        self.seen: dict[Path, Stat | None] = {}  # every file of every step at the previous poll
        self.ranks = 0  # the most files an accepted step had
        self.stable = False  # a step of this run has had its framework's completion marker
        self.pending: set[str] = set()  # the problems the previous poll met: one met on two polls in a row is said
        self.said: set[str] = set()  # the problems said, each once while it lasts (a file being written meets one)

    def poll(self) -> tuple[list[Source], list[str]]:
        """The complete steps now, and notes: a problem met on two polls in a row, said once while it lasts."""
        found, notes = self._discover()
        fresh = [n for n in notes if n in self.pending and n not in self.said]  # a problem that lasts, said once
        self.pending, self.said = set(notes), (self.said & set(notes)) | set(fresh)
        now = {p: _stat(p) for s in found for p in s.paths}
        previous, self.seen = self.seen, now
        self.stable |= any((m := completion_marker(s)) is not None and m.is_file() for s in found)
        settled = [s for s in found if self._settled(s, now, previous)]
        if self.declared is None and settled:
            self.ranks = max(self.ranks, *(len(s.paths) for s in settled))
        need = self.declared if self.declared is not None else self.ranks
        return [s for s in settled if len(s.paths) >= need], fresh

    def _discover(self) -> tuple[list[Source], list[str]]:
        """Every step `build` would find, and a note for each step it cannot read yet (a JSON-lines file half
        written, a step folder with no rank file yet): the others still go on (io.scan)."""
        if not self.run_dir.exists():
            return [], []
        try:
            found, bad = scan(self.run_dir, self.hint)
        except BadInput as exc:
            return [], [f"waiting: {exc}"]
        return found, [f"waiting: {b.origin}: {b.reason}" for b in bad]

    def _settled(self, s: Source, now: dict, previous: dict) -> bool:
        """Every file unchanged since the previous poll, none temporary or empty, and the completion marker if the run
        uses one."""
        if any(temporary(p) for p in s.paths):
            return False
        if any(now[p] is None or now[p] != previous.get(p) or now[p][0] == 0 for p in s.paths):
            return False
        marker = completion_marker(s)
        return not (marker is not None and self.stable and not marker.is_file())


def build_path(s: Source) -> Path:
    """The path `build` reads this one step from: its step folder or file (a step of several rank files: any of them)."""
    return s.origin if s.origin.exists() else s.paths[0]


class Watch:
    """A run folder followed into a site: `step()` is one poll and, when a complete step is new or changed, one build.

    `say`, when given, is told each `skipped:` line as the build meets its step (the command line prints it then);
    without it those lines are the round's notes."""

    def __init__(self, run_dir: Path, out: Path, options: WatchOptions, say: Callable[[str], None] | None = None):
        check_target(out)  # a folder that cannot be a site is refused before the first poll
        self.run_dir, self.out, self.opts, self.say = run_dir, out, options, say
        self.poller = Poller(run_dir, options.build.load.format_hint, options.ranks)
        self.built: tuple | None = None  # the complete steps and their files' stats at the last build
        self.bad: dict[Path, tuple] = {}  # a step's path that was bad input → its stats then (retried once they change)
        self.known_ids, self.known_changes = _known(out)
        self.held = len(self.known_ids)  # the steps the published index lists (the site's last build)
        self.alarmed = {step for step, _ in self.known_changes}  # the steps an alarm was raised for: one per event
        self.lag_events: dict[str, bool] = {}  # a lag alarm's kind → its event still open (the last step had it too)
        self.sync_event: str | None = None  # the sync finding of the last step, whose alarm was raised (docs/sync.md)
        self.sync_run: set[str] = set()  # the sync findings only the steps read together show, alarmed once each

    def step(self) -> Round:
        ready, notes = self.poller.poll()
        rnd = Round(notes=notes)
        ready = [s for s in ready if self.bad.get(build_path(s)) != _stats(s)]
        state = tuple((s.run_id, _stats(s)) for s in ready)
        if not ready or state == self.built:
            return rnd
        skipped: list[Source] = []

        def skip(path: Path, exc: BadInput) -> None:  # a bad step: said now, left out until its files change
            culprit = next((s for s in ready if build_path(s) == path or _names(s, str(path))), None)
            if culprit is None:
                raise exc
            skipped.append(culprit)
            self.bad[build_path(culprit)] = _stats(culprit)
            line = f"skipped: {exc}"
            self.say(line) if self.say is not None else rnd.notes.append(line)

        try:  # one pass: the bad steps are left out as they are met, the others built beside them
            rnd.result = build([build_path(s) for s in ready], self.out, self.opts.build, skip=skip)
        except BadInput:
            if len(skipped) < len(ready):  # not a step's own problem (the output folder): the watch cannot go on
                raise
        self.built = tuple(x for s, x in zip(ready, state) if s not in skipped)
        if rnd.result is not None:
            self.held = len(rnd.result.rows)
            self._news(rnd, rnd.result)
        return rnd

    def _news(self, rnd: Round, result: BuildResult) -> None:
        """The rows and change points the site did not hold before, and the alarms they raise: one per new event (a
        step outside the band, a change point at a step not alarmed yet), its cause first."""
        rnd.new_rows = [r for r in result.rows if r["id"] not in self.known_ids]
        near = Earlier(result.rows, self.opts.history_window)
        for row in sorted(rnd.new_rows, key=lambda r: (r.get("step") is None, r.get("step") or 0)):
            if self._sync_alarm(rnd, row):  # exact evidence of what the engine held: the cause, before the log-probs
                continue
            if near.ordered and _step(row) is not None:  # each window by a binary search: a backlog is N·log N, not N²
                broke = near.identity_broken(row)
                history = near.before(("lag", lag_key(row)) if lag_key(row) is not None else ("all",), row)
            else:
                others = [r for r in result.rows if r is not row]
                broke = identity_broken(row, result.rows)  # the sharper event of a run that was bitwise identical
                history = same_lag(row, others)
            lagged = self._lag_alarm(row)  # stale weights or a negative lag: the cause, before any band
            # a step with tokens of lag ≥ 1 is read lag by lag (its lag_reading), not held to a band of whole-batch
            # numbers that hold the lag's own mismatch
            band = check_history(row, history, self.opts.history_window, self.opts.history_margin)
            if has_lag(row):
                band.violations = []
            if broke is not None:
                rnd.alarms.append(Alarm("identity", row.get("step"), row["id"], ["abs_delta_max"], row.get("abs_delta_max"),
                                        f"{_cause(row)}; {broke}", row))
                self.alarmed.add(row.get("step"))
            elif lagged is not None:
                if lagged.line:  # a new event; a step that continues an open one is quiet, its band included
                    rnd.alarms.append(lagged)
                self.alarmed.add(row.get("step"))
            elif band.violations:
                first, more = band.violations[0], len(band.violations) - 1
                band_line = f"outside the run's band: {first.message}" + (
                    f" (and {more} more metric{'s' if more > 1 else ''})" if more else "")
                # cause first where the step has one; a step that alone reads as noise is news by the band alone
                line = (f"{_cause(row)}; {band_line}" if row.get("findings") else
                        f"{row['id']}: {band_line}; the step alone reads {row.get('glance') or row.get('regime')}")
                rnd.alarms.append(Alarm("band", row.get("step"), row["id"], [v.id for v in band.violations],
                                        row.get(first.id), line, row))
                self.alarmed.add(row.get("step"))
        self._run_sync_alarms(rnd, result.rows)
        for cp in result.change_steps:
            pairs = {(cp["step"], m) for m in cp["metrics"]}
            at: dict | None = next((r for r in result.rows if r.get("id") == cp["run"]), None)
            # a step that carries tokens of lag ≥ 1 is news by its lag reading alone: its whole-batch numbers move
            # with the policy's speed, the lag's own mismatch
            if (pairs - self.known_changes and cp["step"] not in self.alarmed and not lag_changed(at, result.rows)
                    and not (at is not None and has_lag(at))):
                metric = cp["metrics"][0] if cp["metrics"] else None
                rnd.alarms.append(Alarm("change_point", cp["step"], cp["run"], list(cp["metrics"]),
                                        (at or {}).get(metric) if metric else None,
                                        f"{_cause(at) if at else cp['run']}; change point: {cp['sentence']}", at))
            self.alarmed.add(cp["step"])
            self.known_changes |= pairs
        self.known_ids |= {r["id"] for r in result.rows}


    def _sync_alarm(self, rnd: Round, row: dict) -> bool:
        """A step with a sync finding (the weight digests': analysis/lag/digests.py) raises its alarm, once per event
        (the steps that continue it are quiet); whether it had one."""
        from ..analysis.lag.digests import sync_alarm

        found, was = sync_alarm(row), self.sync_event
        self.sync_event = found[0] if found else None
        if found is None:
            return False
        if found[0] != was:
            rnd.alarms.append(Alarm(found[0], row.get("step"), row["id"], ["weight_digests"], None,
                                    f"{_cause(row)}; {found[1]}", row))
        self.alarmed.add(row.get("step"))
        return True

    def _run_sync_alarms(self, rnd: Round, rows: list[dict]) -> None:
        """A sync error that only the steps read together show (a one-step-off run's digests): its alarm, once, at the
        step whose engine digest shows it."""
        from ..analysis.lag.digests import across_steps, first_step

        for f in across_steps(rows):
            if f["id"] not in self.sync_run:
                self.sync_run.add(f["id"])
                row = first_step(f, rows)
                rnd.alarms.append(Alarm(f["id"], (row or {}).get("step"), (row or {}).get("id", "run"), ["weight_digests"],
                                        None, f"{(row or {}).get('id', 'run')}: {f['title']} (the steps read together)", row))

    def _lag_alarm(self, row: dict) -> Alarm | None:
        """The step's lag alarm: stale weights (its own `stale_weights` finding, or a lag beyond the run's own history
        of it: the row's `lag_reading`, run_index.in_run) or a negative lag; an Alarm with an empty line when the step
        continues an event already alarmed; None without."""
        found = set(row.get("findings") or [])
        reading = row.get("lag_reading") or {}
        # the step's own finding names the cause (a stale prefix cache, the digests): its alarm says it
        moved = reading.get("status") in ("beyond", "never") and not ENGINE_CAUSES & found
        causes = {STALE: STALE in found or moved, "negative_lag": "negative_lag" in found}
        open_before, self.lag_events = self.lag_events, {k: v for k, v in causes.items() if v}
        kind = next((k for k, v in causes.items() if v), None)
        if kind is None:
            return None
        if open_before.get(kind):
            return Alarm(kind, row.get("step"), row["id"], [], None, "", row)
        why = lag_words.run_reading(reading) if kind == STALE and moved else "the step's own finding"
        metric = "lag_kl_k3" if kind == STALE else "lag_mix"
        value = reading.get("kl_k3") if moved else (row.get("lag_kl_k3") or {}).get("0") if kind == STALE else None
        return Alarm(kind, row.get("step"), row["id"], [metric], value, f"{_cause(row)}; {LAG_ALARMS[kind]}: {why}", row)


def identity_broken(row: dict, rows: list[dict]) -> str | None:
    """The line of the first step that stops being bitwise identical in a run whose earlier steps all were, or None."""
    value = row.get("abs_delta_max")
    if not isinstance(value, (int, float)) or not value > 0 or not isinstance(row.get("step"), (int, float)):
        return None
    before = [r for r in rows if isinstance(r.get("step"), (int, float)) and r["step"] < row["step"]]
    return _identity_line(value, len(before), all(r.get("abs_delta_max") == 0 for r in before))


def _identity_line(value: float, before: int, identical: bool) -> str | None:
    if not before or not identical:
        return None
    return (f"no longer bitwise identical: max |δ| {fmt(value)} after {before} identical "
            f"step{'s' if before > 1 else ''} (check --exact names the first differing token)")


def _step(row: dict) -> int | float | None:
    step = row.get("step")
    return step if isinstance(step, (int, float)) and not isinstance(step, bool) else None


class Earlier:
    """The rows before a step, each kind in step order, found by a binary search. `_news` checks each new row against
    the rows before it (its band's window, whether all were bitwise identical), and a watch started
    on a run of N steps has N new rows: a scan of every row for each was N² (minutes at 10,000 steps). The answers are
    those of `identity_broken`, `same_lag` and `window_rows` over every row; `ordered` is empty (the caller scans) when
    a row has no step."""

    def __init__(self, rows: list[dict], window: int):
        self.window = window
        numbered = all(_step(r) is not None for r in rows)
        self.ordered = sorted(rows, key=lambda r: r["step"]) if numbered else []  # stable: ties keep the rows' order
        self.kinds: dict[tuple, tuple[list, list[dict]]] = {}
        for r in self.ordered:
            for kind in (("all",), ("lag", lag_key(r))):
                steps, held = self.kinds.setdefault(kind, ([], []))
                steps.append(r["step"])
                held.append(r)
        self.moved = next((i for i, r in enumerate(self.ordered) if r.get("abs_delta_max") != 0), len(self.ordered))

    def before(self, kind: tuple, row: dict) -> list[dict]:
        """The last `window` rows of this kind whose step is below the row's: all that a window of them reads."""
        steps, held = self.kinds.get(kind, ([], []))
        k = bisect.bisect_left(steps, row["step"])
        return held[max(0, k - self.window):k]

    def identity_broken(self, row: dict) -> str | None:
        value = row.get("abs_delta_max")
        if not isinstance(value, (int, float)) or not value > 0:
            return None
        before = bisect.bisect_left(self.kinds.get(("all",), ([], []))[0], row["step"])
        return _identity_line(value, before, self.moved >= before)


def _cause(row: dict) -> str:
    """'step_13 (step 13): systematic: off-by-one (…), side undetermined, every position': what the step is diagnosed with."""
    return f"{row['id']}: {row.get('glance') or row.get('regime') or 'not diagnosed'}"


def _stats(s: Source) -> tuple:
    return tuple(_stat(p) for p in s.paths)


def _names(s: Source, named: str) -> bool:
    return named in {str(p) for p in (*s.paths, s.origin)} or named.startswith(str(s.origin) + os.sep)


def _known(out: Path) -> tuple[set[str], set[tuple]]:
    """The steps and change points a site already holds (a watch restarted on its own site raises no alarm twice)."""
    if not (out / INDEX_JSON).is_file():
        return set(), set()
    doc, rows = read_rows(out, ())  # capped, every part watch reads checked (types, ranges), or one line saying why not
    ids = {r["id"] for r in rows}
    changes = {(c.get("step"), m) for c in doc.get("change_steps", []) for m in c.get("metrics", [])}
    return ids, changes


def run_alarm(argv: list[str], alarm: Alarm, site: Path) -> str | None:
    """Run the alarm command (an argument list: no shell) with the alarm in its environment; a line when it failed.
    It runs in a process group of its own, ended whole (its children too) when it outlives ALARM_TIMEOUT."""
    try:
        proc = subprocess.Popen(argv, env={**os.environ, **alarm.env(site)}, stdin=subprocess.DEVNULL, start_new_session=True)
    except FileNotFoundError:
        return f"alarm command not found: {argv[0]}"
    except OSError as exc:
        return f"alarm command failed: {argv[0]}: {exc.strerror or exc}"
    try:
        code = proc.wait(timeout=ALARM_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"alarm command stopped after {ALARM_TIMEOUT:g} s: {argv[0]}"
    finally:
        _end_group(proc)
    return f"alarm command exited {code}: {argv[0]}" if code != 0 else None


def _end_group(proc: subprocess.Popen) -> None:
    """Kill what is left of the command's process group (a child it started in the background, or the command itself
    after a timeout or an interrupt), then reap the command."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def follow(watch: Watch, report: Callable[[Round], None], stopped: Callable[[float], bool], once: bool = False) -> None:
    """Poll until `stopped(interval)` (which waits the interval, or less when asked to stop) says to stop. `once`:
    two polls an interval apart (settling needs two), then stop."""
    report(watch.step())
    while not stopped(watch.opts.interval):
        report(watch.step())
        if once:
            return
