"""`--tokenizer PATH`: a local tokenizer's decode, offline (transformers is imported only here)."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import BadInput
from .text import first_line


def load_decoder(tokenizer_path: str) -> Callable:
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers is a dependency
        raise BadInput(tokenizer_path, "--tokenizer needs the 'transformers' package") from exc
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
    except Exception as exc:
        raise BadInput(tokenizer_path, f"cannot load a tokenizer from this path ({first_line(exc)})") from exc
    return lambda ids: tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
