"""Tiny CoRe-Code runs with all four roles (retriever, planner, coder, debugger): RL moves exactly the
trained roles, with separate models or LoRA adapters on one base, and a killed run resumes exactly."""

import json
import random

import pytest
import torch
from run_helpers import clean_and_resumed_runs, corecode_cmd

from coral.corecode.recipe import CoReCodeConfig, train_corecode
from coral.train.sft import SFTConfig

ALL = ("retriever", "planner", "coder", "debugger")
FOUR = dict(n_train_tasks=60, n_test_tasks=2, n_fresh_tasks=0, d_model=32, n_layers=1,
            sft=SFTConfig(epochs=0.2, batch_size=8), rl_steps=2, tasks_per_step=2, plans_per_task=2, codes_per_plan=2,
            retrieved_examples=1, retrievals_per_task=2, retriever_max_new_tokens=24, debug_rounds=2,
            rewrites_per_code=2, debug_when="always", max_new_tokens=16, checkpoint_every_steps=2,
            efficiency_weight=0.0, eval_batch_samples=4, eval_samples_per_task=0, sandbox_workers=1,
            sft_processes=1)  # spawning SFT processes costs more than these few SFT steps


def _random_reward():
    """A seeded uniform draw per code, whatever the code: the barely trained tiny models write no parseable
    code, and every group needs rewards that differ for its role to get a non-zero advantage (an alternating
    0, 1 gives every retrieval the same mean)."""
    rng = random.Random(0)
    return lambda task, code, result, reference: rng.random()


def _weights(run, step, role):
    return torch.load(run / "ckpt" / f"step_{step:06d}" / role / "model.pt", weights_only=True)


def _moved(run, role):
    """Share of the role's weight tensors that RL changed (step-0 checkpoint: after SFT; step 2: after RL)."""
    before, after = _weights(run, 0, role), _weights(run, 2, role)
    assert before.keys() == after.keys() and before
    return sum(not torch.equal(before[k], after[k]) for k in before) / len(before)


LORA_SLOW = pytest.mark.slow(reason="a second tiny four-role run, LoRA adapters on one base: about 30 s of CPU")


@pytest.mark.parametrize("train_roles,lora_rank", [(ALL, 0), pytest.param(("retriever", "debugger"), 4, marks=LORA_SLOW)],
                         ids=["all-four-separate-models", "retriever-and-debugger-lora"])
def test_rl_moves_every_trained_role_and_no_frozen_one(tmp_path, train_roles, lora_rank):
    cfg = CoReCodeConfig(**{**FOUR, "train_roles": train_roles, "lora_rank": lora_rank, "out_dir": str(tmp_path)})
    summary = train_corecode(cfg, progress=False, reward_fn=_random_reward())
    assert set(summary["sft_loss"]) == set(ALL)
    metrics = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for role in ALL:
        moved = _moved(tmp_path, role)
        if role in train_roles:
            assert moved > 0.5, f"RL changed only {moved:.0%} of {role}'s weight tensors"
            assert all(m[f"{role}/trained_turns"] > 0 for m in metrics)
        else:
            assert moved == 0, f"frozen {role} moved"
            assert not any(f"{role}/loss" in m for m in metrics)
    # per step: 2 tasks x 2 retrievals x 2 plans x 2 codes x 2 rounds x 2 rewrites (debug_when "always")
    assert [m["debugger/turns"] for m in metrics] == [64.0, 64.0]
    assert [m["retriever/turns"] for m in metrics] == [4.0, 4.0]
    assert "fix_rate" in json.loads((tmp_path / "eval_rl" / "summary.json").read_text())["summary"]


FOUR_FLAT = {**{k: v for k, v in FOUR.items() if k != "sft"}, "sft": {"epochs": 0.2, "batch_size": 8},
             "rl_steps": 4, "checkpoint_every_steps": 1, "train_roles": list(ALL)}


def _train_cmd(out_dir):
    return corecode_cmd({**FOUR_FLAT, "out_dir": str(out_dir)})


@pytest.mark.slow(reason="two tiny four-role runs in subprocesses, one killed and resumed: over a minute on 2 cores")
@pytest.mark.timeout(1200)  # three subprocess runs: the default 300 s is too short on a loaded 2-core machine
def test_a_killed_four_role_run_resumes_to_the_same_state(tmp_path):
    from coral.policy.hf import HFPolicy

    clean, crashed = clean_and_resumed_runs(_train_cmd, tmp_path)
    for role in ALL:
        a = HFPolicy.load(clean / "final" / role).model.state_dict()
        b = HFPolicy.load(crashed / "final" / role).model.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a), f"{role} differs after resume"
    keys = ["step", "pass_rate", "debugger/turns", "debugger/fix_rate"] + [f"{r}/reward" for r in ALL]
    read = lambda run: [[m.get(k) for k in keys] for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]  # noqa: E731
    assert read(crashed) == read(clean)
