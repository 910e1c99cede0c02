"""`weight_digest`: the weights as an engine holds them, in one digest, and the share of them that changed.

The round trip of a weight sync (design §12, docs/sync.md): digest the engine's weights in its dtype, digest the
trainer's weights cast to that dtype the same way, and compare. Equal digests are the same weights, bit for bit; a
digest that stays put while the trainer's moves is a sync that did not arrive. With `since=` (the previous digest of the
same weights) it also counts the share of elements whose value in that dtype changed: 1–2% between RL steps in bf16,
and the same on both sides of a sync that arrived whole.

    digest = sha256("tim-report weights v1\\n" + for each tensor in name order:
                    name + "\\0" + dtype + shape + "\\0" + sha256(its bytes in the engine's dtype))

Names are part of it, so two tensors loaded under each other's names change it. The changed share is exact up to
config.sync.DIGEST_SAMPLE elements and counted over a strided sample above (every s-th element in name order, the
same positions on both sides); a tensor whose own sha256 did not move counts 0 without being read. Torch is imported
here only, when a digest is made.
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
    stride: int  # the changed share is counted at every stride-th element in name order (1: every element)
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
    import torch

    name = _dtype(dtype)
    if version is not None and (isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0):
        raise BadInput(WHO, f"version={version!r:.40}: expected an integer version (0 or more)")
    if since is not None and not isinstance(since, WeightDigest):
        raise BadInput(WHO, f"since is {type(since).__name__}: expected the WeightDigest of the previous version")
    tensors = dict(_pack(_named(weights), packed))
    if not tensors:
        raise BadInput(WHO, "no tensors to digest: expected a torch module, a state dict or (name, tensor) pairs")
    shapes = {n: tuple(int(x) for x in t.shape) for n, t in tensors.items()}
    total = sum(int(np.prod(s, dtype=np.int64)) for s in shapes.values())
    stride = _stride(total)
    outer = hashlib.sha256(HEADER)
    parts: dict[str, tuple[tuple[int, ...], bytes, np.ndarray]] = {}
    start = 0
    for n in sorted(tensors):
        t = tensors[n].detach().to(getattr(torch, name)).reshape(-1).cpu()  # cast where it lives, then one host copy
        raw = t.view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8)
        inner = hashlib.sha256(raw.data).digest()
        bits = raw.view(_BITS[name])
        parts[n] = (shapes[n], inner, bits[(-start) % stride::stride].copy())
        start += bits.size
        outer.update(n.encode("utf-8") + b"\0" + name.encode() + repr(shapes[n]).encode() + b"\0" + inner)
    share = _changed(parts, since, dtype_name(name), stride) if since is not None else None
    return WeightDigest(outer.hexdigest(), dtype_name(name), None if version is None else int(version), share,
                        since.version if since is not None else None, len(parts), total, stride, parts)


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


def _named(weights: Any) -> Iterator[tuple[str, Any]]:
    """(name, tensor) pairs of a module (its parameters, a tied one once), a state dict, or pairs."""
    if hasattr(weights, "named_parameters") and callable(weights.named_parameters):
        pairs: Iterable = weights.named_parameters()
    elif isinstance(weights, Mapping):
        pairs = weights.items()
    elif isinstance(weights, Iterable) and not isinstance(weights, (str, bytes)):
        pairs = weights
    else:
        raise BadInput(WHO, f"weights is {type(weights).__name__}: expected a torch module, a state dict or "
                            "(name, tensor) pairs")
    seen = set()
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise BadInput(WHO, f"an item is {type(item).__name__}: expected (name, tensor) pairs")
        n, t = item
        if not isinstance(n, str) or not (hasattr(t, "detach") and hasattr(t, "dtype")):
            raise BadInput(WHO, f"{str(n)[:60]!r} is {type(t).__name__}: expected a name and a torch tensor")
        if n in seen:
            raise BadInput(WHO, f"{n[:60]!r} is given twice: the digest names each tensor once")
        seen.add(n)
        yield n, t


def _pack(pairs: Iterator[tuple[str, Any]], packed: Mapping[str, Iterable[str]] | None) -> Iterator[tuple[str, Any]]:
    """The pairs with each fused group's parts concatenated along dim 0 under the fused name (packed=None: as given)."""
    if not packed:
        yield from pairs
        return
    import torch

    where = {part: (fused, i, len(list(parts))) for fused, parts in packed.items() for i, part in enumerate(parts)}
    waiting: dict[str, tuple[int, dict[int, Any]]] = {}
    for n, t in pairs:
        bits = n.split(".")
        hit = next(((k, where[b]) for k, b in enumerate(bits) if b in where), None)
        if hit is None:
            yield n, t
            continue
        k, (fused, i, count) = hit
        key = ".".join([*bits[:k], fused, *bits[k + 1:]])
        group = waiting.setdefault(key, (count, {}))[1]
        group[i] = t
        if len(group) == count:
            del waiting[key]
            yield key, torch.cat([group[j].detach() for j in range(count)], dim=0)
    if waiting:
        key, (count, group) = next(iter(waiting.items()))
        raise BadInput(WHO, f"packed: {key[:60]!r} lacks {count - len(group)} of its {count} parts, so it cannot be "
                            "fused as the engine fuses it")


def _stride(total: int) -> int:
    """1 up to DIGEST_SAMPLE elements, else the smallest prime ≥ total / DIGEST_SAMPLE (a prime: no row length of a
    weight matrix aliases it)."""
    if total <= DIGEST_SAMPLE:
        return 1
    s = -(-total // DIGEST_SAMPLE)
    while any(s % p == 0 for p in range(2, int(s**0.5) + 1)):
        s += 1
    return s


def _changed(parts: dict, since: WeightDigest, dtype: str, stride: int) -> float | None:
    """The share of the sampled elements whose bits differ from `since`'s; BadInput when `since` digests other
    weights (other names, shapes or dtype)."""
    if since.dtype != dtype:
        raise BadInput(WHO, f"since= is a digest in {since.dtype}, this one in {dtype}: digest both in the engine's dtype")
    if since._parts.keys() != parts.keys() or since.stride != stride:
        other = sorted(set(parts) ^ set(since._parts))
        raise BadInput(WHO, f"since= digests other weights ({other[0][:60]!r} is on one side only)" if other
                            else "since= digests weights of another size")
    changed = sampled = 0
    for n, (shape, inner, bits) in parts.items():
        before = since._parts[n]
        if before[0] != shape:
            raise BadInput(WHO, f"since= digests other weights ({n[:60]!r} was {list(before[0])}, is {list(shape)})")
        sampled += bits.size
        if before[1] != inner:
            changed += int(np.count_nonzero(bits != before[2]))
    return changed / sampled if sampled else None
