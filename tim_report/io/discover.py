"""A path on the command line → the batches to analyse (`Source`s), one per training step.

    a file, or one step's folder       one Source
    a framework's run folder           one per step, in the shapes its dump declares (io/dumps: the folder an
                                       output dir keeps its dumps in, each step's file or its step_S/ folder of
                                       rank files; a step of several files, such as a rollout id's ranks, is one)
    a save_step run folder             one per step_S/ folder (all its rank_*.npz files, merged by io/ranks.py)
    a folder of step files             one per file (global_step_N.pt, step_N.npz, ...)

Sources come sorted by step, with run ids unique within the folder. Layouts are told apart by the
names the frameworks give their files and folders (every registered dump's, never a framework named here),
and the framework is confirmed from each file's content (`detect.py`); a folder mixing frameworks, or holding
nothing readable, is bad input.

`scan(path)` is what `build` and `check` use on a run folder: a step of it that cannot be read (an empty or
truncated file, a step folder with no rank file) is an `Unreadable` with its reason, beside the steps that can,
so one bad step does not stop the run. `sources(path)` is strict: the first such step is bad input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..catalogue.frameworks import run_folders
from ..errors import BadInput, parser_limits, regular_file
from .detect import check_hint, detect_file, first_record
from .dumps import Dump, dump, dumps, glob
from .readers import SUFFIXES, named

STEP_RE = re.compile(r"(?:global[_-]?)?step[_-]?(\d+)", re.IGNORECASE)
RANK_NPZ = re.compile(r"rank_(\d+)\.npz$")  # save_step's step_S/rank_R.npz
SAVED_STEP = "save_step step"  # the kind of such a Source: io.load merges its rank files
STEP_DIR = re.compile(r"step_(\d+)$")
STEP_LIKE = re.compile(r"step_")  # a folder named like a step; one STEP_DIR does not parse is an unreadable step


@dataclass(frozen=True)
class Source:
    """One batch to analyse: the files that hold it, who wrote them, its step and a run id for its page."""

    paths: tuple[Path, ...]
    framework: str
    step: int | None
    run_id: str
    origin: Path  # the file or step folder, named in messages and as the report's source
    kind: str = "file"  # how it was found, said by `inspect`
    shown: str | None = None  # how pages name it: its own name (service.build.shown_path); None: origin as given


@dataclass(frozen=True)
class Unreadable:
    """A step of a run folder that cannot be read: where it is, its step and run id, and why (one line)."""

    origin: Path
    step: int | None
    run_id: str
    reason: str
    shown: str | None = None  # as Source.shown

    def entry(self) -> dict:
        """Its line of index.json's `unreadable` (docs/index-json.md)."""
        return {"id": self.run_id, "step": self.step, "path": self.shown or str(self.origin), "reason": self.reason}

    @classmethod
    def of(cls, path: Path, exc: BadInput) -> Unreadable:
        step = _int(STEP_DIR, path.name) if path.is_dir() else step_of(path)
        inner = exc.source if exc.source not in (str(path), "") else None  # a rank file inside a step folder
        reason = f"{Path(inner).name}: {exc.problem}" if inner else exc.problem
        return cls(path, step, step_id(step, path.name if path.is_dir() else path.stem), reason)


def completion_marker(src: Source) -> Path | None:
    """The file a framework writes into a step folder once the step is complete (its dump's `marker`, such as
    prime-rl's `step_S/STABLE`), or None when it writes none: what `watch` waits for before it reads a step."""
    d = dump(src.framework)
    return src.origin / d.marker if d is not None and d.marker and src.origin.is_dir() else None


def settle_step(src: Source, own: object, notes: list[str]) -> object:
    """The one rule for a batch's step, for every format (`load` and `inspect` both come here): the path's step
    (step_S/, train_data_stepN, {rollout_id}.pt, global_step_N: what the run id and the index order use) when
    the path names one, else the step the file itself records (`own`); a note when the two disagree."""
    if src.step is None:
        return own
    if own is not None and own != src.step:
        notes.append(f"the path says step {src.step}, the file says {own}: the path's step is used")
    return src.step


def sources(path: str | Path, format_hint: str | None = None) -> list[Source]:
    """Every batch under `path`, sorted by step (BadInput when there is none, the folder mixes frameworks, or a
    step cannot be read)."""
    found, bad = scan(path, format_hint)
    if bad:
        raise BadInput(bad[0].origin, bad[0].reason)
    return found


