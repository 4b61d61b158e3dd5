"""Gradient checkpointing of the unrolled rounds changes memory, not gradients."""

from __future__ import annotations

import torch
from test_train import RECORDS

from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.system import RecursiveMAS
from coral.recursivemas.train import outer_loss


def _outer_grads(mas: RecursiveMAS) -> dict[str, torch.Tensor]:
    mas.zero_grad(set_to_none=True)
    mas.inner.requires_grad_(False)
    loss, _ = outer_loss(mas, RECORDS, rounds=3, earlier_round_weight=0.5)
    loss.backward()
    return {k: p.grad.clone() for k, p in mas.outer.named_parameters()}


def test_checkpointed_rounds_give_the_same_outer_gradients(two_width_agents):
    torch.manual_seed(0)
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=3)
    plain = _outer_grads(mas)
    mas.gradient_checkpointing = True
    checkpointed = _outer_grads(mas)
    assert set(plain) == set(checkpointed) and len(plain) == 3 * 9  # 3 edges, 9 tensors per outer link
    assert all(plain[k].abs().sum() > 0 for k in plain)  # every outer link is reached, so the check is not vacuous
    for k in plain:  # relative to the tensor's largest entry: some gradients are ~1e-6 themselves
        err = (checkpointed[k] - plain[k]).abs().max() / plain[k].abs().max()
        assert err <= 1e-6, (k, err.item())


def test_checkpointing_is_used_only_under_grad(two_width_agents, monkeypatch):
    calls = []
    import coral.recursivemas.system as ckpt  # the name system.py calls

    real = ckpt.checkpoint
    monkeypatch.setattr(ckpt, "checkpoint", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2, gradient_checkpointing=True)
    mas.answer([r.question for r in RECORDS[:2]], rounds=2, max_new_tokens=2)
    assert calls == []
    outer_loss(mas, RECORDS[:2], rounds=2)
    assert len(calls) == 5  # round 1: planner, critic, solver; round 2: planner, critic (the solver decodes)
