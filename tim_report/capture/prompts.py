"""Prompt files: plain text (one prompt a line) or JSONL (`{"prompt": ...}` or `{"messages": [...]}` a line).

Only a regular file of at most `config.PROMPTS_MAX_BYTES` is read (a FIFO, a device, a larger file: one line).
A file is JSONL when its name ends in `.jsonl` / `.json`, or when its first non-empty line starts with
`{`. Blank lines are skipped. Rendering applies the tokenizer's chat template unless disabled:
a plain prompt becomes one user message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..config import PROMPTS_MAX_BYTES
from ..errors import BadInput, parser_limit, regular_file
from .chat_template import render


@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) pairs

    def as_messages(self) -> list[dict]:
        if self.messages is not None:
            return [{"role": r, "content": c} for r, c in self.messages]
        return [{"role": "user", "content": self.text or ""}]


def _parse_json_line(path: Path, lineno: int, line: str) -> Prompt:
    where = f"{path}:{lineno}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadInput(where, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except (RecursionError, ValueError) as exc:  # nested too deep, an integer of too many digits
        bad = parser_limit(where, exc)
        if bad is None:
            raise
        raise bad from None
    if isinstance(obj, str):
        return Prompt(text=obj)
    if not isinstance(obj, dict):
        raise BadInput(where, 'expected an object with "prompt" or "messages"')
    if "messages" in obj:
        msgs = obj["messages"]
        if (not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in msgs)):
            raise BadInput(where, '"messages" must be a non-empty list of {"role": str, "content": str}')
        return Prompt(messages=tuple((m["role"], m["content"]) for m in msgs))
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise BadInput(where, '"prompt" must be a non-empty string')
        return Prompt(text=obj["prompt"])
    raise BadInput(where, 'expected an object with "prompt" or "messages"')


def read_prompts(path: str | Path) -> list[Prompt]:
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such file")
    if path.is_dir():
        raise BadInput(path, "is a directory, expected a prompt file (.txt or .jsonl)")
    regular_file(path, "prompt file")  # a FIFO would block, /dev/zero never end: refused before it is opened
    try:
        with open(path, "rb") as f:
            data = f.read(PROMPTS_MAX_BYTES + 1)
        if len(data) > PROMPTS_MAX_BYTES:
            raise BadInput(path, f"is larger than {PROMPTS_MAX_BYTES // (1024 * 1024)} MiB, more than a prompt file "
                                 "tim-report reads (capture scores a batch, not a data set)")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(path, f"cannot read prompts: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip()]
    if not lines:
        raise BadInput(path, "no prompts (the file is empty)")
    as_json = path.suffix.lower() in (".jsonl", ".json") or lines[0][1].lstrip().startswith("{")
    if as_json:
        return [_parse_json_line(path, i, ln) for i, ln in lines]
    return [Prompt(text=ln) for _, ln in lines]


def render_prompts(prompts: list[Prompt], tokenizer, chat_template: bool, source: str = "--prompts",
                   max_len: int | None = None, model: object = None) -> tuple[list[list[int]], list[str], bool]:
    """Token ids and text of each prompt as the model sees it; third value: whether a template was applied. The
    template runs bounded in a child process (capture/chat_template.py); its failures name `model` (the model folder
    when not given)."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    use_template = chat_template and has_template
    if not use_template and any(p.messages is not None for p in prompts):
        why = "--no-chat-template was given" if not chat_template else "the tokenizer has no chat template"
        raise BadInput(source, f'"messages" prompts need a chat template, but {why}')
    if use_template:
        texts = render(model or getattr(tokenizer, "name_or_path", "the model"), template_of(tokenizer),
                       [p.as_messages() for p in prompts], dict(getattr(tokenizer, "special_tokens_map", {}) or {}))
    else:
        texts = [p.text or "" for p in prompts]
    ids_list: list[list[int]] = []
    for text in texts:
        ids = list(tokenizer(text, add_special_tokens=not use_template)["input_ids"])
        if not ids:
            raise BadInput(source, f"prompt {len(ids_list) + 1} has no tokens")
        if max_len is not None and len(ids) >= max_len:
            raise BadInput(source, f"prompt {len(ids_list) + 1} has {len(ids)} tokens, the model's context is {max_len}")
        ids_list.append([int(t) for t in ids])
    return ids_list, texts, use_template


def template_of(tokenizer) -> str:
    """The template transformers' apply_chat_template would use (a tokenizer with several: its default one)."""
    getter = getattr(tokenizer, "get_chat_template", None)
    return str(getter() if callable(getter) else tokenizer.chat_template)
