#!/usr/bin/env python3
"""Make the fault-injected step batches that validate the diagnosis (tests/data/faults/).

Every batch comes from the tiny model's real logits (models/tiny-qwen2, offline): the "rollout"
samples continuations token by token with a KV cache (an engine's incremental decode, seeded) and
records the log-probs it sampled from; the "trainer" re-scores prompt + response with one full
forward pass, in some precision, with the fault injected where the truth is known:

    identical            trainer = fp32 full forward, rollout = the same forward (bit-identical)
    fp32_decode          trainer = fp32 full forward, rollout = fp32 incremental decode (kernel-order noise)
    bf16_* / fp16_*      trainer = bf16 / fp16 weights and compute (log-softmax in fp32), several sizes
    rollout_bf16_shadow  rollout = bf16 incremental decode, trainer = fp32, shadow = bf16 full forward
    shift_next/prev      trainer_logp[t] = bf16 log-prob of position t+1 / t−1
    temp_rollout_T       rollout sampled at T and returns tempered log-probs, trainer scores at T=1
    temp_trainer_0.6     rollout sampled at 0.6 returns raw log-probs, trainer divides logits by 0.6
    top_p_0.9, top_k_20  rollout returns log-probs renormalised over the kept tokens, trainer the full softmax
    *_bf16, temp_0.7_top_p_0.95, shift_small   the same faults under bf16 noise, combined, or on 91 tokens
    dummy_zero           tool-output tokens inside the mask carry rollout log-prob 0.0
    weights_perturbed    trainer = the model with Gaussian noise on every weight
    weights_reinit       trainer = a freshly initialised model of the same config
    first_token_temp     the rollout samples and scores its first token only at T=2 (the rest at T=1)
    onset_97             the rollout's logits are rounded to fp8 (e4m3, per-row scale) from response position 97 on
    multi_turn_tool      three turns with tool output between; the trainer re-renders the tool text differently
    mixed_versions       half the sequences sampled by older weights (version 8, nudged) and half by version 12

Writes one canonical .npz per case (StepBatch.save) plus manifest.json with the expected regime
and findings. Deterministic on CPU for a given torch version and thread count.

    python scripts/make_fault_fixtures.py                     # all cases → tests/data/faults/
    python scripts/make_fault_fixtures.py --only bf16_m --out /tmp/x
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

from tim_report.io import save_batch
from tim_report.model import StepBatch

ROOT = Path(__file__).resolve().parents[1]

PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Queue:\n    def __init__(self, maxsize=0):\n        ",
    "def _read_file(path, encoding='utf-8'):\n    with open(path",
    "    for i, line in enumerate(lines):\n        if ",
    "\"\"\"Utilities for parsing command-line options.\"\"\"\n\nimport ",
    "    def __repr__(self):\n        return ",
    "try:\n    import _thread\nexcept ImportError:\n    ",
    "    if not isinstance(value, str):\n        raise TypeError(",
    "def join(a, *p):\n    \"\"\"Join two or more pathname components",
    "        self.assertEqual(result, ",
    "    @property\n    def name(self):\n        ",
    "        except OSError as exc:\n            ",
    "__all__ = ['",
    "    def close(self):\n        if self._closed:\n            ",
    "def _check_arg_types(funcname, *args):\n    ",
    "    return ''.join(",
]

# name → (generation settings, trainer variant, expected regime, expected finding ids (must be present))
CASES: dict[str, dict] = {
    "identical": dict(seqs=16, length=64, trainer="fp32", rollout_from="trainer", regime="identical", findings=[]),
    # fp32 decode vs fp32 full forward differs by reduction order only (|δ| ~ 1e-6): rounding, i.e. identical
    "fp32_decode": dict(seqs=16, length=64, trainer="fp32", regime="identical", findings=[]),
    "bf16_xs": dict(seqs=2, length=16, trainer="bf16", regime="numerical_noise", findings=[], seed=11),
    "bf16_s": dict(seqs=8, length=48, trainer="bf16", regime="numerical_noise", findings=[], seed=12),
    "bf16_m": dict(seqs=16, length=96, trainer="bf16", regime="numerical_noise", findings=[], seed=13),
    "bf16_l": dict(seqs=48, length=128, trainer="bf16", regime="numerical_noise", findings=[], seed=14),
    "fp16_s": dict(seqs=8, length=48, trainer="fp16", regime="numerical_noise", findings=[], seed=15),
    "fp16_m": dict(seqs=16, length=96, trainer="fp16", regime="numerical_noise", findings=[], seed=16),
    "rollout_bf16_shadow": dict(seqs=16, length=96, trainer="fp32", rollout_dtype="bf16", shadow=True,
                                regime="numerical_noise", findings=["precision_gap"], seed=17),
    "shift_next": dict(seqs=16, length=64, trainer="bf16", shift=1, regime="systematic", findings=["shift"], seed=21),
    "shift_prev": dict(seqs=16, length=64, trainer="bf16", shift=-1, regime="systematic", findings=["shift"], seed=22),
    "temp_rollout_0.7": dict(seqs=16, length=64, trainer="bf16", temperature=0.7, regime="systematic",
                             findings=["temperature"], seed=31),
    "temp_rollout_0.8": dict(seqs=16, length=64, trainer="bf16", temperature=0.8, regime="systematic",
                             findings=["temperature"], seed=32),
    "temp_rollout_1.2": dict(seqs=16, length=64, trainer="bf16", temperature=1.2, regime="systematic",
                             findings=["temperature"], seed=33),
    "temp_rollout_1.5": dict(seqs=16, length=64, trainer="bf16", temperature=1.5, regime="systematic",
                             findings=["temperature"], seed=34),
    "temp_trainer_0.6": dict(seqs=16, length=64, trainer="bf16", temperature=0.6, tempered_side="trainer",
                             regime="systematic", findings=["temperature"], seed=35),
    "top_p_0.9": dict(seqs=16, length=64, trainer="fp32", top_p=0.9, regime="systematic",
                      findings=["processed_logprobs"], seed=41),
    "top_k_20": dict(seqs=16, length=64, trainer="fp32", top_k=20, regime="systematic",
                     findings=["processed_logprobs"], seed=42),
    # the same faults with a bf16 trainer on top (noise must not hide them), and the common T + top-p combination
    "top_p_0.9_bf16": dict(seqs=16, length=64, trainer="bf16", top_p=0.9, regime="systematic",
                           findings=["processed_logprobs"], seed=43),
    "top_k_50_bf16": dict(seqs=16, length=64, trainer="bf16", top_k=50, regime="systematic",
                          findings=["processed_logprobs"], seed=45),
    "temp_0.7_top_p_0.95": dict(seqs=16, length=64, trainer="bf16", top_p=0.95, temperature=0.7, regime="systematic",
                                findings=["temperature"], seed=44),
    "shift_small": dict(seqs=4, length=32, trainer="bf16", shift=1, regime="systematic", findings=["shift"], seed=46),
    "dummy_zero": dict(seqs=16, length=64, trainer="bf16", tool=True, regime="systematic", findings=["dummy_zero"],
                       seed=51),
    "weights_perturbed": dict(seqs=16, length=64, trainer="perturbed", perturb=1.0, regime="systematic",
                              findings=["one_side_broken"], seed=61),
    # a small weight change (like one optimiser step ahead): beyond noise, but no specific fault
    "weights_nudged": dict(seqs=16, length=64, trainer="perturbed", perturb=0.1, regime="elevated", findings=[],
                           seed=63),
    "weights_reinit": dict(seqs=16, length=64, trainer="reinit", regime="systematic", findings=["one_side_broken"],
                           seed=62),
    # where the mismatch sits (issue 13): one position, from one position on, after each tool span, and staleness
    "first_token_temp": dict(seqs=24, length=48, trainer="bf16", first_temperature=2.0, regime="elevated",
                             findings=["first_token"], seed=71),
    "onset_97": dict(seqs=16, length=200, min_length=120, trainer="bf16", onset=97, regime="elevated",
                     findings=["position_onset"], seed=72),
    "multi_turn_tool": dict(seqs=16, length=32, trainer="bf16", turns=3, regime="elevated", findings=["turn_boundary"],
                            seed=73),
    "mixed_versions": dict(seqs=16, length=64, trainer="bf16", stale=("8", "12"), perturb=0.1, regime="elevated",
                           findings=["mixed_policy_versions"], seed=74),
}

# multi_turn_tool: what the engine saw between turns (token-in), and what the trainer's re-rendered chat template
# gives for the same tool call (the trailing prompt marker dropped): not prefix-preserving
TOOL_TURN = "\n>>> [tool] exit status 0; 3 files changed\n>>> "
TOOL_TURN_RERENDERED = "\n>>> [tool] exit status 0; 3 files changed\n"

TOOL_TEXT = "\n>>> [tool] exit status 0; 3 files changed, 41 insertions(+)\n"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def truncate(logits: torch.Tensor, top_p: float | None, top_k: int | None) -> torch.Tensor:
    """Logits with the tokens top-p / top-k would drop set to −inf (HF / vLLM semantics)."""
    out = logits.clone()
    if top_k:
        kth = torch.topk(out, top_k).values[-1]
        out[out < kth] = -float("inf")
    if top_p is not None and top_p < 1.0:
        sorted_l, idx = torch.sort(out, descending=True)
        cum = torch.softmax(sorted_l, -1).cumsum(-1)
        drop = cum - torch.softmax(sorted_l, -1) >= top_p  # keep the smallest prefix with mass ≥ top_p
        out[idx[drop]] = -float("inf")
    return out


@torch.no_grad()
def sample(model, prompt: list[int], n_new: int, gen: torch.Generator, *, temperature: float = 1.0,
           top_p: float | None = None, top_k: int | None = None, returned: str = "processed",
           first_temperature: float | None = None, onset: int | None = None) -> tuple[list[int], list[float]]:
    """Incremental decode with a KV cache. Returns the sampled tokens and the log-probs the engine reports:
    `processed` = of the distribution it sampled from (temperature + truncation), `raw` = log_softmax(logits).
    `first_temperature`: the first step alone at that temperature; `onset`: logits rounded to fp8 from that step on."""
    out = model(torch.tensor([prompt]), use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1].float()
    toks, logps = [], []
    for step in range(n_new):
        if onset is not None and step >= onset:
            logits = fp8_round(logits)
        t = first_temperature if first_temperature is not None and step == 0 else temperature
        proc = truncate(logits / t, top_p, top_k)
        logp_proc = torch.log_softmax(proc, -1)
        tok = int(torch.multinomial(logp_proc.exp(), 1, generator=gen))
        toks.append(tok)
        logps.append(float(logp_proc[tok] if returned == "processed" else torch.log_softmax(logits, -1)[tok]))
        out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1].float()
    return toks, logps


def fp8_round(logits: torch.Tensor) -> torch.Tensor:
    """Logits through e4m3 with a per-row scale (max |logit| → 448), as an fp8 KV cache / LM head would perturb them."""
    scale = logits.abs().max().clamp_min(1e-12) / 448.0
    return (logits / scale).to(torch.float8_e4m3fn).float() * scale


@torch.no_grad()
def score(model, prompt: list[int], response: list[int], temperature: float = 1.0) -> np.ndarray:
    """Full-forward log-prob of every token of prompt[1:] + response (index p-1+t is response token t)."""
    ids = torch.tensor([prompt + response])
    logits = model(ids).logits[0, :-1].float() / temperature
    logp = torch.log_softmax(logits, -1)
    return logp.gather(-1, ids[0, 1:, None])[:, 0].double().numpy()


def variant(base, kind: str, seed: int, perturb: float = 1.0):
    import copy

    from transformers import AutoModelForCausalLM

    if kind == "fp32":
        return base
    if kind in ("bf16", "fp16"):
        return copy.deepcopy(base).to(torch.bfloat16 if kind == "bf16" else torch.float16)
    if kind == "perturbed":
        m = copy.deepcopy(base)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in m.parameters():
                if p.numel() > 1 and p.std() > 0:
                    p.add_(torch.randn(p.shape, generator=g) * p.std() * perturb)  # noise ∝ each tensor's std
        return m
    if kind == "reinit":
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(base.config).eval()
    raise ValueError(kind)


def make_case(name: str, spec: dict, base, tok) -> StepBatch:
    seed = spec.get("seed", 0)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    n, length = spec["seqs"], spec["length"]
    shift = spec.get("shift", 0)
    temperature = spec.get("temperature", 1.0)
    tempered_side = spec.get("tempered_side", "rollout")
    roll_model = variant(base, spec.get("rollout_dtype", "fp32"), seed)
    trainer = variant(base, spec["trainer"], seed, spec.get("perturb", 1.0))
    shadow_model = variant(base, spec["rollout_dtype"], seed) if spec.get("shadow") else None
    tool_ids = tok.encode(TOOL_TEXT) if spec.get("tool") else []
    stale_model = variant(base, "perturbed", seed, spec["perturb"]) if spec.get("stale") else None
    ro_all, tr_all, sh_all, ids_all, prompts, lengths = [], [], [], [], [], []
    masks, turns, versions = [], [], []
    for i in range(n):
        prompt = tok.encode(PROMPTS[i % len(PROMPTS)])
        L = int(rng.integers(max(4, spec.get("min_length", length // 2)), length + 1))
        if spec.get("turns"):
            ro, tr, ids, m, tn = multi_turn(roll_model, trainer, tok, prompt, spec["turns"], L, gen)
            ro_all.append(ro), tr_all.append(tr), ids_all.append(ids), masks.append(m), turns.append(tn)
            prompts.append(np.asarray(prompt))
            lengths.append(len(ids))
            continue
        engine = roll_model
        if stale_model is not None:  # odd sequences were sampled by the older weights
            engine = stale_model if i % 2 else roll_model
            versions.append(spec["stale"][0] if i % 2 else spec["stale"][1])
        use_tool = bool(tool_ids) and i % 2 == 0
        ctx = prompt + tool_ids if use_tool else prompt
        returned = "raw" if tempered_side == "trainer" else "processed"
        toks, ro = sample(engine, ctx, L + max(shift, 0), gen, temperature=temperature, top_p=spec.get("top_p"),
                          top_k=spec.get("top_k"), returned=returned, first_temperature=spec.get("first_temperature"),
                          onset=spec.get("onset"))
        response = (tool_ids if use_tool else []) + toks
        ro = ([0.0] * len(tool_ids) if use_tool else []) + ro  # the engine's placeholder for tokens it did not sample
        t_temp = temperature if tempered_side == "trainer" else 1.0
        full = score(trainer, prompt, response, t_temp)
        p0 = len(prompt) - 1  # index in `full` of response token 0
        if spec.get("rollout_from") == "trainer":
            ro = list(full[p0:p0 + len(response)])
        keep = len(response) - max(shift, 0)
        tr = full[p0 + shift:p0 + shift + keep]
        ro_all.append(np.asarray(ro[:keep]))
        tr_all.append(tr)
        ids_all.append(np.asarray(response[:keep]))
        if shadow_model is not None:
            sh_all.append(score(shadow_model, prompt, response)[p0:p0 + keep])
        prompts.append(np.asarray(prompt))
        lengths.append(keep)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    t = int(offsets[-1])
    adv = np.repeat(rng.standard_normal(n).round(3), lengths)
    meta = {"model": "tiny-qwen2", "source": f"fault fixture {name}", "run_id": name, "fault": name,
            "expected_regime": spec["regime"], "expected_findings": spec["findings"],
            "rollout_engine": "transformers (incremental decode)", "trainer_engine": "transformers (full forward)",
            "rollout_dtype": spec.get("rollout_dtype", "fp32"), "trainer_dtype": spec["trainer"],
            "sampling": {"temperature": temperature, "top_p": spec.get("top_p"), "top_k": spec.get("top_k")},
            "seed": seed, "generator": "scripts/make_fault_fixtures.py"}
    return StepBatch(rollout_logp=np.concatenate(ro_all).astype(np.float64),
                     trainer_logp=np.concatenate(tr_all).astype(np.float64), offsets=offsets,
                     mask=np.concatenate(masks) if masks else np.ones(t, bool),
                     token_ids=np.concatenate(ids_all).astype(np.int64), prompt_ids=prompts, advantage=adv,
                     shadow_logp=np.concatenate(sh_all) if sh_all else None, meta=meta,
                     turn=np.concatenate(turns).astype(np.int32) if turns else None,
                     weight_version=np.asarray(versions, dtype=str) if versions else None)


def multi_turn(engine, trainer, tok, prompt: list[int], n_turns: int, length: int, gen: torch.Generator):
    """One agentic sequence: `n_turns` sampled turns of `length` tokens with tool output between them.

    The engine continues from the tool text it saw (TOOL_TURN); the trainer re-scores a conversation whose tool
    text was re-rendered (TOOL_TURN_RERENDERED), so the tokens right after each tool span see another context.
    Returns the rollout and trainer log-probs, token ids, loss mask and turn index in the engine's layout."""
    seen, shown = tok.encode(TOOL_TURN), tok.encode(TOOL_TURN_RERENDERED)
    ctx, ro, ids, mask, turn, spans = list(prompt), [], [], [], [], []
    for k in range(n_turns):
        if k:
            ctx += seen
            ids += seen
            ro += [0.0] * len(seen)
            mask += [False] * len(seen)
            turn += [k - 1] * len(seen)
        toks, lp = sample(engine, ctx, length, gen)
        spans.append(toks)
        ctx += toks
        ids += toks
        ro += lp
        mask += [True] * len(toks)
        turn += [k] * len(toks)
    # the trainer's sequence: the same sampled turns, the re-rendered tool text between them
    seq, where = [], []
    for k, toks in enumerate(spans):
        if k:
            seq += shown
        where += list(range(len(seq), len(seq) + len(toks)))
        seq += toks
    full = score(trainer, prompt, seq)
    p0 = len(prompt) - 1
    tr_resp = full[p0:][where]
    tr = np.zeros(len(ids))
    tr[np.flatnonzero(mask)] = tr_resp
    return (np.asarray(ro), tr, np.asarray(ids), np.asarray(mask, bool), np.asarray(turn, np.int32))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models" / "tiny-qwen2"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "faults"))
    ap.add_argument("--only", nargs="*", help="case names (default: all)")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model_dir = Path(args.model)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(CASES)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"cases": {}}
    manifest["model_sha256"] = sha256(model_dir / "model.safetensors")
    manifest["torch"] = torch.__version__
    for name in names:
        spec = CASES[name]
        batch = make_case(name, spec, base, tok)
        save_batch(batch, out / f"{name}.npz")
        manifest["cases"][name] = {"file": f"{name}.npz", "regime": spec["regime"], "findings": spec["findings"],
                                   "tokens": batch.n_tokens, "sequences": batch.n_seqs}
        print(f"{name}: {batch.n_seqs} seqs, {batch.n_tokens} tokens", flush=True)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
