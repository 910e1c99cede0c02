"""Real older versions of the shipped tiny model as checkpoint folders (for `capture --stale` and `rescore`, which load
a model by its path): tim_report.testing.train_versions' real Adam steps, each version saved with the tokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "tiny-qwen2"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def train_versions(out: Path, versions: int = 3) -> list[Path]:
    """[v0 (the shipped model), v1, …, v_versions]: v_k is v_{k-1} after one Adam step (testing.train_versions),
    saved in fp32 with the tokenizer beside it."""
    import torch
    from transformers import AutoModelForCausalLM

    from tim_report.testing import train_versions as states_of

    states = states_of(str(MODEL), versions=versions + 1)
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
