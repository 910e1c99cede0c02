"""Red team, round two: the framework integrations handed the wrong object.

Family: None, a plain dict, numpy arrays where the framework holds tensors, a string step, short sequences, a
missing mask, the wrong trainer, a generator of experiences, num_generations=0. Each is one line of BadInput that
names what the helper expected (the framework's class and the fields it needs), never an AttributeError, KeyError,
IndexError or ValueError from inside it, and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tim_report.errors import BadInput
from tim_report.integrations.openrlhf import save_experiences
from tim_report.integrations.verl import save_dataproto
from tim_report.io import load


def one_line(err: pytest.ExceptionInfo, *words: str) -> None:
    text = str(err.value)
    assert "\n" not in text and all(w in text for w in words), text


@dataclass
class Experience:
    """OpenRLHF's Experience fields (openrlhf/trainer/ppo_utils/experience.py), as test_integrations.py builds it."""

    sequences: object
    action_mask: object
    action_log_probs: object
    rollout_log_probs: object
    advantages: object = None
    rewards: object = None
    index: object = field(default=None)


def experience(b: int = 2, a: int = 5) -> Experience:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(b, a, dtype=torch.bool)
    rollout = -torch.rand(b, a, generator=g)
    return Experience(torch.randint(3, 99, (b, a + 3), generator=g), mask, rollout + 0.01, rollout,
                      advantages=torch.zeros(b, a), rewards=torch.ones(b), index=[0] * b)


@pytest.mark.parametrize("given, words", [
    (lambda: None, "experience 0: expected an OpenRLHF Experience or a list of them"),
    (lambda: {"action_log_probs": 1}, "got dict"),
    (lambda: [experience(), "not one"], "experience 1: expected an OpenRLHF Experience"),
    (lambda: Experience(torch.zeros(2, 8, dtype=torch.long), None, -torch.ones(2, 5), -torch.ones(2, 5)),
     "experience 0 has no action_mask"),
    (lambda: Experience(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 5), -torch.ones(2, 5), -torch.ones(2, 5)),
     "sequences is [2, 3], expected [2, ≥ 5]"),
    (lambda: Experience(torch.zeros(2, 8, dtype=torch.long), torch.ones(5), -torch.ones(5), -torch.ones(5)),
     "must be the same [B, A]"),
    (lambda: Experience(np.zeros((2, 8), np.int64), np.ones((2, 5)), -np.ones((2, 5)), -np.ones((2, 5)),
                        rewards=np.ones(3)), "rewards has 3 values for 2 samples"),
])
def test_openrlhf_given_the_wrong_object_says_what_it_expected(tmp_path, given, words):
    with pytest.raises(BadInput) as err:
        save_experiences(given(), tmp_path, step=1)
    one_line(err, words)
    assert not any(tmp_path.iterdir())


def test_openrlhf_takes_a_generator_of_experiences(tmp_path):
    """Before: a generator was taken for one experience, "experience 0 has no rollout_log_probs"."""
    path = save_experiences((experience() for _ in range(2)), tmp_path, step=2)
    assert load(path).n_seqs == 4


def test_openrlhf_a_string_step_is_one_line(tmp_path):
    with pytest.raises(BadInput) as err:
        save_experiences([experience()], tmp_path, step="3")
    one_line(err, "step='3' is not an integer")
    assert not any(tmp_path.iterdir())


class TensorDict(dict):
    """Stands in for DataProto.batch (keys() and [name]: all the helper uses)."""


def dataproto(**tensors) -> SimpleNamespace:
    b, r = 2, 4
    base = {"rollout_log_probs": -torch.rand(b, r), "old_log_probs": -torch.rand(b, r),
            "response_mask": torch.ones(b, r, dtype=torch.long), "responses": torch.zeros(b, r, dtype=torch.long)}
    base.update(tensors)
    return SimpleNamespace(batch=TensorDict({k: v for k, v in base.items() if v is not None}), non_tensor_batch={},
                           meta_info={"global_steps": 3})


