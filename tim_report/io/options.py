"""How to read a batch: the one options object every command and the Python API pass to `io.load`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class LoadOptions:
    keys: dict[str, str] = field(default_factory=dict)  # --key ROLE=NAME: a key for a role, over auto-detection
    meta: dict = field(default_factory=dict)  # --meta KEY=VALUE (checked by io.meta_overrides): what the file does not say
    allow_pickle: bool = False  # --allow-pickle: full unpickling, for trusted files only
    tokenizer: str | None = None  # --tokenizer: a local tokenizer folder to decode token ids
    format_hint: str | None = None  # --format-hint: the framework, instead of detecting it from the content
    max_tokens: int | None = None  # --max-tokens (None: config.MAX_TOKENS)

    def to_dict(self) -> dict:
        """Every field, JSON-able: part of the per-step cache key (a changed option re-reads every step). The tokenizer
        counts by its files' content, not only its path: a changed tokenizer re-renders the pages it decoded."""
        from .tokenizer import digest

        return {**asdict(self), "tokenizer_content": digest(self.tokenizer) if self.tokenizer else None}
