"""MARS2 training: several independently optimised agents grow one search tree per task; each agent
updates on its own nodes with tree-consistent shaped rewards and a path-level group advantage.

One RL step: search (coral/mars2/tree.py) over a batch of training tasks -> node rewards (pass
fraction on all tests of the training task) -> shaped rewards per tree (parent/sibling baseline,
`shaping=False` uses the raw rewards) -> advantages normalised over each tree -> nodes split by the
agent that wrote them -> one update per agent. `agents=1, algorithm="best_of_n"` is plain
single-agent GRPO with one group per task, at the same node budget.

Cold start (cold_start.py): each agent is SFT'd on solve examples (problem -> gold code) and refine
examples (problem + a code + its public-test feedback -> a code). This module does NOT implement the
search or the reward math (tree_rewards.py).
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import torch

from coral.agents import make_agent
from coral.benchmarks.metrics import paired_change
from coral.benchmarks.splits import ProceduralSplits, build_tasks
from coral.mars2.cold_start import (  # noqa: F401 - cold_start, sft_agents, solve_sft_examples: re-exported
    build_agents,
    cold_start,
    first_stage_examples,
    mutant_refine_examples,
    second_stage,
    sft_agents,
    solve_sft_examples,
    tokenizer_examples,
)
from coral.mars2.tree import TreeConfig, search, tree_metrics
from coral.mars2.tree_rewards import tree_advantages
from coral.policy.base import SamplingParams
from coral.policy.hf import HFPolicy
from coral.report.recipes import finish, mars2_report
from coral.sandbox import Sandbox
from coral.sandbox.protocol import SandboxProtocol
from coral.scale import ScaleOut
from coral.seeding import EVAL_STEP
from coral.terminal import Bar, time_left
from coral.train.checkpoints import TrainedAgent
from coral.train.grpo import AgentLearner, GRPOConfig, check_recipe_owned, reward_spread, saved_references
from coral.train.loop import Run, drive, log_evaluation, log_sft_curves, new_state
from coral.train.rewards import CodeReward, RewardFn
from coral.train.sft import SFTConfig
from coral.trajectory import Task

AGENT_SHAPES = ((128, 4), (96, 3), (128, 3), (96, 4))  # (d_model, n_layers) of agents 0-3 unless agent_shapes says


def _default_sft() -> SFTConfig:
    return SFTConfig(epochs=2.0, lr=3e-3, batch_size=32)


def _default_rl() -> GRPOConfig:
    # lr as CoRe-Code's: 2e-4 lowered held-out Pass@1 in experiments/mars2_compare.py (seed 0)
    return GRPOConfig(lr=5e-5)


# fields a resumed run may change (more RL steps, other worker counts); any other change is refused
RESUMABLE_CHANGES = ("out_dir", "resume", "rl_steps", "checkpoint_every_steps", "sandbox_workers", "ray_address",
                     "sft_processes")


@dataclass(frozen=True)
class MARS2Config:
    seed: int = 0  # base seed of tasks, models, data order, search and sampling
    out_dir: str = "runs/mars2"  # run directory: config, metrics, checkpoints, evaluation trees, final models
    n_train_tasks: int = 3000  # train-split tasks (cold start and RL)
    n_test_tasks: int = 100  # held-out test-split tasks (new skeletons)
    min_depth: int = 1  # shortest composition of primitives in a task
    max_depth: int = 2  # longest composition of primitives in a task
    agents: int = 2  # tiny agents of different shapes that share each tree
    sft: SFTConfig = field(default_factory=_default_sft)  # each agent's cold start (sft.seed comes from seed)
    sft_processes: int | None = None  # agents' cold starts in parallel processes (None: one each, <= CPUs)
    # the cold start (cold_start.py). Gold codes per task in the solve examples (> 1: distinct idioms, drawn per agent)
    solutions_per_task: int = 1
    refine_examples: int = 1000  # cold-start refine examples (per agent with refine_from "own")
    # "mutants": a failing mutant of the gold code -> the gold code; "own": after a first SFT, the agent's own codes
    # (failing -> the nearest gold code, passing -> kept), then a second SFT (refine_sft) on them and the solve examples
    refine_from: Literal["mutants", "own"] = "mutants"
    # "mutants": refine examples that keep a passing code (a gold code and its all-pass feedback -> itself), besides
    # the refine_examples fixes (0: the refiner sees no passing code in SFT; "own" keeps its own passing codes instead)
    refine_keep_examples: int = 0
    # "mutants": keep drills after the first SFT (cold_start.drill_stage: a passing gold code of a later train task
    # -> itself, with the mutant fixes again), trained with drill_sft (0: no drill stage; the testbed's S5: 5900)
    keep_drills: int = 0
    drill_sft: SFTConfig = field(default_factory=lambda: SFTConfig(epochs=3.0, lr=1e-3, batch_size=32))
    refine_samples_per_task: int = 1  # "own": codes each agent writes per task to refine
    # "own": the tasks those codes answer: 0, the cold start's training tasks; n, n other train-split tasks
    # (known skeletons, new parameters) that the first SFT never saw
    refine_tasks: int = 0
    refine_keep_fraction: float = 0.3  # "own": most of the refine examples that keep a passing code
    refine_sft: SFTConfig = field(default_factory=lambda: SFTConfig(epochs=1.0, lr=1e-3, batch_size=32))  # "own": second SFT
    # (d_model, n_layers) of each agent (None: AGENT_SHAPES, the agents are models of different shapes)
    agent_shapes: tuple[tuple[int, int], ...] | None = None
    rl: GRPOConfig = field(default_factory=_default_rl)  # each agent's RL update; rl.temperature samples
    rl_steps: int = 10  # RL steps
    tasks_per_step: int = 16  # training tasks (trees) per RL step
    max_nodes_per_tree: int = 8  # node budget of each tree, root excluded
    algorithm: Literal["abmcts", "uct", "best_of_n"] = "abmcts"  # tree search of RL rollouts
    shaping: bool = True  # tree-consistent reward shaping (false: raw node rewards)
    gamma: float = 0.5  # shaping strength: r~ = r + gamma (r - baseline)
    lam: float = 0.5  # baseline mix of the parent's and the siblings' rewards
    # "tree": one advantage group per tree (the paper's path-level group); "tree_agent": one group per
    # (tree, agent), so a weaker agent's update is not mostly negative (see tree_rewards.tree_advantages)
    advantage_group: Literal["tree", "tree_agent"] = "tree"
    max_new_tokens: int = 96  # longest code, in tokens
    eval_algorithm: Literal["abmcts", "uct", "best_of_n"] = "abmcts"  # tree search of the held-out evaluation
    sandbox_workers: int = 2  # sandbox worker processes that run the tests
    # "local", "auto" or a Ray address: RL searches and tests on Ray actors (coral.scale); None: no Ray
    ray_address: str | None = None
    checkpoint_every_steps: int = 1  # RL steps between checkpoints (a kill -9 loses at most these)
    resume: bool = True  # continue from out_dir's latest checkpoint (false: start over)

    def __post_init__(self) -> None:
        if not 1 <= self.agents <= len(self.shapes):
            raise ValueError(f"field 'agents' must be in 1..{len(self.shapes)} (agent_shapes), got {self.agents}")
        if any(len(s) != 2 or min(s) < 1 for s in self.shapes):
            raise ValueError(f"field 'agent_shapes' must hold (d_model, n_layers) pairs, got {self.agent_shapes}")
        if self.refine_from not in ("mutants", "own"):
            raise ValueError(f"field 'refine_from' must be 'mutants' or 'own', got {self.refine_from!r}")
        for name in ("solutions_per_task", "refine_samples_per_task"):
            if getattr(self, name) < 1:
                raise ValueError(f"field {name!r} must be >= 1, got {getattr(self, name)}")
        if self.refine_tasks < 0:
            raise ValueError(f"field 'refine_tasks' must be >= 0, got {self.refine_tasks}")
        if not 0 <= self.refine_keep_fraction <= 1:
            raise ValueError(f"field 'refine_keep_fraction' must be in [0, 1], got {self.refine_keep_fraction}")
        for name in ("n_train_tasks", "n_test_tasks", "tasks_per_step", "max_nodes_per_tree", "max_new_tokens",
                     "checkpoint_every_steps", "min_depth", "sandbox_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"field {name!r} must be >= 1, got {getattr(self, name)}")
        if self.refine_keep_examples and self.refine_from != "mutants":
            raise ValueError("field 'refine_keep_examples' is for refine_from 'mutants' ('own' keeps the agent's own "
                             f"passing codes: refine_keep_fraction), got {self.refine_keep_examples} with 'own'")
        if self.keep_drills and self.refine_from != "mutants":
            raise ValueError("field 'keep_drills' is for refine_from 'mutants' (its drill trains the mutant fixes again), "
                             f"got {self.keep_drills} with 'own'")
        for name in ("rl_steps", "refine_examples", "refine_keep_examples", "keep_drills", "gamma", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"field {name!r} must be >= 0, got {getattr(self, name)}")
        if self.max_depth < self.min_depth:
            raise ValueError(f"field 'max_depth' must be >= min_depth={self.min_depth}, got {self.max_depth}")
        if self.advantage_group not in ("tree", "tree_agent"):
            raise ValueError(f"field 'advantage_group' must be 'tree' or 'tree_agent', got {self.advantage_group!r}")
        if self.sft_processes is not None and self.sft_processes < 1:
            raise ValueError(f"field 'sft_processes' must be >= 1 or None, got {self.sft_processes}")
        if not 0 <= self.lam <= 1:
            raise ValueError(f"field 'lam' must be in [0, 1], got {self.lam}")
        check_recipe_owned(self.sft, self.rl, advantage_used=False)

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        """(d_model, n_layers) of each agent slot."""
        if self.agent_shapes is None:
            return AGENT_SHAPES
        # as given (a pair of the wrong length is refused by name in __post_init__, which reads this)
        return tuple(cast("tuple[int, int]", tuple(s)) for s in self.agent_shapes)

    @property
    def splits(self) -> ProceduralSplits:
        return ProceduralSplits(seed=self.seed, n_train_tasks=self.n_train_tasks, n_test_tasks=self.n_test_tasks,
                                min_depth=self.min_depth, max_depth=self.max_depth)


NODE_REWARD = CodeReward(correctness="fraction", efficiency_weight=0.0)  # default: pass fraction on all tests


def node_advantages(tree: Any, rewards: Sequence[float], cfg: MARS2Config) -> list[float]:
    """Advantage per node of one tree (root first, 0): shaped (or raw) rewards normalised over the tree."""
    parents = [n.parent for n in tree.nodes]
    full = [None] + list(rewards)
    gamma = cfg.gamma if cfg.shaping else 0.0  # gamma 0: r~ = r, the unshaped ablation
    groups = [n.agent for n in tree.nodes] if cfg.advantage_group == "tree_agent" else None
    return tree_advantages(parents, full, gamma=gamma, lam=cfg.lam, groups=groups).tolist()


def make_tree_agents(cfg: MARS2Config, policies: Sequence[HFPolicy]) -> list[Any]:
    """The solver agents, sampling at rl.temperature from base seed cfg.seed (each request's stream is
    hashed from it and the step the search is given: coral.seeding)."""

    return [make_agent("solver", p, agent_id=f"agent{i}", sampling=SamplingParams(
        max_new_tokens=cfg.max_new_tokens, temperature=cfg.rl.temperature, seed=cfg.seed))
        for i, p in enumerate(policies)]


def mars2_step(cfg: MARS2Config, step: int, batch: Sequence[Task], policies: Sequence[HFPolicy],
               learners: Sequence[Any], sandbox: SandboxProtocol, reward_fn: RewardFn = NODE_REWARD) -> dict[str, float]:
    """search -> node rewards -> (shaped) tree advantages -> each agent updates on its own nodes."""
    t0 = time.perf_counter()
    agents = make_tree_agents(cfg, policies)
    trees = search(batch, agents, sandbox, TreeConfig(cfg.algorithm, cfg.max_nodes_per_tree, seed=cfg.seed), step=step)
    by_id = {t.id: t for t in batch}
    per_agent: dict[str, list[Any]] = {a.id: [] for a in agents}
    rewards_all, per_tree = [], []
    for tree in trees:
        rewards = []
        for n in tree.nodes[1:]:
            assert n.verdicts is not None, "search() judges every node it grows"
            rewards.append(float(reward_fn(by_id[tree.task_id], n.code, n.verdicts.all, None)))
        rewards_all += rewards
        per_tree.append(rewards)
        for node, r, adv in zip(tree.nodes[1:], rewards, node_advantages(tree, rewards, cfg)[1:], strict=True):
            assert node.turn is not None and node.agent is not None, "search() records who grew each node, and how"
            node.turn.reward, node.turn.advantage = r, adv
            per_agent[node.agent].append(node.turn)
    metrics: dict[str, float] = {"step": float(step), "reward": sum(rewards_all) / len(rewards_all),
                                 "pass_rate": sum(r == 1.0 for r in rewards_all) / len(rewards_all),
                                 "tree_pass@n": sum(t.pass_at_n() for t in trees) / len(trees),
                                 "search_s": time.perf_counter() - t0}
    # a tree is MARS2's group (path-level advantage): how much its node rewards differ
    spread = reward_spread(per_tree)
    metrics.update({"tree_reward_std": spread["group_reward_std"], "zero_variance_trees": spread["zero_variance_groups"]})
    for agent, learner in zip(agents, learners, strict=True):
        mine = per_agent[agent.id]
        metrics[f"{agent.id}/nodes"] = float(len(mine))
        if mine:
            metrics[f"{agent.id}/reward"] = sum(t.reward for t in mine) / len(mine)
            metrics.update({f"{agent.id}/{k}": v for k, v in learner.update(mine).items()})
    metrics["step_s"] = time.perf_counter() - t0
    return metrics


def evaluate_search(cfg: MARS2Config, policies: Sequence[HFPolicy], tasks: Sequence[Task], sandbox: SandboxProtocol,
                    progress: bool = False, name: str = "held-out search") -> tuple[dict[str, float], list[Any]]:
    """Held-out Pass@1 / Pass@N at the config's node budget, sampling at rl.temperature (seeded); with
    `progress`, a row of lockstep steps (one node per unfinished tree each) with the running Pass@1."""

    agents = make_tree_agents(cfg, policies)
    with Bar(progress, {"pass@1": "pass@1 {:.3f}"}) as bar:
        row = bar.row(name, cfg.max_nodes_per_tree)
        trees = search(tasks, agents, sandbox, TreeConfig(cfg.eval_algorithm, cfg.max_nodes_per_tree, seed=cfg.seed),
                       step=EVAL_STEP, on_step=lambda t: bar.advance(row, 1, **{"pass@1": tree_metrics(t)["pass@1"]}))
    return tree_metrics(trees), trees


def per_task(trees: Sequence[Any]) -> dict[str, list[float]]:
    """Each held-out tree's [Pass@1, Pass@N] as 0/1, by task id: what a paired change before/after pairs."""
    return {t.task_id: [float(t.pass_at_1()), float(t.pass_at_n())] for t in trees}


