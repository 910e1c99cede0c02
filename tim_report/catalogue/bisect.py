"""bisect's words: what each kind of site is, what an error there usually means, and the verdicts."""

from __future__ import annotations

# kind → (what the site is, what a local error there usually means)
KINDS = {
    "embedding": ("the token embedding", "the embedding table differs: another checkpoint or conversion, an untied "
                  "copy of a tied embedding, a padded vocabulary, or a scale applied to the embedding"),
    "input_norm": ("the layer's first norm", "the norm differs: its eps (1e-6 against 1e-5), a weight offset (1 + w), "
                   "or its upcast to fp32"),
    "attention": ("the attention block's output", "the attention differs: a dropped or doubled 1/√d scaling, a wrong "
                  "rotary embedding (rotation, base, position ids), a mask, or the kernel"),
    "post_attention_norm": ("the layer's second norm", "the norm differs: its eps, a weight offset (1 + w), or its "
                            "upcast to fp32"),
    "router": ("the router's logits and chosen experts", "the router differs: its weights, its precision (an fp32 "
               "router on one side only), its top-k or the renormalisation of the top-k weights"),
    "mlp": ("the MLP (or MoE block) output", "the MLP differs: a swapped activation (SiLU, GELU, GELU-tanh), gate and "
            "up projections exchanged, or an expert's weights"),
    "layer": ("the layer's residual output", "the residual connection differs: a residual dropped, added twice or "
              "scaled, or a fused norm + residual that returns the wrong tensor"),
    "final_norm": ("the final norm", "the final norm differs: its eps, a weight offset, or its upcast"),
    "lm_head": ("the logits", "the output projection differs: an untied head, a logit scale or soft-cap"),
    "log_probs": ("log p of the next prompt token", "the log-softmax differs: a temperature, a soft-cap or a "
                  "vocabulary mask"),
}

METHOD = ("Each site of the candidate runs on the reference's input for that site (replay), so an error does not "
          "propagate: its local error is ‖candidate − reference‖ / ‖reference‖ per token (|Δ log p| for log_probs). "
          "The floor is the same measurement of the reference's weights in the candidate's precision with stock "
          "modules and no patch. A site is beyond its floor at {median}× the floor's median or {p99}× its 99th "
          "percentile.")

METHOD_STATES = ("Saved states, compared without replay: each site's error is the plain forward's difference "
                 "‖candidate − reference‖ / ‖reference‖ per token, which carries every earlier site's; the floor is the "
                 "same difference of the floor file (the reference's setup in the candidate's precision). A site is "
                 "beyond its floor at {median}× the floor's median or {p99}× its 99th percentile; the first such site "
                 "is where the setups start to part, later ones may be beyond only because of it.")


def meaning(kind: str) -> str:
    return KINDS[kind][1]


def verdict(first: dict | None, precision: str, largest: dict | None, rounding_only: bool,
            floor_is_candidate: bool = False) -> str:
    """The one line the terminal prints and the page leads with."""
    if first is None and floor_is_candidate:
        return (f"Every site is within its {precision} floor: the candidate is its own floor (no patch, the same "
                "attention implementation), so only a patch, another attention implementation or saved states can "
                "part from it.")
    if first is None:
        big = f"; the largest, {largest['name']}, {largest['multiple']['median']:.3g}× at the median" if largest else ""
        noise = " A kernel that only rounds differently is noise." if rounding_only else ""
        return f"Every site is within its {precision} floor{big}.{noise}"
    m = first["multiple"]
    before = first.get("within_before") or "no site before it"
    return (f"{first['name']}: local error {m['median']:.3g}× its {precision} floor (p99 {m['p99']:.3g}×); "
            f"{before} within.")
