"""`tim-report capture`: generate with a rollout engine, re-score with a trainer, save step batches.

Heavy imports (torch, transformers, vllm) happen inside the engine modules, only when an engine
is built, so importing this package (or the CLI) stays cheap.

    model_path.py    what --model names → a transformers folder: a model folder (custom code refused), or a GGUF
                     dequantised once into the sha256-keyed cache (every command that loads a model calls it)
    spec.py          EngineSpec: `vllm:bf16`, `hf:fp32` parsed and checked
    options.py       CaptureOptions: what one capture needs (picklable: an engine process receives it)
    environment.py   can this Python run the engines: vLLM installed, no companion package that breaks imports
    prompts.py       prompt files (plain lines or JSONL with `prompt` / `messages`) → token ids
    score.py         the one teacher-forced scoring routine (chunked head, fp32 log-softmax) and score_logprobs
    hf.py            transformers engine: seeded sampling (processed log-probs) and scoring through score.py
    vllm_engine.py   vLLM engine (CPU build or CUDA): sampling with processed log-probs, prompt_logprobs scoring
    engines.py       one engine at a time: hf in this process, each vLLM engine in a fresh process (logs to a file);
                     EngineFailed names the engine that failed
    run.py           orchestration: one generation, every requested pair scored on the same tokens
"""

from .engines import EngineFailed
from .model_path import model_meta, resolve_model
from .options import CaptureOptions
from .run import capture, pair_filename
from .spec import EngineSpec, parse_spec

__all__ = ["CaptureOptions", "EngineFailed", "EngineSpec", "capture", "model_meta", "pair_filename", "parse_spec",
           "resolve_model"]
