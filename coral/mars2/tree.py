"""MARS2 tree search: several agents grow one search tree per task, many trees in lockstep.

A child of the root answers the task (the agent's "solver" prompt); a deeper child refines its
parent's code given the problem, the parent's code and the parent's public-test feedback (the
"refiner" prompt). Each node's code runs against the public tests (its search score) and the private
tests (evaluation only). Which node to expand and which agent writes the child is decided by a rule
in coral/mars2/tree_select.py (AB-MCTS-A, UCT or best-of-N, `TreeConfig.algorithm`).

Lockstep: each step, every unfinished tree picks its expansions; the requests of one agent (per
prompt kind: solve or refine) across all trees go to the policy as ONE `agent.act` batch, and all
new nodes' code runs in ONE `sandbox.run_many` call. So a step costs at most 2 x (number of agents)
generation batches, whatever the number of tasks.

Private tests: `node.private` is written for metrics and never read by the search. Selection rules
receive a `PublicView` (parents, public scores, agents), which holds no private verdict at all.

Why not the treequest library (v0.3.3, which has AB-MCTS-A): (1) it samples through scipy's and
numpy's global random state and names trials with time-based ULIDs, so a run is not reproducible
from a seed and lockstep trees would share one random stream; (2) its posterior state lives in
pickled objects beside the tree, so a tree saved as JSON could not resume without replaying it.
Here posteriors are recomputed from the node list and each tree's selection draws from its own
stream, `sampling_seed(seed, step, "tree-select", "<task>/<tree size>")`, so search is deterministic
and a saved tree resumes exactly.

Random streams of generation: `search(..., step=)` (the training step) and the request key
"<task>/node<n>" (n = the index the new node takes in its tree) go to the agents, which derive one
seed per request (coral/seeding.py); no two expansions of a run share a stream.

This module does NOT compute rewards or advantages for training (the trainer shapes node scores),
and it does NOT retry failed generations: a reply without code becomes a node that scores 0.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coral.agents import TEMPLATES, Agent, extract_code
from coral.mars2.tree_select import SELECTORS, Expansion, PublicView, search_score
from coral.sandbox.protocol import SandboxProtocol
from coral.seeding import sampling_seed
from coral.trajectory import Credit, Node, Task, Turn, Verdicts, node_from_dict, to_dict
from coral.workflows.common import judge, problem_text, task_keys

SOLVE, REFINE = "solver", "refiner"  # the role (and template) of root children / deeper children


@dataclass(frozen=True)
class TreeConfig:
    algorithm: str = "abmcts"  # "abmcts" | "uct" | "best_of_n"
    max_nodes: int = 8  # per tree, root excluded
    seed: int = 0
    binary_score: bool = False  # search score 1/0 (all public tests pass) instead of pass fraction
    uct_c: float = 1.0  # exploration constant of "uct"
    stop_on_public_pass: bool = False  # stop a tree once a node passes all its public tests

    def __post_init__(self) -> None:
        if self.algorithm not in SELECTORS:
            raise ValueError(f"TreeConfig.algorithm must be one of {sorted(SELECTORS)}, got {self.algorithm!r}")
        if self.max_nodes < 1:
            raise ValueError(f"TreeConfig.max_nodes must be >= 1, got {self.max_nodes}")
        if self.uct_c < 0:
            raise ValueError(f"TreeConfig.uct_c must be >= 0, got {self.uct_c}")


@dataclass
class Tree:
    """One task's search tree. nodes[0] is the root (no parent, no code); a node's index is its
    position in `nodes`, and children always come after their parent."""

    task_id: str
    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def new(cls, task_id: str) -> Tree:
        return cls(task_id=task_id, nodes=[Node(index=0, parent=None, depth=0, agent=None)])

    @property
    def size(self) -> int:
        """Number of nodes, root excluded (the sample budget used)."""
        return len(self.nodes) - 1

    def best(self) -> Node | None:
        """The node with the highest public pass fraction (earliest on ties); None if no node yet."""
        best: Node | None = None
        for node in self.nodes[1:]:
            if best is None or node.score > best.score:
                best = node
        return best

    def pass_at_1(self) -> bool:
        """Private verdict of `best()`."""
        best = self.best()
        return best is not None and best.private is not None and best.private.passed

    def pass_at_n(self) -> bool:
        """Whether any node passes its private tests."""
        return any(n.private is not None and n.private.passed for n in self.nodes[1:])

    def add(self, parent: int, agent: str, code: str | None, turn: Turn | None, verdicts: Verdicts | None,
            score: float) -> Node:
        """Append a child of `parent`; visits/value of it and its ancestors count it (value = mean
        search score over the subtree)."""
        node = Node(index=len(self.nodes), parent=parent, depth=self.nodes[parent].depth + 1, agent=agent,
                    code=code, turn=turn, verdicts=verdicts)
        self.nodes.append(node)
        self.nodes[parent].children.append(node.index)
        up: int | None = node.index
        while up is not None:
            n = self.nodes[up]
            n.value = (n.value * n.visits + score) / (n.visits + 1)
            n.visits += 1
            up = n.parent
        return node

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "nodes": [to_dict(n) for n in self.nodes]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tree:
        nodes = [node_from_dict(n) for n in d["nodes"]]
        for i, n in enumerate(nodes):
            if n.index != i:
                raise ValueError(f"tree {d['task_id']!r}: node at position {i} has index {n.index}")
        return cls(task_id=d["task_id"], nodes=nodes)


def _role_agent(agent: Agent, role: str) -> Agent:
    """The agent with the prompt of `role`: its own template if that is its role, else the default
    template of `role` (same id, policy and sampling, so its nodes are credited to it)."""
    if agent.role == role:
        return agent
    return replace(agent, role=role, template=TEMPLATES[role], parser=extract_code)


def _check_inputs(tasks: Sequence[Task], agents: Sequence[Agent], trees: Sequence[Tree] | None) -> None:
    if not agents:
        raise ValueError("search: no agents given")
    ids = [a.id for a in agents]
    if len(set(ids)) != len(ids):
        raise ValueError(f"search: agent ids must be unique, got {ids}")
    for task in tasks:
        if not task.public_tests:
            raise ValueError(f"search: task {task.id!r} has no public tests, so its nodes cannot be scored")
    if trees is not None:
        if len(trees) != len(tasks):
            raise ValueError(f"search: {len(trees)} trees to resume but {len(tasks)} tasks")
        for task, tree in zip(tasks, trees, strict=True):
            if tree.task_id != task.id:
                raise ValueError(f"search: resumed tree {tree.task_id!r} does not match task {task.id!r}")


def _finished(tree: Tree, cfg: TreeConfig) -> bool:
    if tree.size >= cfg.max_nodes:
        return True
    return cfg.stop_on_public_pass and any(n.public is not None and n.public.passed for n in tree.nodes[1:])


def _plan_step(trees: Sequence[Tree], active: Sequence[int], agent_ids: Sequence[str],
               cfg: TreeConfig, step: int, tkeys: Sequence[str]) -> list[tuple[int, Expansion]]:
    """(tree index, (parent, agent)) for every expansion of this step, in tree order."""
    select = SELECTORS[cfg.algorithm]
    plan = []
    for i in active:
        tree = trees[i]
        # A fresh stream per (seed, step, task, tree size): resuming from saved nodes replays the same draws.
        rng = random.Random(sampling_seed(cfg.seed, step, "tree-select", f"{tkeys[i]}/{tree.size}"))
        view = PublicView.of(tree.nodes, cfg.binary_score)
        for exp in select(view, agent_ids, rng, cfg.max_nodes - tree.size, cfg.uct_c):
            plan.append((i, exp))
    return plan


def _context(task: Task, tree: Tree, parent: int) -> dict[str, str]:
    if parent == 0:
        return {"problem": problem_text(task)}
    node = tree.nodes[parent]
    feedback = node.public.feedback(task.public_tests) if node.public is not None else "not run"
    return {"problem": problem_text(task), "code": node.code or "", "feedback": feedback}


def _request_keys(trees: Sequence[Tree], plan: Sequence[tuple[int, Expansion]], tkeys: Sequence[str]) -> list[str]:
    """"<task>/node<n>" per planned expansion: n is the index its node will take (nodes of one tree
    are appended in plan order)."""
    added: dict[int, int] = {}
    keys = []
    for i, _ in plan:
        keys.append(f"{tkeys[i]}/node{len(trees[i].nodes) + added.get(i, 0)}")
        added[i] = added.get(i, 0) + 1
    return keys


def _generate(tasks: Sequence[Task], trees: Sequence[Tree], agents: Sequence[Agent],
              plan: Sequence[tuple[int, Expansion]], lockstep: int, step: int, keys: Sequence[str]) -> list[Turn]:
    """One turn per planned expansion, in plan order; one `act` batch per (agent, role)."""
    turns: list[Turn | None] = [None] * len(plan)
    for agent in agents:
        for r, role in enumerate((SOLVE, REFINE)):
            picks = [j for j, (i, (parent, a)) in enumerate(plan) if a == agent.id and (parent == 0) == (role == SOLVE)]
            if not picks:
                continue
            contexts = [_context(tasks[plan[j][0]], trees[plan[j][0]], plan[j][1][0]) for j in picks]
            entry_points = [tasks[plan[j][0]].entry_point for j in picks]
            out = _role_agent(agent, role).act(contexts, call_index=2 * lockstep + r, entry_points=entry_points,
                                               step=step, keys=[keys[j] for j in picks])
            for j, turn in zip(picks, out, strict=True):
                turns[j] = turn
    return [t for t in turns if t is not None]  # every expansion names one of `agents`: none is None


def search(tasks: Sequence[Task], agents: Sequence[Agent], sandbox: SandboxProtocol, cfg: TreeConfig, *,
           trees: Sequence[Tree] | None = None,
           on_step: Callable[[list[Tree]], None] | None = None, step: int = 0) -> list[Tree]:
    """Grow one tree per task until each holds `cfg.max_nodes` nodes (root excluded).

    `trees` resumes saved partial trees (same tasks, same order; they are copied, not mutated).
    `on_step(trees)` runs after every lockstep step. `step` is the training step (it keys the random
    streams of selection and generation). Deterministic given `cfg.seed` and `step`, deterministic
    agents and a deterministic sandbox.
    """
    _check_inputs(tasks, agents, trees)
    out = [Tree.from_dict(t.to_dict()) for t in trees] if trees is not None else [Tree.new(t.id) for t in tasks]
    agent_ids = [a.id for a in agents]
    tkeys = task_keys(tasks)
    while True:
        active = [i for i, tree in enumerate(out) if not _finished(tree, cfg)]
        if not active:
            return out
        lockstep = min(out[i].size for i in active)
        plan = _plan_step(out, active, agent_ids, cfg, step, tkeys)
        turns = _generate(tasks, out, agents, plan, lockstep, step, _request_keys(out, plan, tkeys))
        verdicts = judge(sandbox, [tasks[i] for i, _ in plan], [t.parsed for t in turns])
        for (i, (parent, agent_id)), turn, verdict in zip(plan, turns, verdicts, strict=True):
            node = out[i].add(parent, agent_id, turn.parsed, turn, verdict,
                              search_score(verdict.public, cfg.binary_score))
            turn.credit, turn.verdicts = Credit(tasks[i].id, node=node.index, parent=parent), verdict
        if on_step is not None:
            on_step(out)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def tree_metrics(trees: Sequence[Tree]) -> dict[str, float]:
    """System and per-agent Pass@1 / Pass@N (fractions of tasks), node counts and depths.

    Per agent: `agent/<id>/nodes` (total nodes it wrote), `agent/<id>/pass@n` (tasks where one of
    its nodes passes the private tests), `agent/<id>/pass@1` (private verdict of its best-public node).
    """
    metrics: dict[str, float] = {
        "pass@1": _mean([t.pass_at_1() for t in trees]),
        "pass@n": _mean([t.pass_at_n() for t in trees]),
        "nodes_per_tree": _mean([t.size for t in trees]),
        "max_depth": _mean([max(n.depth for n in t.nodes) for t in trees]),
    }
    agents = sorted({n.agent for t in trees for n in t.nodes[1:] if n.agent is not None})
    for agent in agents:
        own = [Tree(t.task_id, [t.nodes[0]] + [n for n in t.nodes[1:] if n.agent == agent]) for t in trees]
        metrics[f"agent/{agent}/nodes"] = float(sum(t.size for t in own))
        metrics[f"agent/{agent}/pass@1"] = _mean([t.pass_at_1() for t in own])
        metrics[f"agent/{agent}/pass@n"] = _mean([t.pass_at_n() for t in own])
    return metrics
