"""The data model: plain data that every layer passes around, with nothing computed here.

    StepBatch    one step's tokens, flat with CSR offsets: what every reader and capture engine produces
    BatchReport  the analysis of one batch (summary.json and samples.js are its serialisation; api.Report adds
                 rendering)
    Comparison   the before/after analysis of two batches (compare.json)

`dumps` is the one JSON encoding of them: deterministic, NaN-free.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .catalogue import metrics as catalogue
from .config import KL_K3_MAX
from .config.bounds import LR_MAX, LR_MIN, MAX_LAGS

SCHEMA_VERSION = 1

# The meta keys a file may carry (or `--meta KEY=VALUE` may set) that the reports name things by.
META_KEYS = {
    "model": "the model's name (a path is shown by its last part)",
    "rollout_engine": "the engine that sampled the tokens (vllm, sglang, ...)",
    "rollout_dtype": "its precision (bf16, fp16, fp32, fp8)",
    "trainer_engine": "the engine that re-scored them (fsdp, megatron, transformers, ...)",
    "trainer_dtype": "its precision",
    "device": "where it ran (an accelerator's name)",
    "step": "the training step (an integer)",
    "model_class": "dense or moe: which published noise band the diagnosis reads the batch against",
    "trainer_version": "the weight version the trainer holds at this step (an integer; else the step is used)",
    "ppo_clip_fraction": "the PPO clip fraction your trainer logged for this step (0 to 1; the idle-correction check)",
    "lr": "this step's learning rate (1e-12 to 1; a lag's KL over the run is read per unit of lr²)",
    "engine_digest": "the engine's weight digest: VERSION:DTYPE:SHA256[:CHANGED_SHARE[:SINCE]], several joined by ','",
    "trainer_digest": "the trainer's weights cast to the engine's dtype, digested the same way (docs/sync.md)",
    "lm_head_fp32": "rollout, trainer, both or none: the side(s) that keep the LM head (output projection) in fp32",
    "trainer_support": "full or kept: the trainer's log-probs are renormalised over each token's kept set (a replaying "
                       "trainer)",
}

_LOCAL_PATH = re.compile(r"^(?:[/\\~]|\.{1,2}[/\\]|[A-Za-z]:[/\\])")  # /abs, ~/home, ./rel, ../rel, a drive, a share
_HUB_CACHE = re.compile(r"(?:^|[/\\])models--[^/\\]+?--([^/\\]+)")  # the transformers cache's models--ORG--NAME/snapshots/<hash>


def model_label(meta: dict) -> str | None:
    """The model's name as pages, report.md and the index show it: never a local path. A folder given as an absolute or
    home path (what older `capture --model` runs recorded) is named by its last part, a transformers cache snapshot by
    the model it holds; a hub name (`Qwen/Qwen2.5-7B`) and anything else stay as written; `--meta model=NAME` sets it."""
    value = meta.get("model") or meta.get("model_name")
    if value in (None, ""):
        return None
    text = str(value).strip()
    if hub := _HUB_CACHE.search(text):
        return hub.group(1)
    if _LOCAL_PATH.match(text):
        return re.split(r"[/\\]", text.rstrip("/\\"))[-1] or text
    return text


# A token whose generating weight version is not known (StepBatch.token_version): never read as a lag of 0.
UNKNOWN_VERSION = -(2**63)
VERSION_DIGITS = 18  # a version or lag of more digits is unknown: every difference of two still fits int64
_VERSION_TEXT = re.compile(rf"-?[0-9]{{1,{VERSION_DIGITS}}}")


def version_int(value: object) -> int | None:
    """A weight version or lag written as text ("3", "-1") → int; None for anything else ("--3", "³", "1e3", a
    20-digit number): the ASCII digits int() takes, and no more than an int64 difference can hold."""
    return int(value) if isinstance(value, str) and _VERSION_TEXT.fullmatch(value.strip()) else None


def learning_rate(value: object) -> float | None:
    """A step's learning rate (meta `lr`), as the lag history reads it: a number in [LR_MIN, LR_MAX]; None for anything
    else (a string, NaN, 0 or a negative rate, 1e-200 whose square is 0, 1e308 whose square overflows)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:  # an integer beyond a float
        return None
    return x if LR_MIN <= x <= LR_MAX else None


