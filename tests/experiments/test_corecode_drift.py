"""experiments/corecode_drift.py: KL of a run's final roles to its kept cold start."""

from __future__ import annotations

import random

import pytest
import torch

from coral.corecode.recipe import CoReCodeConfig, train_corecode
from coral.policy.hf import HFPolicy
from coral.train.grpo import GRPOConfig
from coral.train.sft import SFTConfig

SMALL = dict(n_train_tasks=40, n_test_tasks=2, d_model=32, n_layers=1, sft=SFTConfig(epochs=0.3, batch_size=8),
             tasks_per_step=2, plans_per_task=2, codes_per_plan=2, max_new_tokens=16, efficiency_weight=0.0,
             eval_batch_samples=4, sandbox_workers=1, n_fresh_tasks=0, sft_processes=1, eval_samples_per_task=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    still, moved = tmp_path_factory.mktemp("still"), tmp_path_factory.mktemp("moved")
    train_corecode(CoReCodeConfig(**SMALL, rl_steps=0, out_dir=str(still)), progress=False)
    rng = random.Random(0)  # rewards that differ within every group (nothing these models write parses)
    train_corecode(CoReCodeConfig(**SMALL, rl_steps=2, rl=GRPOConfig(lr=3e-2), out_dir=str(moved)), progress=False,
                   reward_fn=lambda task, code, result, reference: rng.random())
    return still, moved


def test_a_run_without_rl_has_not_moved_and_one_with_rl_has(load_experiment, runs):
    drift = load_experiment("corecode_drift").drift
    still, moved = runs
    kl, tokens = drift(still, steps=1)
    assert kl == {"planner": 0.0, "coder": 0.0} and all(n > 0 for n in tokens.values())  # final = cold start
    kl, tokens = drift(moved, steps=1)
    assert all(kl[role] > 1e-4 for role in kl) and all(n > 0 for n in tokens.values())


def test_the_saved_cold_start_is_the_runs_own(load_experiment, runs, tmp_path, capsys):
    still, _ = runs
    load_experiment("corecode_drift").main([str(still), "--steps", "1", "--save-cold-start", str(tmp_path)])
    assert "KL planner 0.0000" in capsys.readouterr().out
    for role in ("planner", "coder"):  # without RL the final weights are the cold start's
        saved = HFPolicy.load(tmp_path / role).model.state_dict()
        final = HFPolicy.load(still / "final" / role).model.state_dict()
        assert all(torch.equal(saved[k], final[k]) for k in final)


def test_a_folder_that_is_not_a_finished_run_is_refused(load_experiment, tmp_path):
    with pytest.raises(SystemExit, match="config.json does not exist"):
        load_experiment("corecode_drift").main([str(tmp_path)])