def scan(path: str | Path, format_hint: str | None = None) -> tuple[list[Source], list[Unreadable]]:
    """Every batch under `path` sorted by step, and the steps of a run folder that cannot be read (sorted too).
    A file, or a folder of one step, that cannot be read is BadInput, as is a folder with no step at all."""
    path = Path(path)
    hint = check_hint(format_hint)
    if not path.exists():
        raise BadInput(path, "no such file or folder")
    regular_file(path)
    bad: list[Unreadable] = []
    with parser_limits(path):  # a first record nested too deep, or an integer of too many digits
        found = _folder(path, hint, bad) if path.is_dir() else [file_source(path, hint)]
    if not found and not bad:
        raise BadInput(path, "no step batch found here")
    several = len(found) + len(bad) > 1
    readable = []
    for s in found:  # every file a step holds, before anything hashes or reads it (the cache key hashes them all)
        try:
            for p in s.paths:
                regular_file(p)
        except BadInput as exc:
            if not several:
                raise
            bad.append(replace(Unreadable.of(s.origin, exc), step=s.step, run_id=s.run_id))
            continue
        readable.append(s)
    return _unique_ids(sorted(readable, key=step_order)), sorted(bad, key=step_order)


def step_order(s: Source | Unreadable) -> tuple:
    """Steps in order, those without a step last, then by path."""
    return s.step is None, s.step or 0, str(s.origin)


def _each(items: list[Path], make, bad: list[Unreadable]) -> list[Source]:
    """`make(item)` for each step of a run folder; a step that is bad input joins `bad` instead of stopping the run."""
    out = []
    for item in items:
        try:
            out.append(make(item))
        except BadInput as exc:
            bad.append(Unreadable.of(item, exc))
    return out


def file_source(path: Path, hint: str | None = None) -> Source:
    """One file: its framework from its content (or the hint), its step from its path or content."""
    regular_file(path)
    if path.stat().st_size == 0:
        raise BadInput(path, "file is empty")
    framework = hint or detect_file(path)
    d = dump(framework)
    if d is not None and d.rank_files:  # one rank of a step folder
        step = _int(STEP_DIR, path.parent.name)
        step = step if step is not None else _record_step(path)
        return Source((path,), framework, step, step_id(step, path.stem), path, f"{framework} rank file")
    if d is not None and d.source is not None and (found := d.source(path)) is not None:
        return found
    step = step_of(path, d)
    if d is not None and d.step_files:
        return Source((path,), framework, step, step_id(step, path.stem), path, f"{framework} dump file")
    return Source((path,), framework, step, path.stem, path, "file")


def _folder(path: Path, hint: str | None, bad: list[Unreadable]) -> list[Source]:
    registered = dumps()
    if not _own_folder(path, registered):  # an output dir: into the folder a framework keeps its dumps in
        path = next((path / d.folder for d in registered if d.folder and (path / d.folder).is_dir()), path)
    members = _own_folder(path, registered)
    if members:
        return _dump_files(path, members, hint, bad)
    ranked = [d for d in registered if d.rank_files]  # a step is a step_S/ folder of rank files
    logs = [d for d in registered if d.step_files and not d.folder]  # a step is a file, in any folder
    kinds: dict[str, list[Path]] = {f"{d.name} step folder": _ranks(path, d) for d in ranked}
    kinds["save_step step folder"] = _rank_npz(path) or _odd_rank_files(path)
    kinds["step_S folders"] = sorted(d for d in path.iterdir() if d.is_dir() and STEP_LIKE.match(d.name))
    kinds.update({f"{d.name} log dir": _named(path, [d]) for d in logs})
    present = [k for k, v in kinds.items() if v]
    if len(present) > 1:
        raise BadInput(path, f"holds dumps of several layouts ({', '.join(present)}): point at one of them")
    step_dump = next((d for d in ranked if present == [f"{d.name} step folder"]), None)
    if step_dump is None and not present:  # an empty step folder of a run: its rank files are missing
        step_dump = next((d for d in ranked if STEP_DIR.match(path.name) and
                          ((d.marker and (path / d.marker).exists()) or path.parent.name == d.folder)), None)
    if step_dump is not None:
        return [_rank_step(path, step_dump, hint)]
    if present == ["save_step step folder"]:
        return [_saved_step(path, hint)]
    if present == ["step_S folders"]:
        return _each(kinds["step_S folders"], lambda s: _step_folder(s, ranked, hint), bad)
    log = next((d for d in logs if present == [f"{d.name} log dir"]), None)
    if log is not None:
        return _each(kinds[present[0]], lambda f: file_source(f, hint) if hint else _confirmed(f, log.name), bad)
    return _plain_files(path, hint, bad)


