"""Issue 24, the read side: what a hostile folder, device or option can make tim-report read, run or print.

Each cause is a test: special files (a FIFO, /dev/zero, /dev/urandom) wherever a path is read, each in a
subprocess under a timeout, so a hang fails the test instead of stalling the suite; a tokenizer folder's code never
runs and its content is part of the cache key; parser limits (nesting, digits, ranges) and odd tensors are one line;
strings reach the terminal escaped; the option that lands in a link is allow-listed.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import ROOT, skip_or_fail

from tim_report.cli import main
from tim_report.errors import BadInput
from tim_report.io import LoadOptions, load, save_batch
from tim_report.service.build import BuildOptions, build, unique_ids
from tim_report.testing import make_batch, to_padded

HANG = 60  # seconds: a command that has not answered by then is stuck on a read that never ends
TOKENIZER = ROOT / "models" / "tiny-qwen2"


def run(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


def one_line(res, *phrases: str) -> str:
    """A CliRunner result or a CompletedProcess: exit 2, one line on stderr, naming each phrase."""
    code = getattr(res, "exit_code", getattr(res, "returncode", None))
    assert code == 2, (code, res.stdout, res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tim-report: error: "), res.stderr[-2000:]
    for p in phrases:
        assert p in lines[0], lines[0]
    return lines[0]


def cli(args: list, cwd: Path, stdin: str = "", hang: float = HANG) -> subprocess.CompletedProcess:
    """The command line in its own process; a read that blocks fails the test after `hang` seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run([sys.executable, "-m", "tim_report", *map(str, args)], cwd=cwd, env=env, input=stdin,
                              capture_output=True, text=True, timeout=hang)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tim-report {' '.join(map(str, args))} hung for {hang} s")


@pytest.fixture(scope="module")
def batch_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "ok.npz"
    save_batch(make_batch(n_seqs=6, mean_len=12, seed=1), path)
    return path


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    return path


# ---- special files are refused before anything reads or hashes them --------------------------------------------


@pytest.mark.parametrize("device,command", [("fifo", "build"), ("/dev/zero", "check"), ("/dev/urandom", "inspect"),
                                            ("fifo", "compare"), ("/dev/zero", "build")])
def test_a_special_file_as_a_step_file_is_one_line_not_a_hang(tmp_path, fifo, batch_file, device, command):
    target = fifo if device == "fifo" else Path(device)
    args = {"build": ["build", target, "-o", tmp_path / "site"], "check": ["check", target], "inspect": ["inspect", target],
            "compare": ["compare", batch_file, target, "-o", tmp_path / "cmp"]}[command]
    one_line(cli(args, tmp_path), str(target), "not a regular file")
    assert not (tmp_path / "site").exists() and not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("device", ["fifo", "/dev/zero"])
def test_a_special_file_inside_a_step_folder_is_refused_before_the_cache_hashes_it(tmp_path, device):
    """A prime-rl step folder whose rank file is a FIFO (or a link to /dev/zero): the build's cache key would hash it."""
    step = tmp_path / "token_exports" / "step_3"
    step.mkdir(parents=True)
    rank = step / "rank_0.jsonl"
    os.mkfifo(rank) if device == "fifo" else rank.symlink_to(device)
    one_line(cli(["build", tmp_path / "token_exports", "-o", tmp_path / "site"], tmp_path), "rank_0.jsonl", "not a regular file")


def test_special_files_as_notes_and_history_are_one_line(tmp_path, fifo, batch_file):
    one_line(cli(["build", batch_file, "--notes", fifo, "-o", tmp_path / "site"], tmp_path), "pipe.jsonl", "FIFO")
    one_line(cli(["build", batch_file, "--notes", "/dev/zero", "-o", tmp_path / "site"], tmp_path), "/dev/zero", "character device")
    one_line(cli(["check", batch_file, "--history", fifo], tmp_path), "pipe.jsonl", "FIFO")
    site = tmp_path / "hist"
    site.mkdir()
    os.mkfifo(site / "index.json")
    one_line(cli(["check", batch_file, "--history", site], tmp_path), "index.json", "FIFO")


