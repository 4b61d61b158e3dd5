"""CoRe-Code: planner -> coder, cold start by SFT, then collaboration-aware multi-agent GRPO.

Per task the planner samples P plans and the coder C codes per plan. Coder reward = correctness
(pass fraction, or 1 only if all tests pass) + an efficiency bonus gated on passing every test;
planner reward = mean (or max) of the coder rewards of its plan's codes. Coder groups are the codes
of one plan (or of one task); planner groups are the plans of one task. Each agent updates only on
its own turns. Training uses the train split of the procedural family; evaluation uses held-out
compositions. This module does NOT implement the math (train/advantages.py, train/losses.py).
"""

from __future__ import annotations

import functools
import json
import logging
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from coral.trajectory import ExecutionResult, Task, Trajectory

logger = logging.getLogger(__name__)
UNPARSED_WARN_RATE = 0.5  # warn when more sampled completions than this fail to parse


@dataclass(frozen=True)
class CoReCodeConfig:
    seed: int = 0
    out_dir: str = "runs/demo"
    n_train_tasks: int = 4000
    n_test_tasks: int = 200
    # held-out tasks of the training skeletons: train-split compositions after the first n_train_tasks, which
    # neither SFT nor RL sees (new parameters, known kinds of steps; the test split's skeletons are new). 0: off.
    # RL raised their pass@1 in each of six seed-0 runs (sampled +0.009 to +0.058), where the test split's moved
    # -0.025 to +0.065 (README, "Two held-out sets")
    n_fresh_tasks: int = 500
    min_depth: int = 1
    max_depth: int = 2
    rl_max_depth: int | None = None  # RL on train-split tasks up to this depth (None: max_depth, SFT's tasks)
    # > 0: this share of the train split's skeletons is kept out of SFT and RL trains on it alone, so
    # RL practises new compositions as the held-out test does (0: RL on SFT's own tasks)
    rl_skeleton_fraction: float = 0.0
    # models: "tiny" builds two fresh tiny models (planner, coder) with a tokenizer trained on the data
    model: str = "tiny"
    # > 0: planner and coder are LoRA adapters of this rank on one shared base model (held once in memory,
    # frozen; coral.policy.shared_lora); 0: two separate models, every weight trained (the demo)
    shared_base_lora: int = 0
    d_model: int = 128
    n_layers: int = 4
    # cold start
    sft_epochs: float = 6.0  # 3 epochs: held-out pass@1 0.21; 6: 0.65 (seed 0, bench/corecode_rl_probe.py)
    sft_lr: float = 3e-3
    sft_batch_size: int = 32
    sft_processes: int | None = None  # planner and coder SFT in parallel processes (None: one each, <= CPUs)
    # the coder's own epochs (None: sft_epochs) and SFTConfig.length_window (batches of similar length).
    # Both shorten SFT; coder 4 epochs with window 8 (planner 6) left held-out greedy pass@1 at 0.20 (seed 0)
    sft_coder_epochs: float | None = None
    sft_length_window: int = 1
    # SFTConfig.bf16 (forward under bfloat16 autocast). Off: at seed 0 it cut SFT from 10.2 to 9.2 min but
    # the cold start reached held-out greedy pass@1 0.680 instead of 0.810 (README)
    sft_bf16: bool = False
    # RL. 200 steps: held-out sampled pass@1 rose in 6 of 6 runs over 3 seeds (+0.007 to +0.102, 500 tasks);
    # at 60 and 100 steps the change was within noise (README, "CoRe-Code: what RL does here")
    rl_steps: int = 200
    tasks_per_step: int = 16
    plans_per_task: int = 4
    codes_per_plan: int = 2
    rl_lr: float = 1e-4  # a tiny model is fragile: 2e-4 and 3e-4 lowered even the training pass rate
    # sgd (lr 0.1-0.3) kept the training pass rate where adamw at 3e-4 lowered it, but did not raise held-out
    # pass@1 either (README, "CoRe-Code: what RL does here")
    rl_optimizer: Literal["adamw", "sgd"] = "adamw"
    rl_updates_per_batch: int = 1  # optimiser steps per rollout batch (GRPOConfig.updates_per_batch)
    beta_kl: float = 0.0  # k3 KL to the SFT policy (a frozen copy taken after SFT, saved in out_dir/sft)
    loss: Literal["ppo_clip", "gspo"] = "ppo_clip"
    loss_norm: Literal["token", "sequence"] = "token"
    # dr_grpo: no division by the group std, which would blow the 0.1-weighted efficiency bonus up to
    # full-size advantages in groups whose codes all pass (see test_corecode)
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"] = "dr_grpo"
    temperature: float = 1.0
    max_new_tokens: int = 96
    coder_group: Literal["plan", "task"] = "plan"
    planner_reward: Literal["mean", "max"] = "mean"
    correctness: Literal["fraction", "all"] = "all"
    efficiency_weight: float = 0.1
    train_roles: tuple[str, ...] = ("planner", "coder")
    checkpoint_every: int = 5
    resume: bool = True
    sandbox_workers: int = 2
    eval_batch: int = 50
    # > 0: also estimate held-out pass@1 from this many samples per task at `temperature` (the
    # distribution RL optimises), after SFT and after RL; 0: greedy pass@1 only
    eval_samples: int = 4

    def __post_init__(self) -> None:
        if self.n_fresh_tasks < 0:
            raise ValueError(f"field 'n_fresh_tasks' must be >= 0, got {self.n_fresh_tasks}")
        for name in ("n_train_tasks", "n_test_tasks", "tasks_per_step", "plans_per_task", "codes_per_plan",
                     "checkpoint_every", "max_new_tokens", "rl_updates_per_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"field {name!r} must be >= 1, got {getattr(self, name)}")
        if self.eval_samples < 0:
            raise ValueError(f"field 'eval_samples' must be >= 0, got {self.eval_samples}")
        if self.rl_steps < 0:
            raise ValueError(f"field 'rl_steps' must be >= 0, got {self.rl_steps}")
        unknown = set(self.train_roles) - {"planner", "coder"}
        if unknown:
            raise ValueError(f"field 'train_roles': unknown role {sorted(unknown)[0]!r} (planner, coder)")
        if self.rl_max_depth is not None and self.rl_max_depth < self.min_depth:
            raise ValueError(f"field 'rl_max_depth' must be >= min_depth={self.min_depth}, got {self.rl_max_depth}")
        if self.sft_coder_epochs is not None and self.sft_coder_epochs <= 0:
            raise ValueError(f"field 'sft_coder_epochs' must be > 0 or None, got {self.sft_coder_epochs}")
        if self.sft_length_window < 1:
            raise ValueError(f"field 'sft_length_window' must be >= 1, got {self.sft_length_window}")
        if self.sft_processes is not None and self.sft_processes < 1:
            raise ValueError(f"field 'sft_processes' must be >= 1 or None, got {self.sft_processes}")
        if not 0 <= self.rl_skeleton_fraction < 1:
            raise ValueError(f"field 'rl_skeleton_fraction' must be in [0, 1), got {self.rl_skeleton_fraction}")
        if self.rl_skeleton_fraction > 0 and self.rl_max_depth is not None:
            raise ValueError("fields 'rl_skeleton_fraction' and 'rl_max_depth' both choose the RL tasks: set one")
        if self.beta_kl < 0:
            raise ValueError(f"field 'beta_kl' must be >= 0, got {self.beta_kl}")
        if self.shared_base_lora < 0:
            raise ValueError(f"field 'shared_base_lora' must be >= 0 (a LoRA rank; 0: separate models), got {self.shared_base_lora}")
        if not 0 <= self.efficiency_weight <= 1:
            raise ValueError(f"field 'efficiency_weight' must be in [0, 1], got {self.efficiency_weight}")


# ----------------------------------------------------------------------------------- rewards
TIME_FLOOR_S = 0.01  # total test time below which run times are measurement noise, not efficiency
MEMORY_FLOOR_MB = 1.0  # peak-memory differences below this are allocator noise
EFFICIENCY_TOLERANCE = 0.25  # within 25% of the reference counts as "as good as the reference"


def efficiency_bonus(result: ExecutionResult, reference: ExecutionResult | None) -> float:
    """In [0, 1]: mean over time and peak memory of min(1, ref/solution), where a solution within
    EFFICIENCY_TOLERANCE of the reference, or both below the measurement floor, scores 1.

    The floors and the tolerance matter for GRPO: passing codes of one group would otherwise differ
    only by timing noise, and normalising by the group's tiny std turns that noise into full-size
    advantages (measured: RL then lowered its own training reward). No reference run, or a failing
    one, gives no bonus information: 0."""
    if reference is None or not reference.passed:
        return 0.0
    ratios = []
    for sol, ref, floor in ((result.wall_s, reference.wall_s, TIME_FLOOR_S),
                            (result.peak_memory_mb, reference.peak_memory_mb, MEMORY_FLOOR_MB)):
        ratio = max(ref, floor) / max(sol, floor)
        ratios.append(1.0 if ratio >= 1 / (1 + EFFICIENCY_TOLERANCE) else ratio)
    return sum(ratios) / len(ratios)


def coder_reward(result: ExecutionResult, reference: ExecutionResult | None, correctness: str = "fraction",
                 efficiency_weight: float = 0.1) -> float:
    """Correctness plus an efficiency bonus that only a fully passing solution earns."""
    base = result.pass_fraction if correctness == "fraction" else float(result.passed)
    if result.passed and efficiency_weight > 0:
        base += efficiency_weight * efficiency_bonus(result, reference)
    return base


def score_corecode(trajs: Sequence[Trajectory], results: Sequence[ExecutionResult],
                   references: Sequence[ExecutionResult | None], cfg: CoReCodeConfig) -> None:
    """Set rewards on coder turns (last code-writing turn of each trajectory) and planner turns."""
    per_plan: dict[int, list[float]] = {}
    for traj, res, ref in zip(trajs, results, references, strict=True):
        r = coder_reward(res, ref, cfg.correctness, cfg.efficiency_weight)
        coder = traj.turns_of("coder")[-1]
        coder.reward = r
        planner = traj.turns_of("planner")
        if planner:
            per_plan.setdefault(id(planner[0]), []).append(r)
    for traj in trajs:
        for plan in traj.turns_of("planner"):
            rs = per_plan[id(plan)]
            plan.reward = sum(rs) / len(rs) if cfg.planner_reward == "mean" else max(rs)


def group_key(cfg: CoReCodeConfig):
    def key(turn):
        if turn.role == "coder" and cfg.coder_group == "plan":
            return ("coder", turn.metadata["task_id"], turn.metadata["plan_id"])
        return (turn.role, turn.metadata["task_id"])
    return key


# ----------------------------------------------------------------------------------- setup
def build_tasks(cfg: CoReCodeConfig) -> tuple[list[Task], list[Task]]:
    from coral.benchmarks.procedural import make_tasks

    train = make_tasks(cfg.n_train_tasks, "train", min_depth=cfg.min_depth, max_depth=cfg.max_depth, seed=cfg.seed)
    test = make_tasks(cfg.n_test_tasks, "test", min_depth=cfg.min_depth, max_depth=cfg.max_depth,
                      seed=cfg.seed + 1)
    return train, test


RL_SKELETON_SALT = "coral-rl-skeletons/"


def _split_off_rl_skeletons(cfg: CoReCodeConfig, train: list[Task]) -> tuple[list[Task], list[Task]]:
    """(SFT's tasks, RL's tasks): train tasks whose skeleton hashes below rl_skeleton_fraction go to RL."""
    from coral.benchmarks.procedural import parse_composition, skeleton_unit

    sft: list[Task] = []
    rl: list[Task] = []
    for task in train:
        comp = parse_composition(task.metadata["family"], task.metadata["composition"])
        (rl if skeleton_unit(comp, RL_SKELETON_SALT) < cfg.rl_skeleton_fraction else sft).append(task)
    return sft, rl


def sft_tasks(cfg: CoReCodeConfig, train: list[Task]) -> list[Task]:
    """The cold start's tasks: the train split, less the skeletons kept for RL (rl_skeleton_fraction)."""
    if cfg.rl_skeleton_fraction == 0:
        return train
    return _split_off_rl_skeletons(cfg, train)[0]


def rl_tasks(cfg: CoReCodeConfig, train: list[Task]) -> list[Task]:
    """The RL stream's tasks: SFT's training tasks; or (rl_skeleton_fraction > 0) the train tasks whose
    skeletons SFT never saw; or (rl_max_depth set) other train-split tasks up to that depth, generated
    with another seed. Held-out compositions never enter any of them."""
    if cfg.rl_skeleton_fraction > 0:
        tasks = _split_off_rl_skeletons(cfg, train)[1]
        if not tasks:
            raise ValueError(f"rl_skeleton_fraction={cfg.rl_skeleton_fraction} keeps no train task for RL; raise it")
        return tasks
    if cfg.rl_max_depth is None:
        return train
    return build_tasks(replace(cfg, max_depth=cfg.rl_max_depth, rl_max_depth=None, seed=cfg.seed + 17))[0]


def fresh_tasks(cfg: CoReCodeConfig, train: Sequence[Task], rl_pool: Sequence[Task]) -> list[Task]:
    """cfg.n_fresh_tasks held-out tasks of the training skeletons: the train split's tasks after the first
    n_train_tasks (make_tasks extends its list deterministically), less any the RL pool holds (rl_max_depth
    draws other train-split tasks). Neither SFT nor RL sees them; their skeletons are the train split's,
    where the test split's are new."""
    from coral.benchmarks.procedural import make_tasks

    n = cfg.n_fresh_tasks
    if n == 0:
        return []
    taken = {t.id for t in train} | {t.id for t in rl_pool}
    extra = 0
    while True:
        try:
            more = make_tasks(len(train) + n + extra, "train", min_depth=cfg.min_depth, max_depth=cfg.max_depth,
                              seed=cfg.seed)
        except ValueError as exc:
            raise ValueError(f"field 'n_fresh_tasks'={n} asks for more train-split tasks than there are: {exc}") from exc
        if [t.id for t in more[:len(train)]] != [t.id for t in train]:
            raise RuntimeError("fresh_tasks: `train` is not the train split's first n_train_tasks tasks")
        fresh = [t for t in more[len(train):] if t.id not in taken]
        if len(fresh) >= n:
            return fresh[:n]
        extra += n - len(fresh)


def build_policies(cfg: CoReCodeConfig, train: Sequence[Task]) -> dict[str, Any]:
    """The planner and coder: two models, or with cfg.shared_base_lora two LoRA adapters on one base."""
    from coral.policy import load_policy, tiny_policy
    from coral.train.sft import corecode_sft_examples

    if cfg.model == "tiny":
        examples = corecode_sft_examples(train)
        corpus = [m["content"] for ex in examples["planner"] + examples["coder"] for m in ex.messages]
        corpus += [ex.completion for ex in examples["planner"] + examples["coder"]]

    def make(i: int) -> Any:
        if cfg.model != "tiny":
            return load_policy(cfg.model)
        policy = tiny_policy(seed=cfg.seed * 10 + i, corpus=corpus, d_model=cfg.d_model, n_layers=cfg.n_layers)
        # tiny models: bigger generation batches are faster (an RL step's 128 codes in one batch rather than
        # two of 64: rollouts 5-15% faster, bench/corecode_rollout_batch.py); seeded tokens do not change
        policy.batch_size = 128
        return policy

    if cfg.shared_base_lora:
        from coral.policy.shared_lora import shared_lora

        return dict(shared_lora(make(0), ["planner", "coder"], r=cfg.shared_base_lora, alpha=2 * cfg.shared_base_lora))
    return {role: make(i) for i, role in enumerate(("planner", "coder"))}


def make_agents(cfg: CoReCodeConfig, policies: dict[str, Any], greedy: bool = False):
    from coral.agents import make_agent
    from coral.policy.base import SamplingParams

    out = {}
    for role in ("planner", "coder"):
        sampling = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=0.0 if greedy else cfg.temperature,
                                  seed=cfg.seed)  # a base seed: each request's stream is hashed from it (seeding.py)
        out[role] = make_agent(role, policies[role], sampling=sampling, trainable=role in cfg.train_roles)
    return out