def train_mars2(cfg: MARS2Config, policies: Sequence[HFPolicy] | None = None, tasks: tuple | None = None,
                sandbox: SandboxProtocol | None = None, progress: bool = True, eval_before: bool = True,
                reward_fn: RewardFn = NODE_REWARD) -> dict[str, Any]:
    """Cold start (unless `policies` are given, e.g. shared across ablations; copies are trained) -> RL in
    the shared run loop -> held-out eval. A killed run restarts from its latest checkpoint (cold start:
    from each agent's SFT state) and ends in the state the uninterrupted run would have reached."""

    run = Run(cfg.out_dir, cfg, start_over=not cfg.resume, may_change=RESUMABLE_CHANGES)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    train, test = tasks or build_tasks(cfg.splits)
    own = sandbox is None
    sandbox = sandbox or Sandbox(workers=cfg.sandbox_workers)
    scale = ScaleOut(cfg.ray_address)
    try:
        policies, fresh = _initial_policies(cfg, run, policies, train, sandbox, progress)
        if fresh is not None:  # a cold start is needed: no checkpoint holds its result yet
            log_sft_curves(run.out, sft_agents(cfg, policies, fresh, progress, checkpoint_dir=run.out / "sft_ckpt"))
            second_stage(cfg, policies, train, sandbox, progress, checkpoint_dir=run.out / "sft_ckpt")
        refs = cold_references(cfg, run.out / "cold_start", policies, saved=cfg.resume and run.latest() is not None)
        learners = [AgentLearner(f"agent{i}", p, cfg.rl, reference=refs[i]) for i, p in enumerate(policies)]
        agents = {f"agent{i}": TrainedAgent(p, lrn) for i, (p, lrn) in enumerate(zip(policies, learners, strict=True))}
        state = run.restore(agents) if cfg.resume else None
        if state is not None and progress:
            print(f"resumed from {run.latest()} (step {state['step']})", flush=True)
        if state is None:
            before, before_trees = evaluate_search(cfg, policies, test, sandbox, progress, "held-out search, cold start") \
                if eval_before else (None, [])
            state = new_state(before=before, before_tasks=per_task(before_trees) if eval_before else None)
            if before is not None:
                log_evaluation(run.out, {f"eval/{k}": before[k] for k in ("pass@1", "pass@n")}, 0)
            run.save(agents, state)  # step 0: the cold start's result
            shutil.rmtree(run.out / "sft_ckpt", ignore_errors=True)

        def say(m: dict[str, float], history: list) -> None:
            if progress:
                print(f"step {int(m['step'])}/{cfg.rl_steps} reward {m['reward']:.3f} pass {m['pass_rate']:.3f} "
                      f"tree pass@N {m['tree_pass@n']:.3f} {m['step_s']:.1f}s  "
                      f"{time_left([h['step_s'] for h in history], cfg.rl_steps - int(m['step']))}", flush=True)

        # after the cold start and the learners: searches and tests on Ray from here (ray_address None: the same objects)
        ray_policies, ray_sandbox = scale.distribute(policies, sandbox)
        state = drive(run, lambda step, batch: mars2_step(cfg, step, batch, ray_policies, learners, ray_sandbox,
                                                          reward_fn),
                      train, agents, state, steps=cfg.rl_steps, tasks_per_step=cfg.tasks_per_step, seed=cfg.seed,
                      checkpoint_every_steps=cfg.checkpoint_every_steps, on_step=say)
        after, trees = evaluate_search(cfg, ray_policies, test, ray_sandbox, progress, "held-out search, after RL")
    finally:
        scale.close()
        if own:
            sandbox.close()
    for i, policy in enumerate(policies):
        policy.save(run.out / "final" / f"agent{i}")
    (run.out / "eval_trees.json").write_text(json.dumps([t.to_dict() for t in trees]))
    summary = {"seed": cfg.seed, "before": state["before"], "after": after, "tasks": len(trees),
               "rl_steps": cfg.rl_steps, "change": paired_changes(state.get("before_tasks"), per_task(trees)),
               "wall_s": run.elapsed_s()}
    (run.out / "summary.json").write_text(json.dumps(summary, indent=2))
    log_evaluation(run.out, {f"eval/{k}": after[k] for k in ("pass@1", "pass@n")}, cfg.rl_steps)
    finish(mars2_report(run.out, summary))
    return summary


