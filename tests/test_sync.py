"""The exact check of a weight sync (issue 42, design §12, docs/sync.md): `weight_digest` on real versions of the tiny
model, its carriage (save_step, the canonical `.npz`, `--meta`, rank files), and the three sync findings on synthetic
batches whose digests say what happened."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest
from helpers import one_line_exit_2, run

import tim_report
from tim_report.analysis import analyze
from tim_report.analysis.lag.digests import checks
from tim_report.errors import BadInput
from tim_report.io import LoadOptions, load, meta_overrides
from tim_report.io.discover import sources
from tim_report.testing import make_batch

torch = pytest.importorskip("torch")

A, B, C = "a" * 64, "b" * 64, "c" * 64


def rec(version, digest, share=None, since=None, dtype="bf16"):
    return {"version": version, "dtype": dtype, "digest": digest, "changed_share": share, "since": since}


def ids(report) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in report.diagnosis["findings"]}


def with_digests(engine, trainer, **meta):
    b = make_batch(seed=1)
    b.meta.update(engine_digest=engine, trainer_digest=trainer, **meta)
    return b


# ---- the digest -----------------------------------------------------------------------------------------


def test_the_engine_and_the_trainer_cast_to_its_dtype_digest_alike(tiny_versions):
    v0, v1 = tiny_versions[0], tiny_versions[1]
    engine = {k: t.to(torch.bfloat16) for k, t in v1.items()}  # what a sync that copies the weights leaves
    e0 = tim_report.weight_digest({k: t.to(torch.bfloat16) for k, t in v0.items()}, "bf16", version=0)
    t0 = tim_report.weight_digest(v0, "bf16", version=0)
    t1 = tim_report.weight_digest(v1, "bf16", since=t0, version=1)
    e1 = tim_report.weight_digest(engine, torch.bfloat16, since=e0, version=1)
    assert e0.digest == t0.digest and e1.digest == t1.digest and t1.digest != t0.digest
    assert len(t1.digest) == 64 and t1.tensors == len(v1) and t1.elements == sum(t.numel() for t in v1.values())
    # the same elements changed on both sides, counted at the same positions (an Adam step moves most at lr 2e-4)
    changed = sum(int((v1[k].to(torch.bfloat16) != v0[k].to(torch.bfloat16)).sum()) for k in v1)
    assert e1.changed_share == t1.changed_share == pytest.approx(changed / t1.elements, abs=0.01)
    assert 0 < t1.changed_share < 1 and t1.sampled < t1.elements / 5  # the embeddings (393k elements) sampled
    assert (t1.since, t1.version) == (0, 1)
    assert tim_report.weight_digest(v1, "fp16").digest != tim_report.weight_digest(v1, "bf16").digest


def test_two_tensors_under_each_others_names_change_the_digest_and_are_named(tiny_versions):
    v1 = tiny_versions[1]
    a, b = "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"
    swapped = {**v1, a: v1[b], b: v1[a]}
    good, bad = tim_report.weight_digest(v1, "bf16"), tim_report.weight_digest(swapped, "bf16")
    assert good.digest != bad.digest
    assert bad.differing(good) == [a, b]
    assert good.differing(tim_report.weight_digest(dict(reversed(list(v1.items()))), "bf16")) == []  # order: none


def test_an_update_below_the_rounding_step_changes_nothing_in_bf16():
    w = {"w": torch.full((1000,), 1.0), "b": torch.zeros(10)}
    before = tim_report.weight_digest(w, "bf16", version=0)
    tiny = {"w": w["w"] + 1e-4, "b": w["b"]}  # bf16's step at 1.0 is 2⁻⁷: rounded away
    after = tim_report.weight_digest(tiny, "bf16", since=before, version=1)
    assert after.digest == before.digest and after.changed_share == 0
    assert tim_report.weight_digest(tiny, "fp32", version=1).digest != tim_report.weight_digest(w, "fp32").digest
    some = {"w": torch.cat([w["w"][:990], w["w"][990:] + 0.01]), "b": w["b"]}
    assert tim_report.weight_digest(some, "bf16", since=before).changed_share == pytest.approx(10 / 1010)


def test_a_sampled_share_reads_the_same_positions_on_both_sides(monkeypatch):
    monkeypatch.setattr("tim_report.io.weights.DIGEST_SAMPLE", 1000)
    g = torch.Generator().manual_seed(0)
    w = {f"layer{i}": torch.randn(64, 100, generator=g) for i in range(4)}
    moved = {k: torch.where(torch.rand(t.shape, generator=g) < 0.2, t + 1.0, t) for k, t in w.items()}
    w["norm"] = torch.ones(100)  # small: every element counted
    moved["norm"] = torch.cat([torch.ones(50), torch.full((50,), 2.0)])
    d0 = tim_report.weight_digest(w, "bf16")
    d1 = tim_report.weight_digest(moved, "bf16", since=d0)
    assert d1.sampled == 4 * 915 + 100  # every 7th element of each 6,400 (7: the smallest prime ≥ 6.4), the norm whole
    exact = (sum(int((moved[k].bfloat16() != w[k].bfloat16()).sum()) for k in w)) / 25_700
    assert d1.changed_share == pytest.approx(exact, abs=0.03)
    same = tim_report.weight_digest({k: t.clone() for k, t in moved.items()}, "bf16", since=d0)
    assert same.changed_share == d1.changed_share


def test_a_digester_reads_a_sync_stream_as_it_passes(tiny_versions):
    v1 = tiny_versions[1]
    digester = tim_report.WeightDigester("bf16", packed={"gate_up_proj": ["gate_proj", "up_proj"]})
    passed = list(digester.tap(iter(v1.items())))  # what the engine's load_weights would receive, unchanged
    assert [n for n, _ in passed] == list(v1) and all(t is v1[n] for n, t in passed)
    assert digester.result(version=1).digest == tim_report.weight_digest(
        v1, "bf16", packed={"gate_up_proj": ["gate_proj", "up_proj"]}).digest


def test_packed_parts_digest_as_the_engine_fuses_them(tiny_versions):
    v1 = tiny_versions[1]
    fused = {}
    for k, t in v1.items():
        if ".q_proj." in k:
            fused[k.replace("q_proj", "qkv_proj")] = torch.cat([t, v1[k.replace("q_", "k_")], v1[k.replace("q_", "v_")]])
        elif ".k_proj." not in k and ".v_proj." not in k:
            fused[k] = t
    mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    assert tim_report.weight_digest(v1, "bf16", packed=mapping).digest == tim_report.weight_digest(fused, "bf16").digest
    with pytest.raises(BadInput, match="lacks 1 of its 3 parts"):
        tim_report.weight_digest({k: t for k, t in v1.items() if ".v_proj." not in k}, "bf16", packed=mapping)


@pytest.mark.parametrize("call, message", [
    (lambda w: tim_report.weight_digest(w, "fp8"), "expected the engine's, one of bf16, fp16, fp32"),
    (lambda w: tim_report.weight_digest(w, "bf16", version=-1), "version=-1"),
    (lambda w: tim_report.weight_digest(w, "bf16", version=True), "version=True"),
    (lambda w: tim_report.weight_digest({}, "bf16"), "no tensors"),
    (lambda w: tim_report.weight_digest(42, "bf16"), "weights is int"),
    (lambda w: tim_report.weight_digest({"x": [1.0]}, "bf16"), "expected a name and a torch tensor"),
    (lambda w: tim_report.weight_digest({**w, "qkv.weight": torch.empty(0)}, "bf16"), "holds no elements"),
    (lambda w: tim_report.weight_digest(w, "bf16", since="abc"), "since is str"),
    (lambda w: tim_report.weight_digest(w, "bf16", since=tim_report.weight_digest({"y": w["x"]}, "bf16")),
     "'x' is on one side only"),
    (lambda w: tim_report.weight_digest(w, "bf16", since=tim_report.weight_digest(w, "fp16")), "in fp16"),
    (lambda w: tim_report.weight_digest(w, "bf16", since=tim_report.weight_digest({"x": torch.ones(3)}, "bf16")),
     "was [3], is [4]"),
])
def test_a_bad_call_is_one_line_naming_it(call, message):
    with pytest.raises(BadInput, match=message.replace("[", r"\[").replace("]", r"\]")) as e:
        call({"x": torch.ones(4)})
    assert "\n" not in str(e.value)


# ---- carried per step -----------------------------------------------------------------------------------


def save(path, **kw):
    b = make_batch(seed=2, n_seqs=8)
    return tim_report.save_step(path, b.rollout_logp, b.trainer_logp, offsets=b.offsets, **kw)


def test_save_step_carries_both_sides_through_the_canonical_file(tmp_path):
    w = {"x": torch.arange(12.0)}
    e0 = tim_report.weight_digest(w, "bf16")
    e1 = tim_report.weight_digest({"x": w["x"] + 3}, "bf16", since=e0)  # no version: the batch's one version, 4
    t1 = tim_report.weight_digest({"x": w["x"] + 3}, "bf16", version=5)
    path = save(tmp_path / "s.npz", engine_digest=e1, trainer_digest=[t1, str(e0).replace("?", "4")],
                weight_version=[4] * 8, trainer_version=5, step=5)
    meta = load(path).meta
    assert meta["engine_digest"] == [{**e1.record(), "version": 4}]
    assert meta["trainer_digest"][0] == t1.record() and meta["trainer_digest"][1]["version"] == 4
    assert str(t1) == f"5:bf16:{t1.digest}" and str(e1).startswith("?:bf16:")
    with tim_report.StepWriter() as writer:  # a writer thread carries them as they are
        background = save(tmp_path / "bg.npz", engine_digest=e1, weight_version=[4] * 8, background=writer)
    assert load(background).meta["engine_digest"] == meta["engine_digest"]
    with pytest.raises(BadInput, match="engine_digest has no version and the step names no single one"):
        save(tmp_path / "t.npz", engine_digest=e1, weight_version=[4, 5] * 4)
    with pytest.raises(BadInput, match="trainer_digest has digest 'xyz'"):
        save(tmp_path / "u.npz", trainer_digest={"version": 1, "dtype": "bf16", "digest": "xyz"})
    assert not (tmp_path / "u.npz").exists()


def test_the_meta_option_takes_the_text_form_and_refuses_a_bad_one(tmp_path):
    path = save(tmp_path / "s.npz", step=3)
    text = f"3:bf16:{A}:0.015:2,3:bf16:{B}"
    assert meta_overrides({"engine_digest": text})["engine_digest"] == [rec(3, A, 0.015, 2), rec(3, B)]
    meta = load(path, LoadOptions(meta={"engine_digest": f"3:BF16:{A.upper()}", "trainer_digest": f"3:bf16:{A}"})).meta
    assert meta["engine_digest"] == meta["trainer_digest"] == [rec(3, A)]
    for bad, said in ((f"3:bf8:{A}", "dtype 'bf8'"), (f"x:bf16:{A}", "version 'x'"), (f"3:bf16:{A}:1.5", "changed_share '1.5'"),
                      (f"3:bf16:{A}:nan", "changed_share 'nan'"), ("3:bf16", "expected VERSION:DTYPE:SHA256"),
                      (",".join([f"3:bf16:{A}"] * 65), "holds 65 records"), (f"3:bf16:{A}:0.1:-2", "since '-2'")):
        one_line_exit_2(run("check", path, "--meta", f"engine_digest={bad}"), "--meta", said)


@pytest.mark.parametrize("value", ["garbage", [{"version": "abc"}], {"version": 1, "dtype": "bf16", "digest": A * 2},
                                   [rec(1, A)] * 65, 42])
def test_a_bad_digest_in_a_file_is_unknown_with_a_note(tmp_path, value):
    b = with_digests(value, [rec(1, B)], trainer_version=1)
    report = analyze(b)
    assert "weights_mismatch" not in ids(report) and report.sync["engine"] == []
    assert report.sync["health"] == "unchecked" and "the engine digest" in report.sync["line"]
    assert any(n.startswith("meta engine_digest ") and "not checked" in n for n in report.run["notes"])


def test_rank_files_carry_every_ranks_digests_once(tmp_path):
    for rank in (0, 1):
        save(tmp_path / "run", step=2, rank=rank, world_size=2, engine_digest=[rec(2, A), rec(2, [A, C][rank])],
             trainer_digest=rec(2, A))
    meta = load(sources(tmp_path / "run")[0]).meta
    assert meta["engine_digest"] == [rec(2, A), rec(2, C)] and meta["trainer_digest"] == [rec(2, A)]
    report = analyze(load(sources(tmp_path / "run")[0]))  # one replica missed the sync
    f = next(f for f in report.diagnosis["findings"] if f["id"] == "weights_mismatch")
    assert f["evidence"]["differing"] == 1 and f["evidence"]["engine_digests"] == 2 and "1 of 2 engine digests" in f["title"]


# ---- the findings -------------------------------------------------------------------------------------


def test_equal_digests_raise_nothing_and_say_so():
    b = with_digests([rec(5, A, 0.015, 4)], [rec(5, A, 0.015, 4), rec(4, B)], trainer_version=5)
    report = analyze(b)
    assert not {"sync_not_applied", "updates_rounded_away", "weights_mismatch"} & set(ids(report))
    assert report.sync["health"] == "agree" and report.sync["compared"] == [{"version": 5, "equal": True}]
    assert report.sync["line"] == ("Sync: the engine holds the trainer's weights at version 5 (bf16 digests equal); since "
                                   "version 4 the engine changed 1.5% of its elements, the trainer 1.5%.")


def test_a_sync_not_applied_leads_the_verdict_and_fails_check(tmp_path):
    b = with_digests([rec(5, A, 0.0, 4)], [rec(5, B, 0.016, 4)], trainer_version=5)
    report = analyze(b)
    lead = report.diagnosis["findings"][0]
    assert lead["id"] == "sync_not_applied" and lead["severity"] == "error"
    assert "weights_mismatch" not in ids(report)  # the same version: explained by the sync that did not arrive
    assert report.diagnosis["verdict"].startswith("Systematic: sync not applied: the engine's weights at version 5 are "
                                                  "its weights of version 4, bit for bit")
    assert report.diagnosis["regime"] == "systematic" and report.sync["health"] == "fault"
    path = save(tmp_path / "s.npz", engine_digest=rec(5, A, 0.0, 4), trainer_digest=rec(5, B, 0.016, 4),
                trainer_version=5)
    res = run("check", path)
    assert res.exit_code == 1 and "sync_not_applied" in res.output


def test_a_digest_unchanged_across_two_versions_is_not_applied():
    found = checks([rec(4, A), rec(5, A)], [rec(4, A), rec(5, C)])
    assert found == [("sync_not_applied", {"version": 5, "since": 4, "engine_digest": A[:12], "engine_changed_share": 0.0,
                                           "trainer_changed_share": None})]
    assert checks([rec(4, A), rec(5, A)], [rec(4, A), rec(5, A)]) == []  # the trainer did not move either: nothing to say
    assert checks([rec(5, A, 0.0, 4)], [rec(5, A, 0.0, 4)]) == []


def test_a_share_far_below_the_trainers_is_an_update_rounded_away():
    report = analyze(with_digests([rec(5, A, 0.001, 4)], [rec(5, B, 0.015, 4)], trainer_version=5))
    lead = report.diagnosis["findings"][0]
    assert lead["id"] == "updates_rounded_away" and lead["evidence"]["ratio"] == pytest.approx(0.001 / 0.015)
    assert "weights_mismatch" not in ids(report)
    assert checks([rec(5, A, 0.0145, 4)], [rec(5, B, 0.015, 4)]) == [  # nearly all of it arrived: other weights
        ("weights_mismatch", {"version": 5, "engine_digest": A[:12], "trainer_digest": B[:12], "engine_digests": 1,
                              "differing": 1, "holds_version": None})]


def test_a_mismatch_names_the_version_the_engine_holds():
    report = analyze(with_digests([rec(9, A)], [rec(9, B), rec(5, A)], trainer_version=9))
    f = report.diagnosis["findings"][0]
    assert f["id"] == "weights_mismatch" and f["evidence"]["holds_version"] == 5
    assert f["title"].endswith("they are the trainer's weights of version 5")
    assert json.loads(json.dumps(report.summary_dict(), default=str))["sync"]["faults"] == ["weights_mismatch"]


def test_digests_of_other_dtypes_or_versions_are_not_compared():
    assert checks([rec(5, A, dtype="fp16")], [rec(5, B)]) == []
    report = analyze(with_digests([rec(4, A)], [rec(5, B)], trainer_version=5))
    assert report.sync["health"] == "unchecked" and report.sync["compared"] == []
    assert "no version with both sides' digests" in report.sync["line"]


def test_a_batch_without_digests_has_no_sync_section():
    report = analyze(make_batch(seed=1))
    assert report.sync is None and "sync" not in report.summary_dict()


def test_meta_lists_the_digest_keys():
    assert np.all([k in tim_report.model.META_KEYS for k in ("engine_digest", "trainer_digest")])


# ---- the run view -------------------------------------------------------------------------------------


def one_step_off(stuck_from: int | None, steps: int = 5) -> list[tuple[str, object]]:
    """A one-step-off run whose steps each carry the engine's digest of the version it sampled with (t − 1) and the
    trainer's of its own (t): no step alone can compare them. From `stuck_from` on the engine keeps its weights."""
    trainer = [f"{v:064x}" for v in range(1, steps + 1)]
    engine = [trainer[v] if stuck_from is None or v < stuck_from else trainer[stuck_from - 1] for v in range(steps)]
    out = []
    for t in range(1, steps):
        b = make_batch(seed=t)
        b.meta.update(step=t, trainer_version=t, engine_digest=[rec(t - 1, engine[t - 1])], trainer_digest=[rec(t, trainer[t])])
        b.weight_version = np.full(b.n_seqs, str(t - 1))
        out.append((f"step_{t}", b))
    return out


