"""samples.js: a run's sampled sequences, token by token, in the one file both the page and scripts read.

The run page draws its token tables from it (a script file of the page's own folder works from file://, where a
page cannot fetch JSON, under the page's `script-src 'self'`); a script reads the JSON object on the file's
second line: `json.loads(Path("samples.js").read_text(encoding="utf-8").split("\\n")[1])`. The rows are carried
once, as columns (model.Report.samples_dict), not as table markup in the page and again in a JSON file.
"""

from __future__ import annotations

from ..model import dumps

NAME = "samples.js"
GLOBAL = "timSamples"  # what the page's script reads
HEAD = (f"/* tim-report {NAME}: the sampled sequences, token by token; the run page draws its token tables from it. "
        f"The next line is JSON. */ window.{GLOBAL} =")

# Inside a <script> element (a self-contained page) "</script>" or "<!--" in a token would end or bend it; the
# JSON escapes say the same characters in a form no HTML parser reads. U+2028/9 break some line splitters.
_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def samples_json(report) -> str:
    """The samples as one line of JSON, safe inside a <script> element (made once per report: the page and the json
    format both write it)."""
    made = getattr(report, "_samples_json", None)
    if made is None or made[0] is not report.samples:
        made = (report.samples, dumps(report.samples_dict(), compact=True).rstrip("\n").translate(_SAFE))
        object.__setattr__(report, "_samples_json", made)
    return made[1]


def samples_js(report) -> str:
    return f"{HEAD}\n{samples_json(report)}\n;\n"
