"""Per-token log-probs of a transformers model: the one scoring routine of `capture` and of test suites.

`token_logprobs` runs the decoder (`model.base_model`) once and applies the output projection
itself, only on the scored positions and `chunk_rows` rows at a time, each chunk cast to fp32,
divided by the temperature and log-softmaxed in fp32, then reduced to the target token's log-prob
(and, when asked, to its top-k ids and log-probs by torch.topk on the same chunk). So scoring never holds
full-vocabulary logits for the whole batch, and an engine's LM head can be
kept in fp32. `HFEngine.score` (capture) and `score_logprobs` (kernel tests) both call it, so a
test scores exactly the way a captured batch was scored.
"""

from __future__ import annotations

import math

import torch


def process_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p truncation as vLLM's sampler does it (ascending sort, keep ≥ 1 token); -inf outside."""
    if top_k <= 0 and top_p >= 1.0:
        return logits
    v = logits.shape[-1]
    srt, idx = logits.sort(dim=-1, descending=False)
    if 0 < top_k < v:
        thresh = srt[..., v - top_k : v - top_k + 1]
        srt = srt.masked_fill(srt < thresh, -math.inf)
    if top_p < 1.0:
        cum = srt.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= 1.0 - top_p
        drop[..., -1] = False
        srt = srt.masked_fill(drop, -math.inf)
    return torch.empty_like(logits).scatter_(-1, idx, srt)


def processed_logprobs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """fp32 log-softmax of logits / T after top-k / top-p: the distribution the sampler draws from."""
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    return torch.log_softmax(process_logits(x, top_k, top_p), dim=-1)