@pytest.mark.parametrize("given, words", [
    (lambda: None, ("expected a verl DataProto", "got NoneType")),
    (lambda: {"rollout_log_probs": torch.zeros(2, 3)}, ("expected a verl DataProto", "got dict (no 'batch')")),
    (lambda: dataproto(rollout_log_probs=np.zeros((2, 4))), "'rollout_log_probs' is ndarray[2, 4]: expected a torch tensor"),
    (lambda: dataproto(old_log_probs=-torch.rand(8)), "'old_log_probs' has shape [8]: expected 2 dimensions"),
    (lambda: dataproto(response_mask=torch.ones(2, 2, dtype=torch.long)), "'mask' is [2, 2] but the log-probs are [2, 4]"),
    (lambda: SimpleNamespace(batch=[1, 2]), "expected DataProto.batch to be a TensorDict"),
])
def test_verl_given_the_wrong_object_says_what_it_expected(tmp_path, given, words):
    words = words if isinstance(words, tuple) else (words,)
    with pytest.raises(BadInput) as err:
        save_dataproto(given(), tmp_path)
    one_line(err, *words)
    assert not any(tmp_path.iterdir())


def test_verl_a_string_step_and_a_meta_that_is_not_a_dict_are_one_line(tmp_path):
    with pytest.raises(BadInput) as err:
        save_dataproto(dataproto(), tmp_path, step="7")
    one_line(err, "step='7' is not an integer")
    with pytest.raises(BadInput) as err:
        save_dataproto(dataproto(), tmp_path, meta=["x"])
    one_line(err, "meta is list, expected a dict")
    assert load(save_dataproto(dataproto(), tmp_path)).meta["step"] == 3  # the stand-in itself is fine


def grpo_trainer(**overrides) -> SimpleNamespace:
    t = SimpleNamespace(_generate_and_score_completions=lambda *a, **k: {}, accelerator=SimpleNamespace(process_index=0, num_processes=1),
                        num_generations=2, state=SimpleNamespace(global_step=1), args=SimpleNamespace(bf16=False, fp16=False),
                        model=SimpleNamespace(training=True, config=SimpleNamespace(_name_or_path="m")), use_vllm=True)
    for k, v in overrides.items():
        setattr(t, k, v)
    return t


@pytest.mark.parametrize("given, words", [
    (lambda: None, ("expected a trl GRPOTrainer", "got NoneType")),
    (lambda: SimpleNamespace(train=lambda: None), ("expected a trl GRPOTrainer", "(no '_generate_and_score_completions')")),
    (lambda: grpo_trainer(num_generations=0), "num_generations is 0: expected a positive integer"),
])
def test_trl_given_the_wrong_trainer_says_what_it_expected(tmp_path, given, words):
    pytest.importorskip("transformers")
    from tim_report.integrations.trl import TimReportCallback

    words = words if isinstance(words, tuple) else (words,)
    with pytest.raises(BadInput) as err:
        TimReportCallback(given(), tmp_path, background=False)
    one_line(err, *words)


def test_trl_a_generation_batch_missing_a_field_is_one_line(tmp_path):
    pytest.importorskip("transformers")
    from tim_report.integrations.trl import TimReportCallback

    trainer = grpo_trainer()
    callback = TimReportCallback(trainer, tmp_path, background=False)
    out = {"sampling_per_token_logps": -torch.rand(2, 3), "old_per_token_logps": -torch.rand(2, 3),
           "completion_ids": torch.zeros(2, 3, dtype=torch.long), "prompt_ids": torch.zeros(2, 2, dtype=torch.long),
           "prompt_mask": torch.ones(2, 2), "advantages": torch.zeros(2)}
    with pytest.raises(BadInput) as err:
        callback.save(trainer, out)
    one_line(err, "no 'completion_mask'", "expected the dict GRPOTrainer._generate_and_score_completions returns")
    with pytest.raises(BadInput) as err:
        callback.save(trainer, [1, 2])
    one_line(err, "returned list")
    out["completion_mask"] = torch.ones(2, 3)
    assert load(callback.save(trainer, out)).group.tolist() == ["0", "0"]
