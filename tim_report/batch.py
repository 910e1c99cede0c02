"""StepBatch: the one in-memory shape every loader and capture engine produces.

Token-level arrays are flat (padding removed) with CSR `offsets` per sequence, so
the analysis never sees a framework's layout (design §3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

CANONICAL_FORMAT = "tim-report/step-batch"
CANONICAL_VERSION = 1


@dataclass
class StepBatch:
    rollout_logp: np.ndarray  # [T] float64, log p under the rollout engine (behaviour policy μ)
    trainer_logp: np.ndarray  # [T] float64, log p recomputed by the trainer (π)
    offsets: np.ndarray  # [N+1] int64, sequence i is tokens offsets[i]:offsets[i+1]
    mask: np.ndarray  # [T] bool, token is trained on
    token_ids: np.ndarray | None = None  # [T] int64
    token_text: Sequence[str] | None = None  # [T] decoded tokens (list, array or lazy decoder)
    prompt_ids: list[np.ndarray] | None = None  # ragged, one array per sequence
    prompt_text: list[str] | None = None  # one string per sequence
    group: np.ndarray | None = None  # [N] str
    reward: np.ndarray | None = None  # [N] float64 (token-level rewards are summed)
    advantage: np.ndarray | None = None  # [T] float64 (sequence advantages are broadcast)
    shadow_logp: np.ndarray | None = None  # [T] float64, trainer weights in rollout precision
    meta: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # how the loader read the file (alignment, inferred masks)
    decoder: Callable[[Sequence[int]], str] | None = field(default=None, repr=False)  # a tokenizer's decode, not saved

    @property
    def n_tokens(self) -> int:
        return int(self.rollout_logp.shape[0])

    @property
    def n_seqs(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def seq_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def seq_index(self) -> np.ndarray:
        """[T] index of the sequence each token belongs to."""
        return np.repeat(np.arange(self.n_seqs), self.seq_lengths)

    def tokens_of(self, i: int) -> slice:
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    def token_strings(self, sl: slice) -> list[str]:
        """Decoded tokens for a slice: stored text, else the tokenizer, else `[id]`."""
        if self.token_text is not None:
            return [str(t) for t in self.token_text[sl]]
        if self.token_ids is None:
            return ["" for _ in range(sl.start, sl.stop)]
        ids = [int(t) for t in self.token_ids[sl]]
        if self.decoder is not None:
            return [self.decoder([t]) for t in ids]
        return [f"[{t}]" for t in ids]

    def prompt_string(self, i: int) -> str | None:
        """The prompt of sequence i as text, when the file or a tokenizer can tell."""
        if self.prompt_text is not None:
            return str(self.prompt_text[i])
        if self.prompt_ids is None:
            return None
        ids = [int(t) for t in self.prompt_ids[i]]
        return self.decoder(ids) if self.decoder is not None else " ".join(f"[{t}]" for t in ids)

    def save(self, path: str | Path) -> None:
        """Write the canonical `.npz` (no pickled objects; meta as JSON)."""
        arrays: dict[str, np.ndarray] = {
            "rollout_logp": self.rollout_logp.astype(np.float64),
            "trainer_logp": self.trainer_logp.astype(np.float64),
            "offsets": self.offsets.astype(np.int64),
            "mask": self.mask.astype(bool),
        }
        if self.token_ids is not None:
            arrays["token_ids"] = np.asarray(self.token_ids, dtype=np.int64)
        if self.token_text is not None:
            arrays["token_text"] = np.asarray([str(t) for t in self.token_text[: self.n_tokens]], dtype=str)
        if self.prompt_ids is not None:
            arrays["prompt_ids"] = np.concatenate([np.asarray(p, dtype=np.int64) for p in self.prompt_ids]) if self.prompt_ids else np.zeros(0, np.int64)
            arrays["prompt_offsets"] = np.concatenate([[0], np.cumsum([len(p) for p in self.prompt_ids])]).astype(np.int64)
        if self.prompt_text is not None:
            arrays["prompt_text"] = np.asarray(self.prompt_text, dtype=str)
        for name in ("group", "reward", "advantage", "shadow_logp"):
            value = getattr(self, name)
            if value is not None:
                arrays[name] = np.asarray(value) if name != "group" else np.asarray(value, dtype=str)
        header = {"format": CANONICAL_FORMAT, "version": CANONICAL_VERSION, "meta": self.meta}
        arrays["meta"] = np.asarray(json.dumps(header, sort_keys=True, default=str))
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
        tmp.replace(path)