def chunk_rows(vocab: int, logit_chunk_mb: int) -> int:
    """Rows of fp32 logits per chunk so that a chunk and its two temporaries fit in `logit_chunk_mb`."""
    return max(1, (logit_chunk_mb << 20) // (vocab * 4 * 3))


def token_logprobs(base, head, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                   cols: torch.Tensor, targets: torch.Tensor, rows_per_chunk: int, temperature: float = 1.0,
                   top_k: int = 0, top_p: float = 1.0, position_ids: torch.Tensor | None = None,
                   topk_logprobs: int = 0, routes: list | None = None, routes_k: int = 0,
                   kept: tuple[torch.Tensor, torch.Tensor] | None = None, masses: list | None = None):
    """log p(targets[i] | input_ids[rows[i], :cols[i] + 1]) as a float64 CPU tensor.

    One decoder pass over the batch; the head runs on the selected hidden states only, chunk by chunk.
    With `topk_logprobs` K > 0 it returns (log-probs, top-K ids [n, K] int32, top-K log-probs [n, K] float32):
    torch.topk on each fp32 log-softmax chunk, so the whole distribution is summarised in the same pass.
    With `routes` (a list) and `routes_k` > 0 on a mixture-of-experts decoder, the experts each layer's router picks
    for every scored position are appended to it: [n, layers, routes_k] int32 (the router's top-k, the order the
    model's own top-k gives).
    With `kept` (ids, offsets [n + 1]: each scored position's kept set) and a `masses` list, the log of the
    probability mass each position's distribution puts on its kept set is appended to it ([n] float64, NaN where the
    set is empty): the trainer's log S, from the same fp32 log-softmax as its log-probs."""
    kw: dict = {} if position_ids is None else {"position_ids": position_ids}
    if routes is not None and routes_k:
        kw["output_router_logits"] = True
    output = base(input_ids=input_ids, attention_mask=attention_mask, **kw)
    hidden = output.last_hidden_state
    if routes is not None and routes_k:
        b, s = input_ids.shape
        per_layer = [logits.reshape(b, s, -1)[rows, cols].float().topk(routes_k, dim=-1).indices
                     for logits in output.router_logits]
        routes.append(torch.stack(per_layer, dim=1).to(torch.int32).cpu().numpy())
    sel = hidden[rows, cols]
    del hidden
    n = sel.shape[0]
    out = torch.empty(n, dtype=torch.float64)
    k = min(int(topk_logprobs), int(head.weight.shape[0])) if topk_logprobs > 0 else 0
    top_ids = torch.empty((n, k), dtype=torch.int32)
    top_lp = torch.empty((n, k), dtype=torch.float32)
    mass = torch.full((n,), math.nan, dtype=torch.float64)
    for s in range(0, n, rows_per_chunk):
        e = s + rows_per_chunk
        logp = processed_logprobs(head(sel[s:e]), temperature, top_k, top_p)
        out[s:e] = logp.gather(-1, targets[s:e, None])[:, 0].double().cpu()
        if k:
            values, ids = torch.topk(logp, k, dim=-1)  # sorted, best first
            top_ids[s:e], top_lp[s:e] = ids.to(torch.int32).cpu(), values.cpu()
        if kept is not None:
            mass[s:e] = kept_log_mass(logp, kept[0], kept[1][s : e + 1])
    if kept is not None and masses is not None:
        masses.append(mass)
    return (out, top_ids, top_lp) if k else out


def kept_log_mass(logp: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """log Σ_{x ∈ K_i} p_i(x) for each row i of `logp` [rows, V], K_i = ids[offsets[i]:offsets[i + 1]] (offsets of
    these rows, into `ids`); NaN where K_i is empty. Summed in float64 from the fp32 log-probs."""
    counts = (offsets[1:] - offsets[:-1]).to(torch.long)
    owner = torch.repeat_interleave(torch.arange(logp.shape[0], device=logp.device), counts.to(logp.device))
    picked = logp[owner, ids[int(offsets[0]) : int(offsets[-1])].to(logp.device, torch.long)].double().exp()
    total = torch.zeros(logp.shape[0], dtype=torch.float64, device=logp.device).index_add_(0, owner, picked)
    return torch.where(counts.to(logp.device) > 0, total.log(), torch.full_like(total, math.nan)).cpu()


def plain_head(model) -> bool:
    """The model's logits are `head(hidden)`: no soft-capping or logit scaling, which this scoring does not apply."""
    cfg = getattr(model, "config", None)
    return not (getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None))


def _as_2d(x, name: str, device) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.ndim == 1:
        t = t[None]
    if t.ndim != 2:
        raise ValueError(f"{name}: expected [batch, length] (or [length]), got shape {tuple(t.shape)}")
    return t.to(device)


@torch.inference_mode()
def score_logprobs(model, input_ids, attention_mask=None, labels_mask=None, *, logit_chunk_mb: int = 256) -> torch.Tensor:
    """Per-token log-probs of `input_ids` under a transformers causal LM, scored as `tim-report capture` does.

    Returns a float64 CPU tensor of shape [batch, length − 1]: column t is log p(input_ids[:, t+1] |
    input_ids[:, :t+1]), the usual logits[:, :-1] / labels[:, 1:] alignment. Positions that are not
    scored are NaN: padding (`attention_mask` 0, either the token or its context), and labels that
    `labels_mask` ([batch, length], aligned with input_ids) leaves out, e.g. the prompt. NaN on both
    sides is what `assert_logprobs_match` skips, so its output can be compared without a mask.
    Left padding is handled (positions count from each row's first real token)."""
    base, head = getattr(model, "base_model", None), getattr(model, "get_output_embeddings", lambda: None)()
    if base is None or base is model or head is None:
        raise TypeError(f"score_logprobs needs a transformers causal LM (…ForCausalLM), got {type(model).__name__}")
    if not plain_head(model):
        raise ValueError(f"score_logprobs: {type(model).__name__} uses logit soft-capping / scaling, which it does not apply")
    device = next(model.parameters()).device
    ids = _as_2d(input_ids, "input_ids", device).long()
    squeeze = torch.as_tensor(input_ids).ndim == 1
    am = torch.ones_like(ids) if attention_mask is None else _as_2d(attention_mask, "attention_mask", device).long()
    lm = am.bool() if labels_mask is None else _as_2d(labels_mask, "labels_mask", device).bool()
    if am.shape != ids.shape or lm.shape != ids.shape:
        raise ValueError(f"input_ids {tuple(ids.shape)}, attention_mask {tuple(am.shape)} and labels_mask "
                         f"{tuple(lm.shape)} must have the same shape")
    scored = am[:, :-1].bool() & am[:, 1:].bool() & lm[:, 1:]
    rows, cols = scored.nonzero(as_tuple=True)
    out = torch.full((ids.shape[0], max(ids.shape[1] - 1, 0)), math.nan, dtype=torch.float64)
    if rows.numel():
        pos = None if attention_mask is None else (am.cumsum(-1) - 1).clamp(min=0)
        lp = token_logprobs(base, head, ids, am, rows, cols, ids[rows, cols + 1],
                            chunk_rows(int(head.weight.shape[0]), logit_chunk_mb), position_ids=pos)
        out[rows.cpu(), cols.cpu()] = lp
    return out[0] if squeeze else out
