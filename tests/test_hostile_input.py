"""Hostile and broken inputs: every one is one line on stderr, exit 2, nothing written, and bounded memory.

Memory bombs run in a subprocess under an address-space limit, so a regression fails with MemoryError
instead of exhausting the machine."""

from __future__ import annotations

import io
import json
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ROOT, run
from helpers import one_line_exit_2 as one_line
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tim_report.errors import BadInput
from tim_report.io import LoadOptions, load, save_batch
from tim_report.testing import make_batch, to_padded

MEMORY_LIMIT = 3 << 30  # bytes of address space for the subprocess: torch itself maps ~0.7 GB


def bounded(args: list[str]) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that may not map more than MEMORY_LIMIT bytes."""
    code = (f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT})); "
            "from tim_report.cli import main; sys.exit(main(sys.argv[1:], prog_name='tim-report'))")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


# ---- memory bombs -------------------------------------------------------------------------------------------


def npy_header(shape: tuple, dtype: str = "<f8") -> bytes:
    """An .npy v1 header declaring `shape` (np.lib.format's layout)."""
    text = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    pad = 64 - (10 + len(text) + 1) % 64
    text += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


def write_npz(path: Path, members: dict[str, bytes], compress: bool = True) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name + ".npy", data)
    return path


@pytest.fixture
def npz_bomb(tmp_path) -> Path:
    """Headers that declare 5·10⁹ float64 (40 GB) over a member that holds 1 MB of zeros: numpy would
    allocate the declared size before reading a byte."""
    body = npy_header((5_000_000_000,)) + bytes(1 << 20)
    return write_npz(tmp_path / "bomb.npz", {"rollout_log_probs": body, "old_log_probs": body})


@pytest.fixture
def stride_bomb(tmp_path) -> Path:
    """A 1-element tensor expanded by a zero stride to 2·10¹⁰ elements: 1.6 KB on disk, loads under weights_only."""
    path = tmp_path / "stride.pt"
    big = torch.zeros(1).expand(20_000_000_000)
    torch.save({"rollout_log_probs": big, "old_log_probs": big}, path)
    assert path.stat().st_size < 4096
    return path


@pytest.mark.parametrize("bomb", ["npz_bomb", "stride_bomb"])
def test_memory_bombs_are_refused_within_bounded_memory(bomb, request, tmp_path):
    path = request.getfixturevalue(bomb)
    res = bounded(["build", str(path), "-o", str(tmp_path / "site")])
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(res.stderr.strip().splitlines()) == 1 and "MemoryError" not in res.stderr
    assert not (tmp_path / "site").exists()


def test_the_element_limit_follows_max_tokens(tmp_path):
    d = to_padded(make_batch(n_seqs=8, mean_len=200), dtype=np.float64)  # ~1,600 tokens in [8, 300] arrays
    np.savez_compressed(tmp_path / "b.npz", **d)
    assert run("check", tmp_path / "b.npz", "--no-limits").exit_code == 0
    one_line(run("check", tmp_path / "b.npz", "--max-tokens", "100"), "--max-tokens")


