"""Site-by-site replay of two setups of one causal LM, and of the floor setup, reduced to per-token errors as it goes.

Three models take part: the reference, the candidate, and the floor (the reference's weights in the candidate's
precision with stock modules; it may be the candidate itself when the candidate is unpatched). The decoder is
driven one layer at a time, in lock-step on all three, so only one layer's tensors are alive at once:

1. `prepare`: each side's own decoder is called once with its layers short-circuited, to record what each layer
   is called with (the causal mask its attention implementation wants, the rotary cos/sin in its dtype, the
   position ids) and the embedding's output. Each side keeps its own: SDPA wants no mask where eager wants a
   4-D one, so a mask is never carried from one side to the other.
2. Each layer runs on each side's own running hidden state (the plain forward), with hooks on its four children
   (and the router) recording their inputs, call arguments and outputs.
3. Replay: each candidate and floor site is called again on the reference's input for that site, with the side's
   own call arguments; its output against the reference's is the site's local error. The whole layer is replayed
   the same way (its residual output's local error).

Every comparison is reduced at once to one number per token (relative L2 error over the hidden dimension; |Δ log p|
for `log_probs`) and handed on as a `SiteRecord`; nothing else is kept. Tensors move to the device of the module
that reads them, so a model split over devices (`device_map`) is bisected site by site as well.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from .bisect_sites import Site, Structure

SUBS = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp.gate", "mlp")
HEAD_CHUNK_BYTES = 64 * 1024 * 1024  # logits of the five head comparisons, per chunk of rows


@dataclass
class SiteRecord:
    """One site over one batch: per-token errors of the tokens that count (attention mask 1)."""

    site: Site
    seq: np.ndarray  # [n] the sequence each token belongs to (its row in the batch, offset by the batch's start)
    local: np.ndarray  # [n] candidate site on the reference's input vs the reference
    floor: np.ndarray  # [n] floor site on the reference's input vs the reference
    plain: np.ndarray  # [n] candidate's plain forward vs the reference's
    floor_plain: np.ndarray  # [n] floor's plain forward vs the reference's
    flips: dict | None = None  # router sites: {"local", "floor", "plain"} → [n] bool, another expert set chosen


@dataclass
class Sides:
    ref: Structure
    cand: Structure
    floor: Structure  # may be `cand` (same object): then computed once
    switch: Callable[[bool], None] | None = None  # PatchScope.side: True before the candidate runs, False before others

    def on(self, name: str) -> None:
        if self.switch is not None:
            self.switch(name == "cand")


# ---------------------------------------------------------------- tensors

def _hidden_arg(args: tuple, kwargs: dict):
    return args[0] if args else kwargs["hidden_states"]


def _move(obj, device):
    if device is None:
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple):
        return tuple(_move(o, device) for o in obj)
    if isinstance(obj, list):
        return [_move(o, device) for o in obj]
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    return obj


def _param_device(module) -> torch.device | None:
    """Where the module's weights live; None when offloaded (`meta`: its accelerate hook moves inputs itself)."""
    for p in module.parameters():
        return None if p.device.type == "meta" else p.device
    return None


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _call(module, x: torch.Tensor, like: torch.Tensor, args: tuple, kwargs: dict):
    """The module on `x`, cast and moved as the side's own input `like` was, with the side's own other arguments."""
    x = x.to(device=like.device, dtype=like.dtype)
    if args:
        return module(x, *args[1:], **kwargs)
    return module(**{**kwargs, "hidden_states": x})


def errors(y: torch.Tensor, ref: torch.Tensor, keep: torch.Tensor) -> np.ndarray:
    """Per token: ‖y − ref‖ / ‖ref‖ over the last dimension, for the tokens `keep` selects."""
    r = ref.detach().float().reshape(-1, ref.shape[-1])
    d = y.detach().to(r.device).float().reshape(-1, ref.shape[-1]) - r
    num, den = d.norm(dim=-1), r.norm(dim=-1)
    e = torch.where(num == 0, torch.zeros_like(num), num / den.clamp_min(torch.finfo(torch.float32).tiny))
    return e[keep.to(e.device)].cpu().numpy().astype(np.float32)


