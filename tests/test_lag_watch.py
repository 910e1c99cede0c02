"""The run view and live view by lag: index rows' lag fields, the index's "Lag over steps" table, the scalars a logger
gets, watch's stale-weights rule on the run's own lag-0 floor, and index.json's lag fields read back as untrusted."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import build_site

import tim_report
from tim_report.analysis.lag.history import floor_moved, lag_changed, lag_key, same_lag
from tim_report.errors import BadInput
from tim_report.site.index_json import read_rows
from tim_report.testing import make_batch


def versioned(step: int, lags: list[int], seed: int = 0):
    """A step whose sequences name versions: lag 0 at the numerical noise, older lags with extra mismatch."""
    b = make_batch(n_seqs=32, mean_len=32, noise=0.01, seed=seed)
    lag_of = np.asarray([lags[i % len(lags)] for i in range(b.n_seqs)])
    extra = np.repeat(lag_of * 0.05, b.seq_lengths) * np.random.default_rng(seed).standard_normal(b.n_tokens)
    b.trainer_logp = np.minimum(b.trainer_logp + extra, 0.0)
    b.weight_version = np.asarray([str(10 + step - lag) for lag in lag_of])
    b.meta.update(step=step, trainer_version=10 + step)
    return b


def test_rows_the_index_and_the_scalars_carry_the_lags(tmp_path):
    site = build_site(tmp_path, [(f"step_{s}", versioned(s, [0, 2])) for s in range(3)] + [("plain", make_batch(seed=4))])
    doc = json.loads((site / "index.json").read_text())
    rows = {r["id"]: r for r in doc["runs"]}
    row = rows["step_1"]
    assert set(row["lag_mix"]) == {"0", "2"} and abs(sum(row["lag_mix"].values()) - 1) < 1e-9
    assert row["lag_kl_k3"]["2"] > row["lag_kl_k3"]["0"] and 0 < row["staleness_share"] <= 1
    assert row["floor_kl_k3_se"] > 0
    assert rows["plain"]["lag_mix"] == {} and rows["plain"]["staleness_share"] is None  # no versions: no lag, not lag 0
    html, md = (site / "index.html").read_text(), (site / "report.md").read_text()
    assert "Lag over steps" in html and "Lag over steps" in md and "· 2\\: " in md
    scalars = tim_report.analyze(versioned(1, [0, 2])).scalars()
    assert {"tim/kl_k3_lag_0", "tim/kl_k3_lag_2", "tim/staleness_share"} <= set(scalars)
    assert "tim/staleness_share" not in tim_report.analyze(make_batch(seed=4)).scalars()


def row(step, kl0=None, lags=("0",), se=0.0):
    mix = {k: 1 / len(lags) for k in lags}
    return {"id": f"step_{step}", "step": step, "lag_mix": mix, "lag_kl_k3": {"0": kl0} if kl0 is not None else {},
            "floor_kl_k3_se": se}


def test_the_lag0_floor_moves_beyond_twice_its_median_by_two_standard_errors():
    history = [row(s, 1e-4 * (1 + 0.1 * (s % 3))) for s in range(6)]
    assert floor_moved(row(6, 1.5e-4, se=1e-5), history) is None  # within the run's floor
    assert "above the run's lag-0 floor" in floor_moved(row(6, 5e-4, se=5e-5), history)
    assert floor_moved(row(6, 5e-4, se=2e-4), history) is None  # a step too noisy to tell
    assert floor_moved(row(3, 5e-4), history[:3]) is None  # fewer than 5 earlier lag-0 steps: no floor yet
    assert floor_moved(row(6, lags=("3",)), history) is None  # no lag-0 tokens at this step


def test_bands_and_change_points_stay_within_a_lag_mix():
    rows = [row(0, 1e-4), row(1, lags=("1",)), row(2, lags=("3",)), row(3, lags=("3",))]
    assert lag_key(rows[0]) == (0,) and lag_key({"lag_mix": {"unknown": 1.0, "2": 0.0}}) == (2, "unknown")
    assert lag_key({"lag_mix": {}}) is None
    assert same_lag(rows[3], rows[:3]) == [rows[2]]
    assert lag_changed(rows[1], rows) and lag_changed(rows[2], rows) and not lag_changed(rows[3], rows)


@pytest.mark.parametrize("bad", [[1, 2], {"x": 1.0}, {"0": "a"}, {str(i): 1.0 for i in range(300)}])
def test_index_json_lag_fields_are_read_as_untrusted(tmp_path, bad):
    site = build_site(tmp_path, [("step_0", versioned(0, [0, 1]))])
    doc = json.loads((site / "index.json").read_text())
    _, rows = read_rows(site, ())
    assert rows[0]["lag_kl_k3"]["1"] > 0
    doc["runs"][0]["lag_kl_k3"] = bad
    (site / "index.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="lag_kl_k3"):
        read_rows(site, ())


def test_watch_says_a_lag_event_once_and_the_cause_first(tmp_path):
    from tim_report.service.watch import Watch, WatchOptions

    w = Watch(tmp_path / "run", tmp_path / "site", WatchOptions())
    history = [row(s, 1e-4) for s in range(6)]
    for r in history:
        assert w._lag_alarm(r, []) is None
    first = w._lag_alarm(row(6, 2e-3, se=1e-4), history)
    assert first.kind == "stale_weights" and first.line.startswith("step_6: ") and "stale weights" in first.line
    assert w._lag_alarm(row(7, 4e-3, se=1e-4), history).line == ""  # the same event: no second alarm
    assert w._lag_alarm(row(8, 1e-4), history) is None  # the floor is back: the event is over
    neg = {**row(9, 1e-4), "findings": ["negative_lag"], "glance": "numerical noise"}
    alarm = w._lag_alarm(neg, history)
    assert alarm.kind == "negative_lag" and "negative lag: tokens generated by a version newer" in alarm.line
    assert alarm.env(tmp_path)["TIM_REPORT_ALARM"] == "negative_lag"


def async_rows(lag_only_regime: str = "elevated", findings: tuple[str, ...] = ()) -> list[dict]:
    """Index rows of a clean asynchronous run: six synchronous steps at the floor, then six whose every token is of lag
    3 (KL k3 100× higher, no lag-0 token to judge the floor by), diagnosed `lag_only_regime` with `findings`."""
    rng = np.random.default_rng(0)
    rows = []
    for s in range(12):
        stale = s >= 6
        kl = (1e-2 if stale else 1e-4) * float(np.exp(0.1 * rng.standard_normal()))
        rows.append({"id": f"step_{s}", "step": s, "tokens": 4096, "kl_k3": kl, "abs_delta_mean": 10 * kl,
                     "abs_delta_median": 5 * kl, "regime": lag_only_regime if stale else "numerical_noise",
                     "findings": list(findings) if stale else [], "lag_mix": {"3": 1.0} if stale else {"0": 1.0},
                     "lag_kl_k3": {"3": kl} if stale else {"0": kl}})
    return rows


def test_a_change_of_lag_mix_is_not_a_change_of_regime():
    """A run whose steps hold only stale tokens (elevated by the lag, the floor not judged) reads as the steps before
    them; its change point at the first stale step names the lag mix, not a broken sync."""
    from tim_report.analysis.run_verdict import run_verdict
    from tim_report.analysis.trend import trend

    verdict = run_verdict(async_rows())
    assert verdict["regime"] == "numerical_noise" and verdict["verdict"].startswith("Numerical noise at every step")
    assert verdict["lag_only_steps"] == list(range(6, 12)) and "Steps 6–11 (6 steps) carry tokens of lag ≥ 1" in verdict["verdict"]
    changes = trend(async_rows())["change_steps"]
    assert [c["step"] for c in changes] == [6], changes
    assert "the lag mix changed at that step (lag 0 → lag 3)" in changes[0]["sentence"]
    assert "weight sync that stopped" not in changes[0]["sentence"]
    # a finding at those steps is news: they stay elevated (and a lag-0 floor beyond its band is stale weights, an error)
    flagged = run_verdict(async_rows(findings=("lag_ess_collapse",)))
    assert flagged["regime"] == "elevated" and flagged["since_step"] == 6 and "lag_only_steps" not in flagged
    assert run_verdict(async_rows("systematic", ("stale_weights",)))["regime"] == "systematic"


def test_watch_over_hostile_versions_alarms_only_the_negative_lag_and_reads_its_site_back(tmp_path):
    """Issue 44's attack on watch's lag alarms: garbled versions and trainer versions are unknown (no stale-weights
    alarm from them), a version past the trainer's is the negative-lag alarm, and a step naming 1,000 lags (which
    wrote an index.json row that a restarted watch and `export` then refused) is one skipped line; the site reads back."""
    from helpers import run

    from tim_report.io import save_batch
    from tim_report.service.watch import Watch, WatchOptions

    folder = tmp_path / "run"
    folder.mkdir()
    hostile = {6: (["³", "--3"], 16), 7: (["17", "16"], "³"), 8: (["-1"], 18), 9: (["999999999999999999"], 19)}
    for s in range(11):
        b = versioned(s, [0, 1], seed=s)
        if s in hostile:
            b.weight_version = np.asarray([hostile[s][0][i % len(hostile[s][0])] for i in range(b.n_seqs)])
            b.meta["trainer_version"] = hostile[s][1]
        if s == 10:
            b.token_version = 100_000 - np.arange(b.n_tokens, dtype=np.int64) % 1_000
            b.meta["trainer_version"] = 100_000
        save_batch(b, folder / f"step_{s}.npz")
    said: list[str] = []
    watch = Watch(folder, tmp_path / "site", WatchOptions(), say=said.append)
    watch.step()
    rnd = watch.step()
    assert [(a.kind, a.step) for a in rnd.alarms] == [("negative_lag", 9)], [a.line for a in rnd.alarms]
    assert len(said) == 1 and "step_10.npz: its tokens name 1,000 distinct weight-version lags" in said[0], said
    doc, rows = read_rows(tmp_path / "site", ())
    assert len(rows) == 10
    for s in (6, 7, 8):
        assert next(r for r in doc["runs"] if r["step"] == s)["lag_mix"] == {"unknown": 1.0}
    assert run("export", tmp_path / "site", "--tensorboard", tmp_path / "tb").exit_code == 0
    assert not Watch(folder, tmp_path / "site", WatchOptions()).step().alarms  # restarted on its own site: quiet
