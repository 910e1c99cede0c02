"""The exact gate: `check --exact` (and `--atol`), `assert_logprobs_match(..., exact=True)`, a bitwise-identical
batch's page, and `watch`'s alarm at the first step that stops being identical."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from tim_report import assert_logprobs_match
from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.model import StepBatch
from tim_report.testing import make_batch, make_chain_batch

CHANGED = 654_321  # the one token a batch of a million changes


@pytest.fixture(scope="module")
def million(tmp_path_factory):
    """A bitwise-identical batch of 1,000,000 tokens, and the same batch with one trainer log-prob one ulp off."""
    folder = tmp_path_factory.mktemp("million")
    rng = np.random.default_rng(0)
    n = 1_000_000
    rollout = -rng.exponential(0.5, n)
    batch = StepBatch(rollout_logp=rollout, trainer_logp=rollout.copy(), offsets=np.linspace(0, n, 4001).astype(np.int64),
                      mask=np.ones(n, bool), token_ids=rng.integers(0, 1000, n), token_text=None)
    save_batch(batch, folder / "same.npz")
    batch.trainer_logp[CHANGED] = np.nextafter(batch.trainer_logp[CHANGED], 0.0)
    save_batch(batch, folder / "one.npz")
    return folder, batch


def check(*args):
    return CliRunner().invoke(main, ["check", *map(str, args)])


def test_check_exact_passes_a_bitwise_identical_million_token_batch(million):
    res = check(million[0] / "same.npz", "--exact")
    assert res.exit_code == 0, res.output
    assert "exact: no token of 1,000,000 differs along rollout → trainer (bitwise equal)" in res.output


def test_check_exact_fails_one_changed_token_and_names_it(million):
    folder, batch = million
    res = check(folder / "one.npz", "--exact")
    assert res.exit_code == 1
    seq = int(np.searchsorted(batch.offsets, CHANGED, side="right") - 1)
    pos = CHANGED - int(batch.offsets[seq])
    token = f"[{int(batch.token_ids[CHANGED])}]"
    assert "exact 1 of 1,000,000 tokens differs (0.0001%), max |δ| " in res.output
    assert f"first at sequence {seq}, position {pos}, token '{token}'" in res.output
    # the same token within a tolerance passes; the JSON says the same in fields
    assert check(folder / "one.npz", "--exact", "--atol", "1e-12").exit_code == 0
    doc = json.loads(check(folder / "one.npz", "--exact", "--json").output)
    assert doc["exact"]["differing"] == 1 and doc["exact"]["first"]["sequence"] == seq and not doc["ok"]


def test_check_exact_with_a_chain_names_the_first_link_to_differ(tmp_path):
    save_batch(make_chain_batch("train", n_seqs=8), tmp_path / "c.npz")
    res = check(tmp_path / "c.npz", "--exact")
    assert res.exit_code == 1 and "tokens start to differ on the trainer → train link" in res.output
    b = make_chain_batch("none", n_seqs=8)
    b.sides["recompute"][5] -= 0.25  # the engine's re-score differs on one token; rollout and trainer agree
    save_batch(b, tmp_path / "r.npz")
    res = check(tmp_path / "r.npz", "--exact")
    assert "exact 1 of" in res.output and "tokens start to differ on the rollout → recompute link" in res.output


def test_check_without_exact_reads_one_changed_token_as_identical(million):
    res = check(million[0] / "one.npz")
    assert res.exit_code == 0 and "identical" in res.output and "exact" not in res.output


@pytest.mark.parametrize("args, problem", [(["--atol", "1e-6"], "--atol: goes with --exact"),
                                           (["--exact", "--atol", "inf"], "not a finite number")])
def test_check_atol_misuse_is_one_line(tmp_path, args, problem):
    save_batch(make_batch(n_seqs=4, mean_len=8), tmp_path / "b.npz")
    res = check(tmp_path / "b.npz", *args)
    assert res.exit_code == 2 and problem in res.output and "Traceback" not in res.output


def test_assert_logprobs_match_exact():
    ref = -np.random.default_rng(1).exponential(1.0, (4, 50))
    assert assert_logprobs_match(ref, ref.copy(), exact=True).passed
    cand = ref.copy()
    cand[2, 17] = np.nextafter(cand[2, 17], 0.0)
    with pytest.raises(AssertionError, match=r"1 of 200 tokens differs .* first at sequence 2, position 17"):
        assert_logprobs_match(ref, cand, exact=True, name="kernel")
    assert assert_logprobs_match(ref, cand, precision="fp32").passed  # within the fp32 band: noise
    assert assert_logprobs_match(ref, cand, exact=True, atol=1e-12).passed
    cand[0, 0] = np.nan  # a candidate that returns no log-prob differs
    with pytest.raises(AssertionError, match="2 of 200 tokens differ"):
        assert_logprobs_match(ref, cand, exact=True)
    with pytest.raises(ValueError, match="atol"):
        assert_logprobs_match(ref, ref, exact=True, atol=-1.0)


def test_a_bitwise_identical_page_says_so_instead_of_empty_charts(tmp_path):
    from helpers import build_site

    b = make_batch(n_seqs=8, mean_len=16)
    b.trainer_logp = b.rollout_logp.copy()
    site = build_site(tmp_path, [("same", b)])
    page = (site / "same" / "index.html").read_text()
    md = (site / "same" / "report.md").read_text()
    assert "Rollout and trainer are bitwise identical: all" in page and 'id="chart-' not in page
    assert "bitwise identical" in md and "0 tokens differ" in md
    b.trainer_logp[3] -= 1e-9
    (tmp_path / "b").mkdir()
    page = (build_site(tmp_path / "b", [("near", b)]) / "near" / "index.html").read_text()
    assert "bitwise identical" not in page and re.search(r'id="chart-', page)


def test_watch_alarms_at_the_first_step_that_stops_being_identical(tmp_path):
    from tim_report.service.build import BuildOptions
    from tim_report.service.watch import Watch, WatchOptions

    run, site = tmp_path / "run", tmp_path / "site"
    run.mkdir()

    def step(s: int, same: bool) -> None:
        b = make_batch(n_seqs=6, mean_len=16, seed=s)
        if same:
            b.trainer_logp = b.rollout_logp.copy()
        save_batch(b, run / f"step_{s}.npz")

    for s in range(4):
        step(s, True)
    watch = Watch(run, site, WatchOptions(build=BuildOptions(formats=("json",)), interval=0))
    alarms = watch.step().alarms + watch.step().alarms
    assert not [a for a in alarms if a.kind == "identity"]
    step(4, False)
    step(5, False)
    alarms = watch.step().alarms + watch.step().alarms
    identity = [a for a in alarms if a.kind == "identity"]
    assert [a.step for a in identity] == [4]
    line = identity[0].line
    assert line.startswith("step_4: ") and "; no longer bitwise identical: max |δ| " in line and "after 4 identical steps" in line
    assert not [a for a in alarms if a.kind == "band" and a.step == 4]  # one alarm per step: the sharper one
    assert identity[0].env(site)["TIM_REPORT_ALARM"] == "identity"
