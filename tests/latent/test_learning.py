"""A short tiny-model run: the outer loss falls and the final agent's training accuracy rises."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_agent
from test_train import RECORDS

from coral.latent.agents import role_examples
from coral.latent.evaluate import evaluate
from coral.latent.patterns import PATTERNS
from coral.latent.system import RecursiveMAS
from coral.latent.train import RecursiveMASConfig, new_state, run_steps
from coral.train.sft import SFTConfig, train_sft


@pytest.mark.slow  # ~45 s on a quiet 2-core machine: three cold starts (150 SFT steps each) + 80 outer steps
@pytest.mark.xfail(strict=True, reason="known open: at seed 0 the outer CE falls only 1.44 -> 1.25 and "
                   "training accuracy stays 0.5 (2026-12-04, 6bef5d4); the links do not yet learn to help here")
def test_outer_training_lowers_the_loss_and_raises_training_accuracy(tmp_path):
    pattern = PATTERNS["sequential"]
    tok = tiny_agent(32, 0).tokenizer
    agents = {"planner": tiny_agent(32, 1, tok), "critic": tiny_agent(48, 2, tok), "solver": tiny_agent(32, 3, tok)}
    # each agent learns its role in the text-MAS format (its slot holds its source's gold text); in the
    # latent system the slots hold latents instead, which the outer links must learn to make useful
    for role in pattern.roles:
        train_sft(agents[role], role_examples(pattern, role, RECORDS),
                  SFTConfig(epochs=150, batch_size=4, lr=1e-2, warmup_steps=2), progress=False)
    torch.manual_seed(0)
    mas = RecursiveMAS(pattern, agents, latent_steps=4)
    cfg = RecursiveMASConfig(latent_steps=4, rounds=1, batch_size=4, inner_steps=0, outer_steps=80,
                             outer_lr=0.1, warmup_steps=5, out_dir=str(tmp_path), checkpoint_every=1000)
    before = evaluate("recursive", mas, RECORDS, cfg.rounds, sandbox=None, max_new_tokens=6)
    state = run_steps(new_state(cfg, mas, RECORDS), cfg.outer_steps)
    after = evaluate("recursive", mas, RECORDS, cfg.rounds, sandbox=None, max_new_tokens=6)
    losses = [m["outer/loss"] for m in state.metrics]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    assert after.accuracy > before.accuracy, (before.answers, after.answers)
