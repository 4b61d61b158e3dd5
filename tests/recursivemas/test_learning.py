"""A short tiny-model run: the outer loss falls and the final agent's training accuracy rises.

The agents are cold-started on their roles in the text-MAS format, so the solver answers right with
the critic's gold text in its slot (4 of 4 here) and wrong with nothing there (0 of 4): the task is
learnable only through the slot. The run is the recipe's: inner loop, then outer loop, links
initialised "aligned" (links.py says why the default PyTorch init leaves the loss flat). It unrolls two
rounds, so the links learn through the feedback edge and the later round too."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from test_train import RECORDS

from coral.recursivemas.agents import role_examples
from coral.recursivemas.config import InnerLoopConfig, OuterLoopConfig, RecursiveMASConfig
from coral.recursivemas.evaluate import evaluate
from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.system import RecursiveMAS
from coral.recursivemas.train import new_state, train_links
from coral.train.loop import Run
from coral.train.loop import new_state as new_trainer_state
from coral.train.sft import SFTConfig, train_sft
from tests.recursivemas.conftest import tiny_agent


@functools.cache
def _cold_started_agents() -> dict:
    """The agents after their role SFT, trained once: it does not depend on the links' seed, and the system
    only freezes their weights, so each run takes a deep copy."""
    pattern = PATTERNS["sequential"]
    tok = tiny_agent(32, 0).tokenizer
    agents = {"planner": tiny_agent(32, 1, tok), "critic": tiny_agent(48, 2, tok), "solver": tiny_agent(32, 3, tok)}
    for role in pattern.roles:
        train_sft(agents[role], role_examples(pattern, role, RECORDS),
                  SFTConfig(epochs=150, batch_size=4, lr=1e-2, warmup_steps=2), progress=False)
    return agents


@pytest.fixture
def one_thread():
    """Tiny matrices gain nothing from a second thread, and two OpenMP threads on a loaded 2-core machine
    wait on each other: this test measured 30 s on one thread and over 300 s on two at load average 14."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _one_run(seed: int, out_dir):
    """(outer losses, evaluation before, evaluation after) of one seeded run from a copy of the cold-started agents."""
    agents = copy.deepcopy(_cold_started_agents())  # the SFT is about half of a run's 14 s of CPU time
    torch.manual_seed(seed)
    mas = RecursiveMAS(PATTERNS["sequential"], agents, latent_steps=4)
    cfg = RecursiveMASConfig(latent_steps=4, rounds=2, batch_size=4, out_dir=str(out_dir),
                             inner=InnerLoopConfig(steps=20, lr=1e-2, warmup_steps=2),
                             outer=OuterLoopConfig(steps=40, lr=3e-2, warmup_steps=2), checkpoint_every_steps=1000)
    before = evaluate("recursive", mas, RECORDS, cfg.rounds, sandbox=None, max_new_tokens=6)
    trainer = train_links(new_state(cfg, mas), RECORDS, Run(out_dir), new_trainer_state())
    after = evaluate("recursive", mas, RECORDS, cfg.rounds, sandbox=None, max_new_tokens=6)
    losses = [m["outer/loss"] for m in trainer["metrics"] if "outer/loss" in m]
    return losses, before, after


def test_links_trained_through_two_rounds_lower_the_outer_loss_and_raise_training_accuracy(tmp_path, one_thread):
    """At this size the run is seed-sensitive, and which seeds learn depends on the CPU's float kernels: on
    one machine seed 0 went 1.31 -> 0.74, on another seed 0 stuck at 1.39 (about ln 4) and seed 1 went
    1.35 -> 0.74, and on an AVX2-only EPYC seeds 0-3 fell by 12-16% while seed 4 went 1.31 -> 0.62 (and seed 7
    1.30 -> 0.74; 2026-12-08). So the first of seeds 0-7 whose outer loss falls by 30% must also raise the
    accuracy; with the links' gradient broken no seed learns and this fails (after all eight runs, about 60 s)."""
    flat = {}
    for seed in range(8):
        losses, before, after = _one_run(seed, tmp_path / f"seed{seed}")
        if sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3:
            assert after.accuracy > before.accuracy, (seed, before.answers, after.answers)  # measured: 0.5 -> 0.75
            return
        flat[seed] = (round(sum(losses[:3]) / 3, 3), round(sum(losses[-3:]) / 3, 3))
    pytest.fail(f"the outer loss fell by 30% at no seed (first 3 -> last 3 steps): {flat}")