def test_a_fifo_as_a_cache_entry_is_not_read(tmp_path, batch_file):
    """A FIFO planted as a run folder's cache entry: the next build must not block on it, and rebuilds the step."""
    site = tmp_path / "site"
    assert run("build", batch_file, "-o", site).exit_code == 0
    entry = site / "ok" / ".tim-report-cache.json"
    entry.unlink()
    os.mkfifo(entry)
    res = cli(["build", batch_file, "-o", site], tmp_path)
    assert res.returncode in (0, 2), res.stderr  # rebuilt, or refused in one line: never a hang
    assert "Traceback" not in res.stderr


# ---- a tokenizer folder is data, never code --------------------------------------------------------------------


@pytest.fixture
def custom_code_tokenizer(tmp_path) -> tuple[Path, Path]:
    """A tokenizer folder whose config asks for its own Python (auto_map), which writes a sentinel when imported."""
    folder, sentinel = tmp_path / "evil_tok", tmp_path / "EVIL_RAN"
    folder.mkdir()
    shutil.copy(TOKENIZER / "tokenizer.json", folder)
    config = json.loads((TOKENIZER / "tokenizer_config.json").read_text())
    config.update(auto_map={"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"]}, tokenizer_class="EvilTokenizer")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text('ran')\n"
                                    "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n")
    return folder, sentinel


@pytest.mark.parametrize("command", ["check", "inspect", "build"])
def test_a_tokenizer_asking_for_custom_code_is_refused_and_its_code_never_runs(tmp_path, batch_file, custom_code_tokenizer,
                                                                              command):
    folder, sentinel = custom_code_tokenizer
    args = [command, batch_file, "--tokenizer", folder] + (["-o", tmp_path / "site"] if command == "build" else [])
    res = cli(args, tmp_path, stdin="y\n" * 4)  # the answer transformers' prompt would have taken
    one_line(res, "custom code")
    assert "Do you wish to run" not in res.stdout + res.stderr
    assert not sentinel.exists()


def test_a_tokenizer_over_the_size_limit_is_refused_before_it_is_read(tmp_path, batch_file):
    from tim_report.config import TOKENIZER_MAX_BYTES

    folder = tmp_path / "big_tok"
    folder.mkdir()
    shutil.copy(TOKENIZER / "tokenizer_config.json", folder)
    with open(folder / "tokenizer.json", "wb") as f:  # sparse: the size is declared, nothing is written
        f.truncate(TOKENIZER_MAX_BYTES + 1)
    one_line(run("check", batch_file, "--tokenizer", folder), "big_tok", "TOKENIZER_MAX_BYTES")
    fifo = tmp_path / "fifo_tok"
    fifo.mkdir()
    os.mkfifo(fifo / "tokenizer.json")
    one_line(run("check", batch_file, "--tokenizer", fifo), "tokenizer.json", "FIFO")


def _ids_batch(path: Path) -> Path:
    b = make_batch(n_seqs=6, mean_len=12, seed=2)
    b.token_ids = (np.arange(b.n_tokens) % 200 + 300).astype(np.int64)
    b.token_text = None  # the tokenizer decodes
    save_batch(b, path)
    return path


