"""Real older versions of the shipped tiny model as checkpoint folders (for `capture --stale` and `rescore`, which load
a model by its path): tim_report.testing.train_versions' real Adam steps, each version saved with the tokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "tiny-qwen2"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def save_versions(states: list[dict], out: Path) -> list[Path]:
    """[v0 (the shipped model), v1, …]: the state dicts of testing.train_versions (v0 first) saved as folders
    out/v1, out/v2, … in fp32 with the tokenizer beside each; v0 is models/tiny-qwen2 itself."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    paths = [MODEL]
    for v, state in enumerate(states[1:], start=1):
        model.load_state_dict(state)
        folder = out / f"v{v}"
        model.save_pretrained(folder)
        for name in TOKENIZER_FILES:
            if (MODEL / name).is_file():
                shutil.copy(MODEL / name, folder / name)
        paths.append(folder)
    return paths
