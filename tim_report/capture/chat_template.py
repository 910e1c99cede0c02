"""A model folder's chat template, rendered in a child process bounded in time, memory and output.

A chat template is a program (Jinja): two nested `range(100000)` loops hung `capture`, `'x' * 4000000000` took 4 GB,
`{% if %}` and `raise_exception('boom')` ended in tracebacks. transformers renders it in jinja2's sandbox, which stops
attribute tricks but bounds neither time nor memory. Here the same environment (transformers' `apply_chat_template`:
the immutable sandbox, trim_blocks and lstrip_blocks, loop controls, the `generation` tag, `tojson`, `raise_exception`,
`strftime_now`, the tokenizer's special tokens as variables) runs in a child Python that imports jinja2 alone, under an
address-space limit, streaming each prompt's text under an output cap, and is killed when one prompt takes longer than
CHAT_TEMPLATE_SECONDS. Every failure is one line naming the model folder.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

from ..config.bounds import (
    CHAT_TEMPLATE_MEMORY,
    CHAT_TEMPLATE_MIN_CHARS,
    CHAT_TEMPLATE_OUTPUT_RATIO,
    CHAT_TEMPLATE_SECONDS,
    CHAT_TEMPLATE_START_SECONDS,
)
from ..errors import BadInput

# The child: reads {"template", "variables", "conversations", "caps"} from stdin (its memory limit: argv[1]), says
# {"ready": true} once the template compiled, then one JSON line per rendered conversation ({"text": ...}), or one
# {"error": ...} line and stops. It imports jinja2 and nothing of ours.
CHILD = r'''
import json, resource, sys
job = json.loads(sys.stdin.read())
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))

def say(**obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

def fail(kind, exc):
    text = " ".join(str(getattr(exc, "message", None) or exc).split())[:200]
    say(error=kind, message=text, line=getattr(exc, "lineno", None))
    sys.exit(0)

try:
    from datetime import datetime
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    class Generation(Extension):  # transformers' {% generation %} ... {% endgeneration %}: its body, as rendered
        tags = {"generation"}
        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)
        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
except MemoryError as exc:
    fail("memory", exc)
try:
    template = env.from_string(job["template"])
except jinja2.TemplateSyntaxError as exc:
    fail("syntax", exc)
except (MemoryError, RecursionError) as exc:
    fail("memory" if isinstance(exc, MemoryError) else "recursion", exc)
except Exception as exc:
    fail("compile", exc)
say(ready=True)
for messages, cap in zip(job["conversations"], job["caps"]):
    try:
        parts, size = [], 0
        for chunk in template.generate(messages=messages, tools=None, documents=None, add_generation_prompt=True,
                                       **job["variables"]):
            size += len(chunk)
            if size > cap:
                say(error="output", message=str(cap), line=None)
                sys.exit(0)
            parts.append(chunk)
        say(text="".join(parts))
    except SecurityError as exc:
        fail("sandbox", exc)
    except jinja2.TemplateError as exc:
        fail("raised", exc)
    except MemoryError as exc:
        fail("memory", exc)
    except RecursionError as exc:
        fail("recursion", exc)
    except Exception as exc:
        fail(type(exc).__name__, exc)
'''

SAID = {
    "syntax": "is not valid Jinja (line {line}: {message})",
    "raised": "raised an error: {message}",
    "sandbox": "did what jinja2's sandbox forbids ({message})",
    "memory": "needed more than {memory} MB of memory",
    "recursion": "recursed too deep ({message})",
    "compile": "cannot be compiled ({message})",
    "died": "stopped without an answer (killed, out of memory?)",
}


def render(model: object, template: str, conversations: list[list[dict]], variables: dict) -> list[str]:
    """Each conversation rendered with the generation prompt, in a bounded child process; BadInput naming `model`
    (the folder, or what --model named) and the prompt for any failure."""
    caps = [max(CHAT_TEMPLATE_MIN_CHARS, CHAT_TEMPLATE_OUTPUT_RATIO * sum(len(str(m.get("content", ""))) for m in c))
            for c in conversations]
    job = json.dumps({"template": template, "variables": variables, "conversations": conversations, "caps": caps})
    memory = max(CHAT_TEMPLATE_MEMORY, 16 * len(job))
    proc = subprocess.Popen([sys.executable, "-I", "-c", CHILD, str(memory)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        lines = _Lines(proc, job.encode())
        texts: list[str] = []
        ready = False
        while len(texts) < len(conversations):
            where = f"its chat template, on prompt {len(texts) + 1},"
            line = lines.next(CHAT_TEMPLATE_SECONDS if ready else CHAT_TEMPLATE_START_SECONDS)
            if line is None:
                raise BadInput(model, f"{where} ran past {CHAT_TEMPLATE_SECONDS:g} s (a loop that does not end?): "
                                      "stopped; --no-chat-template sends the prompts as they are")
            said = _parse(line)
            if said.get("ready") and not ready:
                ready = True
                continue
            if "text" in said:
                texts.append(said["text"])
                continue
            kind = str(said.get("error"))
            if kind == "output":
                why = f"wrote more than {int(said['message']):,} characters: stopped"
            else:
                why = SAID.get(kind, "failed ({error}: {message})").format(memory=memory >> 20, **said)
            raise BadInput(model, f"{where if kind not in ('syntax', 'compile') else 'its chat template'} {why}")
        return texts
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


class _Lines:
    """The child's answers line by line, each awaited at most a given time; the job written to its stdin first."""

    def __init__(self, proc: subprocess.Popen, job: bytes):
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(job)
            proc.stdin.close()
        except BrokenPipeError:  # the child died at once: said as its missing answer
            pass
        self.fd, self.buf = proc.stdout.fileno(), b""

    def next(self, seconds: float) -> bytes | None:
        """The next line; None past `seconds`; b"" when the child ended without one."""
        end = time.monotonic() + seconds
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return b""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def _parse(line: bytes) -> dict:
    """The child's answer; one that is missing or unreadable (the child killed: by the kernel, out of memory) is an
    error of its own."""
    try:
        said = json.loads(line)
    except ValueError:
        said = None
    return said if isinstance(said, dict) else {"error": "died", "message": "it ended without an answer"}