def lags_problem(value: object, high: float = KL_K3_MAX) -> str | None:
    """What is wrong with a row's per-lag numbers (`lag_kl_k3`, `lag_kl_k3_se`; `lag_mix` with `high` 1), or None: at
    most MAX_LAGS lags, each named by an integer (`version_int`) or "unknown", each null or a number from 0 to `high` (a
    share is at most 1; no KL k3 of clamped log-ratios, nor its standard error, exceeds KL_K3_MAX)."""
    if not isinstance(value, dict) or len(value) > MAX_LAGS:
        return f"is not an object of at most {MAX_LAGS} lags"
    for k, v in value.items():
        if not isinstance(k, str) or not (k == "unknown" or version_int(k) is not None):
            return f"names a lag {str(k)[:20]!r}: an integer or unknown"
        if v is not None and not (_is_kind(v, "number", False) and 0 <= v <= high):
            return f"holds {str(v)[:20]} at lag {k}: not a number from 0 to {high:.3g}"
    return None

# The weight digests a step may carry (docs/sync.md): meta[side + "_digest"], each a list of records
#   {"version": int, "dtype": "bf16" | "fp16" | "fp32", "digest": 64 hex digits,
#    "changed_share": share of elements whose value changed since version `since` (or null), "since": int or null}
# written by save_step, `--meta engine_digest=5:bf16:<sha256>:0.0153:4` or a framework's dump.
DIGEST_SIDES = ("engine", "trainer")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def digest_records(value: Any) -> tuple[list[dict], str | None]:
    """A meta digest value (one record, a list of them, or their text form) → (the records, None), or ([], what is
    wrong with it): a version that is not an integer ≥ 0 (model.version_int's rule), a dtype outside
    config.sync.DIGEST_DTYPES, a digest that is not 64 hex digits, a share outside [0, 1], too many records."""
    from .config.sync import DIGEST_DTYPES, MAX_DIGEST_RECORDS

    if isinstance(value, str):
        if len(value) > MAX_DIGEST_RECORDS * 120:
            return [], f"is {len(value):,} characters long: not digest records"
        value = [_digest_text(part) for part in value.split(",") if part.strip()]
    items = value if isinstance(value, list) else [value]
    if not items or len(items) > MAX_DIGEST_RECORDS:
        return [], f"holds {len(items)} records (expected 1 to {MAX_DIGEST_RECORDS})"
    out = []
    for item in items:
        if not isinstance(item, dict):
            return [], f"holds {str(item)[:40]!r}: expected VERSION:DTYPE:SHA256[:CHANGED_SHARE[:SINCE]]"
        version, since = _digest_version(item.get("version")), _digest_version(item.get("since"))
        digest, dtype, share = item.get("digest"), item.get("dtype"), item.get("changed_share")
        if version is None:
            return [], f"has version {str(item.get('version'))[:40]!r}: expected an integer version (0 or more)"
        if not (isinstance(dtype, str) and dtype in DIGEST_DTYPES):
            return [], f"has dtype {str(dtype)[:40]!r}: expected one of {', '.join(DIGEST_DTYPES)}"
        if not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
            return [], f"has digest {str(digest)[:40]!r}: expected a sha256 in 64 lower-case hex digits"
        if item.get("since") is not None and since is None:
            return [], f"has since {str(item.get('since'))[:40]!r}: expected an integer version (0 or more)"
        if share is not None and (isinstance(share, (bool, np.bool_)) or not isinstance(share, (int, float, np.number))
                                  or not 0 <= share <= 1):
            return [], f"has changed_share {str(share)[:40]!r}: expected a share between 0 and 1"
        out.append({"version": version, "dtype": dtype, "digest": digest,
                    "changed_share": None if share is None else float(share), "since": since})
    return out, None


def digest_text(record: dict) -> str:
    """A record in the text form `--meta` takes: VERSION:DTYPE:SHA256[:CHANGED_SHARE[:SINCE]]."""
    tail = []
    if record.get("changed_share") is not None:
        tail = [repr(float(record["changed_share"]))] + ([str(record["since"])] if record.get("since") is not None else [])
    return ":".join([str(record["version"]), record["dtype"], record["digest"], *tail])


