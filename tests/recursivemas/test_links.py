"""Golden tests of the RecursiveLink formulas on hand-computed tensors (scalar math, not torch modules)."""

from __future__ import annotations

import math

import pytest
import torch

from coral.recursivemas.links import InnerLink, OuterLink, describe_links, num_parameters

EPS = 1e-5  # torch LayerNorm's default


def gelu(v: float) -> float:
    return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))


def layer_norm(v: list[float], gamma: list[float], beta: list[float]) -> list[float]:
    mean = sum(v) / len(v)
    var = sum((a - mean) ** 2 for a in v) / len(v)
    return [(a - mean) / math.sqrt(var + EPS) * g + b for a, g, b in zip(v, gamma, beta, strict=True)]


def matvec(w: list[list[float]], v: list[float], b: list[float] | None = None) -> list[float]:
    out = [sum(wi * vi for wi, vi in zip(row, v, strict=True)) for row in w]
    return [o + bi for o, bi in zip(out, b, strict=True)] if b is not None else out


def _set(linear: torch.nn.Linear, w: list[list[float]], b: list[float] | None = None) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(w))
        if b is not None:
            linear.bias.copy_(torch.tensor(b))


def test_inner_link_matches_the_formula_on_hand_set_weights():
    link = InnerLink(3)  # W1: 3 -> 6, W2: 6 -> 3
    w1 = [[0.5, -1.0, 0.0], [0.0, 1.0, 2.0], [1.0, 0.0, -0.5], [0.2, 0.2, 0.2], [-1.0, 0.5, 0.0], [0.0, 0.0, 1.0]]
    b1 = [0.1, 0.0, -0.2, 0.0, 0.3, 0.0]
    w2 = [[1.0, 0.0, 0.5, 0.0, 0.0, -1.0], [0.0, 2.0, 0.0, 1.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]]
    b2 = [0.0, -0.1, 0.2]
    _set(link.w1, w1, b1)
    _set(link.w2, w2, b2)
    with torch.no_grad():
        link.ln_pre.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        link.ln_pre.bias.copy_(torch.tensor([0.0, 0.1, -0.1]))
        link.ln_post.weight.copy_(torch.tensor([2.0, 1.0, 1.0]))
        link.ln_post.bias.copy_(torch.tensor([0.5, 0.0, -0.5]))
    x = [1.0, -2.0, 4.0]
    inner = layer_norm(x, [1.0, 2.0, 0.5], [0.0, 0.1, -0.1])
    mlp = matvec(w2, [gelu(v) for v in matvec(w1, inner, b1)], b2)
    expected = layer_norm([a + m for a, m in zip(x, mlp, strict=True)], [2.0, 1.0, 1.0], [0.5, 0.0, -0.5])
    got = link(torch.tensor([x]))
    assert torch.allclose(got, torch.tensor([expected]), atol=1e-6)


def test_outer_link_matches_the_formula_between_two_widths():
    link = OuterLink(3, 2)  # W1: 3 -> 4, W2: 4 -> 2, W3: 3 -> 2
    w1 = [[1.0, 0.0, -1.0], [0.5, 0.5, 0.5], [0.0, -2.0, 1.0], [0.3, 0.0, 0.0]]
    b1 = [0.0, -0.5, 0.1, 0.2]
    w2 = [[1.0, -1.0, 0.0, 2.0], [0.0, 0.5, 1.0, 0.0]]
    b2 = [0.3, -0.3]
    w3 = [[0.1, 0.2, 0.3], [-0.3, 0.0, 0.6]]
    _set(link.w1, w1, b1)
    _set(link.w2, w2, b2)
    _set(link.w3, w3)
    with torch.no_grad():
        link.ln_tgt.weight.copy_(torch.tensor([1.5, 0.5]))
        link.ln_tgt.bias.copy_(torch.tensor([0.25, -1.0]))
    x = [2.0, 0.0, -1.0]
    src = layer_norm(x, [1.0] * 3, [0.0] * 3)
    mlp = matvec(w2, [gelu(v) for v in matvec(w1, src, b1)], b2)
    skip = matvec(w3, x)
    expected = layer_norm([m + s for m, s in zip(mlp, skip, strict=True)], [1.5, 0.5], [0.25, -1.0])
    got = link(torch.tensor([[x]]))  # any leading dims: (batch, latent step, d)
    assert got.shape == (1, 1, 2)
    assert torch.allclose(got[0], torch.tensor([expected]), atol=1e-6)


def test_parameter_counts_follow_the_shapes():
    d, ds, dt = 8, 8, 12
    inner = 2 * d + (d * 2 * d + 2 * d) + (2 * d * d + d) + 2 * d  # LN_pre, W1, W2, LN_post
    outer = 2 * ds + (ds * 2 * dt + 2 * dt) + (2 * dt * dt + dt) + ds * dt + 2 * dt
    assert num_parameters(InnerLink(d)) == inner
    assert num_parameters(OuterLink(ds, dt)) == outer
    text = describe_links({"planner": InnerLink(d)}, {"planner->solver": OuterLink(ds, dt)})
    assert f"inner[planner]: {inner:,} parameters" in text
    assert f"links total: {inner + outer:,} parameters" in text


def test_links_refuse_empty_widths():
    with pytest.raises(ValueError, match="d_src"):
        OuterLink(0, 4)
