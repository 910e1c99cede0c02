"""The sides as a chain (rollout → recompute → trainer → train): each link's mismatch, its share of the end-to-end
mismatch (parts that add up), the link the verdict names, and how the sides are read and written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tim_report import save_step
from tim_report.analysis import analyze
from tim_report.cli import main
from tim_report.io import LoadOptions, load, save_batch
from tim_report.testing import make_batch, make_chain_batch

LEADS = {"sampler": ("rollout", "recompute"), "engine": ("recompute", "trainer"), "train": ("trainer", "train")}


@pytest.mark.parametrize("cause", sorted(LEADS))
def test_the_planted_cause_names_its_link_and_the_parts_add_up(cause):
    report = analyze(make_chain_batch(cause))
    chain = report.chain
    a, b = LEADS[cause]
    assert chain["available"] and chain["sides"] == ["rollout", "recompute", "trainer", "train"]
    assert chain["leading"] == f"{a} → {b}"
    lead = next(x for x in chain["links"] if x["label"] == chain["leading"])
    assert (lead["from"], lead["to"]) == (a, b) and lead["share"] > 0.95
    # the decomposition: shares add up to 1, the links' mean δ to the end-to-end mean δ
    assert math.isclose(sum(x["share"] for x in chain["links"]), 1.0, rel_tol=1e-9)
    assert math.isclose(sum(x["bias"] for x in chain["links"]), chain["end_to_end"]["bias"], rel_tol=1e-9, abs_tol=1e-15)
    assert chain["additivity"]["shares"] == pytest.approx(1.0)
    # the verdict names the link, and a finding carries it
    assert f"the {a} → {b} link" in report.diagnosis["verdict"]
    finding = next(f for f in report.diagnosis["findings"] if f["id"] == "chain_link")
    assert finding["evidence"]["leading"] == f"{a} → {b}" and finding["severity"] == "info"


def test_the_decomposition_adds_up_per_token_on_noise_in_every_link():
    b = make_batch(n_seqs=32, mean_len=64, noise=0.0)
    rng = np.random.default_rng(5)
    steps = [0.01, 0.02, 0.03]  # independent noise added on each link: each carries its variance's share
    recompute = b.rollout_logp + steps[0] * rng.standard_normal(b.n_tokens)
    b.trainer_logp = recompute + steps[1] * rng.standard_normal(b.n_tokens)
    b.rollout_logp, b.trainer_logp, recompute = b.rollout_logp - 1, b.trainer_logp - 1, recompute - 1  # all ≤ 0
    b.sides = {"recompute": recompute, "train": b.trainer_logp + steps[2] * rng.standard_normal(b.n_tokens)}
    chain = analyze(b).chain
    links = chain["links"]
    assert sum(x["share"] for x in links) == pytest.approx(1.0, abs=1e-12)
    assert sum(x["bias"] for x in links) == pytest.approx(chain["end_to_end"]["bias"], abs=1e-15)
    expected = np.square(steps) / np.square(steps).sum()
    assert [x["share"] for x in links] == pytest.approx(expected, abs=0.03)
    assert chain["leading"] == "trainer → train"


def test_a_bitwise_identical_chain_has_no_leading_link():
    report = analyze(make_chain_batch("none"))
    assert report.chain["leading"] is None and report.diagnosis["regime"] == "identical"
    assert all(x["differing"] == 0 and x["share"] is None for x in report.chain["links"])
    assert "no token differs on any link" in report.diagnosis["verdict"]
    assert not [f for f in report.diagnosis["findings"] if f["id"] == "chain_link"]


def test_links_that_cancel_end_to_end_have_no_share():
    b = make_batch(n_seqs=8, mean_len=16, noise=0.0)
    b.trainer_logp = b.rollout_logp.copy()
    b.sides = {"recompute": b.rollout_logp - 0.1}  # away and back: rollout → recompute → trainer cancels
    chain = analyze(b).chain
    assert chain["additivity"]["shares"] is None and all(x["share"] is None for x in chain["links"])
    assert chain["leading"] in ("rollout → recompute", "recompute → trainer")


def test_a_pair_or_a_shadow_alone_has_no_chain_and_summary_json_is_unchanged():
    b = make_batch(n_seqs=4, mean_len=8)
    assert analyze(b).chain is None and "chain" not in analyze(b).summary_dict()
    b.shadow_logp = b.trainer_logp.copy()
    assert analyze(b).chain is None  # the precision gap's section already splits rollout → shadow → trainer


def test_the_shadow_and_a_named_side_take_their_place_and_a_declared_order_wins():
    b = make_chain_batch("engine", n_seqs=8)
    b.shadow_logp = b.trainer_logp.copy()
    b.sides["mine"] = b.sides["train"].copy()
    assert b.chain_order() == ["rollout", "recompute", "shadow", "trainer", "train", "mine"]
    b.meta["chain"] = ["rollout", "trainer", "recompute"]
    assert b.chain_order() == ["rollout", "trainer", "recompute"]
    assert analyze(b).chain["sides"] == ["rollout", "trainer", "recompute"]


def test_a_side_that_scores_no_valid_token_is_left_out_with_its_reason():
    b = make_chain_batch("engine", n_seqs=8)
    b.sides["train"] = np.full(b.n_tokens, np.nan)
    chain = analyze(b).chain
    assert chain["sides"] == ["rollout", "recompute", "trainer"] and "train" in chain["left_out"]


def test_summary_json_carries_the_chain(tmp_path):
    from helpers import build_site

    site = build_site(tmp_path, [("c", make_chain_batch("train", n_seqs=8))])
    summary = json.loads((site / "c" / "summary.json").read_text())
    chain = summary["chain"]
    assert chain["leading"] == "trainer → train"
    assert [(x["from"], x["to"]) for x in chain["links"]] == [("rollout", "recompute"), ("recompute", "trainer"),
                                                              ("trainer", "train")]
    assert {"share", "bias", "abs_mean", "kl_k3", "differing"} <= set(chain["links"][2])


# ---- reading and writing the sides ----------------------------------------------------------------------------

def test_save_step_takes_sides_by_name_and_the_canonical_file_keeps_them(tmp_path):
    rng = np.random.default_rng(0)
    ro = -rng.exponential(0.5, (4, 12))
    path = save_step(tmp_path / "s.npz", ro, ro + 0.01, sides={"recompute": ro, "train": ro + 0.02, "fp8_probe": ro - 0.01})
    keys = set(np.load(path).files)
    assert {"recompute_logp", "train_logp", "side_fp8_probe"} <= keys
    b = load(path)
    assert list(b.sides) == ["recompute", "train", "fp8_probe"]
    np.testing.assert_array_equal(b.sides["train"], (ro + 0.02).ravel())
    assert b.chain_order() == ["rollout", "recompute", "trainer", "train", "fp8_probe"]
    save_batch(b, tmp_path / "again.npz")
    assert list(load(tmp_path / "again.npz").sides) == ["recompute", "train", "fp8_probe"]


@pytest.mark.parametrize("name", ["rollout", "Bad Name", "", "a/b"])
def test_save_step_refuses_a_side_name_it_cannot_keep(tmp_path, name):
    from tim_report.errors import BadInput

    ro = -np.ones((2, 3))
    with pytest.raises(BadInput, match="side name"):
        save_step(tmp_path / "s.npz", ro, ro, sides={name: ro})


def test_save_step_shadow_and_floor_sides_fill_their_fields(tmp_path):
    ro = -np.ones((2, 3))
    b = load(save_step(tmp_path / "s.npz", ro, ro, sides={"shadow": ro - 0.1, "floor": ro - 0.2}))
    assert b.shadow_logp is not None and b.floor_logp is not None and not b.sides


def test_framework_key_names_fill_the_chain_and_key_overrides_them(tmp_path):
    ro = -np.random.default_rng(1).exponential(0.5, (3, 10))
    np.savez(tmp_path / "verl.npz", rollout_log_probs=ro, old_log_probs=ro + 0.01, train_log_probs=ro + 0.02,
             engine_scores=ro, response_mask=np.ones_like(ro))
    b = load(tmp_path / "verl.npz")
    assert set(b.sides) == {"train"} and b.meta["keys"]["train"] == "train_log_probs"
    b = load(tmp_path / "verl.npz", LoadOptions(keys={"recompute": "engine_scores"}))
    assert set(b.sides) == {"recompute", "train"} and b.chain_order() == ["rollout", "recompute", "trainer", "train"]


def test_rank_files_merge_their_sides(tmp_path):
    ro = -np.ones((2, 3))
    for rank in (0, 1):
        save_step(tmp_path, ro, ro, sides={"recompute": ro - 0.1 * (rank + 1)}, step=3, rank=rank, world_size=2)
    b = load(tmp_path / "step_3")
    assert b.sides["recompute"].shape == (12,) and b.sides["recompute"][-1] == pytest.approx(-1.2)


def test_key_recompute_on_the_command_line(tmp_path):
    ro = -np.random.default_rng(1).exponential(0.5, (3, 10))
    np.savez(tmp_path / "b.npz", rollout_log_probs=ro, old_log_probs=ro + 0.05, vllm_prefill=ro,
             response_mask=np.ones_like(ro))
    res = CliRunner().invoke(main, ["build", str(tmp_path / "b.npz"), "-o", str(tmp_path / "site"), "--format", "json",
                                    "--key", "recompute=vllm_prefill"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "site" / "b" / "summary.json").read_text())
    assert summary["chain"]["leading"] == "recompute → trainer"


def test_an_npz_side_of_the_wrong_shape_is_bad_input(tmp_path):
    b = make_chain_batch("engine", n_seqs=4)
    save_batch(b, tmp_path / "c.npz")
    arrays = dict(np.load(tmp_path / "c.npz"))
    arrays["side_extra"] = np.zeros(3)
    np.savez(tmp_path / "bad.npz", **arrays)
    res = CliRunner().invoke(main, ["check", str(tmp_path / "bad.npz")])
    assert res.exit_code == 2 and "side_extra" in res.output and "Traceback" not in res.output


def test_inspect_lists_the_chain_roles(tmp_path):
    b = make_chain_batch("engine", n_seqs=4)
    save_batch(b, tmp_path / "c.npz")
    res = CliRunner().invoke(main, ["inspect", str(tmp_path / "c.npz")])
    assert res.exit_code == 0 and "recompute_logp" in res.output and "train_logp" in res.output


def test_samples_keep_working_with_sides(tmp_path):
    b = make_chain_batch("sampler", n_seqs=4)
    assert analyze(b).samples  # the token tables read rollout and trainer as before
    assert Path(tmp_path).exists()


@pytest.mark.parametrize("fixture, side, copy_of, link", [
    ("top_p_0.9", "recompute", "trainer", "rollout → recompute"),       # a real top-p sampler: the engine re-score = trainer
    ("weights_perturbed", "recompute", "rollout", "recompute → trainer"),  # other trainer weights: re-score = sampler
])
def test_the_fault_fixtures_with_a_third_side_name_their_link(fixture, side, copy_of, link):
    data = Path(__file__).parent / "data" / "faults"
    manifest = json.loads((data / "manifest.json").read_text())
    b = load(data / manifest["cases"][fixture]["file"])
    b.sides[side] = (b.rollout_logp if copy_of == "rollout" else b.trainer_logp).copy()
    chain = analyze(b).chain
    assert chain["leading"] == link and sum(x["share"] for x in chain["links"]) == pytest.approx(1.0)
    assert sum(x["bias"] for x in chain["links"]) == pytest.approx(chain["end_to_end"]["bias"], abs=1e-12)
