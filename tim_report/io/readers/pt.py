"""`.pt` / `.pth`: torch.load(weights_only=True); full unpickling only when the user allows it.

torch.save writes a zip of uncompressed records; the file is checked to be one (or a pre-1.6 pickle)
before torch sees it, memory-mapped rather than read whole, and every tensor is checked before it is
turned into numpy: a tensor whose shape needs more memory than its storage holds (a stride trick that
makes 2·10¹⁰ elements out of one) or that would be copied past the limits is refused.
"""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path
from typing import Any

from ...catalogue.numbers import fmt
from ...errors import BadInput, UnpicklingWarning
from ..limits import current, too_large
from ..text import first_line

NEEDS_PICKLE = ("needs full unpickling (pickled objects such as verl DataProto), which can run arbitrary code; "
                "re-run with --allow-pickle if you trust this file")
# numpy arrays inside a torch.save file: not a framework object the user must trust, a format slip with a plain fix
NUMPY_IN_PT = ("holds numpy arrays, which torch.load(weights_only=True) does not read: save tensors "
               "(torch.from_numpy(a)), or use .npz (np.savez)")


def read(path: Path, allow_pickle: bool) -> Any:
    obj = torch_load(path, allow_pickle)
    with warnings.catch_warnings():  # torch's notes on odd tensors (nested: "prototype stage") are not ours to say
        warnings.simplefilter("ignore")
        return to_plain(unwrap_dataproto(obj), path)


def file_kind(path: Path) -> str | None:
    """'zip' (torch.save since 1.6), 'pickle' (older torch.save, or pickle.dump), or None (neither)."""
    with open(path, "rb") as fh:
        head = fh.read(2)
        head += fh.read(2) if head[:1] == b"P" else b""
    if head == b"PK\x03\x04":
        return "zip"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickle"
    return None


def check_zip(path: Path) -> None:
    """torch.save stores its records uncompressed: a compressed one is no torch file (and could inflate
    to any size); the pickle of Python objects must stay within the limits."""
    limits = current()
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.compress_type != zipfile.ZIP_STORED and info.file_size > (1 << 20):
                    raise BadInput(path, f"record '{info.filename}' is compressed ({fmt(info.file_size)} bytes inflated), "
                                         "which torch.save never writes: not a PyTorch file")
                if info.filename.endswith("data.pkl") and info.file_size > limits.max_pickle_bytes:
                    raise BadInput(path, f"its pickle holds {fmt(info.file_size)} bytes of Python objects, more than this run "
                                         f"reads (from --max-tokens {fmt(limits.max_tokens)})")
            check_storage_records(path, zf)
    except BadInput:
        raise
    except Exception as exc:
        raise BadInput(path, f"not a readable PyTorch file: truncated or corrupt ({first_line(exc)})") from exc


def check_storage_records(path: Path, zf: zipfile.ZipFile) -> None:
    """Every storage the pickle names must be whole in its record: memory-mapped, a record cut short would be read
    past its end, into the next record's bytes (torch checks this only when it reads records without mmap)."""
    pickle_name = next((n for n in zf.namelist() if n.endswith("data.pkl")), None)
    if pickle_name is None:
        return
    prefix = pickle_name[: -len("data.pkl")]
    sizes = {info.filename[len(prefix) + 5:]: info.file_size for info in zf.infolist()
             if info.filename.startswith(prefix + "data/")}
    if not sizes:  # no storage at all: nothing to map (and a large pickle of Python objects is not scanned)
        return
    for key, cls, numel in storage_ids(zf.read(pickle_name)):
        itemsize = STORAGE_BYTES.get(cls.rpartition(" ")[2])
        if not isinstance(numel, int) or itemsize is None:
            continue  # a storage kind we cannot size: torch's own reading judges it
        if key not in sizes:
            raise BadInput(path, f"its pickle names storage record 'data/{key}', which the archive lacks: truncated or corrupt")
        if sizes[key] < numel * itemsize:
            raise BadInput(path, f"storage record 'data/{key}' holds {fmt(sizes[key])} bytes where its tensor needs "
                                 f"{fmt(numel * itemsize)}: cut short (truncated or corrupt)")


# Bytes per element of each storage class a torch.save pickle names (`torch.FloatStorage`, ...).
STORAGE_BYTES = {"DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2, "LongStorage": 8,
                 "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1, "BoolStorage": 1,
                 "ComplexFloatStorage": 8, "ComplexDoubleStorage": 16, "UntypedStorage": 1}