def test_changing_the_tokenizers_files_re_renders_the_pages(tmp_path):
    folder = tmp_path / "tok"
    shutil.copytree(TOKENIZER, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    batch = _ids_batch(tmp_path / "ids.npz")
    opts = BuildOptions(load=LoadOptions(tokenizer=str(folder)), formats=("json",))
    first = build([batch], tmp_path / "site", opts)
    assert (first.analysed, build([batch], tmp_path / "site", opts).reused) == (1, 1)
    before = (tmp_path / "site" / "ids" / "samples.js").read_text()
    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = (next(k for k, v in vocab.items() if v == i) for i in (305, 306))
    vocab[a], vocab[b] = 306, 305  # two ids swap their text (the merges, which name strings, still hold)
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    again = build([batch], tmp_path / "site", opts)
    assert (again.analysed, again.reused) == (1, 0)  # its path is the same; its content is not
    assert (tmp_path / "site" / "ids" / "samples.js").read_text() != before


@pytest.mark.parametrize("bad_id", [-1, 2**32])
def test_token_ids_no_tokenizer_has_are_one_line(tmp_path, bad_id):
    path = _ids_batch(tmp_path / "ids.npz")
    d = dict(np.load(path))
    d["token_ids"][2] = bad_id
    np.savez(path, **d)
    one_line(run("check", path, "--tokenizer", TOKENIZER), str(path), f"token id {bad_id}")


# ---- parser limits and odd values: one line, whichever reader and executor --------------------------------------


DEEP = "[" * 100_000 + "]" * 100_000
BIG_INT = "9" * 5000


def _hostile_parses(tmp: Path) -> dict[str, Path]:
    d = to_padded(make_batch(n_seqs=3, mean_len=6), dtype=np.float64)
    out = {}
    out["jsonl nesting"] = tmp / "deep.jsonl"
    out["jsonl nesting"].write_text('{"rollout_log_probs": ' + DEEP + "}\n")
    out["jsonl digits"] = tmp / "digits.jsonl"
    out["jsonl digits"].write_text('{"rollout_log_probs": [' + BIG_INT + '], "old_log_probs": [-1.0]}\n')
    for name, value in (("nemo nesting", DEEP), ("nemo digits", f"[[1, {BIG_INT}]]")):
        folder = tmp / name.replace(" ", "_")
        folder.mkdir()
        (folder / "train_data_step1.jsonl").write_text(
            '{"generation_logprobs": [[0.0, -1.0]], "prev_logprobs": [[0.0, -1.1]], "token_loss_mask": [[0, 1]], '
            f'"token_ids": {value}}}\n')
        out[name] = folder
    for name, meta in (("npz meta nesting", '{"a": ' + DEEP + "}"), ("npz meta digits", '{"a": ' + BIG_INT + "}"),
                       ("npz step beyond a float", '{"step": ' + "9" * 400 + "}")):
        out[name] = tmp / (name.replace(" ", "_") + ".npz")
        np.savez(out[name], **d, meta=np.array(meta))
    x = torch.from_numpy(d["rollout_log_probs"]).float()
    y = torch.from_numpy(d["old_log_probs"]).float()
    with pytest.warns(UserWarning):  # torch's own deprecation and prototype notes, said when these are made
        odd = {"qint8": torch.quantize_per_tensor(x, 0.1, 0, torch.qint8), "sparse": x.to_sparse(),
               "nested": torch.nested.nested_tensor([x[0], x[1][:3]]), "meta-device": torch.empty(3, 8, device="meta")}
    for name, t in odd.items():
        out[f"pt {name}"] = tmp / f"{name}.pt"
        torch.save({"rollout_log_probs": t, "old_log_probs": y}, out[f"pt {name}"])
    return out


@pytest.fixture(scope="module")
def hostile_parses(tmp_path_factory) -> dict[str, Path]:
    return _hostile_parses(tmp_path_factory.mktemp("parses"))


PHRASES = {"nesting": "nests deeper", "digits": "4,300 digits", "beyond a float": "step beyond", "qint8": "quantized",
           "sparse": "sparse", "nested": "nested tensor", "meta-device": "meta-device"}


@pytest.mark.parametrize("case", ["jsonl nesting", "jsonl digits", "nemo nesting", "nemo digits", "npz meta nesting",
                                  "npz meta digits", "npz step beyond a float", "pt qint8", "pt sparse", "pt nested",
                                  "pt meta-device"])
def test_parser_limits_and_odd_tensors_are_one_line_in_every_command(hostile_parses, tmp_path, case):
    path = hostile_parses[case]
    phrase = next(p for k, p in PHRASES.items() if case.endswith(k))
    for args in (["build", path, "-o", tmp_path / "site"], ["check", path], ["inspect", path]):
        one_line(run(*args), phrase)
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("case", ["jsonl digits", "nemo nesting", "npz meta nesting"])
def test_parser_limits_are_one_line_from_jobs_workers_too(hostile_parses, batch_file, tmp_path, case):
    path = hostile_parses[case]
    one_line(run("build", batch_file, path, "-o", tmp_path / "site", "--jobs", "2"), PHRASES[case.split(" ")[-1]])


@pytest.mark.slow
def test_parser_limits_are_one_line_from_ray_tasks(hostile_parses, batch_file, tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError:
        skip_or_fail('ray is not installed (pip install -e ".[ray]")')
    # in its own process: a Ray driver that fails can take its process down, which must fail this test, not the worker
    res = cli(["build", batch_file, hostile_parses["npz meta digits"], "-o", tmp_path / "site", "--executor", "ray"], tmp_path,
              hang=300)  # starting a local Ray takes 10-20 s
    one_line(res, "4,300 digits")


def test_a_history_metric_beyond_a_float_is_one_line(tmp_path, batch_file):
    site = tmp_path / "site"
    assert run("build", batch_file, "-o", site, "--format", "json").exit_code == 0
    doc = (site / "index.json").read_text()
    (site / "index.json").write_text(doc.replace('"kl_k3": ', '"kl_k3": 1' + "0" * 400 + ", \"_was\": ", 1))
    one_line(run("check", batch_file, "--history", site), "index.json", "kl_k3", "range of a float")


def test_inspect_under_an_ascii_terminal_is_not_a_traceback(tmp_path):
    d = to_padded(make_batch(n_seqs=3, mean_len=6), dtype=np.float64)
    np.savez(tmp_path / "u.npz", **d, **{"clé→✓": d["rollout_log_probs"]})  # a key name inspect lists
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "ascii"}
    res = subprocess.run([sys.executable, "-m", "tim_report", "inspect", str(tmp_path / "u.npz")], env=env,
                         capture_output=True, text=True, timeout=HANG)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "cl\\xe9\\u2192\\u2713" in res.stdout.replace("\n", "")


# ---- what reaches the terminal, the CI log and a link -----------------------------------------------------------


def test_run_ids_from_a_history_reach_the_band_line_escaped(tmp_path):
    """index.json's run ids name the band's basis in `check --history`'s line: ESC, BEL, a newline and an Actions
    command must come out as visible escapes on that one line."""
    from tim_report.testing import make_batch as mk

    quiet = tmp_path / "quiet.npz"
    save_batch(mk(n_seqs=6, mean_len=12, seed=1, noise=1e-4), quiet)
    loud = tmp_path / "loud.npz"
    save_batch(mk(n_seqs=6, mean_len=12, seed=1, noise=0.3), loud)
    site = tmp_path / "site"
    steps = [tmp_path / f"r{i}.npz" for i in range(6)]
    for p in steps:
        shutil.copy(quiet, p)
    assert run("build", *steps, "-o", site, "--format", "json").exit_code == 0
    doc = json.loads((site / "index.json").read_text())
    evil = "x\x1b]0;pwned\x07\n::error::forged\r"
    for r in doc["runs"]:
        r["id"], r["step"] = evil, None
    (site / "index.json").write_text(json.dumps(doc))
    res = run("check", loud, "--history", site, "--no-limits", "--fail-on", "never")
    band = [line for line in res.stdout.splitlines() if " history " in line]
    assert band, res.stdout
    out = res.stdout
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert not any(line.startswith("::") for line in out.splitlines())
    assert "\\x1b]0;pwned\\x07\\x0a::error::forged" in band[0]


@pytest.mark.parametrize("url", ["javascript:alert(1)", "JavaScript:alert(1)", "data:text/html,<script>x</script>",
                                 "file:///etc/passwd", "https:no-host", " javascript:x", "vbscript:x"])
def test_base_url_takes_http_or_a_relative_path_only(tmp_path, batch_file, url):
    one_line(run("build", batch_file, "-o", tmp_path / "site", "--base-url", url), "--base-url")
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("url", ["https://me.github.io/site", "http://localhost:8000/x", "site/runs", "/runs"])
def test_base_url_web_addresses_and_relative_paths_are_kept(tmp_path, batch_file, url):
    assert run("build", batch_file, "-o", tmp_path / "site", "--base-url", url, "--format", "md").exit_code == 0
    assert f"]({url.rstrip('/')}/ok/index.html)" in (tmp_path / "site" / "report.md").read_text()


# ---- run ids ----------------------------------------------------------------------------------------------------


def test_run_ids_stay_unique_whatever_collides():
    names = ["a"] * 5 + ["a-2", "A", "a-3", "index.html", "index.html", "x" * 300, "x" * 300]
    ids = unique_ids(names)
    assert len({i.lower() for i in ids}) == len(ids)
    assert ids[:5] == ["a", "a-2", "a-3", "a-4", "a-5"] and ids[5] == "a-2-2"
    assert all(len(i) <= 100 for i in ids)


def test_making_run_ids_unique_is_linear(monkeypatch):
    """40k inputs of one file name took 141 s (each looked through every suffix before it): count the candidates
    tried, so the test says how the work grows without timing anything."""
    import tim_report.service.build as pipeline

    tried = 0
    real = pipeline._candidate

    def counting(rid: str, n: int) -> str:
        nonlocal tried
        tried += 1
        return real(rid, n)

    monkeypatch.setattr(pipeline, "_candidate", counting)
    ids = unique_ids(["step"] * 20_000)
    assert len(set(ids)) == 20_000
    assert tried <= 2 * 20_000, tried


# ---- damaged archives ---------------------------------------------------------------------------------------------


def test_a_pt_whose_storage_record_is_cut_short_is_one_line(tmp_path):
    """A storage record shorter than its tensor: memory-mapped, the tensor read the next record's bytes as its own
    (nonsense findings, exit 1); now exit 2 in one line, and a whole file still reads."""
    buf = io.BytesIO()
    torch.save({"rollout_log_probs": -torch.rand(4, 25) - 0.1, "old_log_probs": -torch.rand(4, 25) - 0.1}, buf)
    whole = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    for cut in (False, True):
        path = tmp_path / f"cut{cut}.pt"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
            for info in whole.infolist():
                data = whole.read(info)
                out.writestr(info.filename, data[:40] if cut and info.filename.endswith("/data/0") else data)
        if not cut:
            assert load(path).n_tokens == 100
    one_line(run("check", path), str(path), "storage record 'data/0' holds 40 bytes", "cut short")
    with pytest.raises(BadInput, match="cut short"):
        load(path)


# ---- memory: bytes as well as elements; detection reads a prefix --------------------------------------------------


def test_a_wide_string_dtype_is_bounded_by_bytes_not_only_elements(tmp_path):
    """`token_text` of dtype <U1000000 (4 MB an element): 70 elements pass an element count of 4,000 but hold 280 MB."""
    from tim_report.io.limits import MIN_ARRAY_BYTES

    d = to_padded(make_batch(n_seqs=3, mean_len=6), dtype=np.float64)
    path = tmp_path / "wide.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, value in d.items():
            if value.dtype.kind != "U":
                with zf.open(f"{name}.npy", "w") as f:
                    np.lib.format.write_array(f, value)
        with zf.open("token_text.npy", "w", force_zip64=True) as f:
            wide = np.dtype("<U1000000")
            np.lib.format.write_array_header_1_0(f, {"descr": wide.str, "fortran_order": False, "shape": (70,)})
            zeros = bytes(wide.itemsize)
            for _ in range(70):
                f.write(zeros)
    assert 70 * 4_000_000 > MIN_ARRAY_BYTES and path.stat().st_size < 2_000_000
    one_line(run("check", path, "--max-tokens", "1000", "--key", "text=token_text"), "'token_text'", "bytes",
             "more than this run reads")


def test_a_wide_string_member_is_refused_from_its_header_limits_on_or_off(tmp_path):
    """The red team's 974 KiB `.npz`: `token_text` declared `<U1000000` × [8, 32] (1 GB of NULs, deflated) passed the
    byte bound (1.6 GB at the default --max-tokens) and `check --no-limits` read it whole, exit 0 at 1.9 GB. Now the
    text bound refuses it from the header: one line, exit 2, in a process that never holds the member's gigabyte."""
    d = to_padded(make_batch(n_seqs=8, mean_len=20), dtype=np.float64)
    path = tmp_path / "wide.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, value in d.items():
            if value.dtype.kind != "U":
                with zf.open(f"{name}.npy", "w") as f:
                    np.lib.format.write_array(f, value)
        with zf.open("token_text.npy", "w", force_zip64=True) as f:
            wide = np.dtype("<U1000000")
            np.lib.format.write_array_header_1_0(f, {"descr": wide.str, "fortran_order": False, "shape": (8, 32)})
            zeros = bytes(wide.itemsize)
            for _ in range(8 * 32):
                f.write(zeros)
    assert path.stat().st_size < 1_000_000
    peak = tmp_path / "peak"
    # the command, then its own peak resident memory (KiB) written at exit: VmHWM of its own address space, not
    # ru_maxrss, which Linux carries over from the parent when the child is made by vfork + exec (under a full pytest
    # session that is the test runner's gigabyte, not the command's)
    code = ("import atexit, re, sys; from tim_report.cli import main; atexit.register(lambda: open(sys.argv[1], 'w').write("
            "re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))); "
            "main(sys.argv[2:], prog_name='tim-report')")
    for extra in ([], ["--no-limits"]):
        res = subprocess.run([sys.executable, "-c", code, str(peak), "check", str(path), *extra], capture_output=True,
                             text=True, timeout=HANG, env={**os.environ, "PYTHONPATH": str(ROOT)})
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert "'token_text' declares 256 strings of 1,000,000 characters" in lines[0] and "as text" in lines[0]
        assert int(peak.read_text()) < 900_000  # KiB: reading the member alone is 1,000,000 KiB; it was never read


def test_detecting_a_jsonl_framework_reads_a_prefix_of_the_first_line(tmp_path):
    """A first line of 8 MB (a 2 GiB one was a MemoryError): detection reads its first MiB, and still finds its keys."""
    import tracemalloc

    from tim_report.io.detect import detect_file, first_record

    path = tmp_path / "long.jsonl"
    ids = ", ".join(["123456"] * 1_000_000)
    path.write_text('{"step": 4, "inference_logprobs": [-0.5], "trainer_logprobs": [-0.5], "loss_mask": [true], '
                    f'"token_ids": [{ids}]}}\n')
    tracemalloc.start()
    try:
        record = first_record(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, peak
    assert record["step"] == 4 and {"inference_logprobs", "token_ids"} <= set(record)
    assert detect_file(path) == "prime-rl"


@pytest.mark.parametrize("text", ["bytes per token", "one bytes value"])
def test_token_text_as_bytes_is_read_or_one_line(tmp_path, text):
    """Token text as bytes in a .pt was a UnicodeDecodeError (or AttributeError) traceback."""
    d = to_padded(make_batch(n_seqs=3, mean_len=6), dtype=np.float64)
    t = {k: torch.from_numpy(v) for k, v in d.items() if v.dtype.kind != "U"}
    width = d["rollout_log_probs"].shape[1]
    t["token_text"] = ([[f"tok{j}é".encode() for j in range(width)] for _ in range(3)] if text == "bytes per token"
                       else b"\xff\xfe")  # a list of lists of bytes (weights_only loads it), or one bytes value
    path = tmp_path / "bytes.pt"
    torch.save(t, path)
    if text == "one bytes value":
        one_line(run("check", path), "'token_text' is a single bytes value")
        return
    assert "tok1é" in list(load(path).token_text)
