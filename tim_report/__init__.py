"""tim-report: measure and explain the mismatch between an RL rollout engine and its trainer.

The Python API, for notebooks and scripts (tim_report.api); heavy packages are imported only when used:

    report = tim_report.analyze(tim_report.load("step_batch.pt"))
    report.to_html(); report.to_markdown(); report.to_dict()
    report.tokens_frame(); tim_report.read_site("site/").steps_frame()   # pandas DataFrames, for a notebook
    tim_report.compare("before.pt", "after.pt").write("cmp/")

inside a training loop (tim_report.io.save_step; docs/integrations.md has each framework's lines):

    tim_report.save_step("tim_steps/", rollout_logp, trainer_logp, mask=loss_mask, step=step, rank=rank)
    tim_report.save_step(..., background=True)  # the disk left to a thread (or background=tim_report.StepWriter())
    d = tim_report.weight_digest(engine_model, "bf16", since=d, version=v)  # the weights as the engine holds them
    tim_report.save_step(..., engine_digest=d, trainer_digest=t)           # the sync's round trip (docs/sync.md)

and for kernel and engine test suites (tim_report.assertions, tim_report.capture.score):

    tim_report.assert_logprobs_match(reference, candidate, precision="bf16")
    tim_report.assert_layers_match(reference_model, candidate_model, input_ids)  # the first layer and module that part
    tim_report.bisect_models(reference_model, candidate_model, input_ids, precision="bf16")
    tim_report.score_logprobs(model, input_ids, attention_mask)
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["StepWriter", "__version__", "analyze", "assert_layers_match", "assert_logprobs_match", "bisect_models", "compare",
           "load", "read_site", "save_step", "score_logprobs", "weight_digest", "WeightDigester"]


def __getattr__(name: str):
    """The API functions, imported on first use so `import tim_report` stays light."""
    if name == "assert_logprobs_match":
        from .assertions import assert_logprobs_match

        return assert_logprobs_match
    if name == "assert_layers_match":
        from .assertions import assert_layers_match

        return assert_layers_match
    if name == "bisect_models":
        from .service.bisect import bisect_models  # torch: only when asked for

        return bisect_models
    if name == "score_logprobs":
        from .capture.score import score_logprobs  # torch: only when asked for

        return score_logprobs
    if name == "save_step":
        from .io.save_step import save_step

        return save_step
    if name in ("weight_digest", "WeightDigester"):
        from .io import weights  # torch: only when a digest is made

        return getattr(weights, name)
    if name == "read_site":
        from .frames import read_site

        return read_site
    if name == "StepWriter":
        from .io.step_writer import StepWriter

        return StepWriter
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'tim_report' has no attribute {name!r}")
