"""Link training: what an outer step touches, gradient through rounds, inner loss falls, resume."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import tiny_agent

from coral.latent.data import Record
from coral.latent.patterns import PATTERNS
from coral.latent.system import RecursiveMAS, edge_key
from coral.latent.train import (
    RecursiveMASConfig,
    load_state,
    new_state,
    outer_loss,
    outer_step,
    run_steps,
    save_state,
)

RECORDS = [Record(str(i), q, p, p + "!", a) for i, (q, p, a) in
           enumerate([("sum xs", "add", "s+"), ("max xs", "top", "m!"), ("len xs", "count", "n#"), ("rev s", "flip", "r-")])]


def _cfg(tmp_path, **kw) -> RecursiveMASConfig:
    base = dict(latent_steps=2, rounds=2, batch_size=2, inner_steps=2, outer_steps=2, warmup_steps=1,
                out_dir=str(tmp_path), checkpoint_every=100)
    return RecursiveMASConfig(**{**base, **kw})


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_an_outer_step_changes_the_outer_links_and_nothing_else(tmp_path, two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    state = new_state(_cfg(tmp_path), mas, RECORDS)
    lms = {r: _snapshot(a.model) for r, a in two_width_agents.items()}
    inner, outer = _snapshot(mas.inner), _snapshot(mas.outer)
    outer_step(state, RECORDS[:2])
    assert all(not torch.equal(v, mas.outer.state_dict()[k]) for k, v in outer.items() if k.endswith("weight"))
    assert all(torch.equal(v, mas.inner.state_dict()[k]) for k, v in inner.items())
    for role, agent in two_width_agents.items():
        assert all(torch.equal(v, agent.model.state_dict()[k]) for k, v in lms[role].items()), role
        assert all(p.grad is None for p in agent.model.parameters())


def test_round_one_links_get_gradient_only_through_the_later_rounds(two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    mas.inner.requires_grad_(False)
    outputs: list[torch.Tensor] = []

    def keep(module, inputs, output):
        output.retain_grad()
        outputs.append(output)

    mas.outer[edge_key("critic", "solver")].register_forward_hook(keep)
    loss, ces = outer_loss(mas, RECORDS[:2], rounds=2)  # CE on the last round only
    loss.backward()
    round_one, round_two = outputs
    # round 1's critic -> solver latents reach the loss only via the solver's thoughts, the feedback
    # edge to the planner, and all of round 2
    assert round_one.grad is not None and round_one.grad.abs().sum() > 0
    assert round_two.grad.abs().sum() > 0
    assert len(ces) == 1


def test_earlier_rounds_can_be_weighted_into_the_loss(two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    with torch.no_grad():
        loss, ces = outer_loss(mas, RECORDS[:2], rounds=3, earlier_round_weight=0.5)
    assert len(ces) == 3
    assert loss.item() == pytest.approx(ces[-1] + 0.5 * (ces[0] + ces[1]) / 2, rel=1e-5)


def test_the_inner_loss_falls(tmp_path):
    agent = tiny_agent(32, seed=0)
    agents = {"expert": agent, "learner": tiny_agent(32, seed=1, tokenizer=agent.tokenizer)}
    mas = RecursiveMAS(PATTERNS["distillation"], agents, latent_steps=2)
    cfg = _cfg(tmp_path, inner_steps=12, outer_steps=0, batch_size=4, inner_lr=2e-2, warmup_steps=1)
    state = run_steps(new_state(cfg, mas, RECORDS), 12)
    losses = [m["inner/loss"] for m in state.metrics]
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3


def test_a_resumed_run_ends_with_the_links_of_an_uninterrupted_one(tmp_path, two_width_agents):
    def fresh(out):
        torch.manual_seed(0)
        mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
        return new_state(_cfg(out, rounds=1, outer_steps=1), mas, RECORDS)

    whole = run_steps(fresh(tmp_path / "a"), 3)  # 2 inner steps, then 1 outer step
    first = run_steps(fresh(tmp_path / "b"), 1)
    save_state(first, tmp_path / "b")
    resumed = fresh(tmp_path / "b")
    assert load_state(resumed, tmp_path / "b") and resumed.step == 1
    run_steps(resumed, 3)
    for k, v in whole.system.state_dict().items():
        assert torch.allclose(v, resumed.system.state_dict()[k], atol=1e-6), k
    assert [m["step"] for m in resumed.metrics] == [0, 1, 2]


def test_a_state_written_by_another_config_is_refused_by_field(tmp_path, two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    save_state(new_state(_cfg(tmp_path), mas, RECORDS), tmp_path)
    other = new_state(dataclasses.replace(_cfg(tmp_path), rounds=3), mas, RECORDS)
    with pytest.raises(ValueError, match="'rounds'"):
        load_state(other, tmp_path)
