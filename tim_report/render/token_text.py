"""Token text made visible: whitespace and control characters as symbols (numbers: catalogue/numbers.py)."""

from __future__ import annotations

_VISIBLE = {
    " ": "␣",
    "\n": "↵",
    "\t": "⇥",
    "\r": "␍",
    "\u00a0": "⍽",  # no-break space
    "\u200b": "⟨zwsp⟩",
    "\ufeff": "⟨bom⟩",
}


# every character `visible` changes, as one table for str.translate (a page has thousands of tokens)
_TABLE = {**{c: chr(0x2400 + c) for c in range(0x20)}, 0x7F: "␡", **{ord(k): v for k, v in _VISIBLE.items()}}


def visible(text: str | None) -> str:
    """Whitespace and control characters as visible symbols (C0 controls → Control Pictures), so ' the',
    'the' and '\\n' can be told apart."""
    if text is None:
        return ""
    return str(text).translate(_TABLE) or "∅"
