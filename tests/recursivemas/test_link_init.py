"""Link initialisation: latents start at token-embedding norm; aligned outer links start as the ridge
map between two agents' embedding tables (hand-computed); two vocabularies: test_mixed_tokenizers.py."""

from __future__ import annotations

import pytest
import torch

from coral.recursivemas.links import InnerLink, OuterLink, embedding_rms, init_links

# E_dst = E_src @ diag(2, 3) exactly, so the ridge map with lambda 0 is diag(2, 3)
E_SRC = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
E_DST = torch.tensor([[2.0, 0.0], [0.0, 3.0], [2.0, 3.0]])


def test_embedding_rms_is_the_root_mean_square_entry():
    assert embedding_rms(E_DST) == pytest.approx(((4 + 9 + 4 + 9) / 6) ** 0.5)


def test_scaled_links_give_latents_the_norm_of_a_token_embedding():
    gen = torch.Generator().manual_seed(0)
    e_src, e_dst = 0.1 * torch.randn(20, 8, generator=gen), 0.3 * torch.randn(20, 8, generator=gen)
    inner, outer = InnerLink(8), OuterLink(8, 8)
    init_links("scaled", {"a": inner}, {"a__to__b": (outer, "a", "b")}, {"a": e_src, "b": e_dst})
    x = 10 * torch.randn(5, 8, generator=gen)  # spread out, so LayerNorm's eps is negligible
    # a LayerNorm output with gain g (bias 0) has RMS entry g: norm = the table's RMS entry * sqrt(d)
    torch.testing.assert_close(inner(x).norm(dim=-1), torch.full((5,), embedding_rms(e_src) * 8**0.5), rtol=1e-3, atol=0)
    torch.testing.assert_close(outer(x).norm(dim=-1), torch.full((5,), embedding_rms(e_dst) * 8**0.5), rtol=1e-3, atol=0)


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
