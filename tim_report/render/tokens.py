"""Tokens with their whitespace made visible, so ' the' and 'the' and '\\n' can be told apart."""

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


def visible(text: str | None) -> str:
    """Replace whitespace and control characters by visible symbols (C0 controls → Control Pictures)."""
    if text is None:
        return ""
    out = []
    for ch in str(text):
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 0x20:
            out.append(chr(0x2400 + ord(ch)))
        elif ord(ch) == 0x7F:
            out.append("␡")
        else:
            out.append(ch)
    return "".join(out) if out else "∅"
