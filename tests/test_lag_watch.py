"""The run view and live view by lag: index rows' lag fields, the index's "Lag over steps" table, the scalars a logger
gets, watch's stale-weights rule on the run's own lag-0 floor, and index.json's lag fields read back as untrusted."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from helpers import build_site

import tim_report
from tim_report.analysis.lag.history import lag_changed, lag_key, never_delivered, read_run, same_lag
from tim_report.analysis.run_index import in_run, index_from_rows
from tim_report.catalogue.staleness import run_reading
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


def row(step, kl0=None, lags=("0",), se=0.0, tokens=4096):
    mix = {k: 1 / len(lags) for k in lags}
    return {"id": f"step_{step}", "step": step, "tokens": tokens, "lag_mix": mix,
            "lag_kl_k3": {"0": kl0} if kl0 is not None else {}, "lag_kl_k3_se": {"0": se} if kl0 is not None else {},
            "regime": "numerical_noise", "findings": []}


def full(r: dict) -> dict:
    """An index row with every field (model.run_row_fields), `r`'s given."""
    from tim_report.model import run_row_fields

    base = {k: None for k in run_row_fields()}
    base.update(rollout_engine="hf", rollout_dtype="bf16", trainer_engine="hf", trainer_dtype="fp32", routing={},
                routing_unit="group", findings=[], input_problem_kinds=[], health="green", env_kl_k3={}, lag_mix={},
                lag_kl_k3={}, lag_kl_k3_se={}, excluded_tokens=0, input_problems=0, data_problems=0, blocked_by_bug=False)
    return {**base, **r}


def lagged(step, kl, lag=1, se=None, lr=None):
    """A one-step-off row: every token at `lag`, KL k3 `kl` with standard error `se` (10% by default)."""
    return full({"id": f"step_{step}", "step": step, "tokens": 4096, "lag_mix": {str(lag): 1.0}, "lag_kl_k3": {str(lag): kl},
            "lag_kl_k3_se": {str(lag): 0.1 * kl if se is None else se}, "regime": "staleness", "findings": [],
            "lr": lr})


def test_the_lag0_floor_moves_beyond_twice_its_median_by_two_standard_errors():
    history = [row(s, 1e-4 * (1 + 0.1 * (s % 3))) for s in range(6)]
    status = lambda r: (read_run([*history, r]).get(r["id"]) or {}).get("status")
    assert status(row(6, 1.5e-4, se=1e-5)) == "within"  # within the run's floor
    assert status(row(6, 5e-4, se=5e-5)) == "beyond"
    assert "above the run's own" not in run_reading(read_run([*history, row(6, 5e-4, se=5e-5)])["step_6"])
    assert status(row(6, 5e-4, se=2e-4)) == "within"  # a step too noisy to tell
    assert read_run([*history[:3], row(3, 5e-4)])["step_3"]["status"] == "unjudged"  # fewer than 5 earlier: no floor
    assert "step_6" not in read_run([*history, row(6, lags=("3",))])  # no lag-0 tokens at this step: nothing to read
    assert "step_6" not in read_run([*history, row(6, 5e-4, tokens=32)])  # too few tokens at lag 0


