"""RecursiveMAS agents in bfloat16: their direct model calls run under autocast, the links train in
float32, and the agents' weights stay float32 and frozen; the config names a bad dtype."""

from __future__ import annotations

import pytest
import torch

from coral.policy.tiny import build_model, build_tokenizer
from coral.recursivemas.config import RecursiveMASConfig
from coral.recursivemas.data import Record
from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.system import RecursiveMAS
from coral.recursivemas.train import inner_loss, outer_loss

RECORDS = [Record("0", "sum xs", "add", "add!", "s+"), Record("1", "max xs", "top", "top!", "m!")]


def agents(dtype: str) -> dict:
    from coral.policy.hf import HFPolicy

    tok = build_tokenizer()
    return {role: HFPolicy(build_model(tok, seed=i, d_model=32, n_layers=1, n_heads=4, max_len=512), tok,
                           name=role, dtype=dtype) for i, role in enumerate(("planner", "critic", "solver"))}


def matmul_dtypes(mas: RecursiveMAS, run) -> set:
    seen = set()
    hooks = [a.model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, out: seen.add(out.dtype))
             for a in mas.agents.values()]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_agents_compute_in_their_dtype_and_the_links_train_in_float32(dtype):
    mas = RecursiveMAS(PATTERNS["sequential"], agents(dtype), latent_steps=2)
    expected = {torch.bfloat16} if dtype == "bfloat16" else {torch.float32}

    def step():
        loss, _ = outer_loss(mas, RECORDS, rounds=2)
        loss = loss + torch.stack(list(inner_loss(mas, RECORDS).values())).sum()
        assert torch.isfinite(loss)
        loss.backward()

    assert matmul_dtypes(mas, step) == expected
    assert matmul_dtypes(mas, lambda: mas.answer(["sum xs"], rounds=1, max_new_tokens=3)) == expected
    links = [*mas.inner.parameters(), *mas.outer.parameters()]
    assert all(p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 for p in links)
    for agent in mas.agents.values():
        assert all(p.dtype == torch.float32 and p.grad is None for p in agent.model.parameters())


def test_a_bad_dtype_is_named():
    with pytest.raises(ValueError, match="field 'dtype'.*'fp16'"):
        RecursiveMASConfig(dtype="fp16")
