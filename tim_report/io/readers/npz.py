"""`.npz`: np.load(allow_pickle=False) unless the user allows pickles; members read only when used.

An `.npz` is a zip of `.npy` files. Every member's header (shape, dtype) is read first and checked
against the member's own size and the run's limits (io/limits.py), so a header that declares 40 GB,
or a member that inflates to tens of GB, is refused before numpy allocates anything; a member no role
uses is never read at all.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ...errors import BadInput
from ...config import TOPK_MAX
from ..canonical import TOPK_FIELDS
from ..limits import current, too_large
from ..text import first_line

OBJECT_ARRAYS = ("holds object arrays (pickled Python objects); store numeric or string arrays, "
                 "or re-run with --allow-pickle if you trust this file")


def read_npz(path: Path, allow_pickle: bool) -> "NpzMembers":
    with open(path, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":
            raise BadInput(path, "not an .npz archive (numpy writes a zip of .npy files; this is not a zip)")
    try:
        with zipfile.ZipFile(path) as zf:
            headers = {info.filename[:-4]: _header(path, zf, info, allow_pickle)
                       for info in zf.infolist() if info.filename.endswith(".npy")}
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise BadInput(path, f"not a readable .npz archive: truncated or corrupt ({first_line(exc)})") from exc
    if not headers:
        raise BadInput(path, "holds no arrays (an .npz is a zip of .npy files)")
    return NpzMembers(path, headers, allow_pickle)


def _header(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, allow_pickle: bool) -> tuple[tuple, np.dtype]:
    """A member's declared shape and dtype, checked: no object arrays without --allow-pickle, no more data
    declared than the member holds, nothing above the limits."""
    key = info.filename[:-4]
    try:
        with zf.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
    except Exception as exc:  # noqa: BLE001 - a damaged member header is a bad file, whatever numpy raises
        raise BadInput(path, f"member '{key}' is not a readable .npy array ({first_line(exc)})") from exc
    if dtype.hasobject and not allow_pickle:
        raise BadInput(path, OBJECT_ARRAYS)
    count = int(np.prod(shape, dtype=np.float64))
    limits = current()
    if key in TOPK_FIELDS and len(shape) == 2:  # [T, k]: k columns per token, k ≤ TOPK_MAX
        if shape[1] > TOPK_MAX or shape[0] > limits.max_elements:
            raise BadInput(path, f"'{key}' declares shape {list(shape)}: more than {TOPK_MAX} columns or "
                                 f"{limits.max_elements:,} rows (from --max-tokens {limits.max_tokens:,})")
    elif count > limits.max_elements:
        raise BadInput(path, too_large(f"'{key}'", count, limits))
    if not dtype.hasobject and count * dtype.itemsize > info.file_size:
        raise BadInput(path, f"'{key}' declares {count:,} elements but holds only {info.file_size:,} bytes: truncated or corrupt")
    return tuple(shape), dtype


class NpzMembers(Mapping):
    """The archive's arrays by name, each read (and cached) on first use."""

    def __init__(self, path: Path, headers: dict[str, tuple[tuple, np.dtype]], allow_pickle: bool):
        self.path, self.headers, self.allow_pickle = path, headers, allow_pickle
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.headers:
            raise KeyError(key)
        if key not in self._cache:
            try:
                with np.load(self.path, allow_pickle=self.allow_pickle) as npz:
                    self._cache[key] = npz[key]
            except Exception as exc:  # noqa: BLE001 - a member cut short, a bad CRC, ...
                raise BadInput(self.path, f"member '{key}' cannot be read: truncated or corrupt ({first_line(exc)})") from exc
        return self._cache[key]

    def __contains__(self, key: object) -> bool:  # from the headers: asking is not reading
        return key in self.headers

    def prefetch(self, keys: list[str]) -> None:
        """Read these members side by side (zlib releases the GIL; each read opens its own handle)."""
        todo = [k for k in dict.fromkeys(keys) if k in self.headers and k not in self._cache]
        if len(todo) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(4, len(todo))) as pool:
                list(pool.map(self.__getitem__, todo))

    def __iter__(self) -> Iterator[str]:
        return iter(self.headers)

    def __len__(self) -> int:
        return len(self.headers)

    def pop(self, key: str, default: Any = None) -> Any:
        """Take a key out (the meta header), reading it if it is there."""
        if key not in self.headers:
            return default
        value = self[key]
        del self.headers[key]
        self._cache.pop(key, None)
        return value

    def describe(self, key: str) -> tuple[list[int], str]:
        """Shape and dtype from the header, without reading the data (for `inspect`)."""
        shape, dtype = self.headers[key]
        return list(shape), str(dtype)