def test_a_lag_is_held_to_its_own_history_and_a_sync_that_stops_is_named_at_its_first_step():
    """A clean one-step-off run whose lag-1 KL swings 2.6× with the policy's speed stays within; the step a sync stops
    (its lag-1 tokens now come from weights two versions old: about 4×) is beyond, and so is every step after it, held to
    the history before the event, not to a bar the event raised."""
    clean = [2.7e-3, 2.7e-3, 1.7e-3, 1.6e-3, 2.8e-3, 3.3e-3, 7.0e-3, 7.3e-3, 5.1e-3, 2.0e-3]
    rows = [lagged(s + 1, kl) for s, kl in enumerate(clean)]
    assert {r["status"] for r in read_run(rows).values()} <= {"within", "unjudged"}
    # a slow climb (a sync that stops at lag 2: each step a lag older, under 2× a step) is watched, then named at 5×
    slow = rows[:6] + [lagged(s, kl, se=1e-5) for s, kl in ((7, 6.5e-3), (8, 9.5e-3), (9, 1.2e-2), (10, 1.5e-2))]
    got = read_run(slow)
    assert [got[f"step_{s}"]["status"] for s in (7, 8, 9, 10)] == ["within", "beyond", "beyond", "beyond"]
    assert got["step_10"]["since_step"] == 8  # the climb was the event's run-up
    climbing = index_from_rows(slow[:9])
    assert [r["lag_reading"]["status"] for r in climbing["runs"][7:]] == ["climbing", "climbing"]
    assert "climbing 4.44× its own history" in climbing["runs"][8]["glance"] and climbing["run"]["regime"] == "staleness"
    assert "has been climbing above the run's own history since step 8" in climbing["run"]["verdict"]
    stuck = rows[:6] + [lagged(7, 2.9e-2), lagged(8, 4.7e-2), lagged(9, 7.9e-2)]
    got = read_run(stuck)
    assert [got[f"step_{s}"]["status"] for s in (6, 7, 8, 9)] == ["within", "beyond", "beyond", "beyond"]
    assert got["step_9"]["since_step"] == 7 and got["step_9"]["reference"] < 3e-3
    sentence = run_reading(got["step_7"])
    assert sentence.startswith("KL k3 at lag 1 0.029") and "the run's own" in sentence and "older weights" in sentence
    tagged = read_run([{**r, "trainer_version": r["step"] + 10} for r in stuck])["step_9"]  # labels v(t − 1), stuck at v15
    assert (tagged["labelled_version"], tagged["looks_like_version"]) == (18, 15), tagged
    assert "labelled v18, they look like v15 if the engine has taken no update" in run_reading(tagged)
    from tim_report.service.check import run_errors

    errors = run_errors(stuck)  # `check RUN` reads the steps together as the index does: one line per event
    assert [e["id"] for e in errors] == ["stale_weights"] and errors[0]["title"].startswith("step_7: stale weights")
    assert run_errors(rows) == []
    index = index_from_rows(stuck)  # the run reads the step as its engine's weights, whatever the step alone said
    step7 = next(r for r in index["runs"] if r["id"] == "step_7")
    assert step7["regime"] == "systematic" and step7["step_regime"] == "staleness" and step7["health"] == "red"
    assert step7["findings"][0] == "stale_weights" and step7["blocked_by_bug"]
    assert index["run"]["regime"] == "systematic" and index["run"]["since_step"] == 7, index["run"]
    assert "stale weights" in index["run"]["verdict"]


def test_an_engine_that_never_took_an_update_is_named_and_a_warm_up_with_its_lr_is_not():
    # the KL at lag 1 grows with the steps since the start, at a constant learning rate
    never = [lagged(s, 2.7e-3 * s ** 1.8, lr=1e-4) for s in range(1, 13)]
    found = never_delivered(never)
    assert found and found["lag"] == 1 and found["growth"] > 10 and found["per_lr"]
    index = index_from_rows(never)
    assert index["run"]["regime"] == "systematic" and "Never delivered" in index["run"]["verdict"], index["run"]
    assert [(f["id"], f["severity"]) for f in index["run"]["findings"]][0] == ("never_delivered", "error")
    assert all(r["regime"] == "systematic" for r in index["runs"])  # every step of it: the engine's weights
    # without the learning rate a warm-up could grow the same way: the run says both, as a warning, the steps stay
    bare = index_from_rows([{**r, "lr": None} for r in never])
    assert [(f["id"], f["severity"]) for f in bare["run"]["findings"]][0] == ("never_delivered", "warn")
    assert "unless a learning-rate warm-up" in bare["run"]["verdict"] and bare["run"]["regime"] == "staleness"
    # a learning-rate warm-up over 8 steps: the KL grows as lr², then levels off
    lrs = [1e-4 * min(1.0, s / 8) for s in range(1, 13)]
    warm = [lagged(s, 2e-3 * (lr / 1e-4) ** 2, lr=lr) for s, lr in zip(range(1, 13), lrs)]
    assert never_delivered(warm) is None and index_from_rows(warm)["run"]["regime"] == "staleness"
    live = warm[:9]  # still warming up: the shape alone cannot tell, the lr can
    assert never_delivered(live) is None
    assert never_delivered([{**r, "lr": None} for r in live]) is not None  # without the lr: said as possible
    # a sync that stopped after a flat stretch is that event (beyond its history from its first step), not this one
    stopped = [lagged(s, 2e-3 * (1 + 0.2 * (s % 2)), lr=1e-4) for s in range(1, 7)]
    stopped += [lagged(s, 2e-3 * (s - 5) ** 1.8 * 3, lr=1e-4) for s in range(7, 13)]
    assert never_delivered(stopped) is None and read_run(stopped)["step_7"]["status"] == "beyond"


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
    rows = in_run([*history, row(6, 2e-3, se=1e-4), row(7, 4e-3, se=1e-4), row(8, 1e-4)])
    for r in rows[:6]:
        assert w._lag_alarm(r) is None
    first = w._lag_alarm(rows[6])
    assert first.kind == "stale_weights" and first.line.startswith("step_6: ") and "stale weights" in first.line
    assert "the run's own" in first.line  # why: the lag-0 floor beyond the run's own, in numbers
    assert w._lag_alarm(rows[7]).line == ""  # the same event: no second alarm
    assert w._lag_alarm(rows[8]) is None  # the floor is back: the event is over
    neg = {**row(9, 1e-4), "findings": ["negative_lag"], "glance": "numerical noise"}
    alarm = w._lag_alarm(neg)
    assert alarm.kind == "negative_lag" and "negative lag: tokens generated by a version newer" in alarm.line
    assert alarm.env(tmp_path)["TIM_REPORT_ALARM"] == "negative_lag"


