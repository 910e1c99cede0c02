"""tim-report bisect: planted bugs named at their layer and module with no earlier site flagged; no site named
where there is none (bf16 against fp32, a kernel that only rounds differently, SDPA against eager); the command's
files, verdict line and exit codes; the Python API and assert_layers_match."""

from __future__ import annotations

import copy
import importlib.util
import json

import numpy as np
import pytest
from helpers import ROOT, one_line_exit_2, run

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LLAMA = ROOT / "models" / "tiny-llama6"
MIXTRAL = ROOT / "models" / "tiny-mixtral6"
PATCHES = ROOT / "examples" / "bisect_patches.py"


def patches():
    spec = importlib.util.spec_from_file_location("bisect_patches", PATCHES)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load(path, dtype, **kw):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kw).eval()


@pytest.fixture(scope="module")
def llama():
    return {"fp32": load(LLAMA, torch.float32), "bf16": load(LLAMA, torch.bfloat16)}


def prompts(lengths=(5, 23, 64, 130), seed=0):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):  # right padding: each row runs alone on its real tokens
        ids[i, :n] = torch.randint(3, 2000, (n,), generator=g)
        mask[i, :n] = 1
    return ids, mask


def bisect(ref, cand, precision="bf16", floor=None, **kw):
    import tim_report

    ids, mask = prompts(**kw)
    return tim_report.bisect_models(ref, cand, ids, mask, precision=precision, floor_model=floor)


def planted(model, name):
    cand = copy.deepcopy(model)
    getattr(patches(), name)(cand)
    return cand


def assert_first(summary, site):
    assert summary["first_site"] == site, summary["verdict"]
    names = [s["name"] for s in summary["sites"]]
    assert not any(s["beyond"] for s in summary["sites"][: names.index(site)])
    assert summary["verdict"].startswith(f"{site}: local error ")


@pytest.mark.parametrize("patch, site", [
    ("eps_in_layer_3", "model.layers.3.input_layernorm"),
    ("gelu_in_layer_2", "model.layers.2.mlp"),
    ("no_scaling_in_layer_4", "model.layers.4.self_attn"),
])
def test_a_planted_bug_is_named_at_its_layer_and_module(llama, patch, site):
    s = bisect(llama["fp32"], planted(llama["bf16"], patch), floor=llama["bf16"])
    assert_first(s, site)
    first = s["first"]
    assert first["multiple"]["median"] > 3
    kind = site.rsplit(".", 1)[-1]
    assert {"input_layernorm": "eps", "mlp": "activation", "self_attn": "scaling"}[kind] in first["meaning"]


def test_an_eps_below_bf16s_floor_is_found_in_fp32(llama):
    """1e-6 against 1e-5: within bf16's floor on this model, hundreds of times fp32's."""
    s = bisect(llama["fp32"], planted(llama["fp32"], "eps_1e5_in_layer_3"), precision="fp32")
    assert_first(s, "model.layers.3.input_layernorm")
    assert s["first"]["multiple"]["median"] > 100


def test_a_perturbed_router_is_named_with_its_flips():
    ref, bf16 = load(MIXTRAL, torch.float32), load(MIXTRAL, torch.bfloat16)
    s = bisect(ref, planted(bf16, "router_in_layer_3"), floor=bf16)
    assert_first(s, "model.layers.3.mlp.gate")
    flips = s["first"]["flips"]
    assert flips["local"]["rate"] > 0.1 > flips["floor"]["rate"]
    routers = [x for x in s["sites"] if x["kind"] == "router"]
    assert len(routers) == 6 and all(not x["beyond"] for x in routers if x["layer"] != 3)


def test_bf16_against_fp32_names_no_site(llama):
    s = bisect(llama["fp32"], llama["bf16"], lengths=(3, 17, 40, 200))
    assert s["first_site"] is None and s["first"] is None and not s["beyond"]
    assert s["verdict"].startswith("Every site is within its bf16 floor")
    assert s["prompts"] == 4
    assert len(s["sites"]) == 1 + 6 * 5 + 3


