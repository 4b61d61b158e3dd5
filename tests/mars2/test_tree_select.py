"""AB-MCTS-A golden trace: a tree grown by hand for six steps, with every Beta draw scripted.

`ScriptedRng` returns the listed samples in order and records the (alpha, beta) of each draw, so each
step pins: the GEN/CONT posteriors at every node of the walk, the posterior of each child arm on CONT,
each agent's posterior, the expansion chosen, and the visits / values of the nodes after adding it.
Posteriors: Jeffreys Beta(0.5, 0.5) updated by each score r in [0, 1] to (a + r, b + 1 - r).
  GEN(n):  scores of n's direct children;  CONT(n): scores of every deeper descendant of n;
  child c: c's score and its subtree's;   agent: the scores of every node it wrote in the tree.
"""

from __future__ import annotations

import pytest

from coral.mars2.tree import Tree
from coral.mars2.tree_select import PublicView, select_abmcts
from coral.trajectory import ExecutionResult, Verdicts
from coral.trajectory import TestResult as Result


class ScriptedRng:
    def __init__(self, samples: list[float]) -> None:
        self.samples = list(samples)
        self.calls: list[tuple[float, float]] = []

    def betavariate(self, alpha: float, beta: float) -> float:
        self.calls.append((alpha, beta))
        return self.samples.pop(0)


def public(score: float) -> ExecutionResult:
    """Public results with pass fraction `score` (0, 0.5 or 1: two tests)."""
    passed = round(2 * score)
    return ExecutionResult(tests=tuple(Result("pass" if i < passed else "fail") for i in range(2)))


# (samples, expected draws (alpha, beta), expected expansion, score of the new node,
#  expected (visits, value) of every node after adding it)
TRACE = [
    # 1. root is a leaf: GEN is forced, no GEN/CONT draw; agents a, b untried: both at the prior
    ([0.3, 0.6], [(0.5, 0.5), (0.5, 0.5)], (0, "b"), 0.5,
     [(1, 0.5), (1, 0.5)]),
    # 2. root: GEN sees child 1 (0.5) -> Beta(1, 1); CONT sees nothing deeper -> prior. 0.7 >= 0.4: GEN.
    #    agents: a prior, b has 0.5 -> Beta(1, 1)
    ([0.7, 0.4, 0.2, 0.9], [(1.0, 1.0), (0.5, 0.5), (0.5, 0.5), (1.0, 1.0)], (0, "b"), 0.0,
     [(2, 0.25), (1, 0.5), (1, 0.0)]),
    # 3. root: GEN sees 0.5, 0 -> Beta(1, 2); CONT prior; 0.3 < 0.6: CONT. Arms: child 1 Beta(1, 1),
    #    child 2 Beta(0.5, 1.5): 0.8 > 0.1 -> node 1, a leaf: expand it. Agents: a prior, b Beta(1, 2)
    ([0.3, 0.6, 0.8, 0.1, 0.9, 0.1],
     [(1.0, 2.0), (0.5, 0.5), (1.0, 1.0), (0.5, 1.5), (0.5, 0.5), (1.0, 2.0)], (1, "a"), 1.0,
     [(3, 0.5), (2, 0.75), (1, 0.0), (1, 1.0)]),
    # 4. root: GEN Beta(1, 2); CONT sees node 3 (1.0) -> Beta(1.5, 0.5); CONT. Arms: node 1's subtree
    #    0.5, 1 -> Beta(2, 1), node 2 Beta(0.5, 1.5): node 1. At node 1: GEN sees node 3 -> Beta(1.5, 0.5),
    #    CONT prior; a tie (0.5, 0.5) goes to GEN. Agents: a Beta(1.5, 0.5), b Beta(1, 2)
    ([0.2, 0.5, 0.6, 0.4, 0.5, 0.5, 0.4, 0.3],
     [(1.0, 2.0), (1.5, 0.5), (2.0, 1.0), (0.5, 1.5), (1.5, 0.5), (0.5, 0.5), (1.5, 0.5), (1.0, 2.0)],
     (1, "a"), 0.5,
     [(4, 0.5), (3, 2 / 3), (1, 0.0), (1, 1.0), (1, 0.5)]),
    # 5. root: GEN Beta(1, 2); CONT sees 1, 0.5 -> Beta(2, 1); CONT. Arms: node 1's subtree 0.5, 1, 0.5 ->
    #    Beta(2.5, 1.5), node 2 Beta(0.5, 1.5): node 1. At node 1: GEN sees 1, 0.5 -> Beta(2, 1), CONT
    #    prior; 0.3 < 0.8: CONT. Arms: node 3 Beta(1.5, 0.5), node 4 Beta(1, 1): 0.9 -> node 4, a leaf.
    #    Agents: a has 1, 0.5 -> Beta(2, 1), b Beta(1, 2)
    ([0.1, 0.9, 0.5, 0.2, 0.3, 0.8, 0.4, 0.9, 0.7, 0.2],
     [(1.0, 2.0), (2.0, 1.0), (2.5, 1.5), (0.5, 1.5), (2.0, 1.0), (0.5, 0.5), (1.5, 0.5), (1.0, 1.0),
      (2.0, 1.0), (1.0, 2.0)],
     (4, "a"), 0.0,
     [(5, 0.4), (4, 0.5), (1, 0.0), (1, 1.0), (2, 0.25), (1, 0.0)]),
    # 6. root: GEN Beta(1, 2); CONT sees 1, 0.5, 0 (depth 2 and 3) -> Beta(2, 2); tie: GEN at the root.
    #    Agents: a has 1, 0.5, 0 -> Beta(2, 2), b has 0.5, 0 -> Beta(1, 2): 0.2 > 0.1 -> b
    ([0.6, 0.6, 0.1, 0.2], [(1.0, 2.0), (2.0, 2.0), (2.0, 2.0), (1.0, 2.0)], (0, "b"), 1.0,
     [(6, 0.5), (4, 0.5), (1, 0.0), (1, 1.0), (2, 0.25), (1, 0.0), (1, 1.0)]),
]


