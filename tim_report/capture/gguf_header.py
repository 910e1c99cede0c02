"""A GGUF's header walked, and bounded, before gguf's reader runs.

gguf's reader builds one Python object per metadata value, per array element and per tensor field, and trusts the
counts the header states: a 4 MB file declaring a 4,000,000-byte array took 2.8 GB and minutes, a 21 MB file declaring
a million tensors ended in "Cannot recover from MemoryErrors". This walk reads only the header's counts and lengths
(an array of numbers is skipped by arithmetic, never element by element), checks each against the bytes left in the
file and every entry against a budget set by the file's own size (config.bounds), and stops at the first that does
not fit: so the reader runs only on a header that a file of that size can hold as a model.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from ..config.bounds import GGUF_BYTES_PER_ENTRY, GGUF_MAX_ARRAY_DEPTH, GGUF_MAX_ENTRIES, GGUF_MIN_ENTRIES, GGUF_TENSOR_ENTRIES
from ..errors import BadInput

# GGUFValueType: the fixed sizes of the scalar types; 8 is a string (u64 length + bytes), 9 an array (u32 type, u64 count)
SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
VERSIONS = (2, 3)  # the versions gguf's reader reads (READER_SUPPORTED_VERSIONS)
KV_MIN_BYTES = 8 + 4 + 1  # a key's length, its value's type, the smallest value
TENSOR_MIN_BYTES = 8 + 4 + 4 + 8  # a name's length, n_dims, the type, the data offset


class _Refused(Exception):
    pass


def entry_budget(size: int) -> int:
    """How many reader objects (entries) a header may declare in a file of `size` bytes."""
    return max(GGUF_MIN_ENTRIES, min(GGUF_MAX_ENTRIES, size // GGUF_BYTES_PER_ENTRY))


def check_header(gguf: Path) -> None:
    """BadInput (one line) when the header cannot be what a file of this size holds: a length or count past the end
    of the file, more entries than its budget, an unknown value type, arrays nested past GGUF_MAX_ARRAY_DEPTH."""
    try:
        with open(gguf, "rb") as f:
            size = f.seek(0, 2)
            if size < 24:
                raise BadInput(gguf, f"is truncated: {size} bytes, shorter than a GGUF header")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                _Walk(buf, size).header()
    except _Refused as exc:
        raise BadInput(gguf, str(exc)) from None
    except OSError as exc:
        raise BadInput(gguf, f"cannot read it ({exc.strerror or type(exc).__name__})") from None


class _Walk:
    def __init__(self, buf: mmap.mmap, size: int):
        self.buf, self.size, self.pos = buf, size, 4
        self.budget, self.entries = entry_budget(size), 0
        self.order = "<"

    def header(self) -> None:
        version = self.u32()
        if version & 0xFFFF == 0:  # written for the other byte order, as gguf's reader reads it
            self.order = ">"
            version = int.from_bytes(version.to_bytes(4, "little"), "big")
        if version not in VERSIONS:
            raise _Refused(f"is GGUF version {version}; the gguf package reads versions "
                           f"{' and '.join(map(str, VERSIONS))}")
        tensors, kvs = self.u64(), self.u64()
        self.need(kvs * KV_MIN_BYTES + tensors * TENSOR_MIN_BYTES, f"{kvs:,} metadata entries and {tensors:,} tensors")
        self.spend(tensors * GGUF_TENSOR_ENTRIES + kvs * 4)
        for _ in range(kvs):
            self.string("a metadata key")
            self.value(self.u32(), 0)
        for _ in range(tensors):
            self.string("a tensor name")
            dims = self.u32()
            self.need(dims * 8 + 12, "a tensor's shape")
            self.pos += dims * 8 + 12

    def value(self, kind: int, depth: int) -> None:
        if kind in SCALAR_BYTES:
            self.need(SCALAR_BYTES[kind], "a metadata value")
            self.pos += SCALAR_BYTES[kind]
        elif kind == STRING:
            self.string("a metadata string")
        elif kind == ARRAY:
            if depth >= GGUF_MAX_ARRAY_DEPTH:
                raise _Refused(f"nests metadata arrays more than {GGUF_MAX_ARRAY_DEPTH} deep")
            item, count = self.u32(), self.u64()
            least = SCALAR_BYTES.get(item, 8 if item == STRING else 12)
            self.need(count * least, f"a metadata array of {count:,} elements")
            self.spend(count * (2 if item in (STRING, ARRAY) else 1))
            if item in SCALAR_BYTES:
                self.pos += count * least
            else:
                for _ in range(count):
                    self.value(item, depth + 1)
        else:
            raise _Refused(f"declares a metadata value of unknown type {kind} at byte {self.pos}")

    def string(self, what: str) -> None:
        n = self.u64()
        self.need(n, what)
        self.pos += n

    def u32(self) -> int:
        self.need(4, "the header")
        (v,) = struct.unpack_from(self.order + "I", self.buf, self.pos)
        self.pos += 4
        return int(v)

    def u64(self) -> int:
        self.need(8, "the header")
        (v,) = struct.unpack_from(self.order + "Q", self.buf, self.pos)
        self.pos += 8
        return int(v)

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            raise _Refused(f"is truncated or damaged: its header declares {what} ({n:,} bytes or more at byte "
                           f"{self.pos:,}), past the end of the {self.size:,}-byte file")

    def spend(self, n: int) -> None:
        self.entries += n
        if self.entries > self.budget:
            raise _Refused(f"its header declares {self.entries:,} or more entries (metadata values, array elements, "
                           f"tensor fields), more than a {self.size:,}-byte model file holds ({self.budget:,}: one per "
                           f"{GGUF_BYTES_PER_ENTRY} bytes, at least {GGUF_MIN_ENTRIES:,}, at most {GGUF_MAX_ENTRIES:,}); "
                           "refused before the gguf reader builds them")
