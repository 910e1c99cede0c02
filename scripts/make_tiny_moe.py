"""Make models/tiny-mixtral: a random mixture-of-experts model (Mixtral: 2 layers, 8 experts, top-2) sharing
tiny-qwen2's tokenizer, for the routing-agreement tests (`capture --routes`). Random weights are enough: the test
measures whether bf16 and fp32 route the same tokens to the same experts, not what the model says.

    python scripts/make_tiny_moe.py [--out models/tiny-mixtral]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "models" / "tiny-mixtral")
    out = ap.parse_args().out
    src = REPO / "models" / "tiny-qwen2"
    cfg = MixtralConfig(vocab_size=2048, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
                        max_position_embeddings=512, bos_token_id=0, eos_token_id=2, pad_token_id=0,
                        tie_word_embeddings=True)
    torch.manual_seed(0)
    model = MixtralForCausalLM(cfg).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, out / name)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