def flat(pairs: list[tuple[float, float]]) -> list[float]:
    return [x for pair in pairs for x in pair]


def test_abmcts_replays_a_hand_computed_trace_step_by_step():
    tree = Tree.new("t")
    for step, (samples, draws, expansion, score, stats) in enumerate(TRACE, start=1):
        rng = ScriptedRng(samples)
        picked = select_abmcts(PublicView.of(tree.nodes, binary_score=False), ["a", "b"], rng, budget_left=9)
        assert flat(rng.calls) == pytest.approx(flat(draws)), f"step {step}: posteriors drawn from"
        assert picked == [expansion], f"step {step}: expansion"
        assert rng.samples == [], f"step {step}: unused samples"
        parent, agent = expansion
        tree.add(parent, agent, code=None, turn=None, verdicts=Verdicts(public(score), ExecutionResult(())), score=score)
        assert [n.visits for n in tree.nodes] == [v for v, _ in stats], f"step {step}: visits per node"
        assert [n.value for n in tree.nodes] == pytest.approx([v for _, v in stats]), f"step {step}: values"


def test_binary_scores_count_only_all_passing_nodes():
    tree = Tree.new("t")
    tree.add(0, "a", code=None, turn=None, verdicts=Verdicts(public(0.5), ExecutionResult(())), score=0.0)
    rng = ScriptedRng([0.9, 0.1, 0.5])  # GEN wins at the root, then the single agent's draw
    select_abmcts(PublicView.of(tree.nodes, binary_score=True), ["a"], rng, budget_left=1)
    # the half-passing child scores 0: GEN Beta(0.5, 1.5), and agent a Beta(0.5, 1.5) too
    assert rng.calls == [(0.5, 1.5), (0.5, 0.5), (0.5, 1.5)]


def test_ties_between_child_arms_and_between_agents_go_to_the_earliest():
    tree = Tree.new("t")
    for agent in ("a", "b"):
        tree.add(0, agent, code=None, turn=None, verdicts=Verdicts(public(0.5), ExecutionResult(())), score=0.5)
    rng = ScriptedRng([0.1, 0.9, 0.5, 0.5, 0.4, 0.4])  # CONT at the root, tied arms, tied agents
    assert select_abmcts(PublicView.of(tree.nodes, binary_score=False), ["b", "a"], rng, 1) == [(1, "b")]
