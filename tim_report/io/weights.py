"""`weight_digest`: the weights as an engine holds them, in one digest, and the share of them that changed.

The round trip of a weight sync (design §12, docs/sync.md): digest the engine's weights in its dtype, digest the
trainer's weights cast to that dtype the same way, and compare. Equal digests are the same weights, bit for bit; a
digest that stays put while the trainer's moves is a sync that did not arrive. With `since=` (the previous digest of the
same weights) it also counts the share of elements whose value in that dtype changed: 1–2% between RL steps in bf16,
and the same on both sides of a sync that arrived whole.

    digest = sha256("tim-report weights v1\\n" + for each tensor in name order:
                    name + "\\0" + dtype + shape + "\\0" + sha256(its bytes in the engine's dtype))

Names are part of it, so two tensors loaded under each other's names change it. The tensors are read one at a time,
in the order they come (a sync's stream of gathered shards is never held whole): each is cast, hashed and sampled,
then let go. The changed share is exact for a tensor of up to config.sync.DIGEST_SAMPLE elements and counted over a
strided sample of about that many above (every s-th element, s the smallest prime ≥ its elements / DIGEST_SAMPLE: the
same positions on both sides), weighted by the tensors' sizes; a tensor whose own sha256 did not move counts 0 without
being compared. Torch is imported here only, when a digest is made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config.sync import DIGEST_DTYPES, DIGEST_SAMPLE
from ..errors import BadInput
from ..model import digest_text

WHO = "weight_digest"
HEADER = b"tim-report weights v1\n"
_BITS = {"bfloat16": np.uint16, "float16": np.uint16, "float32": np.uint32}


@dataclass(frozen=True, eq=False)
class WeightDigest:
    """One digest of a set of weights in one dtype: `digest` (sha256, 64 hex digits), the `version` it belongs to
    (None until given), `changed_share` since the digest of version `since` (None without `since=`), and what was
    read. `str()` is the text form `--meta engine_digest=...` takes; `record()` what save_step stores."""

    digest: str
    dtype: str
    version: int | None
    changed_share: float | None
    since: int | None
    tensors: int
    elements: int
    sampled: int  # the elements the changed share is counted over (== elements: every one, the share exact)
    _parts: dict[str, tuple[tuple[int, ...], bytes, np.ndarray]] = field(repr=False, default_factory=dict)

    def record(self) -> dict:
        return {"version": self.version, "dtype": self.dtype, "digest": self.digest,
                "changed_share": self.changed_share, "since": self.since}

    def __str__(self) -> str:
        return digest_text(self.record()) if self.version is not None else f"?:{self.dtype}:{self.digest}"

    def differing(self, other: WeightDigest) -> list[str]:
        """The names whose tensors differ between two digests in one dtype (a name only one side has included):
        which tensors a sync did not deliver, or delivered under another name."""
        if other.dtype != self.dtype:
            raise BadInput(WHO, f"the digests are in {self.dtype} and {other.dtype}: digest both in the engine's dtype")
        names = sorted(set(self._parts) | set(other._parts))
        return [n for n in names if n not in self._parts or n not in other._parts
                or self._parts[n][:2] != other._parts[n][:2]]


def weight_digest(weights: Any, dtype: str = "bf16", *, since: WeightDigest | None = None, version: int | None = None,
                  packed: Mapping[str, Iterable[str]] | None = None) -> WeightDigest:
    """The digest of `weights` (a torch module: its named parameters; a state dict; or (name, tensor) pairs, as a weight
    sync streams them) cast to `dtype` (bf16, fp16, fp32: the engine's). `since`: the previous digest of the same
    weights, for the changed share; `version`: the weight version this digest belongs to (save_step records it).
    `packed` packs the trainer's tensors the way an engine fuses them (vLLM's `packed_modules_mapping`, such as
    {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}: the parts concatenated along dim 0), so the two digests compare."""
    digester = WeightDigester(dtype, packed=packed)
    for n, t in _pairs(weights):
        digester.add(n, t)
    return digester.result(since=since, version=version)


class WeightDigester:
    """A digest made while a sync streams its tensors, one at a time: `tap(pairs)` passes each (name, tensor) on
    unchanged while reading it (`engine.load_weights(digester.tap(stream))`), `add(name, tensor)` reads one, and
    `result(since=, version=)` is the WeightDigest, as `weight_digest` of the same tensors would be."""

    def __init__(self, dtype: str = "bf16", *, packed: Mapping[str, Iterable[str]] | None = None):
        self._dtype = _dtype(dtype)
        self._packer = _Packer(packed)
        self._pieces: list[tuple[str, tuple[int, ...], bytes, np.ndarray]] = []
        self._seen: set[str] = set()

    def tap(self, pairs: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        for n, t in pairs:
            self.add(n, t)
            yield n, t

    def add(self, name: str, tensor: Any) -> None:
        _check(name, tensor, self._seen)
        for n, t in self._packer.feed(name, tensor):
            self._read(n, t)

    def _read(self, n: str, t: Any) -> None:
        """Cast where the tensor lives, one host copy, its sha256 and its sample; nothing of it kept beyond those."""
        import torch

        shape = tuple(int(x) for x in t.shape)
        raw = t.detach().to(getattr(torch, self._dtype)).reshape(-1).cpu().view(torch.uint8).numpy()
        bits = raw.view(_BITS[self._dtype])
        self._pieces.append((n, shape, hashlib.sha256(raw.data).digest(), bits[::_stride(bits.size)].copy()))

    def result(self, *, since: WeightDigest | None = None, version: int | None = None) -> WeightDigest:
        if version is not None and (isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0):
            raise BadInput(WHO, f"version={version!r:.40}: expected an integer version (0 or more)")
        if since is not None and not isinstance(since, WeightDigest):
            raise BadInput(WHO, f"since is {type(since).__name__}: expected the WeightDigest of the previous version")
        self._packer.close()
        if not self._pieces:
            raise BadInput(WHO, "no tensors to digest: expected a torch module, a state dict or (name, tensor) pairs")
        outer = hashlib.sha256(HEADER)
        parts: dict[str, tuple[tuple[int, ...], bytes, np.ndarray]] = {}
        for n, shape, inner, sample in sorted(self._pieces, key=lambda p: p[0]):
            parts[n] = (shape, inner, sample)
            outer.update(n.encode("utf-8") + b"\0" + self._dtype.encode() + repr(shape).encode() + b"\0" + inner)
        short = dtype_name(self._dtype)
        share = _changed(parts, since, short) if since is not None else None
        return WeightDigest(outer.hexdigest(), short, None if version is None else int(version), share,
                            since.version if since is not None else None, len(parts),
                            sum(_size(p[0]) for p in parts.values()), sum(p[2].size for p in parts.values()), parts)


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def dtype_name(torch_name: str) -> str:
    """bfloat16 → bf16: the short name records carry."""
    return next(k for k, v in DIGEST_DTYPES.items() if v == torch_name)


def _dtype(dtype: Any) -> str:
    """'bf16', 'bfloat16', torch.bfloat16 → 'bfloat16'; anything else is BadInput."""
    text = str(dtype).removeprefix("torch.").lower()
    if text in DIGEST_DTYPES:
        return DIGEST_DTYPES[text]
    if text in DIGEST_DTYPES.values():
        return text
    raise BadInput(WHO, f"dtype={str(dtype)[:40]!r}: expected the engine's, one of {', '.join(DIGEST_DTYPES)}")


def _pairs(weights: Any) -> Iterable:
    """(name, tensor) pairs of a module (its parameters, a tied one once), a state dict, or pairs."""
    if hasattr(weights, "named_parameters") and callable(weights.named_parameters):
        return weights.named_parameters()
    if isinstance(weights, Mapping):
        return weights.items()
    if isinstance(weights, Iterable) and not isinstance(weights, (str, bytes)):
        return (item if isinstance(item, tuple) and len(item) == 2 else (None, item) for item in weights)
    raise BadInput(WHO, f"weights is {type(weights).__name__}: expected a torch module, a state dict or (name, tensor) pairs")


def _check(n: Any, t: Any, seen: set[str]) -> None:
    """A name and a torch tensor that holds elements, each name once; BadInput otherwise."""
    if n is None:
        raise BadInput(WHO, f"an item is {type(t).__name__}: expected (name, tensor) pairs")
    if not isinstance(n, str) or not (hasattr(t, "detach") and hasattr(t, "dtype")):
        raise BadInput(WHO, f"{str(n)[:60]!r} is {type(t).__name__}: expected a name and a torch tensor")
    if n in seen:
        raise BadInput(WHO, f"{n[:60]!r} is given twice: the digest names each tensor once")
    if t.numel() == 0:  # a weight that lives elsewhere: what is here is not what the model computes with
        raise BadInput(WHO, f"{n[:60]!r} holds no elements: these weights are not materialised here (ZeRO-3 or FSDP "
                            "shards: gather them first; vLLM's CPU build repacks its linear layers: digest a GPU engine)")
    seen.add(n)


class _Packer:
    """Fuses the parts of each packed group, as they arrive, into one tensor under the fused name (concatenated along
    dim 0, in the mapping's order); every other tensor passes as it is."""

    def __init__(self, packed: Mapping[str, Iterable[str]] | None):
        self.where = {part: (fused, i, len(list(parts))) for fused, parts in (packed or {}).items()
                      for i, part in enumerate(parts)}
        self.waiting: dict[str, tuple[int, dict[int, Any]]] = {}

    def feed(self, n: str, t: Any) -> list[tuple[str, Any]]:
        bits = n.split(".")
        hit = next(((k, self.where[b]) for k, b in enumerate(bits) if b in self.where), None)
        if hit is None:
            return [(n, t)]
        k, (fused, i, count) = hit
        key = ".".join([*bits[:k], fused, *bits[k + 1:]])
        group = self.waiting.setdefault(key, (count, {}))[1]
        group[i] = t.detach()
        if len(group) < count:
            return []
        del self.waiting[key]
        import torch

        return [(key, torch.cat([group[j] for j in range(count)], dim=0))]

    def close(self) -> None:
        if self.waiting:
            key, (count, group) = next(iter(self.waiting.items()))
            raise BadInput(WHO, f"packed: {key[:60]!r} lacks {count - len(group)} of its {count} parts, so it cannot be "
                                "fused as the engine fuses it")


def _stride(n: int) -> int:
    """1 for a tensor of up to DIGEST_SAMPLE elements, else the smallest prime ≥ n / DIGEST_SAMPLE (a prime: no row
    length of a weight matrix aliases it)."""
    if n <= DIGEST_SAMPLE:
        return 1
    s = -(-n // DIGEST_SAMPLE)
    while any(s % p == 0 for p in range(2, int(s**0.5) + 1)):
        s += 1
    return s


def _changed(parts: dict, since: WeightDigest, dtype: str) -> float:
    """The share of elements whose bits differ from `since`'s, each tensor's sampled share weighted by its size;
    BadInput when `since` digests other weights (other names, shapes or dtype)."""
    if since.dtype != dtype:
        raise BadInput(WHO, f"since= is a digest in {since.dtype}, this one in {dtype}: digest both in the engine's dtype")
    if since._parts.keys() != parts.keys():
        other = sorted(set(parts) ^ set(since._parts))
        raise BadInput(WHO, f"since= digests other weights ({other[0][:60]!r} is on one side only)")
    changed = total = 0.0
    for n, (shape, inner, bits) in parts.items():
        before = since._parts[n]
        if before[0] != shape:
            raise BadInput(WHO, f"since= digests other weights ({n[:60]!r} was {list(before[0])}, is {list(shape)})")
        total += _size(shape)
        if before[1] != inner:
            changed += _size(shape) * int(np.count_nonzero(bits != before[2])) / bits.size
    return changed / total