def test_a_kernel_that_only_rounds_differently_is_noise(llama):
    import tim_report

    cand = planted(llama["bf16"], "rmsnorm_without_upcast")
    ids, mask = prompts()
    s = tim_report.bisect_models(llama["fp32"], cand, ids, mask, floor_model=llama["bf16"])
    assert s["first_site"] is None, s["verdict"]
    norms = [x for x in s["sites"] if "norm" in x["kind"]]
    assert max(x["multiple"]["median"] for x in norms) > 1.05  # it does round differently: measured, not identical


def test_sdpa_against_eager_is_noise():
    """Each side builds its own mask: SDPA wants none, eager a 4-D one; a carried-over mask would be a false bug."""
    ref = load(LLAMA, torch.float32, attn_implementation="eager")
    floor = load(LLAMA, torch.bfloat16, attn_implementation="eager")
    cand = load(LLAMA, torch.bfloat16, attn_implementation="sdpa")
    assert bisect(ref, cand, floor=floor)["first_site"] is None


def test_a_model_placed_with_device_map_is_bisected_site_by_site():
    ref = load(LLAMA, torch.float32, device_map={"": "cpu"})
    bf16 = load(LLAMA, torch.bfloat16, device_map={"": "cpu"})
    s = bisect(ref, planted(bf16, "gelu_in_layer_2"), floor=bf16)
    assert_first(s, "model.layers.2.mlp")


def test_assert_layers_match_names_the_site_and_what_it_means(llama):
    import tim_report
    from tim_report.assertions import LayersMismatch

    ids, mask = prompts((9, 30))
    tim_report.assert_layers_match(llama["fp32"], llama["bf16"], ids, mask)
    with pytest.raises(LayersMismatch) as err:
        tim_report.assert_layers_match(llama["fp32"], planted(llama["bf16"], "eps_in_layer_3"), ids, mask,
                                       floor_model=llama["bf16"])
    msg = str(err.value)
    assert msg.startswith("model.layers.3.input_layernorm: local error ")
    assert "× its bf16 floor" in msg and "layers 0–2 within" in msg and "eps" in msg
    assert err.value.summary["first_site"] == "model.layers.3.input_layernorm"


def test_memory_is_bounded_by_the_sites_not_the_tokens():
    from tim_report.analysis.bisect import Accumulator

    acc = Accumulator()
    rng = np.random.default_rng(0)
    for seq in range(50):
        n = 2000
        errs = {k: rng.random(n).astype(np.float32) * 1e-3 for k in ("local", "floor", "plain", "floor_plain")}
        acc.add("model.norm", "final_norm", None, np.full(n, seq), errs)
    st = acc.sites["model.norm"]
    assert sum(h.nbytes for h in st.hists.values()) < 64 * 1024 and len(st.prompts) == 50


# ---------------------------------------------------------------- the command

def prompt_file(tmp_path):
    p = tmp_path / "prompts.txt"
    p.write_text("The capital of France is\nWrite a haiku about the sea\nhi\n"
                 "Explain in detail why the sky is blue, with the physics of Rayleigh scattering\n")
    return p


def test_the_command_writes_the_page_report_and_summary_and_exits_1_on_a_bug(tmp_path):
    out = tmp_path / "out"
    res = run("bisect", "--model", LLAMA, "--prompts", prompt_file(tmp_path), "--candidate-patch",
              f"{PATCHES}:no_scaling_in_layer_4", "-o", out)
    assert res.exit_code == 1, res.output
    assert res.stdout.strip().splitlines() == [res.stdout.strip()]
    assert res.stdout.startswith("model.layers.4.self_attn: local error")
    s = json.loads((out / "summary.json").read_text())
    assert s["first_site"] == "model.layers.4.self_attn" and s["labels"]["candidate"].startswith("hf:bf16 (")
    page = (out / "index.html").read_text()
    assert "first beyond its floor" in page and "model.layers.4.self_attn" in page and "assets/vega.js" in page
    md = (out / "report.md").read_text()
    assert "What it usually means" in md and "🔴 first" in md


def test_the_command_says_a_rounding_kernel_is_noise_and_exits_0(tmp_path):
    out = tmp_path / "out"
    res = run("bisect", "--model", LLAMA, "--prompts", prompt_file(tmp_path), "--candidate-patch",
              f"{PATCHES}:rmsnorm_without_upcast", "-o", out, "--self-contained")
    assert res.exit_code == 0, res.output
    assert "A kernel that only rounds differently is noise." in res.stdout
    assert json.loads((out / "summary.json").read_text())["first_site"] is None
    assert "A kernel that only rounds differently is noise." in (out / "index.html").read_text()
    assert not (out / "assets").exists()