def test_a_run_reads_the_digests_of_its_steps_together(tmp_path):
    from helpers import build_site

    site = build_site(tmp_path / "clean", one_step_off(None))
    index = json.loads((site / "index.json").read_text())
    assert [r["weight_digests"][0]["side"] for r in index["runs"]] == ["engine"] * 4
    assert not {f["id"] for f in index["run"]["findings"]} & {"sync_not_applied", "weights_mismatch"}
    site = build_site(tmp_path / "stuck", one_step_off(2))
    run = json.loads((site / "index.json").read_text())["run"]
    lead = run["findings"][0]
    assert lead["id"] == "sync_not_applied" and lead["evidence"]["version"] == 2 and lead["evidence"]["since"] == 1
    assert run["regime"] == "systematic" and run["verdict"].startswith("Sync not applied: the engine's weights at version 2")
    assert run["what_to_check"] == lead["what_to_check"]
    assert "Sync not applied" in (site / "report.md").read_text()


def test_the_page_report_md_and_the_terminal_line_show_the_sync(tmp_path):
    from helpers import build_site

    clean = with_digests([rec(5, A, 0.015, 4)], [rec(5, A, 0.015, 4), rec(6, B, 0.016, 5)], trainer_version=6, step=6)
    clean.weight_version = np.full(clean.n_seqs, "5")
    stuck = with_digests([rec(5, A, 0.0, 4)], [rec(5, B, 0.016, 4)], trainer_version=5, step=7)
    site = build_site(tmp_path, [("clean", clean), ("stuck", stuck)])
    page, md = (site / "clean" / "index.html").read_text(), (site / "clean" / "report.md").read_text()
    line = ("Sync: the engine holds the trainer's weights at version 5 (bf16 digests equal); since version 4 the engine "
            "changed 1.5% of its elements, the trainer 1.5%.")
    assert 'id="sync"' in page and html.escape(line).replace('&#x27;', '&#39;') in page and "✓ equal" in page
    assert "<summary>Weight sync</summary>" in md and f"**{line}**" in md and f"| 5 | {A[:12]} | {A[:12]} | 1.5% since v4" in md
    assert "| 6 | — | " + B[:12] + " |" in md and "one side only" in md
    rows = {r["id"]: r for r in json.loads((site / "index.json").read_text())["runs"]}
    assert rows["clean"]["glance"].endswith("; sync: bf16 digests equal at v5")
    assert rows["stuck"]["glance"].startswith("systematic: sync not applied (engine v5 = v4) (error)")
    assert "✖ differ" in (site / "stuck" / "index.html").read_text()
    res = run("check", tmp_path / "in" / "clean.npz")
    assert res.exit_code == 0 and "sync: bf16 digests equal at v5" in res.output


