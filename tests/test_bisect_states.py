"""tim-report bisect on saved states (an engine's own hook): the layout docs/bisect.md gives, in .safetensors (bf16
too) and .npz, compared without replay; bad files are one line and exit 2."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from helpers import ROOT, one_line_exit_2, run

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

LLAMA = ROOT / "models" / "tiny-llama6"
SITES = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")


def load(dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(LLAMA, dtype=dtype).eval()


def saved(model, ids) -> dict:
    """Each site's output over a plain forward, keyed by its module path, [tokens, hidden], as an engine's hook saves."""
    out: dict = {}
    wanted = {"model.embed_tokens", "model.norm", "lm_head"} | {f"model.layers.{i}" for i in range(6)} | \
        {f"model.layers.{i}.{s}" for i in range(6) for s in SITES}
    hooks = []
    for name, m in model.named_modules():
        if name in wanted:
            hooks.append(m.register_forward_hook(
                lambda mod, a, o, name=name: out.setdefault(name, []).append((o[0] if isinstance(o, tuple) else o)[0])))
    with torch.inference_mode():
        for row in ids:
            model(row[None])
    for h in hooks:
        h.remove()
    states = {k: torch.cat(v).contiguous() for k, v in out.items()}
    states["seq"] = torch.cat([torch.full((len(r),), i) for i, r in enumerate(ids)])
    return states


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("states")
    ids = torch.randint(3, 2000, (3, 40), generator=torch.Generator().manual_seed(0))
    ref, floor = load(torch.float32), load(torch.bfloat16)
    bug = copy.deepcopy(floor)
    bug.model.layers[2].mlp.act_fn = torch.nn.GELU()
    paths = {}
    for name, model in (("ref", ref), ("floor", floor), ("bug", bug)):
        st = saved(model, ids)
        paths[name] = folder / f"{name}.safetensors"
        save_file(st, str(paths[name]))  # the bf16 setups' states stay bf16
    np.savez(folder / "bug.npz", **{k: v.float().numpy() for k, v in saved(bug, ids).items()})
    paths["bug_npz"] = folder / "bug.npz"
    return paths


def bisect(files, cand, tmp_path, *extra):
    return run("bisect", "--reference-states", files["ref"], "--candidate-states", cand, "--floor-states",
               files["floor"], "-o", tmp_path / "out", *extra)


@pytest.mark.parametrize("which", ["bug", "bug_npz"])
def test_saved_states_name_the_first_site_that_parts(files, tmp_path, which):
    res = bisect(files, files[which], tmp_path)
    assert res.exit_code == 1, res.output
    assert res.stdout.startswith("model.layers.2.mlp: local error")
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["replay"] is False and s["prompts"] == 3
    assert "no replay" in (tmp_path / "out" / "index.html").read_text()


def test_the_floors_own_states_are_clean(files, tmp_path):
    res = bisect(files, files["floor"], tmp_path)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("Every site is within its bf16 floor")


def test_bad_states_are_one_line_exit_2(files, tmp_path):
    pickled = tmp_path / "p.npz"
    np.savez(pickled, **{"model.norm": np.array([{"a": 1}], dtype=object)})
    one_line_exit_2(bisect(files, pickled, tmp_path), str(pickled), "other sites")
    res = run("bisect", "--reference-states", pickled, "--candidate-states", pickled, "--floor-states", pickled, "-o",
              tmp_path / "o")
    one_line_exit_2(res, "pickled")
    odd = tmp_path / "odd.npz"
    np.savez(odd, **{"model.layers.0.weird": np.zeros((3, 4), np.float32)})
    res = run("bisect", "--reference-states", odd, "--candidate-states", odd, "--floor-states", odd, "-o", tmp_path / "o")
    one_line_exit_2(res, "not a site name")
    one_line_exit_2(run("bisect", "--reference-states", files["ref"], "-o", tmp_path / "o"), "--candidate-states")
    # a model and states together: the conflict is named (it used to say the states need all three files)
    line = one_line_exit_2(run("bisect", "--model", LLAMA, "--reference-states", files["ref"], "-o", tmp_path / "o"),
                           "--model: and --reference-states both name what to compare")
    assert "all three" not in line
    bad = tmp_path / "x.pt"
    bad.write_bytes(b"\x80\x04")
    one_line_exit_2(bisect(files, bad, tmp_path), "never a pickle")
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()
