"""Saved hidden states for `tim-report bisect --reference-states A --candidate-states B --floor-states C`: one file per
setup, written by an engine's own hook (vLLM, SGLang, Megatron), keyed by site name.

Layout (docs/bisect.md): `.safetensors` or `.npz` (never a pickle), each key a site's output named as transformers
names the module (`model.embed_tokens`, `model.layers.5.input_layernorm`, `model.layers.5.mlp`, `model.layers.5`,
`model.norm`, `lm_head`), a float array [tokens, hidden] or [sequences, positions, hidden] (the same tokens in the
same order in every file); optionally `<router site>.experts` (integer [tokens, k]: the experts chosen, for flips)
and `seq` (integer [tokens]: the prompt of each token, for the spread over prompts). bf16 is read from safetensors
without torch. A safetensors file is memory-mapped: a site is read when it is compared.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from ..errors import BadInput, regular_file

SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
                      "I32": np.int32, "I16": np.int16, "U8": np.uint8, "I8": np.int8}
HEADER_MAX = 100 * 1024 * 1024


class States:
    """One setup's saved sites: names, and each array read on demand (float32, or int for `.experts` / `seq`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        regular_file(self.path, "states file")
        suffix = self.path.suffix.lower()
        if suffix == ".safetensors":
            self._arrays = _safetensors(self.path)
        elif suffix == ".npz":
            self._arrays = _npz(self.path)
        else:
            raise BadInput(self.path, "saved states must be .safetensors or .npz (never a pickle)")
        if not self._arrays:
            raise BadInput(self.path, "holds no arrays")

    def names(self) -> list[str]:
        return list(self._arrays)

    def __getitem__(self, name: str) -> np.ndarray:
        a = self._arrays[name]()
        if name == "seq" or name.endswith(".experts"):
            if a.dtype.kind not in "iu":
                raise BadInput(self.path, f"{name} must be integers")
            return a.reshape(-1, a.shape[-1]) if name.endswith(".experts") else a.reshape(-1)
        if a.ndim < 2:
            raise BadInput(self.path, f"{name} has shape {a.shape}: a site is [tokens, hidden] or [sequences, positions, hidden]")
        return a.reshape(-1, a.shape[-1])


def _safetensors(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if not 0 < n <= HEADER_MAX:
                raise ValueError("header size")
            header = json.loads(f.read(n))
        mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    except (OSError, ValueError, struct.error) as exc:
        raise BadInput(path, f"not a readable safetensors file ({type(exc).__name__})") from None
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (lo, hi) = info["dtype"], [int(x) for x in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise BadInput(path, f"{name}: a malformed header entry") from None
        if dtype not in SAFETENSORS_DTYPES:
            raise BadInput(path, f"{name}: dtype {dtype} is not read here")
        np_dtype = np.dtype(SAFETENSORS_DTYPES[dtype])
        if not 0 <= lo <= hi <= len(mm) or hi - lo != int(np.prod(shape)) * np_dtype.itemsize:
            raise BadInput(path, f"{name}: its data offsets do not match its shape")
        out[name] = _view(mm, lo, hi, np_dtype, shape, dtype == "BF16")
    return out


def _view(mm, lo: int, hi: int, dtype, shape: list[int], bf16: bool):
    def read() -> np.ndarray:
        a = np.frombuffer(mm[lo:hi], dtype=dtype).reshape(shape)
        if bf16:  # bf16 is the top half of an fp32
            return (a.astype(np.uint32) << 16).view(np.float32)
        return a.astype(np.float32) if a.dtype.kind == "f" else a
    return read


def _npz(path: Path) -> dict:
    try:
        z = np.load(path, allow_pickle=False)
        names = list(z.files)
    except (OSError, ValueError) as exc:
        raise BadInput(path, f"not a readable .npz file ({type(exc).__name__})") from None

    def reader(name: str):
        def read() -> np.ndarray:
            try:
                a = z[name]
            except ValueError:  # an object array: would need unpickling
                raise BadInput(path, f"{name} holds Python objects (pickled); save plain arrays") from None
            if a.dtype.kind not in "fiu":
                raise BadInput(path, f"{name} has dtype {a.dtype}, not numbers")
            return a.astype(np.float32) if a.dtype.kind == "f" else a
        return read

    return {n: reader(n) for n in names}