def test_an_engine_that_holds_the_trainers_weights_is_not_judged_by_its_share():
    # the engine was wrong at version 4 and holds the trainer's weights at 5: its share since 4 says nothing wrong at 5
    assert checks([rec(5, A, 0.001, 4)], [rec(5, A, 0.015, 4)]) == []
    assert checks([rec(5, A, 0.0, 4)], [rec(5, A, 0.015, 4)]) == []


def test_check_on_a_run_folder_reads_its_steps_digests_together(tmp_path):
    from tim_report.io import save_batch

    (tmp_path / "stuck").mkdir()
    (tmp_path / "clean").mkdir()
    for name, b in one_step_off(2):
        save_batch(b, tmp_path / "stuck" / f"{name}.npz")
    for name, b in one_step_off(None):
        save_batch(b, tmp_path / "clean" / f"{name}.npz")
    res = run("check", tmp_path / "stuck")
    assert res.exit_code == 1, res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith(f"{tmp_path / 'stuck'}: error sync_not_applied (the steps read together): Sync not applied: "
                           "the engine's weights at version 2 are its weights of version 1")
    assert all(": ok: " in x for x in res.output.strip().splitlines()[:-1])  # no step alone could tell
    res = run("check", tmp_path / "clean")
    assert res.exit_code == 0 and "sync_not_applied" not in res.output
    res = run("check", "--json", tmp_path / "stuck")
    assert json.loads(res.output.strip().splitlines()[-1])["across_steps"] == "sync_not_applied"