def _digest_text(text: str) -> dict | str:
    """One record's text form → its fields (checked by digest_records); the text itself when it has not 3 to 5 parts."""
    parts = text.strip().split(":")
    if not 3 <= len(parts) <= 5:
        return text.strip()
    share: Any = None
    if len(parts) > 3 and parts[3] not in ("", "?"):
        try:
            share = float(parts[3])
        except ValueError:
            share = parts[3]
        share = share if share == share else parts[3]  # NaN is no share
    return {"version": parts[0], "dtype": parts[1].lower(), "digest": parts[2].lower(), "changed_share": share,
            "since": parts[4] if len(parts) > 4 and parts[4] else None}


def _digest_version(v: Any) -> int | None:
    """A digest's version: an int or ASCII digits (version_int), 0 or more; None for anything else."""
    if isinstance(v, str):
        v = version_int(v)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not 0 <= v < 10**VERSION_DIGITS:
        return None
    return int(v)


# What a reader may count in StepBatch.problems, and how a report says it.
INPUT_PROBLEMS = {
    "mask_negative": "mask values below 0; those tokens were treated as not trained",
    "mask_nan": "mask values that are NaN; those tokens were treated as not trained",
    "mask_not_binary": "mask values other than 0 and 1 (such as 7.5); those tokens were treated as trained",
    "text_invalid": "token or prompt strings that were not valid Unicode; the bad characters were replaced by U+FFFD",
}


# The sides a batch may carry (log-probs of the same tokens), in the chain's default order (design §5, docs/chain.md):
# the sampler, the engine re-scoring the sampled tokens, the trainer in the rollout's precision, the trainer's no-grad
# recompute, its training forward. `floor` (the trainer again under another batch) is a reference beside the trainer,
# never a link of the path. Any other named side (StepBatch.sides) follows `train` unless meta["chain"] declares
# the order.
CHAIN_ORDER = ("rollout", "recompute", "shadow", "trainer", "train")
SIDE_KINDS = {
    "rollout": "the sampler's own log-probs",
    "recompute": "the rollout engine re-scoring the sampled tokens (prefill, no sampling)",
    "shadow": "the trainer's weights in the rollout's precision",
    "trainer": "the trainer's no-grad recompute (old_log_probs)",
    "train": "the training forward",
    "floor": "the trainer again under another batch composition (its own floor)",
}
SIDE_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
SIDE_NAME_MAX = 64  # a side's name is a column of pages and a zip member's name (`side_NAME.npy`, at most 65,535 bytes)


