"""Shared fixtures: small step batches written in the layouts real frameworks use; how the suite runs in two processes."""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):  # one of the two workers (pyproject's addopts: -n 2): one core each, so
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # torch's and BLAS's threads (and the
        os.environ.setdefault(_threads, "1")  # commands the tests run) do not spin against the other worker's

import numpy as np  # after the thread counts: BLAS reads them when numpy loads
import pytest

from tim_report.testing import make_batch, to_padded


@pytest.fixture
def batch():
    return make_batch(n_seqs=24, mean_len=40, noise=0.01, seed=1)


@pytest.fixture
def verl_pt(tmp_path, batch):
    """A verl-style .pt: padded tensors, response_mask, responses, uid as a list of str."""
    import torch

    d = to_padded(batch, dtype=np.float64)
    path = tmp_path / "verl_step_7.pt"
    torch.save({k: (v.tolist() if v.dtype.kind == "U" else torch.from_numpy(v)) for k, v in d.items()}, path)
    return path


@pytest.fixture
def trl_npz(tmp_path, batch):
    d = to_padded(batch, rollout_key="sampling_per_token_logps", trainer_key="old_per_token_logps",
                  mask_key="completion_mask", tokens_key="completion_ids", dtype=np.float64)
    path = tmp_path / "trl.npz"
    np.savez(path, **d)
    return path


# With two workers (`--dist loadfile`) each test module runs in one worker, so its module fixtures are made once. The
# tests of these modules never run at once, whichever worker has them: local Ray clusters, vLLM engines (gigabytes each).
ONE_AT_A_TIME = {"test_ray.py": "ray", "test_hostile_read.py": "ray", "test_capture_vllm.py": "vllm",
                 "test_real_model.py": "vllm", "test_real_model_matrix.py": "vllm"}


@pytest.fixture(autouse=True)
def _one_at_a_time(request, tmp_path_factory):
    """A lock shared by the workers (in their common temporary folder) around each test of an ONE_AT_A_TIME module."""
    group = ONE_AT_A_TIME.get(request.path.name) if os.environ.get("PYTEST_XDIST_WORKER") else None
    if group is None:
        yield
        return
    import fcntl

    with open(tmp_path_factory.getbasetemp().parent / f"{group}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def pytest_addoption(parser):
    parser.addoption("--update-gold", action="store_true", default=False,
                     help="Rewrite the gold files in tests/gold/ from the current output.")
    parser.addoption("--update-numbers", action="store_true", default=False,
                     help="Rewrite tests/data/numbers_before.json.gz from the current analysis (tests/test_numbers_kept.py).")


@pytest.fixture(scope="session")
def tiny_versions():
    """Four real versions v0..v3 of models/tiny-qwen2 (one Adam step each; tim_report.testing.train_versions), made
    once per session: the staleness split's and rescore's test bed."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from pathlib import Path

    from tim_report.testing import TINY_MODEL, train_versions

    model = Path(__file__).resolve().parents[1] / TINY_MODEL
    if not (model / "model.safetensors").exists():
        pytest.skip("models/tiny-qwen2 not present")
    return train_versions(str(model))


@pytest.fixture(scope="session")
def tiny_checkpoints(tiny_versions, tmp_path_factory):
    """The same four versions as checkpoint folders [models/tiny-qwen2, v1, v2, v3] (tests/checkpoints.py), for the
    commands that load a model by its path (`capture --stale`, `rescore`)."""
    from checkpoints import save_versions

    return save_versions(tiny_versions, tmp_path_factory.mktemp("checkpoints"))