def _routes(out, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A router's (logits, chosen experts [n, k] sorted): transformers ≥ 5 routers return (logits, weights,
    indices); a plain linear gate returns the logits and the block takes the top k."""
    if isinstance(out, tuple):
        logits = out[0]
        idx = out[-1] if len(out) >= 3 and not out[-1].is_floating_point() else logits.float().topk(top_k, -1).indices
    else:
        logits, idx = out, out.float().topk(top_k, -1).indices
    return logits, idx.reshape(-1, idx.shape[-1]).sort(-1).values


def _flips(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> np.ndarray:
    f = (a.to(b.device) != b).any(-1)
    return f[keep.to(f.device)].cpu().numpy()


# ---------------------------------------------------------------- the three sides

def prepare(st: Structure, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, list]:
    """(embedding output, each layer's (args, kwargs)) of one side, its layers short-circuited: the masks, rotary
    cos/sin and position ids its decoder builds for its own attention implementation and dtype."""
    for as_tuple in (False, True):  # transformers ≥ 5 layers return a tensor, older ones a tuple
        calls: list = [None] * len(st.layers)
        seen: dict = {}
        hooks = [st.embed.register_forward_hook(functools.partial(_keep_output, seen, "embed")),
                 st.norm.register_forward_pre_hook(functools.partial(_keep_input, seen, "norm_in"))]
        saved = [layer.__dict__.get("forward") for layer in st.layers]
        try:
            for i, layer in enumerate(st.layers):
                layer.forward = functools.partial(_recorded, calls, i, as_tuple)
            dev = _param_device(st.embed) or ids.device
            st.base(input_ids=ids.to(dev), attention_mask=mask.to(dev), use_cache=False)
        finally:
            for layer, fwd in zip(st.layers, saved):
                if fwd is None:
                    del layer.forward
                else:
                    layer.forward = fwd
            for h in hooks:
                h.remove()
        emb = seen["embed"]
        if seen.get("norm_in") is not None and seen["norm_in"].shape == emb.shape and all(c is not None for c in calls):
            return emb, calls
    raise RuntimeError("the decoder's layer loop could not be followed")  # pragma: no cover - a new transformers


def _recorded(calls: list, i: int, as_tuple: bool, *args, **kwargs):
    """A short-circuited layer: its call recorded, its input returned as its output."""
    calls[i] = (args, kwargs)
    h = _hidden_arg(args, kwargs)
    return (h,) if as_tuple else h


def _keep_output(seen: dict, key: str, module, args, out) -> None:
    _keep(seen, key, out)


def _keep_input(seen: dict, key: str, module, args) -> None:
    _keep(seen, key, args[0] if args else None)


def _keep(seen: dict, key: str, value) -> None:
    """A hook's record; it returns None, so the module's output (or input) is left as it is."""
    seen.setdefault(key, value)


def _run_layer(st: Structure, i: int, h: torch.Tensor, call: tuple) -> tuple[torch.Tensor, dict]:
    """Layer i on the side's own hidden state; its children's (args, kwargs, output) recorded."""
    layer = st.layers[i]
    seen: dict = {}
    hooks = []
    for sub in SUBS:
        module = _module(layer, sub) if sub != "mlp.gate" or st.router else None
        if module is not None:
            hooks.append(module.register_forward_hook(
                lambda m, a, k, o, sub=sub: _keep(seen, sub, (a, k, o)), with_kwargs=True))
    args, kwargs = call
    dev = _param_device(layer)
    try:
        out = layer(_move(h, dev), *_move(args[1:], dev), **_move(kwargs, dev))
    finally:
        for hk in hooks:
            hk.remove()
    return _first(out), seen


def _module(layer, sub: str):
    m = layer
    for part in sub.split("."):
        m = getattr(m, part, None)
    return m


def run(sides: Sides, batches: Iterator[tuple[torch.Tensor, torch.Tensor, int]]) -> Iterator[SiteRecord]:
    """Every site of every batch ((ids, attention mask, index of its first sequence)), in forward order."""
    with torch.inference_mode():
        for ids, mask, start in batches:
            yield from _batch(sides, ids, mask, start)


def _batch(sides: Sides, ids: torch.Tensor, mask: torch.Tensor, start: int) -> Iterator[SiteRecord]:
    same = sides.floor is sides.cand
    names = ("ref", "cand") if same else ("ref", "cand", "floor")
    st = {"ref": sides.ref, "cand": sides.cand, "floor": sides.floor}
    keep = mask.reshape(-1).bool()
    seq = (torch.arange(ids.shape[0])[:, None].expand_as(ids).reshape(-1)[keep.cpu()] + start).numpy()
    prep = {}
    for n in names:
        sides.on(n)
        prep[n] = prepare(st[n], ids, mask)
    if same:
        prep["floor"] = prep["cand"]
    sites = iter(sides.ref.sites())

    def record(local, floor, plain, floor_plain, flips=None, rows=seq):
        return SiteRecord(next(sites), rows, local, floor, plain, floor_plain, flips)

    h = {n: prep[n][0] for n in st}
    e = {n: errors(h[n], h["ref"], keep) for n in ("cand", "floor")}
    yield record(e["cand"], e["floor"], e["cand"], e["floor"])  # the embedding: its input is the ids themselves
    for i in range(len(sides.ref.layers)):
        runs = {}
        for n in names:
            sides.on(n)
            runs[n] = _run_layer(st[n], i, h[n], prep[n][1][i])
        if same:
            runs["floor"] = runs["cand"]
        yield from _children(sides, st, i, runs, keep, record)
        # the whole layer on the reference's input: its residual output's local error
        y = runs["ref"][0]
        local: dict = {}
        for n in ("cand", "floor"):
            if n == "floor" and same:
                local["floor"] = local["cand"]
                continue
            sides.on(n)
            local[n] = _first(_run_layer(st[n], i, h["ref"].to(h[n].dtype), prep[n][1][i])[0])
        yield record(errors(local["cand"], y, keep), errors(local["floor"], y, keep),
                     errors(runs["cand"][0], y, keep), errors(runs["floor"][0], y, keep))
        h = {n: runs[n][0] for n in st}
    yield from _tail(sides, st, h, ids, mask, keep, start, record)


def _children(sides: Sides, st: dict, i: int, runs: dict, keep: torch.Tensor, record) -> Iterator[SiteRecord]:
    """Layer i's children (norms, attention, router, MLP): each candidate and floor child replayed on the
    reference's input for it, beside the plain forward's outputs `runs` recorded."""
    same = sides.floor is sides.cand
    ref_kids = runs["ref"][1]
    for sub in SUBS:
        if sub not in ref_kids:
            continue
        a, k, out = ref_kids[sub]
        x = _hidden_arg(a, k)
        replay: dict = {}
        plain: dict = {}
        for n in ("cand", "floor"):
            if n == "floor" and same:
                replay["floor"], plain["floor"] = replay["cand"], plain["cand"]
                continue
            oa, ok, oo = runs[n][1][sub]
            sides.on(n)
            replay[n] = _call(_module(st[n].layers[i], sub), x, _hidden_arg(oa, ok), oa, ok)
            plain[n] = oo
        if sub == "mlp.gate":
            yield _router_record(sides.ref.top_k, out, replay, plain, keep, record)
        else:
            y = _first(out)
            yield record(errors(_first(replay["cand"]), y, keep), errors(_first(replay["floor"]), y, keep),
                         errors(_first(plain["cand"]), y, keep), errors(_first(plain["floor"]), y, keep))


def _router_record(top_k: int, out, replay: dict, plain: dict, keep: torch.Tensor, record) -> SiteRecord:
    """A router: its logits' errors, and the tokens whose chosen experts differ from the reference's (flips)."""
    ref_logits, ref_idx = _routes(out, top_k)
    got = {f"{n}:{w}": _routes(v[n], top_k) for w, v in (("l", replay), ("p", plain)) for n in ("cand", "floor")}
    flips = {"local": _flips(got["cand:l"][1], ref_idx, keep), "floor": _flips(got["floor:l"][1], ref_idx, keep),
             "plain": _flips(got["cand:p"][1], ref_idx, keep)}
    e4 = [errors(got[key][0], ref_logits, keep) for key in ("cand:l", "floor:l", "cand:p", "floor:p")]
    return record(e4[0], e4[1], e4[2], e4[3], flips)


def _tail(sides, st, h, ids, mask, keep, start, record) -> Iterator[SiteRecord]:
    """The final norm, the logits and the log-probs of the next prompt token, the head in chunks of rows."""
    names = ("ref", "cand", "floor")
    normed, local_norm = {}, {}
    for n in names:
        sides.on(n)
        dev = _param_device(st[n].norm)
        normed[n] = st[n].norm(_move(h[n], dev))
        local_norm[n] = st[n].norm(_move(h["ref"].to(h[n].dtype), dev))
    y = normed["ref"]
    yield record(errors(local_norm["cand"], y, keep), errors(local_norm["floor"], y, keep),
                 errors(normed["cand"], y, keep), errors(normed["floor"], y, keep))
    # rows of the flattened batch; the log-prob of token t+1 is scored at row t when both are real tokens
    b, t = ids.shape
    nxt = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], 1).reshape(-1)
    has_next = torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], 1).reshape(-1).bool() & keep
    rows = {n: normed[n].reshape(b * t, -1) for n in names}
    ref_rows = y.reshape(b * t, -1)
    vocab = int(sides.ref.head.weight.shape[0])
    step = max(1, HEAD_CHUNK_BYTES // (vocab * 4 * 5))
    logit_err: list = [[] for _ in range(4)]
    lp_err: list = [[] for _ in range(4)]
    for lo in range(0, b * t, step):
        sl = slice(lo, lo + step)
        outs = [_head(sides, "ref", ref_rows[sl])]
        for n in ("cand", "floor"):
            outs.append(_head(sides, n, ref_rows[sl].to(rows[n].dtype)))
        outs += [_head(sides, n, rows[n][sl]) for n in ("cand", "floor")]
        k, hn, tg = keep[sl], has_next[sl], nxt[sl]
        ref_lp = _token_logprobs(outs[0], tg)
        for j in range(4):
            logit_err[j].append(errors(outs[j + 1], outs[0], k))
            d = (_token_logprobs(outs[j + 1], tg) - ref_lp.to(outs[j + 1].device)).abs()
            lp_err[j].append(d[hn.to(d.device)].cpu().numpy().astype(np.float32))
    # the floor replay and plain sit at index 1 and 3; the candidate's at 0 and 2
    yield record(*(np.concatenate(e) for e in logit_err))
    lp_seq = torch.arange(b)[:, None].expand(b, t).reshape(-1)[has_next.cpu()].numpy() + start
    lp = [np.concatenate(e) for e in lp_err]
    yield record(lp[0], lp[1], lp[2], lp[3], rows=lp_seq)


def _head(sides: Sides, name: str, x: torch.Tensor) -> torch.Tensor:
    sides.on(name)
    st = getattr(sides, name)
    return st.head(_move(x, _param_device(st.head)))


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    lp = torch.log_softmax(logits.float(), dim=-1)
    return lp.gather(-1, targets.to(lp.device)[:, None])[:, 0]
