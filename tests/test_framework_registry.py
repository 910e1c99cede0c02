"""The input registries: a framework is its dump module and one catalogue entry, a file format its reader and one
entry, and every place that lists them reads the registry (detection, discovery, io.load, inspect, watch, the help,
docs/formats.md)."""

from __future__ import annotations

import importlib.util
import json
import pickle
import re

import numpy as np
from helpers import ROOT, one_line_exit_2, run, throwaway

from tim_report.catalogue.frameworks import FRAMEWORKS
from tim_report.io import LoadOptions, load
from tim_report.io.dumps import dump, dumps, glob, pattern
from tim_report.io.readers import FILE_FORMATS, SUFFIXES, reader

THROWAWAY = r'''
import json, sys, types
from pathlib import Path
import numpy as np
from click.testing import CliRunner

# The whole of adding a framework: its dump module (here built in memory) and its entry in the catalogue.
from tim_report.catalogue import frameworks as F
from tim_report.io import dumps as D
from tim_report.io.readers.jsonl import read_records
from tim_report.io.sequences import Exclusions, Seq, assemble_seqs, floats

def read(src, allow_pickle=False):
    seqs = [Seq(rollout=floats(rec["toy_rollout"]), trainer=floats(rec["toy_trainer"]), mask=np.ones(len(rec["toy_rollout"]), bool))
            for path in src.paths for _, rec in read_records(path)]
    meta = {"framework": "toy", "layout": "toy: one sample per line", "alignment": "index i scores token i",
            "keys": {"rollout": "toy_rollout", "trainer": "toy_trainer"}}
    return assemble_seqs(src.origin, seqs, meta, Exclusions(), []), [{"key": "toy_rollout", "type": "list"}]

module = types.ModuleType("tim_report.io.dumps.toy")
module.DUMP = D.Dump(name="toy", layout="one sample per line", record_keys=frozenset({"toy_rollout", "toy_trainer"}),
                     folder="toy_exports", rank_files="part_{R}.jsonl", marker="DONE", read=read)
sys.modules[module.__name__] = module
F.FRAMEWORKS["toy"] = F.Framework("toy", "toy", "toy_exports/step_S/part_R.jsonl", "a toy export")

from tim_report.cli import main
from tim_report.io import sources
from tim_report.io.detect import detect_file
from tim_report.service.watch import Poller

tmp = Path(sys.argv[1])
rng = np.random.default_rng(0)
def write_step(step, done):
    folder = tmp / "out" / "toy_exports" / f"step_{step}"
    folder.mkdir(parents=True)
    for rank in range(2):
        lines = []
        for _ in range(8):
            r = -rng.random(48) * 3
            lines.append(json.dumps({"toy_rollout": r.tolist(), "toy_trainer": (r + rng.normal(0, 0.01, 48)).tolist()}))
        (folder / f"part_{rank}.jsonl").write_text("\n".join(lines) + "\n")
    if done:
        (folder / "DONE").write_text("")
    return folder
first, second = write_step(1, True), write_step(2, False)
run = lambda *a: CliRunner().invoke(main, [str(x) for x in a], catch_exceptions=False)
out = {"detection": detect_file(first / "part_0.jsonl") == "toy"}
found = sources(tmp / "out")
out["discovery"] = ([(s.framework, s.step, s.run_id, len(s.paths)) for s in found] == [("toy", 1, "step_1", 2), ("toy", 2, "step_2", 2)]
                    and found[0].kind == "toy step folder (2 rank files)")
helps = [run(cmd, "--help").output for cmd in ("build", "check", "compare", "inspect", "watch")]
out["format_hint_help"] = all("toy (toy_exports/step_S/part_R.jsonl)" in " ".join(h.split()) for h in helps)
out["run_folder_help"] = "a toy export" in " ".join(helps[0].split()) and "a toy export" in " ".join(helps[4].split())
res = run("inspect", first / "part_0.jsonl", "--format-hint", "toy", "--json")
out["format_hint_choice"] = res.exit_code == 0 and json.loads(res.output)["framework"] == "toy"
res = run("inspect", first, "--json")
info = json.loads(res.output)
out["inspect"] = (info["framework"] == "toy" and info["found_as"] == "toy step folder (2 rank files)"
                  and info["layout"] == "toy: one sample per line" and info["tokens"] == 2 * 8 * 48)
out["inspect_run"] = [s["framework"] for s in json.loads(run("inspect", tmp / "out", "--json").output)["sources"]] == ["toy", "toy"]
poller = Poller(tmp / "out")
poller.poll()
ready = [s.run_id for s in poller.poll()[0]]
(second / "DONE").write_text("")
poller.poll()
out["watch_marker"] = ready == ["step_1"] and [s.run_id for s in poller.poll()[0]] == ["step_1", "step_2"]
out["build"] = run("build", tmp / "out", "--format", "json", "-o", tmp / "site").exit_code
doc = json.loads((tmp / "site" / "index.json").read_text())
out["index"] = [r["step"] for r in doc["runs"]] == [1, 2]
print(json.dumps(out))
'''


