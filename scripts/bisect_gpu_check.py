"""A GPU check of `tim-report bisect` on a model split over devices: models/tiny-llama6 placed with transformers'
device_map across cuda:0 and the CPU (the embedding and layers 0–2 on the GPU, layers 3–5, the final norm and the
head on the CPU, which accelerate offloads and runs on the GPU), a bug planted in layer 4's attention (no 1/√d
scaling), bisected site by site. Prints the verdict and where each site's module lives; exit 0 when the bug is named
at model.layers.4.self_attn with no earlier site flagged and an unpatched bf16 candidate is clean, else 1.

    python scripts/bisect_gpu_check.py [--device cuda:0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def split_map(device: str) -> dict:
    gpu = int(device.split(":")[1]) if ":" in device else 0
    placed: dict = {"model.embed_tokens": gpu, "model.rotary_emb": gpu, "model.norm": "cpu", "lm_head": "cpu"}
    for i in range(6):
        placed[f"model.layers.{i}"] = gpu if i < 3 else "cpu"
    return placed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    import tim_report

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs one (the CPU tests cover device_map={'': 'cpu'})")
        return 1
    path = REPO / "models" / "tiny-llama6"
    placed = split_map(args.device)

    def load(dtype):
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, device_map=placed).eval()

    ref, floor = load(torch.float32), load(torch.bfloat16)
    cand = load(torch.bfloat16)
    cand.model.layers[4].self_attn.scaling = 1.0
    devices = {name: str(next(m.parameters()).device) for name, m in cand.named_modules()
               if name in ("model.embed_tokens", "model.layers.2", "model.layers.3", "lm_head")}
    print(f"placement (parameter devices; 'meta' is offloaded by accelerate): {devices}")
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 2000, (3, 64), generator=gen)
    bug = tim_report.bisect_models(ref, cand, ids, precision="bf16", floor_model=floor)
    print(f"planted bug: {bug['verdict']}")
    clean = tim_report.bisect_models(ref, floor, ids, precision="bf16", floor_model=floor)
    print(f"unpatched:   {clean['verdict']}")
    names = [s["name"] for s in bug["sites"]]
    ok = (bug["first_site"] == "model.layers.4.self_attn"
          and not any(s["beyond"] for s in bug["sites"][: names.index("model.layers.4.self_attn")])
          and clean["first_site"] is None)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
