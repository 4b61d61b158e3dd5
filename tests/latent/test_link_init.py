"""Link initialisation: latents start at token-embedding norm; aligned outer links start as the ridge
map between two agents' embedding tables (hand-computed), and need one vocabulary."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_agent

from coral.latent.links import InnerLink, OuterLink, embedding_rms, init_links
from coral.latent.patterns import PATTERNS
from coral.latent.system import RecursiveMAS
from coral.policy.tiny import build_tokenizer

# E_dst = E_src @ diag(2, 3) exactly, so the ridge map with lambda 0 is diag(2, 3)
E_SRC = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
E_DST = torch.tensor([[2.0, 0.0], [0.0, 3.0], [2.0, 3.0]])


def test_embedding_rms_is_the_root_mean_square_entry():
    assert embedding_rms(E_DST) == pytest.approx(((4 + 9 + 4 + 9) / 6) ** 0.5)


def test_scaled_links_give_latents_the_norm_of_a_token_embedding():
    inner, outer = InnerLink(2), OuterLink(2, 2)
    init_links("scaled", {"a": inner}, {"a__to__b": (outer, "a", "b")}, {"a": E_SRC, "b": E_DST})
    x = torch.randn(5, 2)
    # a 2-wide LayerNorm output is (+-1, -+1) times its gain: norm = gain * sqrt(2) = the table's RMS * sqrt(d)
    expected_inner, expected_outer = embedding_rms(E_SRC) * 2**0.5, embedding_rms(E_DST) * 2**0.5
    torch.testing.assert_close(inner(x).norm(dim=-1), torch.full((5,), expected_inner), atol=0, rtol=1e-3)  # eps of LayerNorm
    torch.testing.assert_close(outer(x).norm(dim=-1), torch.full((5,), expected_outer), atol=0, rtol=1e-3)  # eps of LayerNorm


def test_aligned_outer_link_starts_as_the_ridge_map_between_embedding_tables():
    outer = OuterLink(2, 2)
    init_links("aligned", {}, {"a__to__b": (outer, "a", "b")}, {"a": E_SRC, "b": E_DST}, ridge_lambda=0.0)
    torch.testing.assert_close(outer.w3.weight, torch.tensor([[2.0, 0.0], [0.0, 3.0]]))
    assert outer.w2.bias.abs().max() == 0 and outer.w2.weight.abs().max() < 0.02  # the MLP branch starts near 0


def test_random_init_leaves_pytorch_defaults():
    outer = OuterLink(2, 2)
    before = {k: v.clone() for k, v in outer.state_dict().items()}
    init_links("random", {}, {"a__to__b": (outer, "a", "b")}, {"a": E_SRC, "b": E_DST})
    assert all(torch.equal(before[k], v) for k, v in outer.state_dict().items())


def test_aligned_init_refuses_agents_of_different_vocabularies():
    other = build_tokenizer(["def f(x): return x"] * 4, vocab_size=300)
    agents = {"planner": tiny_agent(32, 1), "critic": tiny_agent(32, 2, other), "solver": tiny_agent(32, 3)}
    with pytest.raises(ValueError, match="link_init 'aligned' needs agents of one vocabulary"):
        RecursiveMAS(PATTERNS["sequential"], agents, latent_steps=2)
    RecursiveMAS(PATTERNS["sequential"], agents, latent_steps=2, link_init="scaled")  # no vocabulary needed