def test_a_new_framework_is_its_dump_module_and_its_catalogue_entry(tmp_path):
    """docs/architecture.md's worked example: a throwaway framework registered in a fresh interpreter is detected from
    its content, its run folder and step folders are found, `--format-hint` and the commands' help name it, `inspect`
    describes it, `watch` waits for its completion marker, and `build` reads it, with no other file touched."""
    found = throwaway(THROWAWAY, tmp_path)
    assert all(found.values()), found


def test_every_registered_framework_has_a_dump_that_names_itself():
    for name, entry in FRAMEWORKS.items():
        d = dump(name)
        assert (d is None) == (entry.module is None), name
        if d is not None:
            assert d.name == name and d.layout
            assert d.record_keys or (d.pickled is not None and d.pickled_words), f"{name}: recognised from nothing"
            assert d.read is not None or d.values is not None, f"{name}: read by nothing"
    assert [d.name for d in dumps()] == [n for n, f in FRAMEWORKS.items() if f.module]


def test_file_names_with_placeholders():
    assert pattern("train_data_step{N}.jsonl").fullmatch("train_data_step12.jsonl").group(1) == "12"
    assert pattern("{rollout_id}_{rank}.pt").fullmatch("3_1.pt").groups() == ("3", "1")
    assert pattern("{rollout_id}.pt").fullmatch("3_1.pt") is None
    assert glob("rank_{R}.jsonl") == "rank_*.jsonl"


def test_docs_list_every_framework():
    """docs/formats.md's table of frameworks is the registry's (scripts/framework_table.py --update-doc rewrites it),
    each framework has its section, and `--format-hint`'s values are listed in the registry's order."""
    spec = importlib.util.spec_from_file_location("framework_table", ROOT / "scripts" / "framework_table.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = (ROOT / "docs" / "formats.md").read_text()
    assert script.START + script.table() + script.END in text, "stale: run python scripts/framework_table.py --update-doc"
    sections = {m.lower() for m in re.findall(r"^### (\S+)", text, re.MULTILINE)}
    assert {d.name for d in dumps()} <= sections
    hint = re.search(r"`--format-hint FRAMEWORK` \(([^)]*)\)", text)
    assert hint is not None and re.findall(r"`([^`]+)`", hint.group(1)) == list(FRAMEWORKS)


def test_one_list_of_file_formats():
    """Every suffix discovery takes has a reader, and every format module reads (no second list to disagree)."""
    assert set(SUFFIXES) == {s for f in FILE_FORMATS for s in f.suffixes} >= {".pt", ".pth", ".npz", ".jsonl", ".pkl"}
    for suffix in SUFFIXES:
        assert callable(reader(suffix))


def test_a_plain_pkl_is_read_only_with_allow_pickle(tmp_path):
    """A `.pkl` holding a plain dict of arrays: refused without --allow-pickle (unpickling runs code), read with it."""
    rng = np.random.default_rng(0)
    rollout = -rng.random((6, 20)) * 2
    path = tmp_path / "step_3.pkl"
    with open(path, "wb") as fh:
        pickle.dump({"rollout_log_probs": rollout, "old_log_probs": rollout + 0.01, "response_mask": np.ones((6, 20))}, fh)
    one_line_exit_2(run("check", path), "step_3.pkl", "--allow-pickle")
    res = run("inspect", path, "--allow-pickle", "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["framework"] == "dict" and info["step"] == 3 and info["roles"]["rollout"]["key"] == "rollout_log_probs"
    batch = load(path, LoadOptions(allow_pickle=True))
    np.testing.assert_allclose(batch.trainer_logp - batch.rollout_logp, 0.01)


def test_compare_takes_ppo_eps(tmp_path):
    """`compare --ppo-eps LOW HIGH` reaches the analysis as it does in build and check."""
    from tim_report.io import save_batch
    from tim_report.testing import make_batch

    save_batch(make_batch(n_seqs=16, mean_len=32, noise=0.05, seed=1), tmp_path / "a.npz")
    save_batch(make_batch(n_seqs=16, mean_len=32, noise=0.2, seed=2), tmp_path / "b.npz")
    outs = []
    for eps in (("0.2", "0.28"), ("0.001", "0.001")):
        res = run("compare", tmp_path / "a.npz", tmp_path / "b.npz", "--ppo-eps", *eps, "-o", tmp_path / eps[0])
        assert res.exit_code == 0, res.output
        outs.append((tmp_path / eps[0] / "compare.json").read_text())
    assert outs[0] != outs[1]
    assert run("compare", tmp_path / "a.npz", tmp_path / "b.npz", "-o", tmp_path / "default").exit_code == 0
    assert (tmp_path / "default" / "compare.json").read_text() == outs[0]
