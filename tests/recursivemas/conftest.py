"""Fixtures for latent tests: tiny frozen agents of two widths sharing one byte-level tokenizer."""

from __future__ import annotations

import pytest

from coral.policy.hf import HFPolicy
from coral.policy.tiny import build_model, build_tokenizer


def tiny_agent(d_model: int, seed: int, tokenizer=None) -> HFPolicy:
    tokenizer = tokenizer or build_tokenizer()
    model = build_model(tokenizer, seed=seed, d_model=d_model, n_layers=2, n_heads=4, max_len=2048)
    return HFPolicy(model, tokenizer, name=f"tiny{d_model}")


@pytest.fixture
def two_width_agents() -> dict[str, HFPolicy]:
    """planner and solver 32 wide, critic 48 wide (sequential pattern)."""
    tok = build_tokenizer()
    return {"planner": tiny_agent(32, 1, tok), "critic": tiny_agent(48, 2, tok), "solver": tiny_agent(32, 3, tok)}