def test_a_class_patch_is_undone_around_the_reference_and_the_floor(tmp_path):
    out = tmp_path / "out"
    res = run("bisect", "--model", LLAMA, "--prompts", prompt_file(tmp_path), "--candidate-patch",
              f"{PATCHES}:eps_in_the_rmsnorm_class", "-o", out, "--max-prompts", "2")
    assert res.exit_code == 1, res.output
    assert res.stdout.startswith("model.layers.0.input_layernorm: local error")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    assert "rsqrt(variance + self.variance_epsilon)" in __import__("inspect").getsource(LlamaRMSNorm.forward)


def test_a_patch_module_in_the_current_folder_or_named_by_its_file_is_found(tmp_path, monkeypatch):
    """`--candidate-patch mypatch:fn` with `mypatch.py` in the current folder was a ModuleNotFoundError: the
    `tim-report` script's import path does not hold the current folder. It is on the path for the patch now (after the
    installed packages); `path/to/file.py:fn` is read from its file; a module found nowhere says both ways."""
    import sys

    from tim_report.capture.bisect_setup import load_patch
    from tim_report.errors import BadInput

    here = tmp_path / "work"
    (here / "patches").mkdir(parents=True)
    (here / "i39_local_patch.py").write_text("def patch(model):\n    return 'local'\n")
    (here / "patches" / "deep.py").write_text("def patch(model):\n    return 'deep'\n")
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(here))])  # as the console script runs
    assert load_patch("i39_local_patch:patch")(None) == "local"
    assert str(here) not in sys.path  # only for the patch's import
    assert load_patch("patches/deep.py:patch")(None) == "deep"
    with pytest.raises(BadInput) as err:
        load_patch("i39_nowhere:patch")
    assert "no module 'i39_nowhere' installed or in the current folder" in str(err.value)
    assert "path/to/file.py:FUNCTION" in str(err.value)
    with pytest.raises(BadInput, match="patches/none.py: no such file"):
        load_patch("patches/none.py:patch")


@pytest.mark.parametrize("args, phrases", [
    (["--candidate", "vllm:bf16"], ["--candidate", "transformers setups"]),
    (["--candidate-patch", "nope"], ["--candidate-patch", "MODULE:FUNCTION"]),
    (["--candidate-patch", "no_such_module_xyz:f"], ["cannot import no_such_module_xyz"]),
    (["--attn-implementation", "magic"], ["--attn-implementation", "magic"]),
    (["--device-map", "{bad"], ["--device-map", "not valid JSON"]),
    pytest.param(["--device", "cuda:7"], ["--device", "no CUDA device"],
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")),
])
def test_bad_options_are_one_line_exit_2(tmp_path, args, phrases):
    res = run("bisect", "--model", LLAMA, "--prompts", prompt_file(tmp_path), "-o", tmp_path / "out", *args)
    one_line_exit_2(res, *phrases)
    assert not (tmp_path / "out").exists()


def test_a_model_whose_structure_is_not_understood_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=2048)).save_pretrained(folder)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (folder / f).write_bytes((LLAMA / f).read_bytes())
    res = run("bisect", "--model", folder, "--prompts", prompt_file(tmp_path), "-o", tmp_path / "out")
    one_line_exit_2(res, "bisect")
    assert not (tmp_path / "out").exists()


def test_the_example_finds_its_planted_bug(capsys):
    import runpy

    mod = runpy.run_path(str(ROOT / "examples" / "bisect_planted_bug.py"))
    assert mod["main"]() == 0
    assert capsys.readouterr().out.startswith("model.layers.2.mlp: local error")


def test_an_unpatched_candidate_is_said_to_be_its_own_floor(tmp_path):
    res = run("bisect", "--model", LLAMA, "--prompts", prompt_file(tmp_path), "-o", tmp_path / "out", "--max-prompts", "1")
    assert res.exit_code == 0, res.output
    assert "the candidate is its own floor" in res.stdout
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["floor_is_candidate"] is True


