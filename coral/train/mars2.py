"""MARS2 training: several independently optimised agents grow one search tree per task; each agent
updates on its own nodes with tree-consistent shaped rewards and a path-level group advantage.

One RL step: search (coral/workflows/tree.py) over a batch of training tasks -> node rewards (pass
fraction on all tests of the training task) -> shaped rewards per tree (parent/sibling baseline,
`shaping=False` uses the raw rewards) -> advantages normalised over each tree -> nodes split by the
agent that wrote them -> one update per agent. `agents=1, algorithm="best_of_n"` is plain
single-agent GRPO with one group per task, at the same node budget.

Cold start: each agent is SFT'd on solve examples (problem -> gold code) and refine examples
(problem + a mutant of the gold code + its public-test feedback -> gold code). This module does NOT
implement the search or the reward math (train/tree_rewards.py).
"""

from __future__ import annotations

import copy
import json
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from coral.trajectory import ExecutionResult, Task

AGENT_SHAPES = ((128, 4), (96, 3), (128, 3), (96, 4))  # (d_model, n_layers): the agents are different models


@dataclass(frozen=True)
class MARS2Config:
    seed: int = 0
    out_dir: str = "runs/mars2"
    n_train_tasks: int = 3000
    n_test_tasks: int = 100
    min_depth: int = 1
    max_depth: int = 2
    agents: int = 2
    sft_epochs: float = 2.0
    sft_lr: float = 3e-3
    sft_batch_size: int = 32
    sft_processes: int | None = None  # agents' cold starts in parallel processes (None: one each, <= CPUs)
    refine_examples: int = 1000
    rl_steps: int = 10
    tasks_per_step: int = 16
    max_nodes: int = 8
    algorithm: Literal["abmcts", "uct", "best_of_n"] = "abmcts"
    shaping: bool = True
    gamma: float = 0.5
    lam: float = 0.5
    # "tree": one advantage group per tree (the paper's path-level group); "tree_agent": one group per
    # (tree, agent), so a weaker agent's update is not mostly negative (see tree_rewards.tree_advantages)
    advantage_group: Literal["tree", "tree_agent"] = "tree"
    rl_lr: float = 5e-5  # as CoRe-Code: 2e-4 lowered held-out Pass@1 in bench/mars2_compare.py (seed 0)
    temperature: float = 1.0
    max_new_tokens: int = 96
    eval_algorithm: Literal["abmcts", "uct", "best_of_n"] = "abmcts"
    sandbox_workers: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.agents <= len(AGENT_SHAPES):
            raise ValueError(f"field 'agents' must be in 1..{len(AGENT_SHAPES)}, got {self.agents}")
        for name in ("n_train_tasks", "n_test_tasks", "tasks_per_step", "max_nodes", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"field {name!r} must be >= 1, got {getattr(self, name)}")
        if self.advantage_group not in ("tree", "tree_agent"):
            raise ValueError(f"field 'advantage_group' must be 'tree' or 'tree_agent', got {self.advantage_group!r}")
        if self.sft_processes is not None and self.sft_processes < 1:
            raise ValueError(f"field 'sft_processes' must be >= 1 or None, got {self.sft_processes}")
        if not 0 <= self.lam <= 1:
            raise ValueError(f"field 'lam' must be in [0, 1], got {self.lam}")


def node_advantages(tree: Any, rewards: Sequence[float], cfg: MARS2Config) -> list[float]:
    """Advantage per node of one tree (root first, 0): shaped (or raw) rewards normalised over the tree."""
    from coral.train.tree_rewards import tree_advantages

    parents = [n.parent for n in tree.nodes]
    full = [None] + list(rewards)
    gamma = cfg.gamma if cfg.shaping else 0.0  # gamma 0: r~ = r, the unshaped ablation
    groups = [n.agent for n in tree.nodes] if cfg.advantage_group == "tree_agent" else None
    return tree_advantages(parents, full, gamma=gamma, lam=cfg.lam, groups=groups).tolist()


