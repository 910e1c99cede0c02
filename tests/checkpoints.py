"""Real older versions of the shipped tiny model: a few AdamW steps of next-token training between versions, each
version saved as a transformers folder (for the staleness tests: sampling with an older checkpoint, rescoring)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "tiny-qwen2"
TEXT = ROOT / "examples" / "prompts.jsonl"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def train_versions(out: Path, versions: int = 3, steps: int = 4, lr: float = 3e-3, seed: int = 0) -> list[Path]:
    """[v0 (the shipped model), v1, …, v_versions]: v_k is v_{k-1} after `steps` AdamW steps on the prompts' text
    (a language-modelling loss, real gradients), saved in fp32 with the tokenizer beside it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    texts = [json.loads(line).get("prompt") or json.dumps(json.loads(line)) for line in TEXT.read_text().splitlines()
             if line.strip()]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    paths = [MODEL]
    for v in range(1, versions + 1):
        for _ in range(steps):
            loss = model(**batch, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        folder = out / f"v{v}"
        model.save_pretrained(folder)
        for name in TOKENIZER_FILES:
            if (MODEL / name).is_file():
                shutil.copy(MODEL / name, folder / name)
        paths.append(folder)
    return paths
