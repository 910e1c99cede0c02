"""Bounds on what a hostile file or model folder may declare, each beside its source: a GGUF's header, a run's weight
versions, a model folder's chat template.

Part of `config` (imported as `config.bounds`): every number here is a cap checked before the work it bounds starts.
"""

from __future__ import annotations

# ---- a GGUF's header (capture/gguf_header.py) ------------------------------------------------------------------

# gguf's reader builds one Python object (a numpy view, ~800 bytes and ~25 µs each: measured on SmolLM2-135M's header,
# 245,000 of them, 200 MB and 6 s) per metadata value, per array element and per tensor field. A real model's header is
# a sliver of its file: SmolLM2-135M (Q4_1, 98 MB) declares one per 400 bytes, Gemma 3 270M (a 262,144-token
# vocabulary, ~240 MB at Q4_0) about one per 230 bytes. A header declaring more than one per GGUF_BYTES_PER_ENTRY bytes
# of the file, or more than GGUF_MAX_ENTRIES in all (~3 GB of the reader's objects), is refused before the reader runs.
# Whatever the file's size, GGUF_MIN_ENTRIES are allowed (~50 MB and a second or two of the reader's work): a test's
# tiny GGUF of a few hundred bytes still reads.
GGUF_BYTES_PER_ENTRY = 128
GGUF_MAX_ENTRIES = 1 << 22
GGUF_MIN_ENTRIES = 1 << 16
# A tensor's entry costs the reader its six fields and the tensor object: counted as this many entries.
GGUF_TENSOR_ENTRIES = 8
# Arrays of arrays: llama.cpp writes none; the reader recurses per level.
GGUF_MAX_ARRAY_DEPTH = 4

# ---- weight versions (io/sequences.py, io/save_step.py) --------------------------------------------------------

# The most distinct weight versions one sequence may name (slime and miles list one per generate call, miles' spans one
# per call's stretch of tokens; save_step takes a list per sequence). A multi-turn agent's trace resumed across
# updates names a few dozen; 4,096 leaves a wide margin, and keeps a sequence's joined versions ("2,3,…", 19 digits and
# a comma each at most) under 82,000 characters, inside what the canonical reader takes (config.MAX_STRING_CHARS).
MAX_SEQUENCE_VERSIONS = 4096
# save_step's meta: how deep its lists and dicts may nest. The reader parses a file's meta with json, which recurses per
# level under the interpreter's recursion limit (1,000 by default); a training loop that raised its own limit could
# write a meta nested 5,000 deep that no reader reads back. Real metas nest two or three levels.
META_MAX_DEPTH = 64
# The most lag buckets one step is split into (analysis/lag/split.py), and so the most lags an index.json row names
# (site/index_json.py reads no more back): a run's lag knob is a few versions (verl's staleness threshold, AReaL's
# max_head_offpolicyness: 1 to 8); a step whose tokens name hundreds of distinct lags is corrupt, and its split (one pass
# per lag) and its row would grow with it. Such a step is one line, as any other count past its bound.
MAX_LAGS = 256

# ---- a step's learning rate (meta `lr`; analysis/lag/history.py) -------------------------------------------------

# A lag's KL is read per unit of lr² (an Adam step moves the policy by about lr). RL runs on LLMs train at 1e-7 to
# 1e-4 (verl, TRL and OpenRLHF's defaults: 1e-6, 1e-5); an lr outside [LR_MIN, LR_MAX] is no such step's (its square
# would underflow to 0 or divide a KL by 1e-300), so it is unknown: `--meta lr=` refuses it, a file's or index.json's is
# read as absent, and the lag it would scale is read without the lr, as a run that gives none.
LR_MIN = 1e-12
LR_MAX = 1.0

# ---- a model folder's chat template (capture/chat_template.py) -------------------------------------------------

# A chat template is a program in Jinja: it is rendered in a child process of its own, under these bounds. A real
# template renders a prompt in about a millisecond (SmolLM2's, Qwen2's); the child's start (Python and jinja2) takes
# about half a second, several on a loaded machine. Past CHAT_TEMPLATE_SECONDS on one prompt the child is killed.
CHAT_TEMPLATE_SECONDS = 10.0
CHAT_TEMPLATE_START_SECONDS = 60.0
# One prompt's rendered text: at most this many characters, or CHAT_TEMPLATE_OUTPUT_RATIO × its messages' characters
# when that is more (a template adds role markers and at most a system prompt of a few kilobytes).
CHAT_TEMPLATE_MIN_CHARS = 1 << 20
CHAT_TEMPLATE_OUTPUT_RATIO = 4
# The child's address space: what Python and jinja2 need (~60 MB) with room for the prompts, or 16 bytes per byte of
# the prompts when that is more ('x' * 4000000000 is a MemoryError in the child, not 4 GB taken from the machine).
CHAT_TEMPLATE_MEMORY = 1 << 30
