"""Where `tim-report bisect` looks: the sites of a transformers causal LM, found from its module tree.

A site is one module's output, named by its path as transformers names it (`model.layers.5.input_layernorm`), in
the order the forward pass reaches it:

    model.embed_tokens                       the embedding (input: the token ids)
    model.layers.N.input_layernorm           the layer's first norm (input: the residual stream entering layer N)
    model.layers.N.self_attn                 the attention's output projection (input: the first norm's output)
    model.layers.N.post_attention_layernorm  the second norm (input: residual + attention)
    model.layers.N.mlp.gate                  a mixture-of-experts router: its logits, and the experts it picks
    model.layers.N.mlp                       the MLP, or the MoE block (input: the second norm's output)
    model.layers.N                           the layer's residual output (input: the residual stream entering it)
    model.norm                               the final norm
    lm_head                                  the logits (input: the final norm's output)
    log_probs                                log p of the next prompt token (from the logits; not a module)

A model whose decoder layers lack one of the four children above, or carry more norms (Gemma's sandwich norms,
whose post-attention norm is applied to the attention's output, not the residual), is refused: the sites would not
mean what their names say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BadInput

LAYER_CHILDREN = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
KIND = {"input_layernorm": "input_norm", "self_attn": "attention", "post_attention_layernorm": "post_attention_norm",
        "mlp.gate": "router", "mlp": "mlp", "": "layer"}
UNDERSTOOD = "Llama, Qwen2/3, Mistral, Mixtral and Qwen-MoE decoder layers (input_layernorm, self_attn, " \
             "post_attention_layernorm, mlp)"


@dataclass(frozen=True)
class Site:
    name: str  # the module path, as transformers names it
    kind: str  # embedding, input_norm, attention, post_attention_norm, router, mlp, layer, final_norm, lm_head, log_probs
    layer: int | None  # the decoder layer's index; None outside the layers


@dataclass
class Structure:
    """One loaded model's modules at its sites."""

    model: Any  # the causal LM
    base: Any  # the decoder (`model.model`)
    prefix: str  # the decoder's path in the model ("model")
    embed: Any
    layers: list
    norm: Any
    head: Any
    head_name: str
    router: bool  # the layers' mlp has a `gate` (a mixture of experts)
    top_k: int  # experts per token (0: not an MoE)

    def sites(self) -> list[Site]:
        p = self.prefix
        out = [Site(f"{p}.embed_tokens", "embedding", None)]
        for i in range(len(self.layers)):
            for sub in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp.gate", "mlp", ""):
                if sub == "mlp.gate" and not self.router:
                    continue
                out.append(Site(f"{p}.layers.{i}" + (f".{sub}" if sub else ""), KIND[sub], i))
        return out + [Site(f"{p}.norm", "final_norm", None), Site(self.head_name, "lm_head", None),
                      Site("log_probs", "log_probs", None)]


def structure(model, where: object) -> Structure:
    """The model's sites, or a one-line BadInput saying what is not understood."""
    base = getattr(model, "base_model", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = {id(m): n for n, m in model.named_modules()}
    kind = type(model).__name__
    if base is None or base is model or head is None or id(base) not in names or id(head) not in names:
        raise BadInput(where, f"bisect needs a causal LM with a decoder and an output head; {kind} is not one")
    layers = getattr(base, "layers", None)
    embed, norm = getattr(base, "embed_tokens", None), getattr(base, "norm", None)
    if layers is None or embed is None or norm is None or not len(layers):
        raise BadInput(where, f"bisect understands {UNDERSTOOD}; {kind}'s decoder has no embed_tokens, layers and norm")
    first = layers[0]
    missing = [c for c in LAYER_CHILDREN if getattr(first, c, None) is None]
    extra = sorted(n for n, m in first.named_children() if n not in LAYER_CHILDREN and "norm" in n.lower())
    if missing or extra:
        what = f"has no {', '.join(missing)}" if missing else f"has more norms ({', '.join(extra)})"
        raise BadInput(where, f"bisect understands {UNDERSTOOD}; {type(first).__name__} {what}")
    gate = getattr(first.mlp, "gate", None)
    router = gate is not None and not _is_plain_projection(first.mlp, gate)
    cfg = getattr(model, "config", None)
    top_k = int(getattr(cfg, "num_experts_per_tok", 0) or 0) if router else 0
    if router and top_k < 1:
        raise BadInput(where, f"{type(first.mlp).__name__} has a router but the config names no num_experts_per_tok")
    return Structure(model, base, names[id(base)], embed, list(layers), norm, head, names[id(head)], router, top_k)


def _is_plain_projection(mlp, gate) -> bool:
    """A dense MLP may name its gate projection `gate` (not `gate_proj`): it is a router only if the block also
    holds experts."""
    return not any(hasattr(mlp, n) for n in ("experts", "expert", "shared_expert"))


def same_structure(a: Structure, b: Structure, where: object) -> None:
    """Both sides must have the same sites (like with like)."""
    if [s.name for s in a.sites()] != [s.name for s in b.sites()]:
        raise BadInput(where, "the two setups have different sites (layer count, router or head differ): "
                              "bisect compares two setups of the same model")