def refine_sft_examples(tasks: Sequence[Task], sandbox: Any, limit: int, seed: int) -> list[Any]:
    """(problem + mutant + its public feedback -> gold code) for up to `limit` tasks whose mutant
    fails a public test (a mutant that passes them teaches nothing about feedback)."""
    from coral.agents import TEMPLATES
    from coral.benchmarks.mutants import mutants
    from coral.train.sft import SFTExample, code_block
    from coral.workflows.common import judge

    rng = random.Random(seed)
    picked = []
    for task in rng.sample(list(tasks), min(len(tasks), 2 * limit)):
        try:
            options = mutants(task)
        except ValueError:
            continue
        if options:
            picked.append((task, rng.choice(options)))
    results = judge(sandbox, [t for t, _ in picked], [m for _, m in picked])
    out = []
    for (task, mutant), (public, _) in zip(picked, results, strict=True):
        if public.passed:
            continue
        ctx = {"problem": task.prompt.strip(), "code": mutant, "feedback": public.feedback(task.public_tests)}
        out.append(SFTExample(TEMPLATES["refiner"].render(ctx), code_block(task.reference)))
        if len(out) == limit:
            break
    return out


def solve_sft_examples(tasks: Sequence[Task]) -> list[Any]:
    from coral.agents import TEMPLATES
    from coral.train.sft import SFTExample, code_block

    return [SFTExample(TEMPLATES["solver"].render({"problem": t.prompt.strip()}), code_block(t.reference))
            for t in tasks]


def cold_start(cfg: MARS2Config, train: Sequence[Task], sandbox: Any, progress: bool = True) -> list[Any]:
    """Fresh tiny agents of different shapes, each SFT'd on solve + refine examples."""
    from coral.policy.hf import HFPolicy
    from coral.policy.tiny import build_model, build_tokenizer
    from coral.train.sft import SFTConfig, train_sft_many

    examples = solve_sft_examples(train) + refine_sft_examples(train, sandbox, cfg.refine_examples, cfg.seed)
    corpus = [m["content"] for ex in examples for m in ex.messages] + [ex.completion for ex in examples]
    tokenizer = build_tokenizer(corpus)
    policies = []
    for i in range(cfg.agents):
        d_model, n_layers = AGENT_SHAPES[i]
        model = build_model(tokenizer, seed=cfg.seed * 10 + i, d_model=d_model, n_layers=n_layers)
        policies.append(HFPolicy(model, tokenizer, name=f"tiny{i}"))
    jobs = {f"agent{i}": (p, examples, SFTConfig(epochs=cfg.sft_epochs, lr=cfg.sft_lr, batch_size=cfg.sft_batch_size,
                                                 seed=cfg.seed + i)) for i, p in enumerate(policies)}
    with tempfile.TemporaryDirectory(prefix="coral-sft-") as work:
        train_sft_many(jobs, work, progress=progress, processes=cfg.sft_processes)
    return policies


def make_tree_agents(cfg: MARS2Config, policies: Sequence[Any], temperature: float | None = None):
    from coral.agents import make_agent
    from coral.policy.base import SamplingParams

    temp = cfg.temperature if temperature is None else temperature
    return [make_agent("solver", p, agent_id=f"agent{i}", sampling=SamplingParams(
        max_new_tokens=cfg.max_new_tokens, temperature=temp, seed=cfg.seed))  # base seed: streams hashed per request
        for i, p in enumerate(policies)]