@dataclass
class StepBatch:
    """Token-level arrays are flat (padding removed) with CSR `offsets` per sequence, so the analysis
    never sees a framework's layout (design §3)."""

    rollout_logp: np.ndarray  # [T] float64, log p under the rollout engine (behaviour policy μ)
    trainer_logp: np.ndarray  # [T] float64, log p recomputed by the trainer (π)
    offsets: np.ndarray  # [N+1] int64, sequence i is tokens offsets[i]:offsets[i+1]
    mask: np.ndarray  # [T] bool, token is trained on
    token_ids: np.ndarray | None = None  # [T] int64
    token_text: Sequence[str] | np.ndarray | None = None  # [T] decoded tokens (list, array or lazy decoder)
    prompt_ids: list[np.ndarray] | None = None  # ragged, one array per sequence
    prompt_text: list[str] | None = None  # one string per sequence
    group: np.ndarray | None = None  # [N] str
    reward: np.ndarray | None = None  # [N] float64 (token-level rewards are summed)
    advantage: np.ndarray | None = None  # [T] float64 (sequence advantages are broadcast)
    shadow_logp: np.ndarray | None = None  # [T] float64, trainer weights in rollout precision
    floor_logp: np.ndarray | None = None  # [T] float64, the trainer again under another batch composition (its own floor)
    # [T] float64 each: further sides of the chain by name: "recompute" (the engine re-scoring), "train" (the training
    # forward), or any other name; their order is CHAIN_ORDER's, or meta["chain"] where the file declares one
    sides: dict[str, np.ndarray] = field(default_factory=dict)
    turn: np.ndarray | None = None  # [T] int32, turn of each token in its sequence (k-th trained span and what follows it); multi-turn only
    # [N] str, the weight version(s) that generated each sequence: "3", or a span oldest → newest joined by "," ("2,3");
    # an integer where it is one (analysis/lag/versions.py reads them), "" where unknown
    weight_version: np.ndarray | None = None
    # [T] int64, the version that generated each token where the framework records it (slime / miles: one per generate
    # call; Megatron: its per-token lag converted); UNKNOWN_VERSION where unknown
    token_version: np.ndarray | None = None
    # [N] int64, the prompt tokens the rollout engine served from its prefix cache (vLLM's RequestOutput.num_cached_tokens,
    # SGLang's meta_info cached_tokens): a cache hit is > 0; a KV cache computed by older weights shows there first
    cached_tokens: np.ndarray | None = None
    env: np.ndarray | None = None  # [N] str, environment name
    # The k most likely tokens at each position and their log-probs, per side ([T, k], best first; capture
    # --top-k-logprobs). The rollout's are the sampler's distribution (processed, like rollout_logp).
    rollout_topk_ids: np.ndarray | None = None  # [T, k] int32
    rollout_topk_logp: np.ndarray | None = None  # [T, k] float32
    trainer_topk_ids: np.ndarray | None = None  # [T, k] int32
    trainer_topk_logp: np.ndarray | None = None  # [T, k] float32
    # The sampler's kept set of each token (the vocabulary ids that survived top-k / top-p / min-p: vLLM's SamplingMask,
    # prime-rl's replayed support), CSR over the flat tokens: token t's set is kept_ids[kept_offsets[t]:kept_offsets[t+1]],
    # empty where none was recorded; and the trainer's log-probability mass on it (log S ≤ 0, NaN where unknown)
    kept_ids: np.ndarray | None = None  # [K] int32
    kept_offsets: np.ndarray | None = None  # [T+1] int64
    kept_log_mass: np.ndarray | None = None  # [T] float64
    rollout_routes: np.ndarray | None = None  # [T, layers, k] int32: the experts each MoE layer routed the token to
    trainer_routes: np.ndarray | None = None  # [T, layers, k] int32, the trainer's (capture --routes)
    meta: dict[str, Any] = field(default_factory=dict)  # step, framework, layout, alignment, exclusions, routed_experts, ...
    notes: list[str] = field(default_factory=list)  # how the loader read the file (alignment, inferred masks)
    problems: dict[str, int] = field(default_factory=dict)  # what the reader had to drop or repair, counted (see INPUT_PROBLEMS)
    decoder: Callable[[Sequence[int]], str] | None = field(default=None, repr=False)  # a tokenizer's decode, not saved

    @property
    def n_tokens(self) -> int:
        return int(self.rollout_logp.shape[0])

    @property
    def n_seqs(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def seq_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def seq_index(self) -> np.ndarray:
        """[T] index of the sequence each token belongs to."""
        return np.repeat(np.arange(self.n_seqs), self.seq_lengths)

    def tokens_of(self, i: int) -> slice:
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    def side(self, name: str) -> np.ndarray | None:
        """A side's log-probs by name: the two of every batch, shadow and floor, or a named one of `sides`."""
        fixed = {"rollout": self.rollout_logp, "trainer": self.trainer_logp, "shadow": self.shadow_logp,
                 "floor": self.floor_logp}
        return fixed[name] if name in fixed else self.sides.get(name)

    def chain_order(self) -> list[str]:
        """The sides on the chain's path, in order: meta["chain"] where declared (the sides it names that the batch
        holds), else CHAIN_ORDER's then the other named sides as they were added. The floor is never on the path."""
        declared = self.meta.get("chain")
        if isinstance(declared, list) and declared:
            names = [str(n) for n in declared]
        else:
            names = [*CHAIN_ORDER, *(n for n in self.sides if n not in CHAIN_ORDER)]
        return [n for n in dict.fromkeys(names) if n != "floor" and self.side(n) is not None]

    def token_strings(self, sl: slice) -> list[str]:
        """Decoded tokens for a slice: stored text, else the tokenizer, else `[id]`."""
        if self.token_text is not None:
            return [str(t) for t in self.token_text[sl]]
        if self.token_ids is None:
            return ["" for _ in range(sl.start, sl.stop)]
        ids = [int(t) for t in self.token_ids[sl]]
        if self.decoder is not None:
            return [self.decoder([t]) for t in ids]
        return [f"[{t}]" for t in ids]

    def prompt_string(self, i: int) -> str | None:
        """The prompt of sequence i as text, when the file or a tokenizer can tell."""
        if self.prompt_text is not None:
            return str(self.prompt_text[i])
        if self.prompt_ids is None:
            return None
        ids = [int(t) for t in self.prompt_ids[i]]
        return self.decoder(ids) if self.decoder is not None else " ".join(f"[{t}]" for t in ids)


@dataclass
class BatchReport:
    """The analysis of one batch as plain, JSON-able data."""

    run: dict
    metrics: dict
    breakdowns: dict
    routing: dict
    what_if: list
    verl: dict
    data_problems: dict
    distributions: dict
    diagnosis: dict = field(default_factory=dict)  # empty when the diagnosis did not run
    topk: dict | None = None  # the two sides' top-k distributions compared (analysis/topk.py); absent with a reason
    chain: dict | None = None  # the sides as a chain, each link's share (analysis/chain.py); None: no side beyond the pair
    staleness: dict | None = None  # the split by weight-version lag (analysis/lag/split.py); None: no version at all
    rescore: dict | None = None  # which weights sampled each lag bucket (analysis/lag/rescored.py); None: none rescored
    sync: dict | None = None  # the weight digests' round trip (analysis/lag/digests.py); None: no digest at all
    samples: list = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def summary_dict(self) -> dict:
        """Every field but the samples, schema version first. Shallow: the values are the BatchReport's own (a deep
        copy of a 16M-token report's distributions cost a fifth of a second per page), so read, don't modify."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("samples", "schema_version")}
        for key in ("chain", "staleness", "rescore", "sync"):  # two sides, no versions, none rescored, no digests
            if d[key] is None:
                del d[key]
        return {"schema_version": self.schema_version, **d}

    def samples_dict(self) -> dict:
        """What samples.js carries: each sample's token rows as columns (one array per field), log-probs to 9
        significant digits (every float32 exactly), the fields that follow from the rest left out (DERIVED_ROW_FIELDS)."""
        return {"schema_version": SAMPLES_SCHEMA_VERSION, "run_id": self.run.get("id"),
                "derived": DERIVED_ROW_FIELDS, "samples": [_columnar(s) for s in self.samples]}

    def to_dict(self) -> dict:
        return {**self.summary_dict(), "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict) -> BatchReport:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


@dataclass
class Comparison:
    """The before/after comparison of two batches: `data` is the JSON-able dict (compare.json)."""

    data: dict

    def to_dict(self) -> dict:
        return self.data

    @classmethod
    def from_dict(cls, d: dict) -> Comparison:
        return cls(d)


# ---- the run index (index.json's rows; tim_report.site.index_json writes and reads them) ----------------------

# One row per run: what the index, the run view, `check --history` and the cache read back without the BatchReport
# (analysis.run_index.run_row makes it; its metrics are the catalogue's ROW view). Each field with the kind of value it
# holds, so a row read back from disk is checked before it is used.
_ROW_IDENTITY = {"id": "text", "model": "text?", "device": "text?", "rollout_engine": "text", "rollout_dtype": "text",
                 "trainer_engine": "text", "trainer_dtype": "text", "step": "number?", "max_new_tokens": "number?"}
_ROW_VERDICT = {"routing": "counts", "routing_unit": "text", "regime": "text?", "verdict": "text?", "glance": "text?",
                "side": "text?", "findings": "texts",
                "blocked_by_bug": "bool",
                "excluded_tokens": "number", "input_problems": "number", "input_problem_kinds": "texts",
                "data_problems": "number", "health": "text", "env_kl_k3": "counts",
                "lag_mix": "shares", "lag_kl_k3": "lags", "lag_kl_k3_se": "lags", "floor_kl_k3_se": "number?",
                "staleness_share": "number?", "trainer_version": "number?", "lr": "number?", "weight_digests": "digests",
                # as its run reads the step (analysis.run_index.in_run; null in a step's own row): its lag against the
                # run's own history of that lag, and its own regime where the run's differs
                "lag_reading": "object?", "step_regime": "text?"}


def run_row_fields() -> dict[str, str]:
    """Every field of a run row and the kind of value it holds (text, number, bool, texts, counts; ? = or null)."""
    return {**_ROW_IDENTITY, **{key: "number?" for key in catalogue.ROW}, **_ROW_VERDICT}


def row_problem(row: Any) -> str | None:
    """What is wrong with a run row read back from disk (a field missing, extra or of the wrong kind), or None."""
    if not isinstance(row, dict):
        return "is not an object"
    fields = run_row_fields()
    if set(row) != set(fields):
        return f"has fields {sorted(set(row) ^ set(fields))[:5]} where a run row has not, or lacks them"
    for name, kind in fields.items():
        if not _is_kind(row[name], kind.rstrip("?"), kind.endswith("?")):
            return f"{name} is not {kind.rstrip('?')}"
    return None


def _is_kind(v: Any, kind: str, optional: bool) -> bool:
    if v is None:
        return optional
    if kind == "number":
        return not isinstance(v, bool) and isinstance(v, (int, float)) and abs(v) <= sys.float_info.max and math.isfinite(v)
    if kind == "text":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "texts":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "object":
        return isinstance(v, dict) and all(isinstance(k, str) for k in v)
    if kind == "digests":  # the step's weight digests, each a record with its side (docs/sync.md)
        if not isinstance(v, list) or not all(isinstance(x, dict) and x.get("side") in DIGEST_SIDES for x in v):
            return False
        sides = [[{k: y for k, y in x.items() if k != "side"} for x in v if x["side"] == side] for side in DIGEST_SIDES]
        return all(not recs or digest_records(recs)[1] is None for recs in sides)
    if kind in ("lags", "shares"):
        return lags_problem(v, 1.0 if kind == "shares" else KL_K3_MAX) is None
    if kind == "counts":
        return isinstance(v, dict) and all(isinstance(k, str) and (x is None or _is_kind(x, "number", False))
                                           for k, x in v.items())
    return False


_PLAIN = frozenset({str, int, bool, type(None)})  # values JSON writes as they are


def clean(obj: Any) -> Any:
    """NaN / inf become null so the JSON is valid everywhere (browsers, jq, GitHub).

    Plain values and floats are handled in line rather than by a call each: a page's JSON holds tens of thousands
    of them (a finite x has x − x = 0; inf and NaN give NaN)."""
    t = type(obj)
    if t is dict:
        return {k if type(k) is str else str(k): v if type(v) in _PLAIN else (v if v - v == 0.0 else None)
                if type(v) is float else clean(v) for k, v in obj.items()}
    if t is list or t is tuple:
        return [v if type(v) in _PLAIN else (v if v - v == 0.0 else None) if type(v) is float else clean(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


# The samples' own schema (samples.js): 3 since the rows are carried once for the page and for scripts, each
# row's position, mask and validity left implicit (2: samples.json, every field a column; 1: named row objects).
SAMPLES_SCHEMA_VERSION = 3
# What a reader of the samples computes from the rest instead of reading it (the page shows them).
DERIVED_ROW_FIELDS = {"diff": "trainer_logp - rollout_logp", "r": "exp(diff)", "p_rollout": "exp(rollout_logp)",
                      "p_trainer": "exp(trainer_logp)", "pos": "the row's index: the rows are the sequence's first tokens",
                      "mask": "false at the rows `unmasked` lists, true elsewhere",
                      "valid": "false at the rows `invalid` lists, true elsewhere",
                      "token": "[token_id] where a sample has no `token` column (the batch has no token text)"}
_FLAGS = {"mask": "unmasked", "valid": "invalid"}  # a flag that is true on nearly every row: where it is false


def _digits9(v: Any) -> Any:
    return float(f"{v:.9g}") if isinstance(v, float) and math.isfinite(v) else v


def _columnar(sample: dict) -> dict:
    """One sample with its token rows as {field: [value per row]} and its flags as the rows where they are false:
    a third of the bytes of named row objects, half of every flag spelt out."""
    rows = sample.get("rows") or []
    names = sorted({k for row in rows for k in row} - (set(DERIVED_ROW_FIELDS) - {"token"}))
    flags = {key: [i for i, row in enumerate(rows) if not row.get(flag, True)] for flag, key in _FLAGS.items()}
    if rows and all(row.get("token_id") is not None and row.get("token") == f"[{row['token_id']}]" for row in rows):
        names.remove("token")  # no token text: the page writes each id as model.StepBatch.token_strings does
    return {**{k: v for k, v in sample.items() if k != "rows"},
            "rows": {**{k: [_digits9(row.get(k)) for row in rows] for k in names}, **flags}}


def dumps(obj: Any, compact: bool = False) -> str:
    """Deterministic JSON: sorted keys, trailing newline; `compact` for bulky per-token data."""
    layout = {"separators": (",", ":")} if compact else {"indent": 1}
    return json.dumps(clean(obj), sort_keys=True, ensure_ascii=False, allow_nan=False, **layout) + "\n"