def _own_folder(path: Path, registered: tuple[Dump, ...]) -> list[Dump]:
    """The frameworks that keep their step files in a folder of this name (two may share one: the content tells them apart)."""
    return [d for d in registered if d.folder == path.name and d.step_files]


def _named(folder: Path, members: list[Dump]) -> list[Path]:
    """The files of `folder` named as these frameworks name their step files."""
    return sorted(f for f in folder.iterdir() if f.is_file() and any(p.fullmatch(f.name) for d in members for p in d.patterns))


def _dump_files(folder: Path, members: list[Dump], hint: str | None, bad: list[Unreadable]) -> list[Source]:
    """A framework's own folder of step files; frameworks sharing the folder's name are told apart by the first
    file's content. A step of several files (a rollout id's ranks, a train dump joined with its rollout dump)
    is one Source, as the framework's `source` groups it."""
    files = _named(folder, members)
    if not files:
        raise BadInput(folder, f"no {'/'.join(d.name for d in members)} dump in this folder (expected "
                               f"{' or '.join(p for d in members for p in d.step_files)})")
    names = [d.name for d in members]
    if hint is not None and hint not in names:
        return _each(files, lambda f: file_source(f, hint), bad)
    framework = hint or (names[0] if len(names) == 1 else _first_framework(files))
    d = next((d for d in members if d.name == framework), None)
    if d is not None and d.source is not None:
        grouped = _each(files, lambda f: d.source(f) or file_source(f, d.name), bad)
        return list({s.origin: s for s in reversed(grouped)}.values())[::-1]  # one per step, its first file's
    return _each(files, lambda f: file_source(f, hint) if hint else _confirmed(f, framework), bad)


def _ranks(step_dir: Path, d: Dump) -> list[Path]:
    """A step folder's rank files of this framework, in rank order."""
    rank = d.rank_pattern
    assert rank is not None and d.rank_files is not None
    found = [(int(m.group(1)), f) for f in step_dir.glob(glob(d.rank_files)) if (m := rank.fullmatch(f.name))]
    return [f for _, f in sorted(found)]


def _step_folder(step_dir: Path, ranked: list[Dump], hint: str | None) -> Source:
    """One step_S/ folder of a run: save_step's rank files, or a framework's; a name that is not step_N (step_-3,
    step_2.9) is a step that cannot be read (its row says why), never a folder silently passed over."""
    if not STEP_DIR.fullmatch(step_dir.name):
        raise BadInput(step_dir, "is named like a step folder but its step does not parse (expected step_N, N a "
                                 "non-negative integer): not read")
    if _rank_npz(step_dir) or _odd_rank_files(step_dir):
        return _saved_step(step_dir, hint)
    d = next((d for d in ranked if _ranks(step_dir, d)), ranked[0] if ranked else None)
    return _rank_step(step_dir, d, hint) if d is not None else _saved_step(step_dir, hint)


def _rank_step(step_dir: Path, d: Dump, hint: str | None) -> Source:
    """A framework's step folder: the union of its rank files (no rank file is bad input: the step was not written)."""
    ranks = _ranks(step_dir, d)
    if not ranks:
        raise BadInput(step_dir, f"{d.name} step folder with no {glob(d.rank_files or '')} file (was the step exported?)")
    if hint not in (None, d.name) and len(ranks) > 1:
        raise BadInput(step_dir, f"--format-hint {hint} reads one file, and this {d.name} step has {len(ranks)} rank "
                                 "files: point at one of them")
    for f in ranks:
        regular_file(f)
    step = _int(STEP_DIR, step_dir.name)
    step = step if step is not None else _record_step(ranks[0])
    return Source(tuple(ranks), hint or d.name, step, step_id(step, step_dir.name), step_dir,
                  f"{d.name} step folder ({len(ranks)} rank file{'s' if len(ranks) != 1 else ''})")


