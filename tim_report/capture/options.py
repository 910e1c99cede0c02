"""CaptureOptions: everything one capture needs to know, picklable (an engine process receives it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import TOPK_LOGPROBS_DEFAULT
from .spec import EngineSpec, Sampling


@dataclass
class CaptureOptions:
    model: str  # what --model names: a model folder, a .gguf file or a folder holding one
    prompts: str
    rollouts: list[EngineSpec]
    trainers: list[EngineSpec]
    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    shadow: bool = False
    recompute: EngineSpec | None = None  # the rollout engine re-scoring the sampled tokens (prefill, no sampling)
    trainer_floor: bool = False  # each hf trainer scores the tokens twice, under two batch compositions
    routes: bool = False  # hf scoring passes on an MoE model record each token's routed experts
    lm_head_fp32: str | None = None  # None | "rollout" | "trainer" | "both"
    chat_template: bool = True
    device: str = "auto"  # hf engine device: auto | cpu | cuda
    max_prompts: int | None = None
    kv_cache_gib: int = 1  # vLLM CPU KV cache (VLLM_CPU_KVCACHE_SPACE)
    prefix_caching: bool = False  # the vLLM engines keep their prefix cache on (each sequence's cached_tokens recorded)
    logit_chunk_mb: int = 256  # hf scoring: full-vocabulary fp32 logits held at once
    top_k_logprobs: int = TOPK_LOGPROBS_DEFAULT  # both sides' K most likely tokens per position; 0: off
    engine_log: str | None = None  # file that receives the vLLM engine processes' output; None: our stdout/stderr
    verbose: bool = False  # vLLM logs at INFO (always so into engine_log); else ERROR only
    stale: dict[int, str] = field(default_factory=dict)  # lag → an older checkpoint that samples part of the prompts
    trainer_version: int | None = None  # with `stale`: the trainer's version (default the largest lag)
    default_rollout: bool = False  # no --rollout was given: vllm:bf16, said so where it fails
    model_dir: str = ""  # the transformers folder `model` stands for (model_path.resolve_model), set by check_options
    # the sampler's kept set of every token: None records it where the sampler computes it (hf, when sampling
    # truncates), True asks for it (vLLM: Model Runner V2, a GPU), False never
    kept_sets: bool | None = None

    @property
    def folder(self) -> str:
        """The folder every engine loads: the resolved one once check_options ran."""
        return self.model_dir or self.model

    def lm_head(self, side: str) -> bool:
        """Whether `side` ("rollout" or "trainer") keeps its LM head in fp32."""
        return self.lm_head_fp32 in (side, "both")

    def pairs(self) -> list[tuple[EngineSpec, EngineSpec]]:
        return [(r, t) for r in self.rollouts for t in self.trainers]