def async_rows(stale_regime: str = "staleness", findings: tuple[str, ...] = ()) -> list[dict]:
    """Index rows of a clean asynchronous run: six synchronous steps at the floor, then six whose every token is of lag
    3 (KL k3 100× higher, no lag-0 token to judge the floor by), diagnosed `stale_regime` with `findings`."""
    rng = np.random.default_rng(0)
    rows = []
    for s in range(12):
        stale = s >= 6
        kl = (1e-2 if stale else 1e-4) * float(np.exp(0.1 * rng.standard_normal()))
        rows.append({"id": f"step_{s}", "step": s, "tokens": 4096, "kl_k3": kl, "abs_delta_mean": 10 * kl,
                     "abs_delta_median": 5 * kl, "regime": stale_regime if stale else "numerical_noise",
                     "findings": list(findings) if stale else [], "lag_mix": {"3": 1.0} if stale else {"0": 1.0},
                     "lag_kl_k3": {"3": kl} if stale else {"0": kl}, "lag_kl_k3_se": {"3": kl / 10} if stale else {"0": kl / 10}})
    return rows


def test_a_change_of_lag_mix_is_not_a_change_of_regime():
    """A run whose steps hold only stale tokens reads "staleness" from there, not a fault; its change point at the first
    stale step names the lag mix, not a broken sync."""
    from tim_report.analysis.run_verdict import run_verdict
    from tim_report.analysis.trend import trend

    verdict = run_verdict(in_run(async_rows()))
    assert verdict["regime"] == "staleness" and verdict["verdict"].startswith("Staleness from step 6"), verdict
    assert "steps 0–5 numerical noise" in verdict["verdict"]
    assert [(f["id"], f["severity"]) for f in verdict["findings"]] == [("level_jump", "info")]  # the lag mix: staleness
    changes = trend(async_rows())["change_steps"]
    assert [c["step"] for c in changes] == [6], changes
    assert "the lag mix changed at that step (lag 0 → lag 3)" in changes[0]["sentence"]
    assert "weight sync that stopped" not in changes[0]["sentence"]
    # a finding at those steps is news: they stay elevated (and a lag-0 floor beyond its band is stale weights, an error)
    flagged = run_verdict(in_run(async_rows("elevated", ("lag_ess_collapse",))))
    assert flagged["regime"] == "elevated" and flagged["since_step"] == 6
    assert run_verdict(in_run(async_rows("systematic", ("stale_weights",))))["regime"] == "systematic"


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
    exported = run("export", tmp_path / "site", "--tensorboard", tmp_path / "tb")
    if importlib.util.find_spec("tensorboard") is None:  # the README's install has no TensorBoard: one line naming it
        assert exported.exit_code == 2 and "TensorBoard is not installed" in exported.stderr, exported.output
    else:
        assert exported.exit_code == 0, exported.output
    assert not Watch(folder, tmp_path / "site", WatchOptions()).step().alarms  # restarted on its own site: quiet


def one_step_off(step: int, noise: float, lr: float = 1e-4, seed: int = 0):
    """A one-step-off step as a file holds it: every token at lag 1 (labelled v(step − 1)), its meta's lr."""
    b = make_batch(n_seqs=32, mean_len=32, noise=noise, seed=seed)
    b.weight_version = np.asarray([str(step - 1)] * b.n_seqs)
    b.meta.update(step=step, trainer_version=step, lr=lr)
    return b


