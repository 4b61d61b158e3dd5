"""LatentMAS: ridge realignment on hand-computed matrices, norm rescaling, one cache across agents."""

from __future__ import annotations

import torch

from coral.recursivemas.latentmas import LatentMAS
from coral.recursivemas.links import ridge_realignment
from coral.recursivemas.patterns import PATTERNS
from tests.recursivemas.conftest import tiny_agent


def test_ridge_realignment_matches_hand_computed_solutions():
    w_out = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    w_in = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    # lambda 0: W_out^-1 W_in; lambda 1: diag(2, 5)^-1 [[1, 1], [0, 2]]
    assert torch.allclose(ridge_realignment(w_out, w_in, 0.0).float(), torch.tensor([[1.0, 1.0], [0.0, 0.5]]))
    assert torch.allclose(ridge_realignment(w_out, w_in, 1.0).float(), torch.tensor([[0.5, 0.5], [0.0, 0.4]]))


def test_realigned_thoughts_have_the_mean_input_embedding_norm():
    agent = tiny_agent(32, seed=0)
    mas = LatentMAS(PATTERNS["sequential"], agent, latent_steps=2)
    mean_norm = agent.model.get_input_embeddings().weight.norm(dim=-1).mean()
    e = mas.realign(torch.randn(3, 32))
    assert torch.allclose(e.norm(dim=-1), mean_norm.expand(3), rtol=1e-4)


def test_a_rows_answer_does_not_depend_on_the_rows_batched_with_it():
    agent = tiny_agent(32, seed=0)
    mas = LatentMAS(PATTERNS["sequential"], agent, latent_steps=3)
    alone = mas.answer(["sum xs"], rounds=2, max_new_tokens=6)
    batched = mas.answer(["a much longer question about lists", "sum xs"], rounds=2, max_new_tokens=6)
    assert batched[1] == alone[0]
