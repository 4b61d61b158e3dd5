"""Where to grow a search tree next: AB-MCTS-A, UCT and best-of-N selection rules.

Every rule is a pure function of a `PublicView` of one tree (parents, public-derived scores, the agent
of each node) and a `random.Random`; it returns `(parent index, agent id)` pairs to expand. A
`PublicView` is built from public-test results only, so a rule *cannot* read private verdicts.

AB-MCTS-A (Inoue et al., 2025, "Wider or Deeper?"), node-aggregation variant with Beta posteriors:
walking down from the root, a node n compares a sample of GEN(n) with a sample of CONT(n):
  GEN(n)   observes the scores of n's direct children (what generating from n has yielded),
  CONT(n)  observes the scores of every deeper descendant of n (what descending has yielded).
GEN wins ties and is forced at a leaf. On CONT the walk moves to the child whose posterior (its own
score plus every score in its subtree) gives the largest sample. On GEN the acting agent is the one
whose posterior over the scores of all nodes it produced in this tree gives the largest sample.
A score r in [0, 1] updates Beta(a, b) to Beta(a + r, b + 1 - r). Priors: Jeffreys Beta(0.5, 0.5)
for every posterior (as in the treequest reference implementation); with no observations the prior
is sampled, so an untried agent is tried early. Posteriors are recomputed from the nodes at every
step, so a tree loaded from JSON resumes exactly: there is no hidden bandit state to save.

UCT: the same walk, but each node scores a GEN arm (mean score of its direct children, count = number
of children) and one arm per child (mean score of the child's subtree, count = subtree size) with
UCB1, Q + c * sqrt(ln(1 + total count) / count); an arm with count 0 is taken first; ties go to GEN,
then to the earliest child. The acting agent is chosen by the same Thompson rule as AB-MCTS-A, so
the two algorithms differ only in how they pick the node to expand.

Best-of-N: every new node is a child of the root; agents take turns in the given order.

This module does NOT generate, run or store anything; see coral/mars2/tree.py.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coral.trajectory import ExecutionResult, Node

PRIOR_A = 0.5  # Jeffreys prior Beta(0.5, 0.5)
PRIOR_B = 0.5

Expansion = tuple[int, str]  # (index of the node to expand, id of the agent that writes the child)


@dataclass(frozen=True)
class PublicView:
    """What a selection rule may see of a tree: structure, agents and public-test scores."""

    parents: tuple[int | None, ...]
    scores: tuple[float, ...]  # search score of each node from its public tests; root: 0
    agents: tuple[str | None, ...]

    @classmethod
    def of(cls, nodes: Sequence[Node], binary_score: bool) -> PublicView:
        return cls(
            parents=tuple(n.parent for n in nodes),
            scores=tuple(search_score(n.public, binary_score) for n in nodes),
            agents=tuple(n.agent for n in nodes),
        )

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in self.parents]
        for i, p in enumerate(self.parents):
            if p is not None:
                kids[p].append(i)
        return kids

    def subtree_sums(self) -> tuple[list[float], list[int]]:
        """(sum of scores, number of nodes) of each node's subtree, the node included.
        Children always have larger indices than their parent, so one reverse pass suffices."""
        total = list(self.scores)
        count = [1] * len(self.parents)
        for i in range(len(self.parents) - 1, 0, -1):
            p = self.parents[i]
            if p is not None:
                total[p] += total[i]
                count[p] += count[i]
        return total, count


def search_score(public: ExecutionResult | None, binary_score: bool) -> float:
    """The search score of a node from its public results: pass fraction, or 1/0 for all passing."""
    if public is None:
        return 0.0
    return float(public.passed) if binary_score else public.pass_fraction


def beta_sample(rng: random.Random, total: float, count: int) -> float:
    """A sample of the Beta posterior after `count` scores summing to `total`."""
    return rng.betavariate(PRIOR_A + total, PRIOR_B + count - total)


def _argmax(values: Sequence[float]) -> int:
    """Index of the largest value; the earliest one on ties."""
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def thompson_agent(view: PublicView, agent_ids: Sequence[str], rng: random.Random) -> str:
    """The agent whose posterior over the scores of its own nodes in this tree samples highest."""
    samples = []
    for agent in agent_ids:
        mine = [s for s, a in zip(view.scores, view.agents, strict=True) if a == agent]
        samples.append(beta_sample(rng, sum(mine), len(mine)))
    return agent_ids[_argmax(samples)]


def select_abmcts(view: PublicView, agent_ids: Sequence[str], rng: random.Random,
                  budget_left: int, uct_c: float = 1.0) -> list[Expansion]:
    kids = view.children()
    sub_total, sub_count = view.subtree_sums()
    node = 0
    while kids[node]:
        gen_total = sum(view.scores[c] for c in kids[node])
        cont_total = sum(sub_total[c] - view.scores[c] for c in kids[node])
        cont_count = sum(sub_count[c] - 1 for c in kids[node])
        gen = beta_sample(rng, gen_total, len(kids[node]))
        cont = beta_sample(rng, cont_total, cont_count)
        if gen >= cont:
            break
        arms = [beta_sample(rng, sub_total[c], sub_count[c]) for c in kids[node]]
        node = kids[node][_argmax(arms)]
    return [(node, thompson_agent(view, agent_ids, rng))]


def _ucb(mean: float, count: int, total_count: int, c: float) -> float:
    if count == 0:
        return math.inf
    return mean + c * math.sqrt(math.log(1 + total_count) / count)


def select_uct(view: PublicView, agent_ids: Sequence[str], rng: random.Random,
               budget_left: int, uct_c: float = 1.0) -> list[Expansion]:
    kids = view.children()
    sub_total, sub_count = view.subtree_sums()
    node = 0
    while kids[node]:
        children = kids[node]
        n_gen = len(children)
        total = n_gen + sum(sub_count[c] for c in children)
        arms = [_ucb(sum(view.scores[c] for c in children) / n_gen, n_gen, total, uct_c)]
        arms += [_ucb(sub_total[c] / sub_count[c], sub_count[c], total, uct_c) for c in children]
        pick = _argmax(arms)
        if pick == 0:
            break
        node = children[pick - 1]
    return [(node, thompson_agent(view, agent_ids, rng))]


def select_best_of_n(view: PublicView, agent_ids: Sequence[str], rng: random.Random,
                     budget_left: int, uct_c: float = 1.0) -> list[Expansion]:
    start = len(view.parents) - 1
    return [(0, agent_ids[(start + j) % len(agent_ids)]) for j in range(budget_left)]


# A selector returns this step's expansions of one tree (at most `budget_left`, at least one).
# The tree walks return one, because the next walk needs the new node's score; best-of-N needs no
# feedback, so it spends the whole remaining budget in one step (one big generation batch).
Selector = Callable[[PublicView, Sequence[str], random.Random, int, float], list[Expansion]]
SELECTORS: dict[str, Selector] = {"abmcts": select_abmcts, "uct": select_uct, "best_of_n": select_best_of_n}
