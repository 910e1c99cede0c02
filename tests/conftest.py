"""Shared fixtures: small step batches written in the layouts real frameworks use."""

from __future__ import annotations

import numpy as np
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


def pytest_addoption(parser):
    parser.addoption("--update-gold", action="store_true", default=False,
                     help="Rewrite the gold files in tests/gold/ from the current output.")


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