def test_members_no_role_uses_are_never_read(tmp_path):
    """Members no role takes neither veto the file nor get read: one declaring 5·10⁹ elements, one whose body
    is cut short, one whose header is garbage, one with a bad CRC, and a real routed_experts array larger than
    --max-tokens allows. Any of them read would be a BadInput; the batch loads with the numbers of the
    same batch saved alone."""
    batch = make_batch(n_seqs=4, mean_len=10)
    d = to_padded(batch, dtype=np.float64)
    plain = tmp_path / "plain.npz"
    np.savez(plain, **d)
    routed = np.zeros((*d["rollout_log_probs"].shape, 48, 8), dtype=np.int16)  # [seqs, len, layers, top-k]
    buf = io.BytesIO()
    np.save(buf, routed)
    good = npy_header((10,)) + np.arange(10, dtype="<f8").tobytes()
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(tmp_path / "extra.npz", "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        zout.writestr("routed_experts.npy", buf.getvalue(), zipfile.ZIP_DEFLATED)
        zout.writestr("junk.npy", npy_header((5_000_000_000,)) + bytes(80))
        zout.writestr("cut_short.npy", npy_header((1000,)) + bytes(24))
        zout.writestr("bad_header.npy", b"\x93NUMPY\x01\x00\xff\x7fnot a header")
        zout.writestr("bad_crc.npy", good)
    data = bytearray((tmp_path / "extra.npz").read_bytes())
    at = data.rindex(good[-16:])  # the last member's body, stored: flip a byte of its data, not of its header
    data[at] ^= 0xFF
    (tmp_path / "extra.npz").write_bytes(bytes(data))
    limit = batch.n_tokens * 2  # the token arrays fit; routed_experts holds ~384 elements per position
    assert routed.size > 4 * limit
    for name in ("junk", "cut_short", "bad_header", "bad_crc", "routed_experts"):  # each one, if read, is refused
        with pytest.raises(BadInput, match=name if name != "routed_experts" else "--max-tokens"):
            load(tmp_path / "extra.npz", LoadOptions(keys={"rollout": name} if name != "bad_crc" else {"trainer": name},
                                                     max_tokens=limit))
    got, want = load(tmp_path / "extra.npz", LoadOptions(max_tokens=limit)), load(plain)
    assert got.n_tokens == want.n_tokens == batch.n_tokens
    np.testing.assert_array_equal(got.rollout_logp, want.rollout_logp)
    np.testing.assert_array_equal(got.trainer_logp, want.trainer_logp)
    assert run("check", tmp_path / "extra.npz", "--max-tokens", limit).exit_code in (0, 1)


# ---- not what they say they are -----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix,phrase", [(".pt", "not a PyTorch file"), (".npz", "not an .npz archive"),
                                           (".jsonl", "not valid")])
def test_random_bytes_are_named_for_what_they_are(tmp_path, suffix, phrase):
    p = tmp_path / f"random{suffix}"
    p.write_bytes(np.random.default_rng(0).bytes(4096))
    line = one_line(run("build", p, "-o", tmp_path / "site"), phrase)
    assert "--allow-pickle" not in line  # random bytes are not a pickle, and unpickling them would be bad advice


def test_a_zip_that_asks_for_an_unknown_zip_version_is_one_line(tmp_path):
    """Found by the mutation test below: zipfile raises NotImplementedError for a "version needed" it lacks."""
    buf = io.BytesIO()
    np.savez(buf, a=np.zeros(3))
    data = bytearray(buf.getvalue())
    entry = data.rfind(b"PK\x01\x02")
    data[entry + 6:entry + 8] = (80).to_bytes(2, "little")  # the central directory's "version needed to extract": 8.0
    (tmp_path / "v8.npz").write_bytes(bytes(data))
    with pytest.raises(BadInput, match="not a readable .npz archive"):
        load(tmp_path / "v8.npz")


def test_a_raw_pickle_named_pt_is_refused_without_allow_pickle_and_one_line_with_it(tmp_path):
    p = tmp_path / "raw.pt"
    p.write_bytes(pickle.dumps([1, 2, 3], protocol=4))
    one_line(run("build", p, "-o", tmp_path / "s1"), "--allow-pickle")
    one_line(run("build", p, "--allow-pickle", "-o", tmp_path / "s2"), "cannot unpickle")  # not torch.save's: no warning line too


def test_nested_ragged_lists_are_one_line(tmp_path):
    p = tmp_path / "nested.pt"
    torch.save({"rollout_log_probs": [[[-1.0, -2.0], [-3.0]], [[-1.0]]], "old_log_probs": [[[-1.0, -2.0], [-3.0]], [[-1.0]]]}, p)
    one_line(run("build", p, "-o", tmp_path / "site"), "nested")


def test_nan_offsets_are_one_line(tmp_path):
    b = make_batch(n_seqs=4, mean_len=8)
    np.savez(tmp_path / "off.npz", rollout_logp=b.rollout_logp, trainer_logp=b.trainer_logp,
             offsets=np.array([0.0, np.nan, 10.0, float(b.n_tokens)]))
    one_line(run("build", tmp_path / "off.npz", "-o", tmp_path / "site"), "offsets", "whole numbers")