def mars2_step(cfg: MARS2Config, step: int, batch: Sequence[Task], policies: Sequence[Any],
               learners: Sequence[Any], sandbox: Any) -> dict[str, float]:
    """search -> node rewards -> (shaped) tree advantages -> each agent updates on its own nodes."""
    from coral.workflows.tree import TreeConfig, search

    t0 = time.perf_counter()
    agents = make_tree_agents(cfg, policies)
    trees = search(batch, agents, sandbox, TreeConfig(cfg.algorithm, cfg.max_nodes, seed=cfg.seed), step=step)
    per_agent: dict[str, list[Any]] = {a.id: [] for a in agents}
    rewards_all = []
    for tree in trees:
        rewards = [ExecutionResult(n.public.tests + n.private.tests, n.public.error).pass_fraction
                   for n in tree.nodes[1:]]
        rewards_all += rewards
        for node, r, adv in zip(tree.nodes[1:], rewards, node_advantages(tree, rewards, cfg)[1:], strict=True):
            node.turn.reward, node.turn.advantage = r, adv
            per_agent[node.agent].append(node.turn)
    metrics: dict[str, float] = {"step": float(step), "reward": sum(rewards_all) / len(rewards_all),
                                 "pass_rate": sum(r == 1.0 for r in rewards_all) / len(rewards_all),
                                 "tree_pass@n": sum(t.pass_at_n() for t in trees) / len(trees),
                                 "search_s": time.perf_counter() - t0}
    for agent, learner in zip(agents, learners, strict=True):
        mine = per_agent[agent.id]
        metrics[f"{agent.id}/nodes"] = float(len(mine))
        if mine:
            metrics[f"{agent.id}/reward"] = sum(t.reward for t in mine) / len(mine)
            metrics.update({f"{agent.id}/{k}": v for k, v in learner.update(mine).items()})
    metrics["step_s"] = time.perf_counter() - t0
    return metrics


def evaluate_search(cfg: MARS2Config, policies: Sequence[Any], tasks: Sequence[Task], sandbox: Any,
                    ) -> tuple[dict[str, float], list[Any]]:
    """Held-out Pass@1 / Pass@N at the config's node budget, with greedy-free sampling (seeded)."""
    from coral.seeding import EVAL_STEP
    from coral.workflows.tree import TreeConfig, search, tree_metrics

    agents = make_tree_agents(cfg, policies)
    trees = search(tasks, agents, sandbox, TreeConfig(cfg.eval_algorithm, cfg.max_nodes, seed=cfg.seed),
                   step=EVAL_STEP)
    return tree_metrics(trees), trees


def train_mars2(cfg: MARS2Config, policies: Sequence[Any] | None = None, tasks: tuple | None = None,
                sandbox: Any = None, progress: bool = True, eval_before: bool = True) -> dict[str, Any]:
    """Cold start (unless `policies` are given, e.g. shared across ablations) -> RL -> held-out eval."""
    from coral.sandbox import Sandbox
    from coral.train.corecode import _Log, build_tasks, next_batch
    from coral.train.grpo import AgentLearner, GRPOConfig

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    train, test = tasks or build_tasks(cfg)
    own = sandbox is None
    sandbox = sandbox or Sandbox(workers=cfg.sandbox_workers)
    try:
        policies = [copy.deepcopy(p) for p in policies] if policies else cold_start(cfg, train, sandbox, progress)
        learners = [AgentLearner(f"agent{i}", p, GRPOConfig(lr=cfg.rl_lr, temperature=cfg.temperature)) for i, p in enumerate(policies)]
        before = evaluate_search(cfg, policies, test, sandbox)[0] if eval_before else None
        log = _Log(out, [])
        for step in range(1, cfg.rl_steps + 1):
            metrics = mars2_step(cfg, step, next_batch(train, (step - 1) * cfg.tasks_per_step,
                                                       cfg.tasks_per_step, cfg.seed), policies, learners, sandbox)
            log(metrics)
            if progress:
                print(f"step {step}/{cfg.rl_steps} reward {metrics['reward']:.3f} pass {metrics['pass_rate']:.3f} "
                      f"tree pass@N {metrics['tree_pass@n']:.3f} {metrics['step_s']:.1f}s", flush=True)
        after, trees = evaluate_search(cfg, policies, test, sandbox)
    finally:
        if own:
            sandbox.close()
    (out / "eval_trees.json").write_text(json.dumps([t.to_dict() for t in trees]))
    summary = {"seed": cfg.seed, "before": before, "after": after}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