def test_watch_alarms_once_per_sync_fault_cause_first(tmp_path):
    from tim_report.io import save_batch

    for folder, steps in (("own", [with_digests([rec(v, A if v < 2 else B, 0.0 if v >= 2 else 0.01, v - 1)],
                                                [rec(v, f"{v:064x}", 0.015, v - 1)], trainer_version=v, step=v)
                                   for v in range(1, 5)]),
                          ("together", [b for _, b in one_step_off(2)])):
        (tmp_path / folder).mkdir()
        for b in steps:
            save_batch(b, tmp_path / folder / f"step_{b.meta['step']}.npz")
    res = run("watch", tmp_path / "own", "-o", tmp_path / "own_site", "--once", "--interval", "0.05")
    alarms = [x for x in res.output.splitlines() if x.startswith("alarm: ")]
    assert len(alarms) == 2, res.output  # step 1's partial update, then the stuck engine from step 2 on (one event)
    assert alarms[1].startswith("alarm: step_2: systematic: sync not applied (engine v2 = v1) (error); sync not applied: ")
    assert alarms[1].endswith("(exact: the weight digests say so)")
    res = run("watch", tmp_path / "together", "-o", tmp_path / "together_site", "--once", "--interval", "0.05")
    alarms = [x for x in res.output.splitlines() if x.startswith("alarm: ")]
    assert len(alarms) == 1 and alarms[0].startswith("alarm: step_3: Sync not applied: the engine's weights at version 2 "
                                                     "are its weights of version 1"), res.output
    assert alarms[0].endswith("(the steps read together)")