@pytest.mark.parametrize("shape", [(0, 0), (5, 0)])
def test_a_batch_of_zero_tokens_is_one_line(tmp_path, shape):
    """A [0, 0] padded batch with a mask crashed build with a traceback (argmax of an empty sequence)."""
    p = tmp_path / "empty.npz"
    np.savez(p, rollout_log_probs=np.zeros(shape, np.float32), old_log_probs=np.zeros(shape, np.float32),
             response_mask=np.zeros(shape))
    for command in (["build", p, "-o", tmp_path / "site"], ["check", p]):
        one_line(run(*command), "no tokens", str(list(shape)))
    assert not (tmp_path / "site").exists()


def test_all_nan_log_probs_name_the_file_not_the_tool_that_wrote_it(tmp_path):
    b = make_batch(n_seqs=4, mean_len=8)
    b.rollout_logp = np.full(b.n_tokens, np.nan)
    b.meta = {**b.meta, "source": "tim-report capture"}
    p = tmp_path / "nan.npz"
    save_batch(b, p)
    line = one_line(run("build", p, "-o", tmp_path / "site"), "no usable tokens")
    assert str(p) in line and "tim-report capture" not in line


# ---- text that is not valid Unicode -------------------------------------------------------------------------


@pytest.fixture
def bad_text(tmp_path) -> Path:
    b = make_batch(n_seqs=6, mean_len=10)
    d = to_padded(b, dtype=np.float64)
    text = np.full(d["responses"].shape, "ok", dtype="<U8")
    text[0, 0] = "a\udc80b"  # a lone surrogate, as JSON "\\udc80" decodes
    d["token_text"] = text
    d["uid"] = np.array(["g\ud800"] * b.n_seqs)
    p = tmp_path / "text.npz"
    np.savez(p, **d)
    return p


@pytest.mark.parametrize("command", ["build", "build-jobs", "inspect", "check", "compare"])
def test_lone_surrogates_are_repaired_and_counted_everywhere(bad_text, tmp_path, command):
    args = {"build": ["build", bad_text, "-o", tmp_path / "s"],
            "build-jobs": ["build", bad_text, bad_text, "--jobs", "2", "-o", tmp_path / "s"],
            "inspect": ["inspect", bad_text], "check": ["check", bad_text, "--no-limits"],
            "compare": ["compare", bad_text, bad_text, "-o", tmp_path / "c"]}[command]
    res = run(*args)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    if command == "check":
        assert "input values repaired (text_invalid)" in res.output
    if command == "build":
        summary = json.loads((tmp_path / "s" / "text" / "summary.json").read_text(encoding="utf-8"))
        assert summary["data_problems"]["input"]["text_invalid"] >= 2
        assert "\ufffd" in (tmp_path / "s" / "text" / "samples.js").read_text(encoding="utf-8")


def test_bytes_that_are_not_utf8_become_replacement_characters(tmp_path):
    b = make_batch(n_seqs=4, mean_len=6)
    d = to_padded(b, dtype=np.float64)
    d["token_text"] = np.full(d["responses"].shape, b"\xff\xfe", dtype="S4")
    np.savez(tmp_path / "bytes.npz", **d)
    assert run("build", tmp_path / "bytes.npz", "-o", tmp_path / "s").exit_code == 0


# ---- any bytes at all -----------------------------------------------------------------------------------------


def _valid_archives() -> dict[str, bytes]:
    b = make_batch(n_seqs=3, mean_len=6)
    d = to_padded(b, dtype=np.float64)
    npz, pt = io.BytesIO(), io.BytesIO()
    np.savez(npz, **d)
    torch.save({k: torch.from_numpy(v) for k, v in d.items() if v.dtype.kind != "U"}, pt)
    rows = [{"rollout_log_probs": list(map(float, r)), "old_log_probs": list(map(float, t))}
            for r, t in zip(d["rollout_log_probs"], d["old_log_probs"])]
    frameworks = ROOT / "tests" / "data" / "frameworks"
    return {".npz": npz.getvalue(), ".pt": pt.getvalue(), ".jsonl": "".join(json.dumps(r) + "\n" for r in rows).encode(),
            "nemo-rl": (frameworks / "nemo-rl" / "train_data_step1.jsonl").read_bytes(),
            "prime-rl": (frameworks / "prime-rl" / "token_exports" / "step_1" / "rank_0.jsonl").read_bytes()}


