"""`rescore` handed hostile checkpoints and names (issue 44): a config.json whose numbers are not numbers, a 70,000-letter
`--as`, weights that do not load, a file that is no model. Each was a traceback (exit 1) or the wrong complaint; each
is one line, exit 2, before any model loads, and nothing is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from checkpoints import MODEL
from helpers import one_line_exit_2, run

from tim_report.io import load, save_batch
from tim_report.testing import make_batch


@pytest.fixture
def step(tmp_path) -> Path:
    b = make_batch(n_seqs=4, mean_len=8, seed=0)
    b.token_ids = np.zeros(b.n_tokens, np.int64) + 5
    b.prompt_ids = [np.array([1, 2, 3])] * b.n_seqs
    path = tmp_path / "step.npz"
    save_batch(b, path)
    return path


def model_copy(tmp_path: Path, config: object = None, weights: bytes | None = None) -> Path:
    """models/tiny-qwen2 with another config.json or weights (the rest linked)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for f in Path(MODEL).iterdir():
        if f.is_file():
            os.symlink(f.resolve(), folder / f.name)
    if config is not None:
        (folder / "config.json").unlink()
        base = json.loads((Path(MODEL) / "config.json").read_text())
        (folder / "config.json").write_text(config if isinstance(config, str) else
                                            json.dumps(config if isinstance(config, list) else {**base, **config}))
    if weights is not None:
        (folder / "model.safetensors").unlink()
        (folder / "model.safetensors").write_bytes(weights)
    return folder


@pytest.mark.parametrize("config, phrase", [
    ({"max_position_embeddings": "abc"}, "'max_position_embeddings' is \"abc\": expected a positive integer"),
    ('{"vocab_size": 1e999, "model_type": "qwen2"}', "'vocab_size' is Infinity: expected a positive integer"),
    ([1, 2, 3], "is a JSON list, not the object a model's config is"),
    ({"max_position_embeddings": -5}, "'max_position_embeddings' is -5"),
], ids=["text", "1e999", "list", "negative"])
def test_a_config_whose_numbers_are_not_numbers_is_one_line(tmp_path, step, config, phrase):
    ckpt = model_copy(tmp_path, config=config)
    out = tmp_path / "out.npz"
    one_line_exit_2(run("rescore", step, "--model", ckpt, "-o", out), str(ckpt / "config.json"), phrase)
    assert not out.exists()


@pytest.mark.parametrize("weights, phrase", [
    (bytes(100), "is not a whole safetensors file (a header of 0 bytes in a 100-byte file)"),
    ((40).to_bytes(8, "little") + b'{"w": {"dtype": "F32", "shape": [9], "data_offsets": [0, 36]}}'[:40] + bytes(4),
     "is not a whole safetensors file"),
], ids=["100-zero-bytes", "data-past-the-end"])
def test_weights_that_do_not_load_are_one_line_before_any_model_loads(tmp_path, step, weights, phrase):
    ckpt = model_copy(tmp_path, weights=weights)
    out = tmp_path / "out.npz"
    one_line_exit_2(run("rescore", step, "--model", ckpt, "-o", out), str(ckpt / "model.safetensors"), phrase)
    assert not out.exists()


def test_a_70000_letter_side_name_is_one_line(tmp_path, step):
    """A zip member's name holds at most 65,535 bytes: the write failed after the scoring ran."""
    out = tmp_path / "out.npz"
    line = one_line_exit_2(run("rescore", step, "--model", MODEL, "--as", "a" * 70_000, "-o", out), "--as",
                           "a side is named in at most 64 lower-case letters")
    assert len(line) < 300 and not out.exists()


def test_a_file_that_is_no_model_is_named_so(tmp_path, step):
    """`--model X.npz` said "not a GGUF file"; it is not a model at all."""
    out = tmp_path / "out.npz"
    one_line_exit_2(run("rescore", step, "--model", step, "-o", out), str(step), "is not a model: --model takes a "
                    "transformers model folder (config.json and weights), a .gguf file")
    assert not out.exists() and load(step).sides == {}


def test_save_step_refuses_a_side_name_no_zip_member_can_carry(tmp_path):
    import tim_report
    from tim_report.errors import BadInput

    logp = -np.linspace(0.1, 2.0, 8).reshape(2, 4)
    with pytest.raises(BadInput, match="named in at most 64 lower-case letters"):
        tim_report.save_step(tmp_path / "steps", logp, logp, step=1, sides={"a" * 70_000: logp})
    assert not (tmp_path / "steps").exists()
