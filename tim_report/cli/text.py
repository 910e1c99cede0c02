"""What the commands print: file-supplied strings made safe for a terminal or CI log, and one-line summaries.

A key name, a path or a token may hold a newline, ESC/OSC sequences or a `::notice::` prefix; printed raw
it could fake an "ok" line, clear the screen or send a GitHub Actions workflow command. `safe` turns every
control and invisible-formatting character into a visible escape, so whatever a file holds stays on its
own line's tail, after our prefix.
"""

from __future__ import annotations

import re

from ..catalogue.metrics import metric
from ..catalogue.numbers import fmt

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")


def safe(text: object) -> str:
    """`text` with controls, bidi overrides, line separators and lone surrogates as visible \\x / \\u escapes."""
    def escape(m: re.Match) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _UNSAFE.sub(escape, str(text))


def excluded_note(row: dict) -> str:
    """'; 12 tokens excluded (NaN/inf/positive log-probs), 3 input values repaired (…)', or '' when nothing was."""
    parts = []
    if row.get("excluded_tokens"):
        parts.append(f"{fmt(row['excluded_tokens'])} tokens excluded (NaN, inf or positive log-probs)")
    if row.get("input_problems"):
        parts.append(f"{fmt(row['input_problems'])} input values repaired ({', '.join(row.get('input_problem_kinds') or [])})")
    return "; " + ", ".join(parts) if parts else ""


def summary_line(row: dict) -> str:
    """One run after a build (its index row): the verdict at a glance (regime, leading finding, its side and place),
    then size, the headline numbers, and anything left out."""
    def num(key: str) -> str:
        return metric(key).write(row.get(key)).replace("—", "n/a")

    head = f"{safe(row['id'])}: {safe(row['glance'])}; " if row.get("glance") else f"{safe(row['id'])}: "
    return (f"{head}{row['tokens']} tokens, {row['sequences']} sequences, "
            f"median |δ| {num('abs_delta_median')} nats, KL k3 {num('kl_k3')}, ESS {num('ess')}{excluded_note(row)}")


def terminal_blocked(diagnosis: dict | None) -> str:
    """"Do not train" for a terminal: the page's message speaks of the routes below it, which a terminal has not."""
    from ..catalogue.verdicts import blocked_message

    first = next(f for f in (diagnosis or {}).get("findings", []) if f["severity"] == "error")
    return safe(blocked_message(first["problem"], terminal=True))
