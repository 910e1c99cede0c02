"""Plant a bug in one layer of a bundled 6-layer model and let bisect find it.

    python examples/bisect_planted_bug.py

The reference is models/tiny-llama6 in fp32; the candidate the same weights in bf16 with layer 2's MLP activation
swapped to GELU (examples/bisect_patches.py). bisect replays each candidate site on the reference's input and
compares its local error with the floor's (the stock model in bf16): it names `model.layers.2.mlp`, and says that
every site before it is within its floor. The same check as a test: `tim_report.assert_layers_match`. The command
line does the same, with a page: `tim-report bisect --model models/tiny-llama6 --prompts examples/prompts.jsonl
--candidate-patch examples/bisect_patches.py:gelu_in_layer_2 -o bisect-out`.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM

    import tim_report

    sys.path.insert(0, str(HERE))
    from bisect_patches import PATCHES

    model = HERE.parent / "models" / "tiny-llama6"
    reference = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    stock_bf16 = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).eval()
    candidate = copy.deepcopy(stock_bf16)
    PATCHES["gelu_in_layer_2"](candidate)

    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, 2000, (3, 48), generator=gen)
    summary = tim_report.bisect_models(reference, candidate, input_ids, precision="bf16", floor_model=stock_bf16)
    print(summary["verdict"])
    print(f"what it usually means: {summary['first']['meaning']}")
    return 0 if summary["first_site"] == "model.layers.2.mlp" else 1


if __name__ == "__main__":
    raise SystemExit(main())
