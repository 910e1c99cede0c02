"""Make models/tiny-llama6 and models/tiny-mixtral6: random 6-layer causal LMs (Llama; Mixtral with 4 experts,
top-2) sharing tiny-qwen2's tokenizer, for `tim-report bisect`'s tests: a planted bug must be named at the right
layer of six, with no earlier site flagged. Random weights are enough: bisect compares two setups of the same
weights site by site, not what the model says.

    python scripts/make_bisect_models.py [--out models]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMON = dict(vocab_size=2048, hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=512, bos_token_id=0, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True,
              rms_norm_eps=1e-6)


def main() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "models")
    out = ap.parse_args().out
    src = REPO / "models" / "tiny-qwen2"
    made = {"tiny-llama6": (LlamaForCausalLM, LlamaConfig(intermediate_size=128, **COMMON)),
            "tiny-mixtral6": (MixtralForCausalLM, MixtralConfig(intermediate_size=64, num_local_experts=4,
                                                                num_experts_per_tok=2, **COMMON))}
    for name, (cls, cfg) in made.items():
        torch.manual_seed(0)
        model = cls(cfg).eval()
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(src / f, folder / f)
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
