"""bisect on saved states (an engine's own hook): three setups' site outputs, compared without replay.

Pure numpy; the files are read by io.states, handed in as objects with `names()` and `[name]`. Without the models
nothing can be replayed, so each site's error is the plain forward's (it carries every earlier site's): the first
site beyond its floor is still where the two setups start to part, a later one may be beyond only because of it.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import BadInput
from .bisect import Accumulator

SUBS = {"input_layernorm": (0, "input_norm"), "self_attn": (1, "attention"), "post_attention_layernorm": (2, "post_attention_norm"),
        "mlp.gate": (3, "router"), "mlp": (4, "mlp"), "": (5, "layer")}
LAYER = re.compile(r"^(.*\.)?layers\.(\d+)(?:\.(.+))?$")


def site_key(name: str) -> tuple | None:
    """(order, kind, layer) of a site name, or None when it names no site bisect knows."""
    if name.endswith("embed_tokens"):
        return (0, 0, 0), "embedding", None
    m = LAYER.match(name)
    if m:
        sub = m.group(3) or ""
        if sub in SUBS:
            return (1, int(m.group(2)), SUBS[sub][0]), SUBS[sub][1], int(m.group(2))
        return None
    if name.endswith("norm"):
        return (2, 0, 0), "final_norm", None
    if name.endswith("lm_head"):
        return (3, 0, 0), "lm_head", None
    if name == "log_probs":
        return (4, 0, 0), "log_probs", None
    return None


def relative_errors(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per row: ‖y − ref‖ / ‖ref‖ (float64 sums of float32 rows)."""
    num = np.linalg.norm((y - ref).astype(np.float64), axis=-1)
    den = np.linalg.norm(ref.astype(np.float64), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(num == 0, 0.0, num / np.maximum(den, np.finfo(np.float64).tiny))


def compare_states(ref, cand, floor, where: tuple[str, str, str]) -> Accumulator:
    names = [n for n in ref.names() if n != "seq" and not n.endswith(".experts")]
    for other, path in ((cand, where[1]), (floor, where[2])):
        if set(other.names()) - {"seq"} != set(ref.names()) - {"seq"}:
            missing = sorted((set(ref.names()) ^ set(other.names())) - {"seq"})
            raise BadInput(path, f"holds other sites than {where[0]} ({', '.join(missing[:3])}): the same sites are compared")
    keyed = []
    for n in names:
        k = site_key(n)
        if k is None:
            raise BadInput(where[0], f"'{n}' is not a site name bisect knows (docs/bisect.md lists them)")
        keyed.append((k, n))
    acc = Accumulator()
    seq = None
    for (_, kind, layer), name in sorted(keyed):
        r = ref[name]
        c, f = cand[name], floor[name]
        if c.shape != r.shape or f.shape != r.shape:
            raise BadInput(where[1] if c.shape != r.shape else where[2],
                           f"{name} has shape {c.shape if c.shape != r.shape else f.shape}, {where[0]} {r.shape}")
        if seq is None:
            seq = ref["seq"] if "seq" in ref.names() else np.zeros(len(r), np.int64)
        if len(seq) != len(r):
            raise BadInput(where[0], f"seq has {len(seq)} tokens, {name} {len(r)}")
        e_c, e_f = relative_errors(c, r), relative_errors(f, r)
        flips = None
        if kind == "router" and f"{name}.experts" in ref.names():
            ex = {k: np.sort(s[f"{name}.experts"], axis=-1) for k, s in (("r", ref), ("c", cand), ("f", floor))}
            flips = {"local": (ex["c"] != ex["r"]).any(-1), "floor": (ex["f"] != ex["r"]).any(-1),
                     "plain": (ex["c"] != ex["r"]).any(-1)}
        acc.add(name, kind, layer, seq, {"local": e_c, "floor": e_f, "plain": e_c, "floor_plain": e_f}, flips)
    return acc
