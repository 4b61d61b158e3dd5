"""MARS2 tree-consistent reward shaping and path-level group advantages for one search tree.

A tree is `parents: list[int | None]` (node 0 is the root, parent None; every other node names its
parent's index) and `rewards: list[float]` (one per node; the root's entry is ignored, it may be
None). For a non-root node t with parent p and siblings S(t) (the other children of p):

    r~_t = r_t + gamma * (r_t - b_t)
    b_t  = (1 - lam) * r_p + lam * mean(r_S)   p is not the root, S nonempty
    b_t  = r_p                                 p is not the root, S empty
    b_t  = mean(r_S)                           p is the root, S nonempty
    b_t  = r_t  (no shaping: r~_t = r_t)       p is the root, S empty (no reference to compare with)

mean(r_S) is the leave-one-out mean over the siblings (t itself excluded). The path-level advantage
normalises r~ over all non-root nodes of the tree as one group, with the same convention as
`coral.train.advantages.grpo` (unbiased std, eps on the std; a lone non-root node gets 0).
`split_by_agent` then tells each agent which node indices it trains on.

Trees are validated before any arithmetic: a tree whose parent links are missing (the public MARTI
code records none, so its shaping silently never fires) raises instead of returning r unchanged.

This module does NOT run the search, score nodes or choose which reward (fraction or binary) to use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import torch
from torch import Tensor

from coral.train.advantages import DEFAULT_EPS, group_ids, grpo
from coral.trajectory import Node


def validate_tree(parents: Sequence[int | None]) -> None:
    """Raise ValueError unless node 0 is the only root and every other node's parent chain reaches it."""
    n = len(parents)
    if n == 0:
        raise ValueError("tree has no nodes; node 0 must be the root")
    if parents[0] is not None:
        raise ValueError(f"node 0 is the root and must have parent None, got {parents[0]!r}")
    orphans = [i for i in range(1, n) if parents[i] is None]
    if orphans and len(orphans) == n - 1:
        raise ValueError(
            f"all {n - 1} non-root nodes have parent None: the parent links are missing "
            "(shaping would silently do nothing); record each node's parent index"
        )
    if orphans:
        raise ValueError(f"non-root nodes {orphans} have parent None; only node 0 may be a root")
    for i, p in enumerate(parents[1:], start=1):
        if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < n:
            raise ValueError(f"node {i} has parent {p!r}, not a node index in [0, {n})")
        if p == i:
            raise ValueError(f"node {i} is its own parent")
    reaches_root = [False] * n
    reaches_root[0] = True
    for start in range(1, n):
        path: list[int] = []
        node = start
        while not reaches_root[node]:
            if node in path:
                cycle = path[path.index(node) :]
                raise ValueError(f"parent links form a cycle through nodes {cycle}")
            path.append(node)
            node = parents[node]  # type: ignore[assignment]  # validated int above
        for visited in path:
            reaches_root[visited] = True


def _children(parents: Sequence[int | None]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p is not None:
            kids[p].append(i)
    return kids


def _checked_rewards(parents: Sequence[int | None], rewards: Sequence[float | None]) -> list[float]:
    if len(rewards) != len(parents):
        raise ValueError(f"rewards has {len(rewards)} entries but parents has {len(parents)}")
    out = [0.0]
    for i, r in enumerate(rewards[1:], start=1):
        if r is None or not math.isfinite(r):
            raise ValueError(f"node {i} has reward {r!r}; every non-root node needs a finite reward")
        out.append(float(r))
    return out


def shaped_rewards(
    parents: Sequence[int | None], rewards: Sequence[float | None], gamma: float = 0.5, lam: float = 0.5
) -> Tensor:
    """r~ per node as a float tensor [n] (see the module docstring); the root's entry is 0."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    if not math.isfinite(gamma):
        raise ValueError(f"gamma must be finite, got {gamma}")
    validate_tree(parents)
    r = _checked_rewards(parents, rewards)
    kids = _children(parents)
    shaped = [0.0] * len(parents)
    for t in range(1, len(parents)):
        p = parents[t]
        assert p is not None  # validate_tree guarantees it
        siblings = [s for s in kids[p] if s != t]
        sib_mean = sum(r[s] for s in siblings) / len(siblings) if siblings else None
        if p != 0:
            baseline = r[p] if sib_mean is None else (1 - lam) * r[p] + lam * sib_mean
        else:
            baseline = r[t] if sib_mean is None else sib_mean
        shaped[t] = r[t] + gamma * (r[t] - baseline)
    return torch.tensor(shaped, dtype=torch.float32)


def tree_advantages(
    parents: Sequence[int | None],
    rewards: Sequence[float | None],
    gamma: float = 0.5,
    lam: float = 0.5,
    eps: float = DEFAULT_EPS,
    groups: Sequence[Hashable] | None = None,
) -> Tensor:
    """Path-level group advantage per node, [n]: grpo over the shaped rewards of all non-root
    nodes (one group per tree); the root's entry is 0.

    `groups` (one label per node, the root's ignored) normalises within each label instead, e.g. the
    node's agent: then every agent's advantages are centred on its own nodes of the tree. With one
    group per tree, a weaker agent's nodes are mostly below the tree mean, so its whole update pushes
    its own samples down."""
    shaped = shaped_rewards(parents, rewards, gamma=gamma, lam=lam)
    advantages = torch.zeros_like(shaped)
    if groups is not None and len(groups) != len(parents):
        raise ValueError(f"groups has {len(groups)} entries but parents has {len(parents)}")
    if len(parents) > 1:
        ids = group_ids(list(groups)[1:]) if groups is not None else torch.zeros(len(parents) - 1, dtype=torch.long)
        advantages[1:] = grpo(shaped[1:], ids, eps=eps)
    return advantages


def split_by_agent(agents: Sequence[str | None]) -> dict[str, list[int]]:
    """Node indices per agent, in order of first appearance; node 0 is the root and must have
    agent None (it is never trained on); every other node must name its agent."""
    if agents and agents[0] is not None:
        raise ValueError(f"node 0 is the root and must have agent None, got {agents[0]!r}")
    by_agent: dict[str, list[int]] = {}
    for i, agent in enumerate(agents[1:], start=1):
        if agent is None:
            raise ValueError(
                f"node {i} has agent None; every non-root node must name the agent that produced it"
            )
        by_agent.setdefault(agent, []).append(i)
    return by_agent


def tree_arrays(
    nodes: Sequence[Node], reward: Callable[[Node], float] = lambda node: node.score
) -> tuple[list[int | None], list[float | None], list[str | None]]:
    """(parents, rewards, agents) of a tree's nodes, for the functions above. `reward` defaults to
    the public pass fraction; the root's reward is None."""
    for position, node in enumerate(nodes):
        if node.index != position:
            raise ValueError(f"nodes[{position}].index is {node.index}; nodes must be listed by index")
    parents = [node.parent for node in nodes]
    rewards: list[float | None] = [None if i == 0 else reward(node) for i, node in enumerate(nodes)]
    return parents, rewards, [node.agent for node in nodes]
