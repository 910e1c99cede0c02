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


def visible(text: str | None) -> str:
    """Whitespace and control characters as visible symbols (C0 controls → Control Pictures), so ' the',
    'the' and '\\n' can be told apart."""
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
