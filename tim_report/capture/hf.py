"""The transformers engine: seeded sampling with processed log-probs, and chunked teacher-forced scoring.

Both paths run the model's decoder (`model.base_model`) and apply the output projection themselves, so
that (a) the LM head can be kept in fp32 (`lm_head_fp32`), and (b) scoring never materialises
full-vocabulary logits for the whole batch. Scoring is `score.token_logprobs`, the routine
`tim_report.score_logprobs` uses too: hidden states of the scored positions are projected in row
chunks sized to `logit_chunk_mb`, each chunk cast to fp32, divided by the temperature and
log-softmaxed in fp32, then reduced to the sampled token's log-prob (and with `topk` to the K most likely
tokens of the same chunk).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import BadInput
from .score import chunk_rows, plain_head, processed_logprobs, token_logprobs
from .spec import Sampled, TopK

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class FP32Head(torch.nn.Module):
    """An output projection kept in fp32: hidden states are upcast before the matmul."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().float().clone(), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().float().clone(), requires_grad=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h.float(), self.weight, self.bias)


def _load_model(path: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bars; no "Loading weights" tqdm on stderr
    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=False)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        return AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, trust_remote_code=False)


class HFEngine:
    def __init__(self, model_path: str, dtype: str, device: str = "cpu", lm_head_fp32: bool = False,
                 logit_chunk_mb: int = 256, max_batch_tokens: int = 16384, gen_batch: int = 32):
        import transformers

        self.version = transformers.__version__
        self.dtype, self.device, self.lm_head_fp32 = dtype, device, lm_head_fp32
        torch_dtype = TORCH_DTYPES[dtype]
        model = _load_model(model_path, torch.float32 if lm_head_fp32 else torch_dtype)
        cfg = model.config
        if not plain_head(model):
            raise BadInput(model_path, "the hf engine does not implement logit soft-capping / logit scaling")
        head = model.get_output_embeddings()
        if lm_head_fp32:
            self.head = FP32Head(head.weight, getattr(head, "bias", None)).to(device)
            model = model.to(torch_dtype)
        else:
            self.head = head
        self.model = model.to(device).eval()
        self.base = model.base_model
        self.vocab = int(head.weight.shape[0])
        self.logit_chunk_rows = chunk_rows(self.vocab, logit_chunk_mb)
        self.max_batch_tokens = max_batch_tokens
        self.gen_batch = gen_batch
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        self.eos = set([eos] if isinstance(eos, int) else (eos or []))
        if cfg.eos_token_id is not None:
            self.eos |= set([cfg.eos_token_id] if isinstance(cfg.eos_token_id, int) else cfg.eos_token_id)
        self.pad_id = cfg.pad_token_id if isinstance(cfg.pad_token_id, int) else 0
        experts = next((getattr(cfg, k) for k in ("num_local_experts", "num_experts", "n_routed_experts")
                        if isinstance(getattr(cfg, k, None), int)), 0)
        self.routes_k = int(getattr(cfg, "num_experts_per_tok", 0) or 0) if experts > 1 else 0  # 0: not an MoE
        self.last_routes: list | None = None  # score(routes=True): each sequence's [n, layers, k] routed experts
        self.last_kept_mass: list | None = None  # score(kept=...): each sequence's [n] log-mass on its kept sets

    def close(self) -> None:
        del self.model, self.base, self.head

    # ------------------------------------------------------------------ scoring (teacher forced)

    @torch.inference_mode()
    def score(self, prompts: list[list[int]], completions: list[list[int]], temperature: float = 1.0,
              top_k: int = 0, top_p: float = 1.0, progress=None, topk: int = 0, alone: bool = False,
              routes: bool = False, kept: list | None = None) -> list:
        """log p(completion token | prompt, earlier completion tokens) for every completion token.

        With `topk` K > 0 each sequence's entry is (log-probs, TopK): the K most likely tokens at each
        position and their log-probs, from the same chunked fp32 log-softmax. Sequences are packed into right-padded
        micro-batches of at most `max_batch_tokens` tokens; the
        head runs only on scored positions, `logit_chunk_rows` rows at a time.

        `alone`: one sequence per micro-batch (no padding), in reverse order: the same tokens under another batch
        composition, for the trainer's own floor (`capture --trainer-floor`).
        `routes` on a mixture-of-experts model: each sequence's routed experts are left in `self.last_routes`
        ([n, layers, k] int32, in the order of the sequences), None when the model has no router.
        `kept`: each sequence's kept sets (ids, a size per token: the sampler's); the log of this scorer's mass on
        each token's set is left in `self.last_kept_mass` (a [n] float64 array per sequence, in their order).
        """
        found: list = []
        routed: list | None = [None] * len(prompts) if routes and self.routes_k else None
        out: list = [None] * len(prompts)
        masses: list = []
        kept_mass: list | None = [None] * len(prompts) if kept is not None else None
        order = sorted(range(len(prompts)), key=lambda i: -(len(prompts[i]) + len(completions[i])))
        batches: list[list[int]] = [[i] for i in reversed(range(len(prompts)))] if alone else []
        cur: list[int] = []
        cur_len = 0
        for i in order if not alone else ():
            n = len(prompts[i]) + len(completions[i])
            width = max(cur_len, n)
            if cur and width * (len(cur) + 1) > self.max_batch_tokens:
                batches.append(cur)
                cur, width = [], n
            cur.append(i)
            cur_len = width
        if cur:
            batches.append(cur)
        for mb in batches:
            seqs = [prompts[i] + completions[i] for i in mb]
            width = max(len(s) for s in seqs)
            ids = torch.full((len(mb), width), self.pad_id, dtype=torch.long)
            am = torch.zeros((len(mb), width), dtype=torch.long)
            rows, cols, targets = [], [], []
            for b, (i, s) in enumerate(zip(mb, seqs)):
                ids[b, : len(s)] = torch.tensor(s)
                am[b, : len(s)] = 1
                p, c = len(prompts[i]), len(completions[i])
                rows.append(torch.full((c,), b))
                cols.append(torch.arange(p - 1, p - 1 + c))
                targets.append(torch.tensor(completions[i]))
            sets = _batch_sets([kept[i] for i in mb]) if kept is not None else None
            lp = token_logprobs(self.base, self.head, ids.to(self.device), am.to(self.device),
                                torch.cat(rows).to(self.device), torch.cat(cols).to(self.device),
                                torch.cat(targets).to(self.device), self.logit_chunk_rows, temperature, top_k, top_p,
                                topk_logprobs=topk, routes=found if routed is not None else None, routes_k=self.routes_k,
                                kept=sets, masses=masses)
            lp, top = (lp[0], lp[1:]) if isinstance(lp, tuple) else (lp, None)
            pos = 0
            for i in mb:
                c = len(completions[i])
                if routed is not None:
                    routed[i] = found[-1][pos : pos + c]
                if kept_mass is not None:
                    kept_mass[i] = masses[-1][pos : pos + c].numpy()
                out[i] = lp[pos : pos + c].numpy()
                if top is not None:
                    out[i] = (out[i], TopK(top[0][pos : pos + c].numpy(), top[1][pos : pos + c].numpy()))
                pos += c
            if progress is not None:
                progress(len(mb))
        self.last_routes = routed
        self.last_kept_mass = kept_mass
        return out

    # ------------------------------------------------------------------ sampling (rollout side)

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], seeds: list[int], temperature: float, top_k: int, top_p: float,
                 max_new_tokens: int, progress=None, topk: int = 0, kept: bool = False) -> list[Sampled]:
        """Sample completions with one seeded torch.Generator per sequence: token ids and processed log-probs, with
        `topk` K > 0 the K most likely tokens of the sampling distribution (TopK), with `kept` each token's kept set
        (the ids of the very distribution it was drawn from that top-k / top-p left finite)."""
        results: list[Sampled] = []
        for start in range(0, len(prompts), self.gen_batch):
            chunk = prompts[start : start + self.gen_batch]
            results += self._generate_batch(chunk, seeds[start : start + len(chunk)], temperature, top_k, top_p,
                                            max_new_tokens, topk, kept)
            if progress is not None:
                progress(len(chunk))
        return results

    def _generate_batch(self, prompts, seeds, temperature, top_k, top_p, max_new_tokens, topk=0, kept=False):
        b, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        am = torch.zeros((b, width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every row's next token is at the same column
            ids[i, width - len(p):] = torch.tensor(p)
            am[i, width - len(p):] = 1
        ids, am = ids.to(self.device), am.to(self.device)
        pos = (am.cumsum(-1) - 1).clamp(min=0)
        gens = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
        out = self.base(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=True)
        past, h = out.past_key_values, out.last_hidden_state[:, -1]
        pos = pos[:, -1:]
        toks: list[list[int]] = [[] for _ in range(b)]
        lps: list[list[float]] = [[] for _ in range(b)]
        k = min(topk, self.vocab)
        tops: list[list[tuple]] = [[] for _ in range(b)]
        sets: list[list[np.ndarray]] = [[] for _ in range(b)]
        done = [False] * b
        for _ in range(max_new_tokens):
            logp = processed_logprobs(self.head(h), temperature, top_k, top_p).cpu()
            probs = logp.exp()
            top = torch.topk(logp, k, dim=-1) if k else None
            finite = torch.isfinite(logp) if kept else None
            nxt = torch.empty(b, dtype=torch.long)
            for i in range(b):
                nxt[i] = torch.multinomial(probs[i], 1, generator=gens[i])[0] if not done[i] else self.pad_id
                if not done[i]:
                    t = int(nxt[i])
                    toks[i].append(t)
                    lps[i].append(float(logp[i, t]))
                    if top is not None:
                        tops[i].append((top.indices[i], top.values[i]))
                    if finite is not None:
                        sets[i].append(finite[i].nonzero()[:, 0].to(torch.int32).numpy())
                    done[i] = t in self.eos
            if all(done):
                break
            am = torch.cat([am, torch.ones((b, 1), dtype=am.dtype, device=am.device)], dim=1)
            pos = pos + 1
            out = self.base(input_ids=nxt[:, None].to(self.device), attention_mask=am, position_ids=pos,
                            past_key_values=past, use_cache=True)
            past, h = out.past_key_values, out.last_hidden_state[:, -1]
        # no prefix cache here: every prompt is computed afresh (cached 0, known, not unknown)
        return [Sampled(t, np.asarray(lp, dtype=np.float64), _stack(tp, k) if k else None, _sets(ks) if kept else None)
                for t, lp, tp, ks in zip(toks, lps, tops, sets)]


def _batch_sets(seqs: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences' kept sets (ids, sizes) end to end → (ids, offsets) over their tokens, in the micro-batch's order."""
    ids = np.concatenate([np.asarray(x[0], np.int64) for x in seqs]) if seqs else np.zeros(0, np.int64)
    counts = np.concatenate([np.asarray(x[1], np.int64) for x in seqs]) if seqs else np.zeros(0, np.int64)
    return torch.from_numpy(ids), torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))


def _sets(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One sequence's kept sets, a row per token → (ids in position order, a size per token)."""
    ids = np.concatenate(rows).astype(np.int32) if rows else np.zeros(0, np.int32)
    return ids, np.asarray([len(r) for r in rows], np.int32)


def _stack(rows: list[tuple], k: int) -> TopK:
    """Per-step (ids, log-probs) rows of one sequence → TopK [n, k]."""
    if not rows:
        return TopK.empty(k)
    return TopK(torch.stack([r[0] for r in rows]).to(torch.int32).numpy(),
                torch.stack([r[1] for r in rows]).float().numpy())