def test_check_history_reads_a_step_as_the_index_does(tmp_path):
    """`check STEP --history SITE` said "ok … within the run's band" of a step the index (and `watch`) read as an engine
    that never took an update (every step systematic, `never_delivered` an error), and "within the run's band (steps
    0-9)" of a step whose lag the index said was climbing: it reads the step's lag as the index reads it."""
    from helpers import run

    from tim_report.analysis.run_index import run_row
    from tim_report.io import save_batch

    step = one_step_off(12, noise=0.05)
    save_batch(step, tmp_path / "step_12.npz")
    kl = run_row(tim_report.analyze(step))["lag_kl_k3"]["1"]

    def site(name: str, rows: list[dict]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.json").write_text(json.dumps({"tool": "tim-report", "schema_version": 1, "runs": rows}))
        return tmp_path / name

    never = site("never", [lagged(s, kl * (s / 12) ** 1.8, lr=1e-4) for s in range(1, 12)])
    assert index_from_rows(json.loads((never / "index.json").read_text())["runs"])["run"]["regime"] == "systematic"
    res = run("check", tmp_path / "step_12.npz", "--history", never)
    assert res.exit_code == 1, res.output
    assert "stale weights: KL k3 at lag 1" in res.output and "never have taken an update" in res.output
    flat_then_up = [lagged(s, kl / 4.5 * (1 + 0.1 * (s % 2)), se=1e-6, lr=1e-4) for s in range(1, 11)]
    climbing = site("climbing", [*flat_then_up, lagged(11, kl / 1.8, se=1e-6, lr=1e-4)])  # then 4.5× its history
    res = run("check", tmp_path / "step_12.npz", "--history", climbing)
    assert res.exit_code == 0 and "lag 1 climbing above the run's own history since step 12" in res.output, res.output
    assert "within the run's band" not in res.output
    flat = site("flat", [lagged(s, kl * (1 + 0.1 * (s % 2)), lr=1e-4) for s in range(1, 12)])
    res = run("check", tmp_path / "step_12.npz", "--history", flat)
    assert res.exit_code == 0 and "lag 1 as expected" in res.output and "(steps 2-11)" in res.output, res.output
    young = site("young", [lagged(s, kl, lr=1e-4) for s in range(10, 12)])
    res = run("check", tmp_path / "step_12.npz", "--history", young)
    assert res.exit_code == 0 and "lag 1 not judged yet: too few earlier steps at that lag (steps 10-11)" in res.output


@pytest.mark.parametrize("lr", [1e308, 1e200, 1e-200, 5e-324, -1e-4, 0, 10 ** 400])
def test_a_hostile_learning_rate_is_unknown_not_a_traceback_or_an_alarm(lr):
    """A step's `lr` of 1e308 overflowed its square (OverflowError) and 1e-200 divided by 0 (ZeroDivisionError): `build`,
    `watch` and `check --history` died with a traceback. An lr outside [LR_MIN, LR_MAX] is unknown, so the lag is read
    without the lr, as a run that gives none: no alarm from it."""
    rows = [lagged(s, 2e-3 * (1 + 0.2 * (s % 2)), lr=lr if s % 3 == 0 else 1e-4) for s in range(1, 13)]
    index = index_from_rows(rows)
    assert index["run"]["regime"] == "staleness" and not index["run"]["findings"], index["run"]
    assert {r["lag_reading"]["per_lr"] for r in index["runs"]} == {False}


@pytest.mark.parametrize("bad, said", [(-1.0, "holds -1.0 at lag 1: not a number from 0 to"), ({"1": 1.0, "²": 1.0}, "names a lag '²'")])
def test_index_json_lag_numbers_are_never_negative(tmp_path, bad, said):
    """A negative KL in index.json's history (KL k3 is ≥ 0) made every later step "stale weights" (a median below 0
    that anything exceeds); it is a corrupt index, one line naming the field."""
    from helpers import one_line_exit_2, run

    rows = [lagged(s, -1.0 if s % 2 and bad == -1.0 else 3e-3) for s in range(1, 12)]
    if isinstance(bad, dict):
        rows[3]["lag_mix"] = bad
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.json").write_text(json.dumps({"tool": "tim-report", "schema_version": 1, "runs": rows}))
    from tim_report.io import save_batch

    save_batch(one_step_off(12, noise=0.05), tmp_path / "step_12.npz")
    one_line_exit_2(run("check", tmp_path / "step_12.npz", "--history", tmp_path / "site"), "index.json", said)


def test_a_history_at_zero_raises_nothing_and_a_cached_row_with_a_bad_lag_is_not_reused(tmp_path):
    """A lag whose earlier steps all read KL 0 (a rollout side recomputed by the trainer) has no scale: a step above it
    is not judged, never "stale weights". A cache row naming a lag "²" (int() refuses it) crashed `build` with a
    traceback; such a row is not the cache's, its step is analysed again."""
    zeros = [lagged(s, 0.0, se=0.0) for s in range(1, 9)] + [lagged(9, 3e-3)]
    assert read_run(zeros)["step_9"]["status"] == "unjudged"
    from tim_report.model import row_problem

    good = full({"id": "s", "lag_mix": {"1": 1.0}, "lag_kl_k3": {"1": 3e-3}, "weight_digests": []})
    assert row_problem(good) is None
    for field, value in (("lag_mix", {"²": 1.0}), ("lag_kl_k3", {"1": -1.0}), ("lag_kl_k3_se", {"x": 0.1}),
                         ("lag_mix", {str(i): 0.0 for i in range(300)}), ("lag_mix", {"1": 2.0}),
                         ("lag_kl_k3", {"1": 1e308})):  # a share above 1, a KL no clamped log-ratio reaches
        assert row_problem({**good, field: value}) is not None, field
    site = build_site(tmp_path, [(f"step_{s}", one_step_off(s, 0.05, seed=s)) for s in range(1, 4)])
    cache = site / "step_2" / ".tim-report-cache.json"
    entry = json.loads(cache.read_text())
    entry["row"]["lag_mix"] = {"²": 1.0}
    cache.write_text(json.dumps(entry))
    build_site(tmp_path, [(f"step_{s}", one_step_off(s, 0.05, seed=s)) for s in range(1, 4)])
    assert json.loads((site / "step_2" / ".tim-report-cache.json").read_text())["row"]["lag_mix"] == {"1": 1.0}


@pytest.mark.parametrize("value", ["1e308", "1e-200", "0", "-1e-4", "nan", "abc"])
def test_meta_lr_is_a_key_and_a_bad_one_is_one_line(tmp_path, value):
    """docs/staleness.md says `--meta lr=…`; it was refused as an unknown key."""
    from helpers import one_line_exit_2, run

    from tim_report.io import save_batch

    save_batch(one_step_off(3, noise=0.05), tmp_path / "step_3.npz")
    res = run("check", tmp_path / "step_3.npz", "--meta", "lr=2e-5")
    assert res.exit_code == 0, res.output
    one_line_exit_2(run("check", tmp_path / "step_3.npz", "--meta", f"lr={value}"), "--meta", f"lr={value}",
                    "not a learning rate")


def test_a_step_schedule_of_the_learning_rate_is_no_alarm():
    """A 10× drop of the lr (MultiStepLR) moves the lr at once, the lag's KL (the updates before it) a step later: per
    lr² the step after the drop read 100× its history, `stale weights` on a clean run. A lag whose lr jumps is read
    without it; a warm-up (at most 2× a step) still per lr²."""
    lr = lambda t: 1e-4 if t < 8 else 1e-5
    # as the loop records it: the lr of the update this step takes; its lag-1 KL holds the update before (lr(t − 1))
    rows = [lagged(t, 2e-3 * (lr(t - 1) / 1e-4) ** 2 * (1 + 0.2 * (t % 2)), lr=lr(t)) for t in range(1, 16)]
    index = index_from_rows(rows)
    assert {r["regime"] for r in index["runs"]} == {"staleness"} and not index["run"]["findings"], index["run"]
    assert not any(r["lag_reading"]["per_lr"] for r in index["runs"])
    warm = [lagged(t, 2e-3 * min(1.0, t / 8) ** 2, lr=1e-4 * min(1.0, t / 8)) for t in range(1, 13)]
    assert all(r["per_lr"] for r in read_run(warm).values())


def test_an_engine_that_never_took_an_update_is_not_blamed_for_the_tokens_of_its_first_weights():
    """The first one-step-off step of an engine that never took an update is labelled v0 and was sampled by v0, as
    labelled: it was marked systematic, red, "do not train" and alarmed on, a step before the weight digests' first
    fault (engine v1 = v0, at step 2). The run names it from its first step labelled later than the first weights."""
    never = [{**lagged(s, 2.7e-3 * s ** 1.8, lr=1e-4), "trainer_version": s} for s in range(1, 13)]
    index = index_from_rows(never)
    regimes = {r["step"]: r["regime"] for r in index["runs"]}
    assert regimes[1] == "staleness" and all(regimes[s] == "systematic" for s in range(2, 13)), regimes
    assert index["run"]["since_step"] == 2 and index["runs"][5]["lag_reading"]["since_step"] == 2
    assert "Never delivered" in index["run"]["verdict"]


def test_a_noisy_step_inside_an_event_neither_ends_it_nor_joins_the_history():
    """Swapped tensors at lag 1 (the loop, `--bug swapped-tensors`): steps 8-11 read KL k3 4.3, 4.4, 13 ± 8.9, 5.5 against
    a history of 0.0014. Step 10, 9,000× its history but within two of its standard errors of 3×, read "within": the
    event ended, step 10 joined the clean history, and step 11 opened a second event (a second alarm)."""
    kls = [2.8e-3, 2.0e-3, 1.2e-3, 1.1e-3, 1.0e-3, 1.4e-3, 2.0e-3, 4.31, 4.37, 13.15, 5.50]
    ses = [k / 10 for k in kls[:7]] + [0.29, 0.24, 8.86, 1.0]
    rows = [lagged(s, kl, se=se) for s, kl, se in zip(range(1, 12), kls, ses)]
    got = read_run(rows)
    assert [got[f"step_{s}"]["status"] for s in (8, 9, 10, 11)] == ["beyond"] * 4
    assert {got[f"step_{s}"]["since_step"] for s in (8, 9, 10, 11)} == {8}
    assert got["step_11"]["basis"] == "steps 1-7"  # step 10 is no part of the history
    # outside an event such a step is within (too noisy to tell), but no part of the history
    quiet = read_run([*rows[:7], lagged(8, 2e-2, se=1e-2), lagged(9, 1.5e-3)])
    assert quiet["step_8"]["status"] == "within" and quiet["step_9"]["basis"] == "steps 1-7"


def test_a_climbing_lag_is_amber_on_the_index_not_a_green_tick():
    """A lag-2 sync that stopped, climbing 4-7× its history but not named yet: the run verdict said so in words inside a
    green box (report.md: ✅) above rows reading plain "staleness" with red ESS badges. The box is amber, report.md
    marks it ⚠️, and each climbing row says "lag 2 climbing …" beside its verdict."""
    from tim_report.render.html import render_index
    from tim_report.render.markdown import render_index_md

    clean = [2.7e-3, 2.7e-3, 1.7e-3, 1.6e-3, 2.8e-3, 3.3e-3]
    rows = [lagged(s + 1, kl) for s, kl in enumerate(clean)]
    index = index_from_rows(rows + [lagged(7, 6.5e-3, se=1e-5), lagged(8, 9.5e-3, se=1e-5), lagged(9, 1.2e-2, se=1e-5)])
    assert index["run"]["regime"] == "staleness" and index["run"]["climbing"]
    html, md = render_index(index), render_index_md(index)
    assert '<section id="run-verdict" class="verdict staleness climbing">' in html
    assert "**Run verdict:** ⚠️ Staleness" in md and "| ⚠️ staleness (lag 1 climbing 4.44×) |" in md, md
    assert "lag 1 climbing 4.44×" in html
    assert not index_from_rows(rows)["run"]["climbing"] and "**Run verdict:** ✅" in render_index_md(index_from_rows(rows))


def test_many_runs_at_one_step_are_each_judged_against_the_steps_before():
    """Thirty runs at each step (seeds built together): the history was the last 20 entries less this step's, so from
    the 21st run of a step on nothing was left to judge it by ("unjudged", a fault there unseen), and the basis named
    the step once per run ("steps 7, 7, 7, …")."""
    rows = []
    for s in range(1, 10):
        for k in range(30):
            kl = 5e-2 if (s, k) == (8, 25) else 2e-3 * (1 + 0.1 * (k % 3))
            rows.append({**lagged(s, kl, se=1e-5), "id": f"s{s}_{k}"})
    got = read_run(rows)
    assert {got[f"s8_{k}"]["status"] for k in range(30) if k != 25} == {"within"}
    assert got["s8_25"]["status"] == "beyond" and got["s8_25"]["basis"] == "steps 7"
