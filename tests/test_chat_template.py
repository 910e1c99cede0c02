"""A model folder's chat template is a program: rendered in a bounded child process (capture/chat_template.py), each
failure one line naming the folder (issue 44: nested range loops hung `capture`; `{% if %}`, `raise_exception` and
`'x' * 4000000000` were tracebacks or 4 GB), and a real template renders exactly as transformers renders it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import one_line_exit_2, run

from tim_report.capture import chat_template
from tim_report.capture.prompts import read_prompts, render_prompts
from tim_report.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "examples" / "prompts.jsonl"
MESSAGES = [[{"role": "user", "content": "What is 2 + 2?"}]]

HOSTILE = {
    "nested-loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     "on prompt 1, ran past 1 s"),
    "syntax": ("{% if %}hi{% endif %}", "its chat template is not valid Jinja (line 1: Expected an expression"),
    "raise": ("{{ raise_exception('boom') }}", "on prompt 1, raised an error: boom"),
    "memory": ("{{ 'x' * 4000000000 }}", "on prompt 1, needed more than 1024 MB of memory"),
    "output": ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "wrote more than 1,048,576 characters"),
    "sandbox": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "did what jinja2's sandbox forbids"),
}


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(chat_template, "CHAT_TEMPLATE_SECONDS", 1.0)  # the loop case stops after 1 s, not 10


@pytest.mark.usefixtures("quick")
@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_template_is_one_line_naming_the_model(case):
    template, phrase = HOSTILE[case]
    with pytest.raises(BadInput) as err:
        chat_template.render("models/evil", template, MESSAGES, {"eos_token": "</s>"})
    text = str(err.value)
    assert text.startswith("models/evil: ") and phrase in text and "\n" not in text, text


def evil_model(tmp_path: Path, template: str) -> Path:
    """models/tiny-qwen2 with another chat template (the weights linked, not copied)."""
    folder = tmp_path / "evil-model"
    folder.mkdir()
    src = ROOT / "models" / "tiny-qwen2"
    for f in src.iterdir():
        if f.name == "model.safetensors":
            os.symlink(f, folder / f.name)
        elif f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    return folder


@pytest.mark.usefixtures("quick")
@pytest.mark.parametrize("case", ["nested-loops", "raise"])
def test_capture_with_a_hostile_template_is_one_line_and_writes_nothing(tmp_path, case):
    model = evil_model(tmp_path, HOSTILE[case][0])
    res = run("capture", "--model", model, "--prompts", PROMPTS, "--rollout", "hf:fp32", "--trainer", "hf:fp32",
              "-o", tmp_path / "out.npz")
    one_line_exit_2(res, str(model), HOSTILE[case][1])
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama6", "tiny-mixtral"])
def test_a_real_template_renders_as_transformers_renders_it(name):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ROOT / "models" / name)
    prompts = read_prompts(PROMPTS)
    _, texts, used = render_prompts(prompts, tok, True)
    assert used and texts == [tok.apply_chat_template(p.as_messages(), tokenize=False, add_generation_prompt=True)
                              for p in prompts]


def test_the_generation_tag_and_tojson_render_as_in_transformers():
    from transformers.utils.chat_template_utils import render_jinja_template

    template = ("{% for m in messages %}{% generation %}{{ m | tojson }}{% endgeneration %}{% endfor %}"
                "{% if add_generation_prompt %}{{ bos_token }}<go>{% endif %}")
    mine = chat_template.render("m", template, MESSAGES, {"bos_token": "<s>"})
    theirs, _ = render_jinja_template(MESSAGES, chat_template=template, add_generation_prompt=True, bos_token="<s>")
    assert mine == theirs
