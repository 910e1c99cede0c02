"""A path on the command line → the batches to analyse (`Source`s), one per training step.

    a file, or one step's folder       one Source
    prime-rl token_exports/            one per step_S/ folder (all its rank_*.jsonl files)
    a save_step run folder             one per step_S/ folder (all its rank_*.npz files, merged by io/ranks.py)
    a NeMo-RL log dir                  one per train_data_stepN.jsonl
    a slime / miles dump dir           one per rollout id in train_data/ (slime joined with rollout_data/)
    a SkyRL export dir                 one per dumped_data/global_step_N_training_input.pkl
    a folder of step files             one per file (global_step_N.pt, step_N.npz, ...)

Sources come sorted by step, with run ids unique within the folder. Layouts are told apart by the
names the frameworks give their files and folders, and the framework is confirmed from each file's
content (`detect.py`); a folder mixing frameworks, or holding nothing readable, is bad input.

`scan(path)` is what `build` and `check` use on a run folder: a step of it that cannot be read (an empty or
truncated file, a step folder with no rank file) is an `Unreadable` with its reason, beside the steps that can,
so one bad step does not stop the run. `sources(path)` is strict: the first such step is bad input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import BadInput, parser_limits, regular_file
from .detect import INPUT_SUFFIXES, check_hint, detect_file, first_record

STEP_RE = re.compile(r"(?:global[_-]?)?step[_-]?(\d+)", re.IGNORECASE)
RANK_FILE = re.compile(r"rank_(\d+)\.jsonl$")
RANK_NPZ = re.compile(r"rank_(\d+)\.npz$")  # save_step's step_S/rank_R.npz
SAVED_STEP = "save_step step"  # the kind of such a Source: io.load merges its rank files
STEP_DIR = re.compile(r"step_(\d+)$")
STEP_LIKE = re.compile(r"step_")  # a folder named like a step; one STEP_DIR does not parse is an unreadable step
NEMO_FILE = re.compile(r"train_data_step(\d+)\.jsonl$")
SKYRL_FILE = re.compile(r"global_step_(\d+)_training_input\.pkl$")
SLIME_FILE = re.compile(r"(\d+)\.pt$")
MILES_FILE = re.compile(r"(\d+)_(\d+)\.pt$")


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
        step = _int(STEP_DIR, path.name) if path.is_dir() else _step_of(path)
        named = exc.source if exc.source not in (str(path), "") else None  # a rank file inside a step folder
        reason = f"{Path(named).name}: {exc.problem}" if named else exc.problem
        return cls(path, step, _step_id(step, path.name if path.is_dir() else path.stem), reason)


def completion_marker(src: Source) -> Path | None:
    """The file a framework writes once a step is complete (prime-rl's `step_S/STABLE`), or None when it writes none:
    what `watch` waits for before it reads a step."""
    return src.origin / "STABLE" if src.framework == "prime-rl" and src.origin.is_dir() else None


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
    if framework == "prime-rl":
        step = _int(STEP_DIR, path.parent.name)
        step = step if step is not None else _record_step(path)
        return Source((path,), framework, step, _step_id(step, path.stem), path, "prime-rl rank file")
    if framework == "slime" and path.parent.name == "train_data":
        return _slime_source(path)
    if framework == "miles":
        return _miles_source(path)
    step = _step_of(path)
    if framework in ("nemo-rl", "skyrl", "slime"):
        return Source((path,), framework, step, _step_id(step, path.stem), path, f"{framework} dump file")
    return Source((path,), framework, step, path.stem, path, "file")


def _folder(path: Path, hint: str | None, bad: list[Unreadable]) -> list[Source]:
    if path.name == "train_data" or (path / "train_data").is_dir():
        return _train_data(path if path.name == "train_data" else path / "train_data", hint, bad)
    if (path / "token_exports").is_dir():
        path = path / "token_exports"
    if (path / "dumped_data").is_dir():
        path = path / "dumped_data"
    kinds = {
        "prime-rl step folder": sorted(f for f in path.glob("rank_*.jsonl") if RANK_FILE.search(f.name)),
        "save_step step folder": _rank_npz(path) or _odd_rank_files(path),
        "step_S folders": sorted(d for d in path.iterdir() if d.is_dir() and STEP_LIKE.match(d.name)),
        "NeMo-RL log dir": sorted(f for f in path.iterdir() if NEMO_FILE.match(f.name)),
        "SkyRL dumped_data": sorted(f for f in path.iterdir() if SKYRL_FILE.match(f.name)),
    }
    present = [k for k, v in kinds.items() if v]
    if len(present) > 1:
        raise BadInput(path, f"holds dumps of several layouts ({', '.join(present)}): point at one of them")
    if present == ["prime-rl step folder"] or (not present and _looks_like_prime_step(path)):
        return [_prime_step(path, hint)]
    if present == ["save_step step folder"]:
        return [_saved_step(path, hint)]
    if present == ["step_S folders"]:
        return _each(kinds["step_S folders"], lambda d: _step_folder(d, hint), bad)
    if present:
        framework = "nemo-rl" if present == ["NeMo-RL log dir"] else "skyrl"
        return _each(kinds[present[0]], lambda f: file_source(f, hint) if hint else _confirmed(f, framework), bad)
    return _plain_files(path, hint, bad)


def _looks_like_prime_step(path: Path) -> bool:
    """`step_S/` with prime-rl's STABLE marker, or inside `token_exports/`."""
    return STEP_DIR.match(path.name) is not None and ((path / "STABLE").exists() or path.parent.name == "token_exports")


def _prime_step(step_dir: Path, hint: str | None) -> Source:
    """A prime-rl step: the union of its rank files (no rank file is bad input: the step was not written)."""
    ranks = sorted((f for f in step_dir.glob("rank_*.jsonl") if RANK_FILE.search(f.name)),
                   key=lambda f: _int(RANK_FILE, f.name) or 0)
    if not ranks:
        raise BadInput(step_dir, "prime-rl step folder with no rank_*.jsonl file (was the step exported?)")
    if hint not in (None, "prime-rl") and len(ranks) > 1:
        raise BadInput(step_dir, f"--format-hint {hint} reads one file, and this prime-rl step has {len(ranks)} rank "
                                 "files: point at one of them")
    for f in ranks:
        regular_file(f)
    step = _int(STEP_DIR, step_dir.name)
    step = step if step is not None else _record_step(ranks[0])
    return Source(tuple(ranks), hint or "prime-rl", step, _step_id(step, step_dir.name), step_dir,
                  f"prime-rl step folder ({len(ranks)} rank file{'s' if len(ranks) != 1 else ''})")


def _step_folder(step_dir: Path, hint: str | None) -> Source:
    """One step_S/ folder of a run: save_step's or prime-rl's; a name that is not step_N (step_-3, step_2.9) is a step
    that cannot be read (its row says why), never a folder silently passed over."""
    if not STEP_DIR.fullmatch(step_dir.name):
        raise BadInput(step_dir, "is named like a step folder but its step does not parse (expected step_N, N a "
                                 "non-negative integer): not read")
    return _saved_step(step_dir, hint) if _rank_npz(step_dir) or _odd_rank_files(step_dir) else _prime_step(step_dir, hint)


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
    odd = _odd_rank_files(step_dir)
    if odd:
        raise BadInput(step_dir, f"holds {odd[0].name}, whose rank does not parse (expected rank_R.npz, R a non-negative "
                                 "integer): the step cannot be read whole")
    if not ranks:
        raise BadInput(step_dir, "step folder with no rank_*.jsonl (prime-rl) or rank_*.npz (save_step) file")
    if any(step_dir.glob("rank_*.jsonl")):
        raise BadInput(step_dir, "holds both prime-rl rank_*.jsonl and save_step rank_*.npz files: keep one kind per step")
    if hint not in (None, "dict"):
        raise BadInput(step_dir, f"--format-hint {hint}: these rank_*.npz files are tim-report's canonical format (hint dict)")
    step = _int(STEP_DIR, step_dir.name)
    return Source(tuple(ranks), "dict", step, _step_id(step, step_dir.name), step_dir,
                  f"{SAVED_STEP} folder ({len(ranks)} rank file{'s' if len(ranks) != 1 else ''})")


def _train_data(folder: Path, hint: str | None, bad: list[Unreadable]) -> list[Source]:
    """slime `train_data/{id}.pt` (one per rollout id) or miles `train_data/{id}_{rank}.pt` (all ranks of an id)."""
    files = sorted(f for f in folder.glob("*.pt") if SLIME_FILE.fullmatch(f.name) or MILES_FILE.fullmatch(f.name))
    if not files:
        raise BadInput(folder, "no train dump in this folder (expected {rollout_id}.pt or {rollout_id}_{rank}.pt)")
    framework = hint or _first_framework(files)
    if hint not in (None, "slime", "miles"):
        return _each(files, lambda f: file_source(f, hint), bad)
    if framework == "miles":
        firsts = {m.group(1): f for f in reversed(files) if (m := MILES_FILE.fullmatch(f.name))}
        return [_miles_source(f) for f in firsts.values()]
    if framework == "slime":  # {rollout_id}.pt joins its rollout dump; a per-rank template's files stand alone
        return [_slime_source(f) if SLIME_FILE.fullmatch(f.name) else file_source(f, "slime") for f in files]
    return _each(files, lambda f: file_source(f, hint) if hint else _confirmed(f, framework), bad)


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


def _slime_source(train: Path) -> Source:
    """A slime train dump, with the rollout dump of the same id beside it when there is one (the join)."""
    rollout_id = _int(SLIME_FILE, train.name)
    sibling = train.parent.parent / "rollout_data" / train.name
    paths = (train, sibling) if sibling.is_file() else (train,)
    kind = "slime train dump" + (" + rollout dump" if len(paths) == 2 else " (no rollout_data/ sibling)")
    step = rollout_id if rollout_id is not None else _step_of(train)
    return Source(paths, "slime", step, _step_id(step, train.stem), train, kind)


def _miles_source(path: Path) -> Source:
    """A miles rollout id: every rank's file of that id (context-parallel slices need their siblings)."""
    m = MILES_FILE.fullmatch(path.name)
    if m is None:
        return Source((path,), "miles", _step_of(path), path.stem, path, "miles train dump")
    rid = m.group(1)
    ranks = sorted((f for f in path.parent.glob(f"{rid}_*.pt") if MILES_FILE.fullmatch(f.name)),
                   key=lambda f: int(MILES_FILE.fullmatch(f.name).group(2)))  # type: ignore[union-attr]  # matched above
    step = int(rid)
    return Source(tuple(ranks), "miles", step, _step_id(step, rid), path.parent / f"{rid}_*.pt",
                  f"miles train dump ({len(ranks)} rank file{'s' if len(ranks) != 1 else ''})")


def _plain_files(folder: Path, hint: str | None, bad: list[Unreadable]) -> list[Source]:
    """A folder of step files: one Source each; their frameworks must agree."""
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in INPUT_SUFFIXES)
    if not files:
        raise BadInput(folder, "is a directory with no step batch in it: expected .pt, .npz, .jsonl or .pkl files, a prime-rl step or "
                               "token_exports folder, a NeMo-RL log dir, a slime/miles dump dir or a SkyRL export")
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


def _step_of(path: Path) -> int | None:
    for pattern in (NEMO_FILE, SKYRL_FILE):
        if (m := pattern.search(path.name)) is not None:
            return int(m.group(1))
    m = STEP_RE.search(path.stem)
    return int(m.group(1)) if m else None


def _record_step(path: Path) -> int | None:
    step = first_record(path).get("step")
    return step if isinstance(step, int) else None


def _int(pattern: re.Pattern, name: str) -> int | None:
    m = pattern.fullmatch(name) or pattern.search(name)
    return int(m.group(1)) if m else None


def _step_id(step: int | None, fallback: str) -> str:
    return f"step_{step}" if step is not None else fallback


def _unique_ids(found: list[Source]) -> list[Source]:
    seen: dict[str, int] = {}
    out = []
    for s in found:
        seen[s.run_id] = seen.get(s.run_id, 0) + 1
        n = seen[s.run_id]
        out.append(s if n == 1 else replace(s, run_id=f"{s.run_id}-{n}"))
    return out
