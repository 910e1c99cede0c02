"""bisect's three setups loaded from one model folder: the reference, the candidate (with its patch) and the floor.

A setup is `hf:DTYPE` with an optional attention implementation; the candidate may also carry a patch,
`module:function`, called with the loaded model to change it in place (how kernel libraries such as Liger patch a
model). The floor is the reference's weights in the candidate's precision with the reference's attention
implementation and no patch; when the candidate has neither a patch nor another attention implementation the
floor is the candidate itself (loaded once).

A patch that changes what the other two setups would run too (a class's method, a function of the modeling module,
as Liger's `apply_liger_kernel_to_*` does) is undone around the reference's and the floor's calls: `PatchScope`
records every attribute the patch changed on the modeling module and on the classes of the model's modules, and
the engine switches them per side.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import BadInput
from .bisect import Sides
from .bisect_sites import same_structure, structure
from .spec import parse_spec

TORCH_DTYPES = ("fp32", "bf16", "fp16")
ATTN = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True)
class Setup:
    dtype: str  # fp32 | bf16 | fp16
    attn: str | None = None  # the attention implementation; None: transformers' default
    patch: str | None = None  # module:function

    @property
    def label(self) -> str:
        """`hf:bf16 (sdpa, patch)`: a patch file named by its file name, as pages name things, never by this machine's path."""
        module, _, function = (self.patch or "").rpartition(":")
        patch = f"{module.replace(chr(92), '/').rsplit('/', 1)[-1]}:{function}" if module.endswith(".py") else self.patch
        extra = [x for x in (self.attn, patch) if x]
        return f"hf:{self.dtype}" + (f" ({', '.join(extra)})" if extra else "")


def parse_setup(text: str, option: str, attn: str | None = None, patch: str | None = None) -> Setup:
    spec = parse_spec(text, option)
    if spec.engine != "hf":
        raise BadInput(option, f"'{text}': bisect runs transformers setups (hf:fp32, hf:bf16, hf:fp16)")
    if attn is not None and attn not in ATTN:
        raise BadInput("--attn-implementation", f"'{attn}' is not one of {', '.join(ATTN)}")
    if patch is not None and not all(patch.rpartition(":")[::2]):
        raise BadInput("--candidate-patch", f"'{patch}' is not MODULE:FUNCTION")
    return Setup(spec.dtype, attn, patch)


def load_patch(text: str):
    """`package.module:function` (installed, or a `module.py` in the current folder), or `path/to/file.py:function`."""
    module, _, name = text.rpartition(":")
    try:
        if module.endswith(".py"):
            from pathlib import Path

            if not Path(module).is_file():
                raise BadInput("--candidate-patch", f"{module}: no such file")
            spec = importlib.util.spec_from_file_location(Path(module).stem, module)
            mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(mod)  # type: ignore[union-attr]
        else:
            mod = _import_here(module)
    except BadInput:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):  # one the patch imports
            raise BadInput("--candidate-patch", f"cannot import {module}: ModuleNotFoundError: {exc}") from None
        raise BadInput("--candidate-patch", f"cannot import {module}: no module {exc.name!r} installed or in the current "
                                            "folder (a file elsewhere: --candidate-patch path/to/file.py:FUNCTION)") from None
    except Exception as exc:  # the user's module failed to import: say so in one line
        raise BadInput("--candidate-patch", f"cannot import {module}: {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise BadInput("--candidate-patch", f"{module} has no function {name}")
    return fn


def _import_here(module: str):
    """Import `module` as `python -m` would find it: the current folder is on the import path for it (the `tim-report`
    script's own path does not hold it), after the installed packages, so a local file never shadows one."""
    import os

    here = os.getcwd()
    added = here not in sys.path and "" not in sys.path
    if added:
        sys.path.append(here)
    try:
        return importlib.import_module(module)
    finally:
        if added:
            sys.path.remove(here)


def load_model(path: str, setup: Setup, device: str, device_map):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[setup.dtype]
    kw: dict = {"dtype": dtype, "trust_remote_code": False}
    if setup.attn:
        kw["attn_implementation"] = setup.attn
    if device_map is not None:
        kw["device_map"] = device_map
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(str(path), **kw)
    except (OSError, ValueError, KeyError) as exc:
        raise BadInput(path, f"cannot load the model: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if device_map is None:
        model = model.to(device)
    return model.eval()


class PatchScope:
    """The attributes a patch changed on shared objects (the modeling module, the modules' classes): set to the
    patched values while the candidate runs, to the stock ones while the others run."""

    def __init__(self, model):
        mods = {type(m).__module__ for m in model.modules()}
        self.targets = [sys.modules[m] for m in sorted(mods) if m in sys.modules] + \
            list({type(m): None for m in model.modules()})
        self.before = [dict(vars(t)) for t in self.targets]
        self.changes: list[tuple[object, str, object, object]] = []

    def record(self) -> None:
        missing = object()
        for t, before in zip(self.targets, self.before):
            now = vars(t)
            for key in set(before) | set(now):
                old, new = before.get(key, missing), now.get(key, missing)
                if old is not new:
                    self.changes.append((t, key, old, new))
        self.missing = missing

    def side(self, patched: bool) -> None:
        for t, key, old, new in self.changes:
            value = new if patched else old
            if value is self.missing:
                if key in vars(t):
                    delattr(t, key)
            else:
                setattr(t, key, value)


def load_sides(path: str, ref: Setup, cand: Setup, device: str = "cpu", device_map=None) -> tuple[Sides, PatchScope | None]:
    """The three models, checked to be the same model with understood structure; the patch applied to the candidate."""
    from .model_path import resolve_model

    path = str(resolve_model(path))  # a folder (custom code refused before transformers runs) or a GGUF's cached one
    import torch

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise BadInput("--device", f"{device}: this torch sees no CUDA device")
    reference = load_model(path, ref, device, device_map)
    candidate = load_model(path, cand, device, device_map)
    floor_setup = Setup(cand.dtype, ref.attn)
    floor = candidate if (cand.patch is None and cand.attn == ref.attn) else load_model(path, floor_setup, device, device_map)
    scope = None
    if cand.patch:
        fn = load_patch(cand.patch)
        scope = PatchScope(candidate)
        try:
            result = fn(candidate)
        except Exception as exc:  # the user's patch failed: one line naming it
            raise BadInput("--candidate-patch", f"{cand.patch} failed: {type(exc).__name__}: {exc}") from None
        if result is not None and result is not candidate:
            raise BadInput("--candidate-patch", f"{cand.patch} returned a new object; it must change the model in place")
        scope.record()
        scope.side(False)
    cand_st = structure(candidate, path)
    sides = Sides(structure(reference, path), cand_st, cand_st if floor is candidate else structure(floor, path))
    same_structure(sides.ref, sides.cand, path)
    return sides, scope
