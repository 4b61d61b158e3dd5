"""Patterns as the paper draws them: distillation's expert wider than its learner, mixture's three
specialists, and a tiny agent's width taken from its role unless the config gives widths."""

from __future__ import annotations

from coral.recursivemas.agents import build_agents
from coral.recursivemas.config import RecursiveMASConfig
from coral.recursivemas.data import Record
from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.system import d_model

RECORDS = [Record(str(i), f"question {i}", f"plan {i}", f"refined {i}", f"a{i}") for i in range(3)]


def _widths(**kw) -> dict[str, int]:
    cfg = RecursiveMASConfig(n_layers=1, vocab_size=300, **kw)
    return {role: d_model(agent) for role, agent in build_agents(cfg, RECORDS).items()}


def test_distillations_tiny_expert_is_wider_than_its_learner_by_default():
    widths = _widths(pattern="distillation")
    assert widths["expert"] > widths["learner"]


def test_given_agent_widths_still_cycle_over_the_roles():
    assert _widths(pattern="distillation", agent_widths=(16, 24)) == {"expert": 16, "learner": 24}
    assert _widths(pattern="sequential", agent_widths=(16,)) == {"planner": 16, "critic": 16, "solver": 16}


def test_mixture_has_three_specialists_that_each_feed_the_summariser_and_read_its_feedback():
    mixture = PATTERNS["mixture"]
    specialists = [r for r in mixture.roles if r != mixture.final]
    assert len(specialists) == 3 and mixture.final == "summariser"
    assert set(mixture.inputs["summariser"]) == set(specialists)
    assert all(mixture.feedback[s] == ("summariser",) for s in specialists)
    assert len({mixture.gold[s] for s in specialists}) == 3  # each specialist's inner link learns its own text
