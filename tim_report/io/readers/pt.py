"""`.pt` / `.pth`: torch.load(weights_only=True); full unpickling only when the user allows it."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ...errors import BadInput
from ..text import first_line

NEEDS_PICKLE = ("needs full unpickling (pickled objects such as verl DataProto), which can run arbitrary code; "
                "re-run with --allow-pickle if you trust this file")


def read_pt(path: Path, allow_pickle: bool) -> Any:
    return to_plain(unwrap_dataproto(torch_load(path, allow_pickle)))


def torch_load(path: Path, allow_pickle: bool, refusal: str = NEEDS_PICKLE) -> Any:
    """weights_only=True first; a file that needs more is refused (`refusal`) unless pickles are allowed."""
    import pickle

    import torch  # heavy: only for .pt files

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if not allow_pickle:
            raise BadInput(path, refusal) from exc
    except Exception as exc:  # noqa: BLE001 - truncated zip, not a torch file, ...
        raise BadInput(path, f"not a readable PyTorch file: truncated, corrupt or not saved by torch.save ({first_line(exc)})") from exc
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any failure is a bad file
        raise unpickling_failed(path, exc) from exc
    warn_unpickling(path)
    return obj


def warn_unpickling(path: Path) -> None:
    """Said once the file is unpickled (a failure says only its one error line)."""
    warnings.warn(f"{path}: unpickling in full (it can run code from the file) because --allow-pickle was given", stacklevel=3)


def unpickling_failed(path: Path, exc: BaseException) -> BadInput:
    """A missing framework package gets its own sentence: that is what the user can fix."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        package = exc.name.split(".")[0]
        return BadInput(path, f"unpickling needs the '{package}' package, which is not installed here: install it where "
                              "you read the file, or save the batch as a dict of tensors")
    return BadInput(path, f"cannot unpickle: {first_line(exc)}")


def unwrap_dataproto(obj: Any) -> Any:
    """verl's DataProto: tensors in `.batch`, numpy objects in `.non_tensor_batch`, dict `.meta_info`."""
    if hasattr(obj, "batch") and hasattr(obj, "non_tensor_batch"):
        out: dict[str, Any] = {}
        batch = obj.batch
        if batch is not None:
            for k in list(batch.keys()):
                out[k] = batch[k]
        out.update(dict(obj.non_tensor_batch or {}))
        out["meta_info"] = dict(getattr(obj, "meta_info", {}) or {})
        return out
    return obj


def to_plain(obj: Any) -> Any:
    """Tensors to numpy (bf16/fp16 widened to fp32), containers recursively."""
    if type(obj).__module__.startswith("torch"):
        import torch

        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu()
            if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
                t = t.float()
            return t.numpy()
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj
