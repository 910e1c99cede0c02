"""Engines, one at a time: transformers in this process, each vLLM engine in a fresh process of its own.

A vLLM engine leaves state behind in the process that ran it (pinned OpenMP threads, memory it does not give
back, its engine core) and writes its logs from Python and C++ alike, so each one runs in a spawned process
(`EngineProcess`): its stdout and stderr go to the capture's log file at the file-descriptor level, its progress
and results come back through a pipe, and if it dies, for whatever reason, the capture says so in one line.
Any engine failure, in either kind of process, becomes `EngineFailed`, which names the engine and dtype.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from ..errors import BadInput
from .options import CaptureOptions
from .spec import EngineSpec
from .stale import version_label


@dataclass(frozen=True)
class EngineKey:
    """What is loaded once: an engine in one dtype, with or without its LM head kept in fp32."""

    engine: str
    dtype: str
    lm_head_fp32: bool
    model: str | None = None  # another checkpoint than the capture's --model (a --stale sampler)

    def __str__(self) -> str:
        return (f"{self.engine}:{self.dtype}" + (" (LM head in fp32)" if self.lm_head_fp32 else "")
                + (f" with {self.model}" if self.model else ""))


class EngineFailed(BadInput):
    """An engine failed once the checks had passed. run.capture fills `kept` with the pairs captured before it."""

    def __init__(self, key: EngineKey, doing: str, problem: str):
        super().__init__(str(key), f"the engine failed while {doing}: {problem}")
        self.kept: dict = {}


class EngineError(Exception):
    """An engine process's failure, already one line."""


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters of it."""
    if isinstance(exc, (EngineError, BadInput)):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


def build_engine(key: EngineKey, opts: CaptureOptions, device: str, max_model_len: int):
    """The engine itself, in the calling process."""
    model = key.model or opts.folder  # --model resolved (a GGUF's cached folder), or a --stale checkpoint
    if key.engine == "vllm":
        from .vllm_engine import VLLMEngine

        sampler = EngineSpec(key.engine, key.dtype) == opts.rollouts[0]
        return VLLMEngine(model, key.dtype, opts.seed, max_model_len, kv_cache_gib=opts.kv_cache_gib,
                          topk=opts.top_k_logprobs, prefix_caching=opts.prefix_caching, kept=bool(opts.kept_sets) and sampler,
                          version_label=version_label(opts.model, opts.stale, key.model, opts.trainer_version)
                          if sampler and opts.stale else None)
    from .hf import HFEngine

    return HFEngine(model, key.dtype, device=device, lm_head_fp32=key.lm_head_fp32, logit_chunk_mb=opts.logit_chunk_mb)


def open_engine(key: EngineKey, opts: CaptureOptions, device: str, max_model_len: int):
    """transformers here; vLLM in a process of its own."""
    if key.engine == "vllm":
        return EngineProcess(key, opts, device, max_model_len)
    return build_engine(key, opts, device, max_model_len)


class EngineProcess:
    """An engine built in a spawned process; `generate`, `score` and `close` are forwarded to it."""

    def __init__(self, key: EngineKey, opts: CaptureOptions, device: str, max_model_len: int):
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no state from earlier engines or from us
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, key, opts, device, max_model_len), name=f"tim-report {key}")
        self._proc.start()
        child.close()  # ours closed: the pipe reports EOF as soon as the engine process is gone
        self._busy = True
        try:
            self.version = self._reply(None)
        except BaseException:
            self.close()
            raise

    def generate(self, *args: Any, progress: Any = None, **kwargs: Any) -> Any:
        return self._call("generate", args, kwargs, progress)

    def score(self, *args: Any, progress: Any = None, **kwargs: Any) -> Any:
        return self._call("score", args, kwargs, progress)

    def _call(self, method: str, args: tuple, kwargs: dict, progress):
        self._busy = True
        try:
            self._conn.send((method, args, kwargs))
        except OSError:
            pass  # already gone: _reply says how it ended
        return self._reply(progress)

    def _reply(self, progress):
        while True:
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                self._proc.join(10)
                raise EngineError(f"the engine process ended ({_ending(self._proc.exitcode)})") from None
            if kind == "advance":
                if progress is not None:
                    progress(value)
                continue
            self._busy = False
            if kind == "error":
                raise EngineError(value)
            return value

    def close(self) -> None:
        """Let an idle engine shut down; stop one that is still busy (we are unwinding from an error or Ctrl-C)."""
        if not self._busy:
            try:
                self._conn.send(("close", (), {}))
            except OSError:
                pass
            self._proc.join(60)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(10)
        if self._proc.is_alive():  # pragma: no cover - ignores SIGTERM
            self._proc.kill()
            self._proc.join()
        self._conn.close()


def _ending(code: int | None) -> str:
    if code is None:
        return "it did not exit"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return f"killed by {name}" + (", out of memory?" if name == "SIGKILL" else "")
    return f"exit code {code}"


def _to_file(path: str) -> None:
    """This process's stdout and stderr, at the file-descriptor level (C++ and child processes included), to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _serve(conn, key: EngineKey, opts: CaptureOptions, device: str, max_model_len: int) -> None:
    """The engine process: build the engine, then run what the pipe asks until "close"."""
    if opts.engine_log:
        _to_file(opts.engine_log)
        print(f"---- tim-report: {key} (process {os.getpid()})", flush=True)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO" if opts.engine_log or opts.verbose else "ERROR")
    try:
        engine = build_engine(key, opts, device, max_model_len)
        conn.send(("ok", engine.version))
        while True:
            method, args, kwargs = conn.recv()
            if method == "close":
                engine.close()
                return
            result = getattr(engine, method)(*args, progress=lambda n=1: conn.send(("advance", n)), **kwargs)
            conn.send(("ok", result))
    except Exception as exc:
        traceback.print_exc()  # the whole story, for the log
        sys.stderr.flush()
        conn.send(("error", one_line(exc)))
