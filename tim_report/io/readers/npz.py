"""`.npz`: np.load(allow_pickle=False) unless the user allows pickles; members read only when used.

An `.npz` is a zip of `.npy` files. Every member's header (shape, dtype) is read first, for `inspect`
and the role choice; a member is checked against its own stored size and the run's limits
(io/limits.py) when it is about to be read, so a header that declares 40 GB, or a member that inflates
to tens of GB, is refused before numpy allocates anything. A member no role uses is never read nor
judged: a huge `routed_experts` or a damaged extra member does not make a valid batch unreadable.
"""

from __future__ import annotations

import contextlib
import io
import struct
import threading
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...catalogue.numbers import fmt
from ...config import MAX_STRING_CHARS, TOPK_MAX
from ...errors import BadInput
from ..canonical import TOPK_FIELDS
from ..limits import current, too_large
from ..text import first_line

OBJECT_ARRAYS = ("holds object arrays (pickled Python objects); store numeric or string arrays, "
                 "or re-run with --allow-pickle if you trust this file")


def read(path: Path, allow_pickle: bool) -> NpzMembers:
    with open(path, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":
            raise BadInput(path, "not an .npz archive (numpy writes a zip of .npy files; this is not a zip)")
    try:
        with zipfile.ZipFile(path) as zf:
            headers = {info.filename[:-4]: _header(zf, info) for info in zf.infolist() if info.filename.endswith(".npy")}
    # the archive's own directory, not one member; zipfile raises NotImplementedError for a "zip version" it lacks
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
        raise BadInput(path, f"not a readable .npz archive: truncated or corrupt ({first_line(exc)})") from exc
    if not headers:
        raise BadInput(path, "holds no arrays (an .npz is a zip of .npy files)")
    return NpzMembers(path, headers, allow_pickle)


@dataclass(frozen=True)
class Header:
    """What a member declares, read without its data; `error` when even that cannot be read."""

    shape: tuple = ()
    dtype: np.dtype | None = None
    stored: int = 0  # the member's uncompressed size in the zip directory
    error: str | None = None


def _header(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Header:
    """A member's declared shape and dtype; a damaged one is remembered, and refused only if it is read."""
    try:
        with zf.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
    except Exception as exc:
        return Header(stored=info.file_size, error=first_line(exc))
    return Header(tuple(shape), dtype, info.file_size)


# numpy parses each member's .npy header with ast.literal_eval, and CPython 3.11's AST constructor keeps its recursion
# depth in state shared by threads (python/cpython#106905): two members read side by side (`prefetch`) can fail a
# valid file with "SystemError: AST constructor recursion depth mismatch". Such a read is done again, under a lock.
_ALONE = threading.Lock()


def _read_member(path: Path, key: str, allow_pickle: bool, tries: int = 3) -> np.ndarray:
    for attempt in range(tries):
        try:
            with _ALONE if attempt else contextlib.nullcontext():
                direct = _inflate(path, key)
                if direct is not None:
                    return direct
                with np.load(path, allow_pickle=allow_pickle) as npz:
                    return npz[key]
        except SystemError as race:
            if "recursion depth mismatch" not in str(race) or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


PIECE = 1 << 20  # compressed bytes inflated at a time: what comes out stays in the cache


def _inflate(path: Path, key: str) -> np.ndarray | None:
    """A member inflated straight into one buffer that becomes its array, 1 MB of its data at a time, its size and CRC checked:
    what np.load does through zipfile's file object 256 kB at a time, in a tenth less time. None where np.load's own
    rules apply (an object array: the pickle rules; Fortran order; a compression other than deflate or none)."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(key + ".npy")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 1:
        return None
    out = np.empty(info.file_size, np.uint8)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        local = fh.read(30)
        if len(local) < 30 or local[:4] != b"PK\x03\x04":
            raise ValueError("bad local file header")
        fh.seek(info.header_offset + 30 + sum(struct.unpack("<HH", local[26:30])))
        size, crc = _fill(fh, out, info)
    if size != info.file_size or crc != info.CRC:
        raise ValueError(f"inflated to {size} bytes (CRC {crc:08x}) where the archive says {info.file_size} ({info.CRC:08x})")
    head = io.BytesIO(out[:min(out.shape[0], 1 << 16)].tobytes())
    version = np.lib.format.read_magic(head)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(head)
    if dtype.hasobject or fortran:
        return None
    count, start = int(np.prod(shape, dtype=np.int64)), head.tell()
    body = out[start:start + count * dtype.itemsize]
    if body.shape[0] != count * dtype.itemsize:
        raise ValueError(f"holds {body.shape[0]} bytes of data where its header declares {count * dtype.itemsize}")
    body = body if start % max(dtype.alignment, 1) == 0 else body.copy()
    return body.view(dtype).reshape(shape)


def _fill(fh, out: np.ndarray, info: zipfile.ZipInfo) -> tuple[int, int]:
    """Read (and inflate) the member's data into `out`, never past its end: (bytes written, their CRC-32)."""
    pos, crc, left = 0, 0, info.compress_size
    inflate = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    while left:
        data = fh.read(min(PIECE, left))
        if not data:
            raise ValueError("cut short")
        left -= len(data)
        while data:
            got = data if inflate is None else inflate.decompress(data, out.shape[0] - pos + 1)
            if pos + len(got) > out.shape[0]:
                raise ValueError("inflates beyond the size the archive declares")
            out[pos:pos + len(got)] = np.frombuffer(got, np.uint8)
            crc, pos = zlib.crc32(got, crc), pos + len(got)
            data = b"" if inflate is None else inflate.unconsumed_tail
    if inflate is not None and (rest := inflate.flush()):
        raise ValueError(f"inflates beyond the size the archive declares ({len(rest)} more bytes)")
    return pos, crc


class NpzMembers(Mapping):
    """The archive's arrays by name, each checked, read (and cached) on first use."""

    def __init__(self, path: Path, headers: dict[str, Header], allow_pickle: bool):
        self.path, self.headers, self.allow_pickle = path, headers, allow_pickle
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.headers:
            raise KeyError(key)
        if key not in self._cache:
            self._check(key)
            try:
                self._cache[key] = _read_member(self.path, key, self.allow_pickle)
            except Exception as exc:
                raise BadInput(self.path, f"member '{key}' cannot be read: truncated or corrupt ({first_line(exc)})") from exc
        return self._cache[key]

    def _check(self, key: str) -> None:
        """Before reading a member: no object arrays without --allow-pickle, no more data declared than the
        member holds, nothing above the limits."""
        h = self.headers[key]
        if h.error is not None or h.dtype is None:
            raise BadInput(self.path, f"member '{key}' is not a readable .npy array ({h.error})")
        if h.dtype.hasobject and not self.allow_pickle:
            raise BadInput(self.path, OBJECT_ARRAYS)
        count = int(np.prod(h.shape, dtype=np.float64))
        limits = current()
        if key in TOPK_FIELDS and len(h.shape) == 2:  # [T, k]: k columns per token, k ≤ TOPK_MAX
            if h.shape[1] > TOPK_MAX or h.shape[0] > limits.max_elements:
                raise BadInput(self.path, f"'{key}' declares shape {list(h.shape)}: more than {TOPK_MAX} columns or "
                                          f"{fmt(limits.max_elements)} rows (from --max-tokens {fmt(limits.max_tokens)})")
        elif key == "kept_ids":  # a kept set per token: as many ids as one int32 array's bytes allow
            if count * 4 > limits.max_bytes:
                raise BadInput(self.path, f"'kept_ids' declares {fmt(count)} ids, more than this run reads "
                                          f"({fmt(limits.max_bytes // 4)}, from --max-tokens {fmt(limits.max_tokens)})")
        elif count > limits.max_elements:
            raise BadInput(self.path, too_large(f"'{key}'", count, limits))
        chars = h.dtype.itemsize // (4 if h.dtype.kind == "U" else 1)
        if h.dtype.kind in "SU" and chars > MAX_STRING_CHARS:  # converted to Python strings: a few take gigabytes
            raise BadInput(self.path, f"'{key}' holds strings of {fmt(chars)} characters each ({h.dtype}), more than "
                                      f"tim-report reads in one string ({fmt(MAX_STRING_CHARS)}), whatever the limits")
        if h.dtype.kind in "SU" and count * h.dtype.itemsize > limits.max_text_bytes:
            raise BadInput(self.path, f"'{key}' declares {fmt(count)} strings of {fmt(chars)} characters each ({h.dtype}): "
                                      f"{fmt(count * h.dtype.itemsize)} bytes, more than this run reads as text "
                                      f"({fmt(limits.max_text_bytes)}, from --max-tokens {fmt(limits.max_tokens)})")
        if count * h.dtype.itemsize > limits.max_bytes:
            raise BadInput(self.path, f"'{key}' declares {fmt(count)} elements of {h.dtype.itemsize} bytes ({h.dtype}): "
                                      f"{fmt(count * h.dtype.itemsize)} bytes, more than this run reads "
                                      f"({fmt(limits.max_bytes)}, from --max-tokens {fmt(limits.max_tokens)})")
        if not h.dtype.hasobject and count * h.dtype.itemsize > h.stored:
            raise BadInput(self.path, f"'{key}' declares {fmt(count)} elements but holds only {fmt(h.stored)} bytes: "
                                      "truncated or corrupt")

    def __contains__(self, key: object) -> bool:  # from the headers: asking is not reading
        return key in self.headers

    def prefetch(self, keys: list[str]) -> None:
        """Read these members side by side (zlib releases the GIL; each read opens its own handle)."""
        todo = [k for k in dict.fromkeys(keys) if k in self.headers and k not in self._cache]
        for k in todo:  # here, not in the pool: its threads do not see the limits' context variable
            self._check(k)
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
        h = self.headers[key]
        return (list(h.shape), str(h.dtype)) if h.error is None else ([], "unreadable .npy header")
