"""`--tokenizer PATH`: a local tokenizer folder's decode, offline (transformers is imported only here).

The folder is data, never code: one whose config asks for custom code (`auto_map`) is refused before transformers
sees it, and transformers is called with `trust_remote_code=False`, so it raises rather than asking "Do you wish to
run the custom code?" behind the progress bar. The files a tokenizer is built from are regular files of at most
TOKENIZER_MAX_BYTES in all (a 75 MB tokenizer.json takes 2 GB to load), and their content is part of the build
cache's key (`digest`): a changed tokenizer re-renders every page it decoded.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..catalogue.numbers import fmt
from ..config import TOKENIZER_MAX_BYTES
from ..errors import BadInput, regular_file
from .text import first_line

# The files transformers builds a tokenizer from (vocabularies, merges, sentencepiece and tiktoken models, configs);
# model weights beside them are never read, so never counted.
TOKENIZER_FILES = ("tokenizer*", "vocab*", "merges*", "*.model", "*.tiktoken", "special_tokens_map.json",
                   "added_tokens.json", "config.json", "chat_template*")
CONFIGS = ("tokenizer_config.json", "config.json")
MAX_TOKEN_ID = 2**32  # tokenizers takes ids as u32


def tokenizer_files(tokenizer_path: str) -> list[Path]:
    """The folder's tokenizer files, sorted; BadInput unless it is a folder of regular files within the size limit."""
    folder = Path(tokenizer_path)
    regular_file(folder, "tokenizer folder")
    if not folder.is_dir():
        raise BadInput(tokenizer_path, "no such folder: --tokenizer names a local folder holding tokenizer.json "
                                       "(or vocab and merges files)")
    files = sorted({p for pattern in TOKENIZER_FILES for p in folder.glob(pattern) if not p.is_dir()})
    total = 0
    for p in files:
        regular_file(p, "tokenizer file")
        total += p.stat().st_size
    if total > TOKENIZER_MAX_BYTES:
        raise BadInput(tokenizer_path, f"its tokenizer files hold {fmt(total)} bytes, more than the {fmt(TOKENIZER_MAX_BYTES)} "
                                       "a tokenizer needs (config.TOKENIZER_MAX_BYTES)")
    return files


def digest(tokenizer_path: str) -> str:
    """A digest of the tokenizer's files (names and bytes), for the cache key."""
    h = hashlib.sha256()
    for p in tokenizer_files(tokenizer_path):
        h.update(p.name.encode("utf-8", "replace") + b"\0")
        with open(p, "rb") as f:
            h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()


def _refuse_custom_code(tokenizer_path: str, files: list[Path]) -> None:
    for p in files:
        if p.name not in CONFIGS:
            continue
        try:
            config = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise BadInput(p, f"is not valid JSON ({first_line(exc)})") from None
        if isinstance(config, dict) and config.get("auto_map"):
            raise BadInput(tokenizer_path, f"{p.name} asks for custom code (auto_map): tim-report never runs a tokenizer "
                                           "folder's Python; use a tokenizer that transformers ships")


def _tokenizer(tokenizer_path: str):
    files = tokenizer_files(tokenizer_path)
    _refuse_custom_code(tokenizer_path, files)
    return _load(tokenizer_path, tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@functools.lru_cache(maxsize=4)  # one load per command, not one per step; a changed file (its stat) loads anew
def _load(tokenizer_path: str, _files: tuple):
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers is a dependency
        raise BadInput(tokenizer_path, "--tokenizer needs the 'transformers' package") from exc
    try:
        return AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True, trust_remote_code=False)
    except Exception as exc:
        raise BadInput(tokenizer_path, f"cannot load a tokenizer from this folder ({first_line(exc)})") from None


def load_decoder(tokenizer_path: str, token_ids: np.ndarray | None = None, source: object = None) -> Callable:
    """The tokenizer's decode. `token_ids` (the batch's, read from `source`) must be ids at all (0 ≤ id < 2³², what a
    tokenizer takes); an id past the vocabulary (a model's padded embedding rows) decodes as nothing, as transformers
    does."""
    tok = _tokenizer(tokenizer_path)
    if token_ids is not None and len(token_ids):
        ids = np.asarray(token_ids)
        if ids.dtype.kind not in "iu":
            raise BadInput(source or tokenizer_path, f"its token ids are {ids.dtype}, not integers (--tokenizer decodes ids)")
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= MAX_TOKEN_ID:
            raise BadInput(source or tokenizer_path, f"holds token id {low if low < 0 else high}, which no tokenizer has "
                                                     f"(ids are 0 to {fmt(MAX_TOKEN_ID - 1)})")
    return lambda ids: tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
