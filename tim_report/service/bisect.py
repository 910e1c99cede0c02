"""`tim-report bisect`: two setups of one model compared site by site; the first site beyond its floor.

load the three setups (capture.bisect_setup) → prompts, one at a time (no padding; memory bounded by the longest) →
capture.bisect.run yields each site's per-token errors → analysis.bisect.Accumulator reduces them at once →
summarise → render (index.html, report.md) and summary.json, written all or nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis.bisect import Accumulator, summarise
from ..errors import BadInput
from ..model import dumps
from ..site.publish import move_into, staging, write_files

if TYPE_CHECKING:  # torch and transformers are imported only when a bisect runs
    from ..capture.bisect_setup import Setup


@dataclass(frozen=True)
class BisectOptions:
    model: str
    prompts: str
    reference: Setup
    candidate: Setup
    device: str = "cpu"
    device_map: Any = None  # transformers' device_map ("auto", a dict), or None: the whole model on `device`
    max_prompts: int | None = None
    max_tokens: int = 2048  # tokens of one prompt kept (the first ones)
    chat_template: bool = True


def feed(acc: Accumulator, records) -> None:
    """capture records → the accumulator, one site at a time (nothing of a record is kept)."""
    for r in records:
        acc.add(r.site.name, r.site.kind, r.site.layer, r.seq,
                {"local": r.local, "floor": r.floor, "plain": r.plain, "floor_plain": r.floor_plain}, r.flips)


def prompt_ids(opts: BisectOptions, folder: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    from ..capture.prompts import read_prompts, render_prompts

    prompts = read_prompts(opts.prompts)[: opts.max_prompts]
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as exc:  # a folder without a usable tokenizer
        raise BadInput(opts.model, f"transformers cannot load the tokenizer ({type(exc).__name__})") from None
    ids, _, _ = render_prompts(prompts, tok, opts.chat_template, opts.prompts, model=opts.model)
    return [p[: opts.max_tokens] for p in ids]


def rows(ids: list[list[int]], progress: Callable[[int], None] | None = None) -> Iterator:
    """One sequence per batch, no padding: (ids [1, n], mask, its index)."""
    import torch

    for i, p in enumerate(ids):
        t = torch.tensor([p], dtype=torch.long)
        yield t, torch.ones_like(t), i
        if progress is not None:
            progress(1)


def bisect(opts: BisectOptions, progress: Callable | None = None) -> dict:
    """summary.json's content for two setups of the model at `opts.model` over the prompts. `progress(label, total)`:
    a context manager yielding a function called once per prompt done (cli.progress.step_progress)."""
    import contextlib

    from ..capture.bisect_setup import load_sides
    from ..capture.model_path import model_name, resolve_model

    folder = resolve_model(opts.model, notice=lambda line: print(f"tim-report: {line}", file=sys.stderr, flush=True))
    ids = prompt_ids(opts, folder)
    sides, scope = load_sides(str(folder), opts.reference, opts.candidate, opts.device, opts.device_map)
    if scope is not None:
        sides.switch = scope.side
    ref, cand = opts.reference, opts.candidate
    with progress("bisect", len(ids)) if progress else contextlib.nullcontext() as advance:
        try:
            acc = run_sides(sides, rows(ids, advance))
        finally:
            if scope is not None:
                scope.side(False)
    return summarise(acc, cand.dtype, {"reference": ref.label, "candidate": cand.label, "model": model_name(folder)},
                     rounding_only=bool(cand.patch or cand.attn != ref.attn), floor_is_candidate=sides.floor is sides.cand)


def run_sides(sides, batches) -> Accumulator:
    from ..capture.bisect import run

    acc = Accumulator()
    feed(acc, run(sides, batches))
    return acc


def bisect_models(reference_model, candidate_model, input_ids, attention_mask=None, precision: str = "bf16",
                  floor_model=None, rounding_only: bool = False) -> dict:
    """The same summary for two loaded models (the Python API): each row of `input_ids` runs alone on its real tokens
    (`attention_mask` 1). The floor is `floor_model`, or a copy of the reference cast to `precision` (the reference
    itself when it is already in that precision: a floor of zero, held to a quarter roundoff)."""
    import copy

    import torch

    from ..capture.bisect import Sides
    from ..capture.bisect_sites import same_structure, structure

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if precision not in dtypes:
        raise BadInput("precision", f"'{precision}' is not one of fp32, bf16, fp16")
    if floor_model is None:
        ref_dtype = next(reference_model.parameters()).dtype
        floor_model = reference_model if ref_dtype == dtypes[precision] else \
            copy.deepcopy(reference_model).to(dtypes[precision]).eval()
    cand = structure(candidate_model, "candidate_model")
    sides = Sides(structure(reference_model, "reference_model"), cand,
                  cand if floor_model is candidate_model else structure(floor_model, "floor_model"))
    same_structure(sides.ref, sides.cand, "candidate_model")
    ids = torch.as_tensor(input_ids)
    ids = ids[None] if ids.dim() == 1 else ids
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask).reshape(ids.shape)
    seqs = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    acc = run_sides(sides, rows([s for s in seqs if s]))
    return summarise(acc, precision, {"reference": "reference_model", "candidate": "candidate_model", "model": ""},
                     rounding_only=rounding_only, floor_is_candidate=floor_model is candidate_model)


def write_bisect(summary: dict, out: Path, timestamp: str | None = None, self_contained: bool = False) -> Path:
    """index.html (and its assets/ unless self-contained), report.md and summary.json, all or nothing."""
    from ..render.bisect_html import render_bisect_html
    from ..render.bisect_md import render_bisect_md
    from ..render.pages import asset_files, assets_href

    files = {"index.html": render_bisect_html(summary, timestamp, assets_href(self_contained, 0)),
             "report.md": render_bisect_md(summary), "summary.json": dumps(summary) + "\n"}
    if not self_contained:
        files.update(asset_files())
    with staging(out) as folder:
        write_files(folder, files)
        move_into(folder, out)
    return out


def bisect_states(reference: str, candidate: str, floor: str, precision: str) -> dict:
    """The same summary from three files of saved states (io.states), compared without replay."""
    from ..analysis.bisect_states import compare_states
    from ..io.states import States

    acc = compare_states(States(reference), States(candidate), States(floor), (reference, candidate, floor))
    return summarise(acc, precision, {"reference": Path(reference).name, "candidate": Path(candidate).name,
                                      "model": f"saved states, floor {Path(floor).name}"}, replay=False)