VALID = _valid_archives()
FILE_NAMES = {"nemo-rl": "train_data_step1.jsonl", "prime-rl": "step_1/rank_0.jsonl"}
# What a hostile JSON writer can put anywhere: nesting past the recursion limit, an integer past 4,300 digits, numbers
# beyond a float, a lone surrogate, a NUL, a value of the wrong kind.
JSON_BAIT = [b"[" * 5000, b"{\"a\":" * 3000, b"9" * 5000, b"1e999", b"-1e999", b"1" + b"0" * 400, b"\"\\ud800\"", b"\x00",
             b"null", b"\"x\"", b"[]", b"{}", b"true", b"-0", b"\n"]


def mutate(original: bytes, data) -> bytes:
    """Random bytes, or the valid file with bytes flipped, cut, spliced from itself, or hostile JSON spliced in."""
    kind = data.draw(st.sampled_from(["random", "flip", "cut", "splice", "json"]))
    if kind == "random":
        return data.draw(st.binary(min_size=0, max_size=2048))
    if kind == "cut":
        return original[: data.draw(st.integers(0, len(original) - 1))]
    blob = bytearray(original)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(blob) - 1))
        if kind == "json":
            end = data.draw(st.integers(i, min(len(blob), i + 40)))
            blob[i:end] = data.draw(st.sampled_from(JSON_BAIT))
        else:
            blob[i] = data.draw(st.integers(0, 255)) if kind == "flip" else blob[data.draw(st.integers(0, len(blob) - 1))]
    return bytes(blob)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(suffix=st.sampled_from(sorted(VALID)), data=st.data())
def test_random_bytes_and_mutated_archives_only_ever_raise_bad_input(tmp_path, suffix, data):
    """Every reader: .npz, .pt, plain .jsonl, a NeMo-RL dump and a prime-rl rank file (detected from their content)."""
    blob = mutate(VALID[suffix], data)
    p = tmp_path / FILE_NAMES.get(suffix, f"fuzz{suffix}")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(blob)
    try:
        batch = load(p)
    except BadInput as exc:
        assert "\n" not in str(exc) and (str(p) in str(exc) or str(p.parent) in str(exc))
        return
    assert batch.n_tokens > 0  # a mutation that kept the file valid


@pytest.fixture(scope="module")
def cached_site(tmp_path_factory) -> tuple[Path, str, bytes]:
    from tim_report.service.build import BuildOptions, build, cache_options
    from tim_report.site.cache import step_key

    tmp = tmp_path_factory.mktemp("cache")
    save_batch(make_batch(n_seqs=4, mean_len=8), tmp / "s.npz")
    opts = BuildOptions(formats=("json",))
    build([tmp / "s.npz"], tmp / "site", opts)
    key = step_key((tmp / "s.npz",), "dict\0s.npz", "s", cache_options(opts))  # a file named alone: its name
    return tmp / "site", key, (tmp / "site" / "s" / ".tim-report-cache.json").read_bytes()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_cache_entry_is_a_row_or_none_and_its_row_renders(cached_site, data):
    """A cache entry someone edited: either not ours (None, the step is analysed again) or a row every page renders."""
    from tim_report.analysis.run_index import index_from_rows
    from tim_report.render import RenderOptions, render
    from tim_report.site.cache import cached_row

    site, key, original = cached_site
    entry = site / "s" / ".tim-report-cache.json"
    assert cached_row(site, "s", key, ("json",)) is not None
    try:
        entry.write_bytes(mutate(original, data))
        row = cached_row(site, "s", key, ("json",))
    finally:
        entry.write_bytes(original)
    if row is not None:
        files = render("index", index_from_rows([row, row | {"id": "t"}]), ("md", "json"), RenderOptions())
        assert files["report.md"]