def evaluate_pass1(cfg: CoReCodeConfig, policies: dict[str, Any], tasks: Sequence[Task], sandbox: Any,
                   name: str, samples: int = 0, bench: str = "procedural-test") -> dict[str, float]:
    """pass@1 of the planner -> coder chain on `tasks`: greedy (samples=0), or the unbiased estimate
    from `samples` (plan, code) samples per task at cfg.temperature, the distribution RL optimises."""
    from coral.evaluation import EvalConfig, run_eval
    from coral.seeding import EVAL_STEP

    if samples < 0:
        raise ValueError(f"evaluate_pass1: samples must be >= 0, got {samples}")
    ecfg = EvalConfig(bench=bench, workflow="chain", limit=len(tasks),
                      temperature=cfg.temperature if samples else 0.0, samples_per_task=max(samples, 1),
                      max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                      tasks_per_batch=max(1, cfg.eval_batch // max(samples, 1)), out_dir=str(Path(cfg.out_dir) / name))
    # sampled evaluation draws with its own seed streams (EVAL_STEP), never ones an RL step used
    agents = make_agents(cfg, policies, greedy=not samples)
    return run_eval(ecfg, tasks=tasks, agents=agents, sandbox=sandbox, progress=False, step=EVAL_STEP)


def unparsed_warning(cfg: CoReCodeConfig, rate: float, where: str) -> str | None:
    """The loud warning for a run whose sampled completions mostly fail to parse (RL's rewards are then
    mostly 0, and nothing else would say why), or None when `rate` is at most UNPARSED_WARN_RATE."""
    if rate <= UNPARSED_WARN_RATE:
        return None
    text = (f"{100 * rate:.0f}% of the completions sampled at temperature {cfg.temperature} {where} do not parse: "
            "RL's rewards will be mostly 0.")
    if cfg.shared_base_lora and cfg.model == "tiny":
        text += (" With shared_base_lora the tiny model's base stays random and frozen, and its tied head caps "
                 "the logit margins (about 4 at the default size), so sampling at temperature 1 is close to "
                 "uniform; a temperature near 0.1 or a pretrained base avoids this.")
    return text


def _warn_if_unparsed(cfg: CoReCodeConfig, rate: float, where: str) -> None:
    warning = unparsed_warning(cfg, rate, where)
    if warning:
        logger.warning(warning)


# ----------------------------------------------------------------------------------- training
class _Log:
    """metrics.jsonl (append, flushed per step) + TensorBoard, both under out_dir."""

    def __init__(self, out_dir: Path, history: list[dict[str, float]]):
        self.path = out_dir / "metrics.jsonl"
        self.path.write_text("".join(json.dumps(m) + "\n" for m in history))  # resume: drop lost steps
        self.history = list(history)
        try:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(str(out_dir / "tb"))
        except ImportError:  # tensorboard is a declared dependency; a broken install is reported, not hidden
            print("coral: tensorboard is not importable; metrics go to metrics.jsonl only")
            self.tb = None

    def __call__(self, metrics: dict[str, float]) -> None:
        self.history.append(metrics)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(metrics) + "\n")
        if self.tb is not None:
            for k, v in metrics.items():
                if k != "step":
                    self.tb.add_scalar(k, v, int(metrics["step"]))
            self.tb.flush()


def rl_step(cfg: CoReCodeConfig, step: int, batch: Sequence[Task], policies: dict[str, Any],
            learners: dict[str, Any], sandbox: Any) -> dict[str, float]:
    """rollout -> rewards -> advantages -> one update per trained agent -> metrics."""
    from coral.train.grpo import assign_advantages, unique_turns
    from coral.workflows.chain import ChainConfig, run_chain
    from coral.workflows.common import judge

    t0 = time.perf_counter()
    agents = make_agents(cfg, policies)
    trajs = run_chain(batch, agents["coder"], sandbox, ChainConfig(cfg.plans_per_task, cfg.codes_per_plan),
                      planner=agents["planner"], step=step)
    # training reward uses all tests of the (training) task
    results = [ExecutionResult(tr.public.tests + tr.private.tests, tr.public.error) for tr in trajs]
    refs = {}
    if cfg.efficiency_weight > 0:
        for task, (pub, priv) in zip(batch, judge(sandbox, batch, [t.reference for t in batch]), strict=True):
            refs[task.id] = ExecutionResult(pub.tests + priv.tests, pub.error)
            if not refs[task.id].passed:  # a broken baseline would silently zero every bonus
                raise RuntimeError(f"reference solution of task {task.id!r} fails its own tests in the sandbox: "
                                   f"{refs[task.id].feedback(task.all_tests)}")
    score_corecode(trajs, results, [refs.get(tr.task_id) for tr in trajs], cfg)
    t_roll = time.perf_counter() - t0
    turns = unique_turns([tr.turns for tr in trajs])
    assign_advantages(turns, group_key(cfg), cfg.advantage)
    metrics: dict[str, float] = {"step": float(step)}
    for role in ("planner", "coder"):
        mine = [t for t in turns if t.role == role]
        metrics[f"{role}/reward"] = sum(t.reward for t in mine) / len(mine)
        metrics[f"{role}/completion_tokens"] = sum(len(t.completion_ids) for t in mine) / len(mine)
        if role in learners:
            for k, v in learners[role].update(mine).items():
                metrics[f"{role}/{k}"] = v
    metrics["pass_rate"] = sum(r.passed for r in results) / len(results)
    metrics["parse_failures"] = sum(tr.code is None for tr in trajs) / len(trajs)
    metrics["rollout_s"] = t_roll
    metrics["step_s"] = time.perf_counter() - t0
    return metrics


def grpo_config(cfg: CoReCodeConfig) -> Any:
    from coral.train.grpo import GRPOConfig
    from coral.train.losses import LossConfig

    return GRPOConfig(lr=cfg.rl_lr, advantage=cfg.advantage, temperature=cfg.temperature, optimizer=cfg.rl_optimizer,
                      updates_per_batch=cfg.rl_updates_per_batch,
                      loss=LossConfig(kind=cfg.loss, norm=cfg.loss_norm, beta_kl=cfg.beta_kl))


def frozen_copy(policy: Any) -> Any:
    """A copy of `policy` for the KL reference: same weights, no gradients, eval mode."""
    import copy

    ref = copy.deepcopy(policy)
    for p in ref.parameters():
        p.requires_grad_(False)
    ref.eval()
    return ref


@functools.lru_cache(maxsize=4)
def _data_order(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(seed * 7919 + epoch).shuffle(order)
    return tuple(order)


def next_batch(tasks: Sequence[Task], position: int, size: int, seed: int) -> list[Task]:
    """Tasks [position, position + size) of an endless stream of seeded per-epoch shuffles."""
    out = []
    for pos in range(position, position + size):
        epoch, i = divmod(pos, len(tasks))
        out.append(tasks[_data_order(len(tasks), seed, epoch)[i]])
    return out


def train_corecode(cfg: CoReCodeConfig, progress: bool = True) -> dict[str, Any]:
    """SFT (unless resuming) -> eval -> RL with checkpoints -> eval. Returns the run summary, also
    written to out_dir/summary.json. A crashed run restarts from its latest checkpoint."""
    import torch

    from coral.sandbox import Sandbox
    from coral.train.checkpoints import latest_checkpoint, load_checkpoint, save_checkpoint
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t_start = time.perf_counter()
    train, test = build_tasks(cfg)
    rl_pool = rl_tasks(cfg, train)
    sets = {"test": test, "fresh": fresh_tasks(cfg, train, rl_pool)}
    _say(progress, f"tasks: {len(train)} train; held out: {len(test)} of new skeletons (the test split), "
                   f"{len(sets['fresh'])} of the training skeletons; depth {cfg.min_depth}-{cfg.max_depth}")
    policies = build_policies(cfg, train)
    ckpt_root = out / "ckpt"
    ckpt = latest_checkpoint(ckpt_root) if cfg.resume else None
    with Sandbox(workers=cfg.sandbox_workers) as sandbox:
        if ckpt is not None:
            learners = make_learners(cfg, policies, _sft_references(cfg, out, policies, saved=True))
            state = load_checkpoint(ckpt, {r: _Holder(policies[r], learners.get(r)) for r in policies})
            _say(progress, f"resumed from {ckpt} (step {state['step']})")
            missing = [name for name in _eval_names(cfg, sets) if name.replace("eval", "eval_sft", 1) not in state]
            if missing:
                raise ValueError(f"the run in {out} was started with other evaluation settings (eval_samples, "
                                 f"n_fresh_tasks): it has no {missing[0].replace('eval', 'eval_sft', 1)} after SFT "
                                 "to compare with; delete it or set resume: false")
        else:
            state = {"step": 0, "position": 0, "metrics": [], "sft_loss": {}}
            n_sft = len(sft_tasks(cfg, train))
            epochs = (f"{cfg.sft_epochs} epochs" if cfg.sft_coder_epochs is None
                      else f"planner {cfg.sft_epochs} epochs, coder {cfg.sft_coder_epochs}")
            _say(progress, f"SFT planner and coder: {n_sft} examples each, {epochs}"
                           + (f" ({len(train) - n_sft} tasks of unseen skeletons kept for RL)" if n_sft < len(train) else ""))
            t_sft = time.perf_counter()
            if not cfg.resume:
                shutil.rmtree(sft_checkpoint_dir(cfg), ignore_errors=True)
            elif sft_checkpoint_dir(cfg).is_dir():
                _say(progress, f"resuming SFT from {sft_checkpoint_dir(cfg)}")
            losses = sft_corecode(cfg, policies, train, progress=progress)
            for role, curve in losses.items():
                state["sft_loss"][role] = [curve[0], curve[-1]]
                _say(progress, f"SFT {role}: loss {curve[0]:.3f} -> {curve[-1]:.3f}")
            state["sft_s"] = time.perf_counter() - t_sft
            _say(progress, f"SFT took {state['sft_s'] / 60:.1f} min")
            learners = make_learners(cfg, policies, _sft_references(cfg, out, policies, saved=False))
            state.update(_evaluate(cfg, policies, sets, sandbox, "sft", progress))
            if cfg.eval_samples:
                sampled = state["eval_sft_sampled"]
                _warn_if_unparsed(cfg, sampled["parse_failures"] / max(sampled["samples"], 1),
                                  "after SFT (held-out test split)")
            save_checkpoint(ckpt_root, 0, {r: _Holder(policies[r], learners.get(r)) for r in policies}, state)
            shutil.rmtree(sft_checkpoint_dir(cfg), ignore_errors=True)  # the step-0 checkpoint holds the SFT result
        log = _Log(out, state["metrics"])
        first_step = state["step"] + 1
        for step in range(first_step, cfg.rl_steps + 1):
            batch = next_batch(rl_pool, state["position"], cfg.tasks_per_step, cfg.seed)
            metrics = rl_step(cfg, step, batch, policies, learners, sandbox)
            state["position"] += cfg.tasks_per_step
            state["step"] = step
            log(metrics)
            state["metrics"] = log.history
            _say(progress, _fmt_step(metrics, cfg.rl_steps))
            if step == first_step + 4:  # five steps in: say so if the rewards are stuck at 0 for parsing
                recent = log.history[-5:]
                _warn_if_unparsed(cfg, sum(m["parse_failures"] for m in recent) / len(recent),
                                  f"in RL steps {first_step}-{step}")
            if step % cfg.checkpoint_every == 0 or step == cfg.rl_steps:
                save_checkpoint(ckpt_root, step, {r: _Holder(policies[r], learners.get(r)) for r in policies}, state)
        after = _evaluate(cfg, policies, sets, sandbox, "rl", progress)
    for role, policy in policies.items():
        policy.save(out / "final" / role)
    summary = {"seed": cfg.seed, "pass@1_sft": state["eval_sft"]["pass@1"], "pass@1_rl": after["eval_rl"]["pass@1"],
               "sft_loss": state["sft_loss"], "rl_steps": cfg.rl_steps, "sft_s": state.get("sft_s"),
               "wall_s": time.perf_counter() - t_start, "change": {}}
    if cfg.eval_samples:
        summary.update({"pass@1_sampled_sft": state["eval_sft_sampled"]["pass@1"],
                        "pass@1_sampled_rl": after["eval_rl_sampled"]["pass@1"], "eval_samples": cfg.eval_samples})
    if sets["fresh"]:
        summary["pass@1_fresh_sft"] = state["eval_sft_fresh"]["pass@1"]
        summary["pass@1_fresh_rl"] = after["eval_rl_fresh"]["pass@1"]
        if cfg.eval_samples:
            summary["pass@1_fresh_sampled_sft"] = state["eval_sft_fresh_sampled"]["pass@1"]
            summary["pass@1_fresh_sampled_rl"] = after["eval_rl_fresh_sampled"]["pass@1"]
    for name in _eval_names(cfg, sets):
        sft_name, rl_name = name.replace("eval", "eval_sft", 1), name.replace("eval", "eval_rl", 1)
        summary[sft_name], summary[rl_name] = state[sft_name], after[rl_name]
        summary["change"][CHANGE_KEYS[name]] = _paired(out, sft_name, rl_name)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


# summary["change"] keys of the evaluations: the test split's greedy and sampled pass@1, then the fresh tasks'
CHANGE_KEYS = {"eval": "greedy", "eval_sampled": "sampled", "eval_fresh": "fresh_greedy",
               "eval_fresh_sampled": "fresh_sampled"}


def _eval_names(cfg: CoReCodeConfig, sets: dict[str, list[Task]]) -> list[str]:
    """The evaluations run after SFT and after RL, without the "sft"/"rl" part: "eval" (test split, greedy),
    "eval_sampled", "eval_fresh", "eval_fresh_sampled" (as configured)."""
    names = []
    for set_name, tasks in sets.items():
        if tasks:
            base = "eval" if set_name == "test" else f"eval_{set_name}"
            names += [base] + ([f"{base}_sampled"] if cfg.eval_samples else [])
    return names


def _evaluate(cfg: CoReCodeConfig, policies: dict[str, Any], sets: dict[str, list[Task]], sandbox: Any,
              when: str, progress: bool) -> dict[str, Any]:
    """Every evaluation of `_eval_names` at one point of the run ("sft" or "rl"), written under out_dir
    as eval_<when>[_fresh][_sampled]."""
    out = {}
    for name in _eval_names(cfg, sets):
        full = name.replace("eval", f"eval_{when}", 1)
        tasks = sets["fresh" if "_fresh" in name else "test"]
        samples = cfg.eval_samples if name.endswith("_sampled") else 0
        # the label written to the evaluation's summary.json: the fresh tasks come from the train split
        bench = "procedural-train-unseen" if "_fresh" in name else "procedural-test"
        out[full] = evaluate_pass1(cfg, policies, tasks, sandbox, full, samples=samples, bench=bench)
        what = ("held out, tasks of the training skeletons" if "_fresh" in name else "held out, new skeletons (test split)")
        how = _sampled_label(cfg) if samples else "greedy"
        _say(progress, f"pass@1 after {'SFT' if when == 'sft' else 'SFT + RL'}, {what}, {how}: "
                       f"{out[full]['pass@1']:.3f}")
    return out


def sft_corecode(cfg: CoReCodeConfig, policies: dict[str, Any], train: Sequence[Task],
                 progress: bool = True) -> dict[str, list[float]]:
    """Cold start: planner and coder SFT'd in place on the gold plans and codes of `sft_tasks(cfg, train)`
    (in parallel processes unless cfg.sft_processes == 1); returns each role's loss curve."""
    from coral.train.sft import SFTConfig, corecode_sft_examples, train_sft_many

    data = corecode_sft_examples(sft_tasks(cfg, train))
    sft = SFTConfig(epochs=cfg.sft_epochs, lr=cfg.sft_lr, batch_size=cfg.sft_batch_size, seed=cfg.seed,
                    length_window=cfg.sft_length_window, bf16=cfg.sft_bf16)
    per_role = {role: sft if role != "coder" or cfg.sft_coder_epochs is None
                else replace(sft, epochs=cfg.sft_coder_epochs) for role in policies}
    checkpoints = {role: sft_checkpoint_dir(cfg) / f"{role}.pt" for role in policies}
    with tempfile.TemporaryDirectory(prefix="coral-sft-") as work:
        return train_sft_many({role: (policies[role], data[role], per_role[role]) for role in policies}, work,
                              progress=progress, processes=cfg.sft_processes, checkpoints=checkpoints)


def sft_checkpoint_dir(cfg: CoReCodeConfig) -> Path:
    """Where SFT keeps each role's training state until the run's step-0 checkpoint exists."""
    return Path(cfg.out_dir) / "sft_ckpt"


def make_learners(cfg: CoReCodeConfig, policies: dict[str, Any], references: dict[str, Any]) -> dict[str, Any]:
    """One AgentLearner per trained role, with its KL reference when there is one."""
    from coral.train.grpo import AgentLearner

    return {role: AgentLearner(role, policies[role], grpo_config(cfg), reference=references.get(role))
            for role in cfg.train_roles}


def _sft_references(cfg: CoReCodeConfig, out: Path, policies: dict[str, Any], saved: bool) -> dict[str, Any]:
    """KL references of the trained roles (none when beta_kl is 0). After SFT they are copies of the
    policies, also written to out_dir/sft; on resume they are read back from there."""
    if cfg.beta_kl == 0:
        return {}
    from coral.policy.hf import HFPolicy

    refs = {}
    for role in cfg.train_roles:
        where = out / "sft" / role
        if saved:
            if not where.is_dir():
                raise FileNotFoundError(f"beta_kl > 0 needs the SFT reference of {role!r} at {where}, "
                                        "written after SFT; it is missing, so this run cannot resume with a KL term")
            refs[role] = frozen_copy(HFPolicy.load(where))
        else:
            refs[role] = frozen_copy(policies[role])
            refs[role].save(where)
    return refs


class _Holder:
    """What checkpoints need of an agent: its policy, and its learner state when it trains."""

    def __init__(self, policy: Any, learner: Any):
        self.policy, self.learner = policy, learner

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict() if self.learner is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.learner is not None:
            self.learner.load_state_dict(state)


def _fmt_step(m: dict[str, float], total: int) -> str:
    # no coder/loss: the coder was not updated (frozen, or every group's rewards were equal)
    loss = f"{m['coder/loss']:+.4f}" if "coder/loss" in m else "no update"
    return (f"step {int(m['step']):>3}/{total}  pass {m['pass_rate']:.3f}  "
            f"R(planner) {m['planner/reward']:.3f}  R(coder) {m['coder/reward']:.3f}  "
            f"loss(coder) {loss}  parse-fail {m['parse_failures']:.2f}  {m['step_s']:.1f}s")


def _paired(out: Path, before: str, after: str) -> dict[str, float]:
    """Per-task change of held-out pass rates between two evaluations (see metrics.paired_change)."""
    from coral.benchmarks.metrics import paired_change
    from coral.evaluation import task_pass_rates

    change = paired_change(task_pass_rates(out / before / "samples.jsonl"), task_pass_rates(out / after / "samples.jsonl"))
    return asdict(change)


def _fmt_change(change: dict[str, float]) -> str:
    return (f"change {change['mean']:+.3f}, paired standard error {change['se']:.3f}; "
            f"{change['up']} tasks up, {change['down']} down")


def _sampled_label(cfg: CoReCodeConfig) -> str:
    return f"{cfg.eval_samples} samples per task at temperature {cfg.temperature}"


def _say(enabled: bool, text: str) -> None:
    if enabled:
        print(text, flush=True)


def run_demo(cfg: CoReCodeConfig, progress: bool = True) -> dict[str, Any]:
    """The README's main job: SFT then CoRe-Code GRPO on tiny models, before/after pass@1, report."""
    from coral.report.run_report import write_run_report

    summary = train_corecode(cfg, progress=progress)
    report = write_run_report(Path(cfg.out_dir))
    print(f"held-out pass@1 after SFT -> after SFT + RL (seed {cfg.seed}, {summary['wall_s'] / 60:.1f} min):")
    for name, change in CHANGE_KEYS.items():
        before, after = name.replace("eval", "eval_sft", 1), name.replace("eval", "eval_rl", 1)
        if before not in summary:
            continue
        what = ("tasks of the training skeletons" if "_fresh" in name else "new skeletons (test split)")
        how = _sampled_label(cfg) if name.endswith("_sampled") else "greedy"
        print(f"  {what}, {summary[after]['tasks']:.0f} tasks, {how}: {summary[before]['pass@1']:.3f} -> "
              f"{summary[after]['pass@1']:.3f} ({_fmt_change(summary['change'][change])})")
    print("a change within about two paired standard errors of zero is within this evaluation's noise")
    print(f"report: {report}")
    return summary