_TO_MARK = {"TUPLE", "LIST", "DICT", "SETITEMS", "APPENDS", "OBJ", "INST", "POP_MARK", "FROZENSET", "ADDITEMS"}


def storage_ids(data: bytes) -> list[tuple]:
    """(key, storage class, element count) of every storage a torch.save pickle names, read from its opcodes (the
    persistent id `('storage', class, key, location, numel)`) without unpickling anything."""
    import pickletools

    frames: list[list] = [[]]  # what was pushed since each MARK: enough to rebuild the small tuples ids are made of
    memo: dict = {}
    last: object = None
    found = []
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        if name == "MARK":
            frames.append([])
            continue
        if name in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
            memo[len(memo) if name == "MEMOIZE" else arg] = last
            continue
        if name in _TO_MARK:
            frame = frames.pop() if len(frames) > 1 else []
            last = tuple(frame) if name == "TUPLE" else None
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            last = memo.get(arg)
        elif name == "BINPERSID":
            if frames[-1]:
                frames[-1].pop()
            if isinstance(last, tuple) and len(last) == 5 and last[0] == "storage":
                found.append((str(last[2]), str(last[1]), last[4]))
            last = None
        else:
            last = arg
        frames[-1].append(last)
    return found


def torch_load(path: Path, allow_pickle: bool, refusal: str = NEEDS_PICKLE) -> Any:
    """weights_only=True first; a file that needs more is refused (`refusal`) unless pickles are allowed."""
    import pickle

    kind = file_kind(path)
    if kind is None:
        raise BadInput(path, "not a PyTorch file: torch.save writes a zip archive (or, before torch 1.6, a pickle), "
                             "and this is neither")
    if kind == "zip":
        check_zip(path)
    import torch  # heavy: only for .pt files

    mmap = kind == "zip"  # records are mapped, not read: only what is used is ever in memory
    try:
        with warnings.catch_warnings():  # torch's own notes on the file would be a second stderr line
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        if not allow_pickle:
            # a plain file of numpy arrays is a format slip; a framework's own dump (its refusal) needs the trust flag
            numpy_slip = "GLOBAL numpy." in str(exc) and refusal is NEEDS_PICKLE
            raise BadInput(path, NUMPY_IN_PT if numpy_slip else refusal) from exc
    except Exception as exc:
        raise BadInput(path, f"not a readable PyTorch file: truncated, corrupt or not saved by torch.save ({first_line(exc)})") from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as exc:
        raise unpickling_failed(path, exc) from exc
    warn_unpickling(path)
    return obj


def warn_unpickling(path: Path) -> None:
    """Said once the file is unpickled (a failure says only its one error line)."""
    warnings.warn(f"{path}: unpickling in full (it can run code from the file) because --allow-pickle was given",
                  UnpicklingWarning, stacklevel=3)


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


def to_plain(obj: Any, path: Path) -> Any:
    """Tensors to numpy (bf16/fp16 widened to fp32; float32/64 stay views of the mapped file), containers recursively."""
    if type(obj).__module__.startswith("torch"):
        import torch

        if isinstance(obj, torch.Tensor):
            return _tensor(obj.detach(), path, torch)
    if isinstance(obj, dict):
        return {str(k): to_plain(v, path) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v, path) for v in obj]
    return obj


def _tensor(t, path: Path, torch) -> Any:
    if t.is_nested or t.layout != torch.strided or t.is_quantized or t.device.type != "cpu":
        kind = ("nested" if t.is_nested else "quantized" if t.is_quantized else f"{t.device.type}-device"
                if t.device.type != "cpu" else str(t.layout).removeprefix("torch."))
        raise BadInput(path, f"holds a {kind} tensor ({t.dtype}): save plain dense tensors (tensor.dequantize(), "
                             ".to_dense(), .cpu())")
    n = t.numel()
    if n and t.layout == torch.strided and n * t.element_size() > t.untyped_storage().nbytes():
        raise BadInput(path, f"a tensor of shape {list(t.shape)} is drawn from a storage of {fmt(t.untyped_storage().nbytes())} "
                             "bytes (overlapping strides): reading it would take more memory than the file holds")
    copy = t.is_floating_point() and t.dtype not in (torch.float32, torch.float64)
    limits = current()
    if copy and n > limits.max_elements:
        raise BadInput(path, too_large(f"a {t.dtype} tensor of shape {list(t.shape)}", n, limits))
    try:
        return (t.float() if copy else t).numpy()
    except (TypeError, RuntimeError) as exc:  # a dtype numpy has no counterpart for
        raise BadInput(path, f"holds a {t.dtype} tensor numpy cannot hold ({first_line(exc)})") from None