def _odd_rank_files(folder: Path) -> list[Path]:
    """rank_*.npz files whose rank does not parse (rank_-1.npz, rank_1.7.npz)."""
    return sorted(f for f in folder.glob("rank_*.npz") if not RANK_NPZ.fullmatch(f.name))


def _rank_npz(folder: Path) -> list[Path]:
    """save_step's rank files of one step, in rank order (a hidden `.rank_0.npz.*.tmp` being written is not one)."""
    found = [f for f in folder.glob("rank_*.npz") if RANK_NPZ.fullmatch(f.name)]
    return sorted(found, key=lambda f: _int(RANK_NPZ, f.name) or 0)


def _saved_step(step_dir: Path, hint: str | None) -> Source:
    """A step written by save_step: the canonical files of its ranks, read as one batch."""
    ranks = _rank_npz(step_dir)
    ranked = [d for d in dumps() if d.rank_files]
    odd = _odd_rank_files(step_dir)
    if odd:
        raise BadInput(step_dir, f"holds {odd[0].name}, whose rank does not parse (expected rank_R.npz, R a non-negative "
                                 "integer): the step cannot be read whole")
    if not ranks:
        raise BadInput(step_dir, "step folder with no " + "".join(f"{glob(d.rank_files or '')} ({d.name}) or " for d in ranked)
                       + "rank_*.npz (save_step) file")
    for d in ranked:
        if _ranks(step_dir, d):
            raise BadInput(step_dir, f"holds both {d.name} {glob(d.rank_files or '')} and save_step rank_*.npz files: keep "
                                     "one kind per step")
    if hint not in (None, "dict"):
        raise BadInput(step_dir, f"--format-hint {hint}: these rank_*.npz files are tim-report's canonical format (hint dict)")
    step = _int(STEP_DIR, step_dir.name)
    return Source(tuple(ranks), "dict", step, step_id(step, step_dir.name), step_dir,
                  f"{SAVED_STEP} folder ({len(ranks)} rank file{'s' if len(ranks) != 1 else ''})")


def _first_framework(files: list[Path]) -> str:
    """The framework of the first dump that can be read (a truncated first dump does not decide the folder's)."""
    first: BadInput | None = None
    for f in files:
        try:
            return detect_file(f)
        except BadInput as exc:
            first = first or exc
    assert first is not None  # files is not empty
    raise first


def _plain_files(folder: Path, hint: str | None, bad: list[Unreadable]) -> list[Source]:
    """A folder of step files: one Source each; their frameworks must agree."""
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in SUFFIXES)
    if not files:
        raise BadInput(folder, f"is a directory with no step batch in it: expected {named()} files, a step folder, or a run "
                               f"folder ({run_folders()})")
    found = _each(files, lambda f: file_source(f, hint), bad)
    frameworks = sorted({s.framework for s in found})
    if len(frameworks) > 1:
        raise BadInput(folder, f"mixes files of several frameworks ({', '.join(frameworks)}): point at one kind")
    return found


def _confirmed(path: Path, framework: str) -> Source:
    """A file whose name says its framework: the content must agree (names are never enough)."""
    found = file_source(path, None)
    if found.framework != framework:
        raise BadInput(path, f"named like a {framework} dump but its content is not one (looks like: {found.framework})")
    return found


def step_of(path: Path, d: Dump | None = None) -> int | None:
    """A file's step from its name: as its framework names its step files (where that applies), else `step_N`."""
    if d is not None and (d.folder is None or path.parent.name == d.folder):
        for p in d.patterns:
            if (m := p.fullmatch(path.name)) is not None:
                return int(m.group(1))
    m = STEP_RE.search(path.stem)
    return int(m.group(1)) if m else None


def _record_step(path: Path) -> int | None:
    step = first_record(path).get("step")
    return step if isinstance(step, int) else None


def _int(pattern: re.Pattern, name: str) -> int | None:
    m = pattern.fullmatch(name) or pattern.search(name)
    return int(m.group(1)) if m else None


def step_id(step: int | None, fallback: str) -> str:
    return f"step_{step}" if step is not None else fallback


def _unique_ids(found: list[Source]) -> list[Source]:
    seen: dict[str, int] = {}
    out = []
    for s in found:
        seen[s.run_id] = seen.get(s.run_id, 0) + 1
        n = seen[s.run_id]
        out.append(s if n == 1 else replace(s, run_id=f"{s.run_id}-{n}"))
    return out