def test_the_chart_is_valid_vega_lite_and_the_page_escapes_site_names():
    """A summary from the analysis alone (no model): its chart validates against the Vega-Lite schema, and a site
    name from a saved-states file is escaped on the page and in report.md."""
    import altair as alt
    from altair.utils.schemapi import validate_jsonschema

    from tim_report.analysis.bisect import Accumulator, summarise
    from tim_report.render.bisect_html import render_bisect_html
    from tim_report.render.bisect_md import render_bisect_md
    from tim_report.render.bisect_views import chart

    acc = Accumulator()
    rng = np.random.default_rng(0)
    for name, kind, layer, scale in (("model.embed_tokens", "embedding", None, 1), ("model.layers.0.mlp", "mlp", 0, 50),
                                     ("<b>model.layers.0</b>", "layer", 0, 1)):
        f = rng.random(200) * 1e-3
        acc.add(name, kind, layer, np.arange(200) % 4, {"local": f * scale, "floor": f, "plain": f * scale,
                                                          "floor_plain": f})
    s = summarise(acc, "bf16")
    assert s["first_site"] == "model.layers.0.mlp" and s["first"]["within_before"] == "the embedding"
    validate_jsonschema(chart(s)["spec"], alt.VegaLiteSchema._rootschema)
    page = render_bisect_html(s)
    joined = page.replace('</span><wbr><span class="seg">', "")  # the table's name, cut after each dot, read whole
    assert "<b>model.layers.0</b>" not in page and "&lt;b&gt;model.layers.0&lt;/b&gt;" in joined
    assert "<b>" not in render_bisect_md(s)


def llama_like_summary(layers: int = 3, bad: str = "model.layers.1.mlp") -> dict:
    """A summary from the analysis alone, with a llama's site names (long ones among them) and one site beyond its floor."""
    from tim_report.analysis.bisect import Accumulator, summarise

    acc = Accumulator()
    rng = np.random.default_rng(0)
    names = [("model.embed_tokens", "embedding", None)]
    for i in range(layers):
        names += [(f"model.layers.{i}.input_layernorm", "input_norm", i), (f"model.layers.{i}.self_attn", "attention", i),
                  (f"model.layers.{i}.post_attention_layernorm", "post_attention_norm", i), (f"model.layers.{i}.mlp", "mlp", i),
                  (f"model.layers.{i}", "layer", i)]
    for name, kind, layer in names:
        f = rng.random(200) * 1e-3
        scale = 40 if name == bad else 1
        acc.add(name, kind, layer, np.arange(200) % 4, {"local": f * scale, "floor": f, "plain": f * scale, "floor_plain": f})
    return summarise(acc, "bf16")


def test_the_chart_names_each_site_on_its_axis_and_the_table_breaks_names_only_at_dots():
    """The chart's axis was a site index with the names only on hover, and the table broke `post_attention_layernorm`
    mid-word: now each site is a row of the chart named on its axis, in forward order, and a name breaks only after a
    dot. At phone width the table keeps the two multiples and says the other numbers under the name."""
    from tim_report.render.bisect_html import render_bisect_html
    from tim_report.render.bisect_views import chart

    s = llama_like_summary()
    spec = chart(s)["spec"]
    names = [x["name"] for x in s["sites"]]
    ys = [layer["encoding"]["y"] for layer in spec["layer"] if "y" in layer["encoding"] and layer["encoding"]["y"].get("field") == "label"]
    assert ys and all(y["type"] == "nominal" and y["sort"] == [n.removeprefix("model.") for n in names] for y in ys)
    assert not any(layer["encoding"].get("x", {}).get("field") == "i" for layer in spec["layer"])
    page = render_bisect_html(s)
    assert ('<code class="site"><span class="seg">model.</span><wbr><span class="seg">layers.</span><wbr><span class="seg">0.'
            '</span><wbr><span class="seg">post_attention_layernorm</span></code>') in page
    assert page.count('<th class="n wide-only">') == 4 and 'class="small narrow-only">over prompts' in page


def test_a_patch_file_is_named_by_its_file_name_not_its_path():
    from tim_report.capture.bisect_setup import Setup

    assert Setup("bf16", None, "/home/someone/work/my_kernels.py:patch").label == "hf:bf16 (my_kernels.py:patch)"
    assert Setup("bf16", "sdpa", "my_kernels:patch").label == "hf:bf16 (sdpa, my_kernels:patch)"
