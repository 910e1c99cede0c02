"""Each framework's dump, read natively: token counts and metrics against the raw arrays, computed here.

The fixtures (tests/data/frameworks/, written by scripts/make_framework_fixtures.py) carry a known
mismatch, placeholder zeros, first-token fillers, multi-turn tool spans, padding and duplicated or
sliced ranks. Log-probs there are a function of the token id, so `aligned` checks that every token
kept its own log-probs whatever the layout, without trusting the reader.
"""

from __future__ import annotations

import importlib.util
import io
import json
import pickle
import shutil
import sys
import types
import warnings

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import ROOT

from tim_report.analysis import analyze
from tim_report.cli import main
from tim_report.errors import BadInput
from tim_report.io import LoadOptions, load, save_batch, sources

DATA = ROOT / "tests" / "data" / "frameworks"
_spec = importlib.util.spec_from_file_location("make_framework_fixtures", ROOT / "scripts" / "make_framework_fixtures.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)
VOCAB_FILLER = -np.log(fixtures.VOCAB)


def expected(rollout, trainer) -> dict:
    """Token count, mean |δ| and KL k3 of the trained tokens, from their raw log-probs."""
    ro, tr = np.asarray(rollout, np.float64), np.asarray(trainer, np.float64)
    delta = tr - ro
    return {"tokens": ro.size, "abs_delta_mean": np.abs(delta).mean(), "kl_k3": np.mean(np.expm1(delta) - delta)}


def same_numbers(batch, want: dict) -> None:
    m = analyze(batch).metrics
    assert m["tokens"] == want["tokens"]
    assert m["abs_delta_mean"] == pytest.approx(want["abs_delta_mean"], rel=1e-5)
    assert m["kl_k3"] == pytest.approx(want["kl_k3"], rel=1e-4)


def aligned(batch) -> None:
    """Every trained token carries g(its id) as rollout and g + d as trainer log-prob (float32 on some disks)."""
    ids, m = batch.token_ids[batch.mask], batch.mask
    nonzero = batch.rollout_logp[m] != 0.0
    np.testing.assert_allclose(batch.rollout_logp[m][nonzero], fixtures.g(ids)[nonzero], atol=1e-5)
    np.testing.assert_allclose(batch.trainer_logp[m], fixtures.trainer_of(ids), atol=1e-5)


def read(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load(path, LoadOptions(**kw))


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_exit_2(res, path, phrase):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tim-report: error: {path}"), res.stderr
    assert phrase in lines[0], lines[0]
    assert "Traceback" not in res.output


# ---- the fixtures are what the script writes -------------------------------------------------------

def test_fixture_writer_is_deterministic(tmp_path):
    fixtures.write_all(tmp_path)
    committed = sorted(p.relative_to(DATA) for p in DATA.rglob("*") if p.is_file())
    assert committed == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    for rel in committed:
        if (DATA / rel).read_bytes() != (tmp_path / rel).read_bytes():  # torch.save inside a pickle: compare content
            a, b = (read(base / rel, allow_pickle=True) for base in (DATA, tmp_path))
            np.testing.assert_array_equal(a.rollout_logp, b.rollout_logp)
            np.testing.assert_array_equal(a.trainer_logp, b.trainer_logp)
            np.testing.assert_array_equal(a.mask, b.mask)


# ---- prime-rl --------------------------------------------------------------------------------------

def prime_raw(files) -> dict:
    ro, tr = [], []
    for f in files:
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            for i, m in enumerate(rec["loss_mask"]):
                if m and i > 0:
                    ro.append(rec["inference_logprobs"][i])
                    tr.append(rec["trainer_logprobs"][i])
    return expected(ro, tr)


def test_prime_rl_step_folder():
    step = DATA / "prime-rl" / "token_exports" / "step_1"
    batch = read(step)
    assert batch.meta["framework"] == "prime-rl" and batch.meta["step"] == 1
    same_numbers(batch, prime_raw(sorted(step.glob("rank_*.jsonl"))))
    aligned(batch)
    assert not np.any(np.isclose(batch.trainer_logp, VOCAB_FILLER))  # the index-0 filler never enters
    assert batch.turn is not None and batch.turn.max() >= 1  # multi-turn spans kept
    assert set(batch.env) == {"math", "tool-use"}
    assert batch.n_seqs == 6  # 4 lines, the first of each rank packs two samples
    whats = {e["what"] for e in batch.meta["exclusions"]}
    assert {"trainer_logprobs[0] filler", "prompt tokens", "placeholder 0.0 rollout log-probs outside the loss mask"} <= whats


def test_prime_rl_one_rank_file():
    rank = DATA / "prime-rl" / "token_exports" / "step_2" / "rank_1.jsonl"
    batch = read(rank)
    assert batch.meta["step"] == 2
    same_numbers(batch, prime_raw([rank]))


def test_prime_rl_run_folder_gives_one_run_per_step(tmp_path):
    res = run("build", DATA / "prime-rl", "-o", tmp_path / "site")
    assert res.exit_code == 0, res.output
    for step in (1, 2):
        summary = json.loads((tmp_path / "site" / f"step_{step}" / "summary.json").read_text())
        assert summary["run"]["meta"]["step"] == step
        want = prime_raw(sorted((DATA / "prime-rl" / "token_exports" / f"step_{step}").glob("rank_*.jsonl")))
        assert summary["metrics"]["tokens"] == want["tokens"]
        assert summary["metrics"]["kl_k3"] == pytest.approx(want["kl_k3"], rel=1e-4)
    page = (tmp_path / "site" / "step_1" / "index.html").read_text()
    assert "prime-rl dump" in page and "<th>left out<td>" in page and "trainer_logprobs[0] filler" in page


# ---- NeMo-RL ---------------------------------------------------------------------------------------

def nemo_raw(path) -> dict:
    ro, tr = [], []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["sample_loss_mask"][0] == 0:
            continue
        n = rec["input_lengths"][0]
        for i in range(1, n):
            if rec["token_loss_mask"][0][i]:
                ro.append(rec["generation_logprobs"][0][i])
                tr.append(rec["prev_logprobs"][0][i])
    return expected(ro, tr)


def test_nemo_rl_step_file():
    path = DATA / "nemo-rl" / "train_data_step1.jsonl"
    batch = read(path)
    assert batch.meta["framework"] == "nemo-rl" and batch.meta["step"] == 1
    same_numbers(batch, nemo_raw(path))
    assert batch.n_seqs == 5  # the sample with sample_loss_mask 0 is left out
    assert int((batch.rollout_logp[batch.mask] == 0.0).sum()) == 1  # the 0.0 inside the mask stays: a finding
    assert any("exactly 0.0" in n for n in batch.notes)
    assert batch.prompt_string(0).startswith("user: question 0")
    assert {e["what"] for e in batch.meta["exclusions"]} >= {"padding beyond input_lengths", "prev_logprobs[0] filler",
                                                             "samples with sample_loss_mask 0"}


def test_nemo_rl_log_dir_and_unwrapped_fields(tmp_path):
    found = sources(DATA / "nemo-rl")
    assert [(s.run_id, s.step) for s in found] == [("step_1", 1), ("step_2", 2)]
    lines = [json.loads(x) for x in (DATA / "nemo-rl" / "train_data_step2.jsonl").read_text().splitlines()]
    plain = [{k: (v[0] if isinstance(v, list) and len(v) == 1 else v) for k, v in rec.items()} for rec in lines]
    (tmp_path / "train_data_step2.jsonl").write_text("\n".join(json.dumps(r) for r in plain) + "\n")
    same_numbers(read(tmp_path / "train_data_step2.jsonl"), nemo_raw(DATA / "nemo-rl" / "train_data_step2.jsonl"))


# ---- slime -----------------------------------------------------------------------------------------

def slime_raw(path) -> dict:
    dump = torch.load(path, weights_only=True)
    ro = np.concatenate([s["rollout_log_probs"][s["loss_masks"] > 0].numpy() for s in dump["samples"]])
    tr = np.concatenate([s["log_probs"][s["loss_masks"] > 0].numpy() for s in dump["samples"]])
    return expected(ro, tr)


def test_slime_train_dump_joined_with_rollout_dump():
    train = DATA / "slime" / "train_data" / "0.pt"
    batch = read(train)
    assert batch.meta["framework"] == "slime" and batch.meta["step"] == 0
    same_numbers(batch, slime_raw(train))
    aligned(batch)
    rollout = torch.load(DATA / "slime" / "rollout_data" / "0.pt", weights_only=True)["samples"]
    samples = torch.load(train, weights_only=True)["samples"]
    assert list(batch.group) == [str(rollout[s["rollout_position"]]["group_index"]) for s in samples]
    assert analyze(batch).run["weight_versions"]["count"] == 2
    assert "truncated 1" in batch.meta["sample_status"]
    assert batch.prompt_string(0).startswith("user: problem 0-")


def test_slime_dump_dir_gives_one_run_per_rollout_id(tmp_path):
    res = run("build", DATA / "slime", "-o", tmp_path / "site", "--format", "md")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "site" / "step_1" / "report.md").read_text()
    assert "mixes 2 policy weight versions" in md and "slime dump" in md and "About the batch" in md


# ---- miles -----------------------------------------------------------------------------------------

def miles_raw(folder) -> dict:
    """The union of the local slices, one file per cp rank (tensor-parallel copies skipped): order does not matter."""
    ro, tr, seen = [], [], set()
    for f in sorted(folder.glob("0_*.pt")):
        d = torch.load(f, weights_only=False)
        if d["cp_rank"] in seen:
            continue
        seen.add(d["cp_rank"])
        cols = d["rollout_data"]
        for m, r, t in zip(cols["loss_masks"], cols["rollout_log_probs"], cols["log_probs"]):
            keep = np.asarray(m) > 0
            ro.append(np.asarray(r)[keep])
            tr.append(np.asarray(t)[keep])
    return expected(np.concatenate(ro), np.concatenate(tr))


def test_miles_zigzag_slices_reassembled_duplicates_dropped():
    folder = DATA / "miles" / "train_data"
    batch = read(folder / "0_2.pt", allow_pickle=True)  # one rank file brings its siblings
    assert batch.meta["framework"] == "miles"
    same_numbers(batch, miles_raw(folder))
    aligned(batch)  # every slice went back to its own tokens
    assert any(e["what"] == "tensor-parallel duplicate samples" for e in batch.meta["exclusions"])
    assert batch.n_seqs == 5 and batch.turn is not None


def test_miles_without_allow_pickle_names_the_flag_and_the_risk(tmp_path):
    res = run("build", DATA / "miles", "-o", tmp_path / "site")
    one_line_exit_2(res, DATA / "miles" / "train_data" / "0_0.pt", "--allow-pickle")
    assert "arbitrary code" in res.stderr and not (tmp_path / "site").exists()


def test_miles_dump_of_tensors_loads_with_weights_only(tmp_path):
    """miles' own writer under the default Ray object store saves torch tensors and lists, not numpy arrays: such a
    dump loads with weights_only=True, no --allow-pickle (docs/formats.md said it always needed unpickling)."""
    def tensors(x):
        if isinstance(x, np.ndarray):
            return torch.from_numpy(x)
        if isinstance(x, dict):
            return {k: tensors(v) for k, v in x.items()}
        if isinstance(x, list):
            return [tensors(v) for v in x]
        return x

    out = tmp_path / "miles" / "train_data"
    out.mkdir(parents=True)
    for p in sorted((DATA / "miles" / "train_data").glob("*.pt")):
        torch.save(tensors(torch.load(p, weights_only=False)), out / p.name)  # our own fixture: trusted
    assert torch.load(out / "0_0.pt", weights_only=True)["rollout_id"] == 0
    res = run("build", tmp_path / "miles", "-o", tmp_path / "site")
    assert res.exit_code == 0, res.stderr
    assert "unpickl" not in res.stderr and (tmp_path / "site" / "index.json").exists()
    same = read(DATA / "miles" / "train_data" / "0_0.pt", allow_pickle=True)
    assert read(out / "0_0.pt").n_seqs == same.n_seqs == 5


def test_each_file_unpickled_is_named_once_per_command(tmp_path):
    """Every command that unpickles the four miles rank files names each exactly once, whether it reads them once
    or twice (the same input given twice), serially or in --jobs workers; a rebuild that reuses the cached step
    unpickles nothing and names nothing."""
    ranks = sorted((DATA / "miles" / "train_data").glob("0_*.pt"))
    rank0 = ranks[0]

    def named(res) -> list[str]:
        assert res.exit_code == 0, res.output
        lines = [line for line in res.stderr.splitlines() if "unpickling in full" in line]
        assert all(line.startswith("tim-report: warning: ") for line in lines)
        return sorted(line.split(": ")[2] for line in lines)

    want = sorted(str(f) for f in ranks)
    assert named(run("inspect", rank0, "--allow-pickle")) == want
    assert named(run("check", rank0, rank0, "--allow-pickle")) == want
    assert named(run("build", rank0, rank0, "--allow-pickle", "--format", "json", "-o", tmp_path / "a")) == want
    assert named(run("build", rank0, rank0, "--allow-pickle", "--format", "json", "--jobs", "2", "-o", tmp_path / "b")) == want
    assert named(run("build", rank0, rank0, "--allow-pickle", "--format", "json", "-o", tmp_path / "a")) == []


# ---- SkyRL -----------------------------------------------------------------------------------------

class _Captured(dict):
    def __setstate__(self, state):
        self.state = state


class _RawUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module.startswith("skyrl"):
            return _Captured if name != "_rebuild_tensor_batch" else (lambda cls, state: _Captured(state=state))
        return super().find_class(module, name)


def skyrl_raw(path) -> dict:
    obj = _RawUnpickler(io.BytesIO(path.read_bytes())).load()
    fields = obj.state["batch_dict"] if hasattr(obj, "state") else obj["state"]["batch_dict"]

    def arr(f):
        if f.get("format") == "numpy":
            return np.frombuffer(f["data"], dtype=f["dtype"]).reshape(f["shape"])
        return torch.load(io.BytesIO(f["data"]), weights_only=True).numpy()

    rows = slice(0, -1)  # the last row is SkyRL's filler
    keep = arr(fields["loss_mask"])[rows] > 0
    return expected(arr(fields["rollout_logprobs"])[rows][keep], arr(fields["action_log_probs"])[rows][keep])


@pytest.mark.parametrize("step,layout", [(1, "right-aligned"), (2, "right-padded")])
def test_skyrl_right_aligned_and_right_padded(step, layout):
    """SkyRL pops `rewards` and metadata["uids"] before dump_data (skyrl/train/trainer.py, RayPPOTrainer.train): no
    rewards; groups from metadata["policy_prompt_boundaries"] (compute_prompt_boundaries, skyrl/train/dataset/
    preprocess.py: one (start, end) per prompt over the rows before pad_training_input_batch's filler), which
    only SkyRL since prompt_mean (#1719) writes: the older dump (step 2) has no groups, and says so."""
    path = DATA / "skyrl" / "dumped_data" / f"global_step_{step}_training_input.pkl"
    batch = read(path, allow_pickle=True)
    assert batch.meta["framework"] == "skyrl" and layout in batch.meta["layout"] and batch.meta["step"] == step
    same_numbers(batch, skyrl_raw(path))
    aligned(batch)
    assert batch.reward is None
    if step == 1:
        assert list(batch.group) == ["0", "0", "1", "1", "2"]  # the filler row is in no prompt's range
    else:
        assert batch.group is None and any("policy_prompt_boundaries" in n for n in batch.notes)


def test_skyrl_needs_allow_pickle(tmp_path):
    path = DATA / "skyrl" / "dumped_data" / "global_step_1_training_input.pkl"
    one_line_exit_2(run("build", path, "-o", tmp_path / "site"), path, "--allow-pickle")


# ---- verl ------------------------------------------------------------------------------------------

@pytest.fixture
def fake_verl(monkeypatch):
    """verl's DataProto as far as unpickling goes: the state is (torch.save bytes of the batch, non-tensor, meta)."""
    module = types.ModuleType("verl.protocol")

    class DataProto:
        def __setstate__(self, state):
            raw, self.non_tensor_batch, self.meta_info = state
            self.batch = torch.load(io.BytesIO(raw), weights_only=True)

    DataProto.__module__ = "verl.protocol"
    module.DataProto = DataProto
    monkeypatch.setitem(sys.modules, "verl", types.ModuleType("verl"))
    monkeypatch.setitem(sys.modules, "verl.protocol", module)
    return DataProto


def test_verl_dataproto_without_verl_says_so(tmp_path, monkeypatch):
    for name in ("verl", "verl.protocol"):  # as where verl is not installed (the integrations extra installs it)
        monkeypatch.setitem(sys.modules, name, None)
    path = DATA / "verl" / "dataproto_step_3.pkl"
    one_line_exit_2(run("build", path, "-o", tmp_path / "a"), path, "--allow-pickle")
    one_line_exit_2(run("build", path, "--allow-pickle", "-o", tmp_path / "b"), path, "needs the 'verl' package")


def test_verl_dataproto(fake_verl):
    path = DATA / "verl" / "dataproto_step_3.pkl"
    batch = read(path, allow_pickle=True)
    proto = pickle.loads(path.read_bytes())
    keep = proto.batch["response_mask"].numpy() > 0
    same_numbers(batch, expected(proto.batch["rollout_log_probs"].numpy()[keep], proto.batch["old_log_probs"].numpy()[keep]))
    aligned(batch)
    assert batch.meta["framework"] == "verl" and batch.meta["step"] == 3
    assert analyze(batch).run["weight_versions"] == {"count": 2, "values": ["2", "3"]}
    assert batch.turn is not None and list(batch.group[:2]) == ["u0", "u0"]


# ---- what every format shares ----------------------------------------------------------------------

@pytest.mark.parametrize("path", ["prime-rl/token_exports/step_1", "nemo-rl/train_data_step1.jsonl", "slime/train_data/0.pt",
                                  "miles/train_data/0_0.pt", "skyrl/dumped_data/global_step_1_training_input.pkl"])
def test_canonical_round_trip_keeps_the_new_fields(tmp_path, path):
    batch = read(DATA / path, allow_pickle=True)
    save_batch(batch, tmp_path / "c.npz")
    back = load(tmp_path / "c.npz")
    for name in ("turn", "weight_version", "env", "group", "rollout_logp", "mask"):
        a, b = getattr(batch, name), getattr(back, name)
        assert (a is None) == (b is None), name
        if a is not None:
            np.testing.assert_array_equal(a, b)
    assert back.meta["exclusions"] == batch.meta["exclusions"] and back.meta["framework"] == batch.meta["framework"]


def test_inspect_names_framework_layout_roles_and_exclusions():
    res = run("inspect", DATA / "nemo-rl" / "train_data_step1.jsonl", "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["framework"] == "nemo-rl" and "right-padded" in info["layout"]
    assert info["roles"]["trainer"]["key"] == "prev_logprobs" and info["roles"]["rollout"]["key"] == "generation_logprobs"
    assert any(e["what"] == "prev_logprobs[0] filler" and e["why"] for e in info["exclusions"])
    res = run("inspect", DATA / "prime-rl")
    assert res.exit_code == 0 and "2 steps" in res.stdout
    text = run("inspect", DATA / "slime" / "train_data" / "1.pt").stdout
    assert "framework: slime" in text and "excluded from the metrics" in text and "log_probs" in text


@pytest.mark.parametrize("fixture,name,step", [
    ("slime/train_data/1.pt", "baz.pt", 1),  # the train dump's rollout_id, its path renamed away
    ("skyrl/dumped_data/global_step_2_training_input.pkl", "baz.pkl", None),  # metadata's global_step is None here
    ("prime-rl/token_exports/step_2/rank_0.jsonl", "baz.jsonl", 2),  # the records' step
    ("verl/dataproto_step_3.pkl", "baz.pkl", 3),  # meta_info's global_steps
    ("slime/train_data/1.pt", "step_7.pt", 7),  # path and file disagree: the path's, as the run id step_7 says
])
def test_inspect_and_build_give_the_same_step(tmp_path, fake_verl, fixture, name, step):
    """`inspect` says the step `build` puts in the index (one rule: io.discover.settle_step)."""
    path = tmp_path / name
    shutil.copy(DATA / fixture, path)
    res = run("inspect", path, "--allow-pickle", "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["step"] == step and info["meta"].get("step") == step
    assert run("build", path, "--allow-pickle", "--format", "json", "-o", tmp_path / "site").exit_code == 0
    rows = json.loads((tmp_path / "site" / "index.json").read_text())["runs"]
    assert [r["step"] for r in rows] == [step]
    text = run("inspect", path, "--allow-pickle").stdout
    assert f"step {step}" in text.splitlines()[0]
    if name == "step_7.pt":
        assert any("the path says step 7, the file says 1" in n for n in info["notes"])


def test_format_hint_overrides_detection():
    rank = DATA / "prime-rl" / "token_exports" / "step_1" / "rank_0.jsonl"
    assert read(rank, format_hint="dict").meta["framework"] == "dict"
    with pytest.raises(BadInput, match="unknown framework"):
        read(rank, format_hint="megatron")


# ---- bad input: one line, exit 2, nothing written ---------------------------------------------------

def _bad_cases(tmp_path):
    """name → (path to build, path named in the message, phrase)."""
    cases = {}
    step = tmp_path / "token_exports" / "step_4"
    step.mkdir(parents=True)
    (step / "STABLE").write_text("")
    cases["prime_no_rank"] = (step, step, "no rank_*.jsonl")
    cut = tmp_path / "cut" / "step_1"
    cut.mkdir(parents=True)
    text = (DATA / "prime-rl" / "token_exports" / "step_1" / "rank_0.jsonl").read_text()
    (cut / "rank_0.jsonl").write_text(text[: text.index("\n") + 200])
    cases["prime_cut_line"] = (cut, cut / "rank_0.jsonl", "line 2 is cut mid-record")
    slime = tmp_path / "slime"
    shutil.copytree(DATA / "slime", slime)
    dump = torch.load(slime / "train_data" / "0.pt", weights_only=True)
    dump["samples"][3]["rollout_position"] = 8
    torch.save(dump, slime / "train_data" / "0.pt")
    cases["slime_past_rollout"] = (slime / "train_data" / "0.pt", slime / "train_data" / "0.pt",
                                   "rollout_position 8 points past the 8 samples")
    lines = (DATA / "nemo-rl" / "train_data_step1.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["prev_logprobs"][0] = rec["prev_logprobs"][0][:-1]
    (tmp_path / "train_data_step9.jsonl").write_text("\n".join([lines[0], json.dumps(rec)]) + "\n")
    cases["nemo_lengths"] = (tmp_path / "train_data_step9.jsonl", tmp_path / "train_data_step9.jsonl",
                             "line 2: per-token fields differ in length")
    on_policy = [json.loads(x) for x in lines]
    for r in on_policy:
        r["prev_logprobs"] = [[0.0] * len(r["prev_logprobs"][0])]
    (tmp_path / "train_data_step8.jsonl").write_text("\n".join(json.dumps(r) for r in on_policy) + "\n")
    cases["nemo_on_policy"] = (tmp_path / "train_data_step8.jsonl", tmp_path / "train_data_step8.jsonl", "force_on_policy_ratio")
    (tmp_path / "empty").mkdir()
    cases["empty_folder"] = (tmp_path / "empty", tmp_path / "empty", "no step batch")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(DATA / "nemo-rl" / "train_data_step1.jsonl", mixed / "a.jsonl")
    shutil.copy(DATA / "prime-rl" / "token_exports" / "step_1" / "rank_0.jsonl", mixed / "b.jsonl")
    cases["mixed_frameworks"] = (mixed, mixed, "several frameworks (nemo-rl, prime-rl)")
    rollout_only = tmp_path / "ro" / "rollout_data"
    rollout_only.mkdir(parents=True)
    shutil.copy(DATA / "slime" / "rollout_data" / "0.pt", rollout_only / "0.pt")
    cases["slime_rollout_only"] = (rollout_only / "0.pt", rollout_only / "0.pt", "rollout log-probs only")
    return cases


BAD = ["prime_no_rank", "prime_cut_line", "slime_past_rollout", "nemo_lengths", "nemo_on_policy", "empty_folder",
       "mixed_frameworks", "slime_rollout_only"]


@pytest.mark.parametrize("case", BAD)
def test_bad_framework_input_one_line_exit_2(tmp_path, case):
    target, named, phrase = _bad_cases(tmp_path)[case]
    res = run("build", target, "-o", tmp_path / "site")
    one_line_exit_2(res, named, phrase)
    assert not (tmp_path / "site").exists()


def test_docs_have_a_section_per_framework():
    doc = (ROOT / "docs" / "formats.md").read_text()
    for name in ("prime-rl", "slime", "miles", "NeMo-RL", "SkyRL", "verl"):
        section = doc.split(f"### {name}\n", 1)
        assert len(section) == 2, name
        body = section[1].split("\n### ", 1)[0]
        assert "Turn it on" in body and "What we read" in body and "What we assume" in body, name


def test_folder_of_step_files_sorted_by_step(tmp_path):
    """verl-style global_step_N files: one run per file, by step number (not by name), numbers from each file."""
    rng = np.random.default_rng(5)
    want = {}
    for step in (10, 2, 33):
        ro = -rng.exponential(1.0, (4, 9))
        tr = np.minimum(ro + rng.normal(0, 0.01 * step, ro.shape), 0.0)
        mask = (rng.random(ro.shape) < 0.8).astype(np.int64)
        np.savez(tmp_path / f"global_step_{step}.npz", rollout_log_probs=ro, old_log_probs=tr, response_mask=mask)
        want[step] = expected(ro[mask > 0], tr[mask > 0])
    found = sources(tmp_path)
    assert [(s.step, s.run_id) for s in found] == [(2, "global_step_2"), (10, "global_step_10"), (33, "global_step_33")]
    res = run("build", tmp_path, "-o", tmp_path / "site", "--format", "json")
    assert res.exit_code == 0, res.output
    for step, w in want.items():
        m = json.loads((tmp_path / "site" / f"global_step_{step}" / "summary.json").read_text())["metrics"]
        assert m["tokens"] == w["tokens"] and m["kl_k3"] == pytest.approx(w["kl_k3"], rel=1e-6)