def paired_changes(before: dict[str, list[float]] | None, after: dict[str, list[float]]) -> dict[str, Any]:
    """The paired per-task change of Pass@1 and Pass@N (benchmarks.metrics.paired_change), when the run
    kept the per-task results before RL (none for eval_before off or a checkpoint of an older coral)."""
    if not before:
        return {}
    return {key: asdict(paired_change({t: v[i] for t, v in before.items()}, {t: v[i] for t, v in after.items()}))
            for i, key in enumerate(("pass@1", "pass@n"))}


def cold_references(cfg: MARS2Config, where: Path, policies: Sequence[HFPolicy], saved: bool) -> list[Any]:
    """Per agent, a frozen copy of its cold start for the logged KL (cfg.rl.log_kl; else None), written to
    `where`/agent{i} so that a resumed run (`saved`) reads the cold start back instead of its current weights."""
    if not cfg.rl.log_kl:
        return [None] * len(policies)
    names = [f"agent{i}" for i in range(len(policies))]
    refs = saved_references(dict(zip(names, policies, strict=True)), {n: where / n for n in names}, saved, "cold start")
    return [refs[n] for n in names]


def _initial_policies(cfg: MARS2Config, run: Run, given: Sequence[Any] | None, train: Sequence[Task], sandbox: SandboxProtocol,
                      progress: bool) -> tuple[list[Any], list[Any] | None]:
    """(policies, each agent's first cold-start examples): copies of `given` (no cold start), or fresh agents
    and the examples to SFT them on unless the run's latest checkpoint already holds their trained weights."""
    if given:
        if len(given) != cfg.agents:
            raise ValueError(f"train_mars2: {len(given)} policies given for agents={cfg.agents}")
        return [copy.deepcopy(p) for p in given], None
    mutant_refine = mutant_refine_examples(cfg, train, sandbox)
    examples = first_stage_examples(cfg, train, mutant_refine)
    resuming = cfg.resume and run.latest() is not None
    if progress and not resuming:
        print(f"cold start: {cfg.agents} agents, {len(examples[0])} examples each, {cfg.sft.epochs} epochs"
              + (", then their own refine examples" if cfg.refine_from == "own" else "")
              + (f", then {cfg.keep_drills} keep drills" if cfg.keep_drills else ""), flush=True)
    return build_agents(cfg, tokenizer_examples(cfg, train, mutant_refine)), None if resuming else examples
