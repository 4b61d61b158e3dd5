"""CoRe-Code's held-out evaluations, as data: each `EvalSet` names its tasks, how it samples (greedy or k
samples per task) and where its records go; the same sets run after SFT and after RL, and their per-task
change is paired.

Evaluation directories are `eval_<when><suffix>` under out_dir (when: "sft" or "rl"; suffix: "",
"_sampled", "_fresh", "_fresh_sampled"). This module does NOT train anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coral.benchmarks.metrics import paired_change
from coral.corecode.config import CoReCodeConfig
from coral.corecode.setup import make_agents
from coral.evaluation import EvalConfig, run_eval, task_pass_rates
from coral.sandbox.protocol import SandboxProtocol
from coral.seeding import EVAL_STEP
from coral.trajectory import Task

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy

TEST_WHAT = "new skeletons (test split)"
FRESH_WHAT = "tasks of the training skeletons"


@dataclass(frozen=True)
class EvalSet:
    suffix: str  # "", "_sampled", "_fresh", "_fresh_sampled"
    tasks: Sequence[Task]
    samples_per_task: int  # 0: greedy pass@1
    bench: str  # the label written to the evaluation's summary.json
    what: str  # which tasks, for people
    change_key: str  # the key of summary["change"]

    def dir_name(self, when: str) -> str:
        return f"eval_{when}{self.suffix}"

    def how(self, temperature: float) -> str:
        if not self.samples_per_task:
            return "greedy"
        return f"{self.samples_per_task} samples per task at temperature {temperature}"


def eval_sets(cfg: CoReCodeConfig, test: Sequence[Task], fresh: Sequence[Task]) -> list[EvalSet]:
    """The test split and the fresh tasks (when there are any), each greedy and (when
    cfg.eval_samples_per_task > 0) sampled."""
    k = cfg.eval_samples_per_task
    bench, what = f"procedural-{cfg.held_out_split}", TEST_WHAT.replace("test", cfg.held_out_split)
    sets = [EvalSet("", test, 0, bench, what, "greedy")]
    if k:
        sets.append(EvalSet("_sampled", test, k, bench, what, "sampled"))
    if fresh:
        sets.append(EvalSet("_fresh", fresh, 0, "procedural-train-unseen", FRESH_WHAT, "fresh_greedy"))
        if k:
            sets.append(EvalSet("_fresh_sampled", fresh, k, "procedural-train-unseen", FRESH_WHAT, "fresh_sampled"))
    return sets


def evaluate_pass1(cfg: CoReCodeConfig, policies: dict[str, HFPolicy], tasks: Sequence[Task], sandbox: SandboxProtocol,
                   name: str, samples: int = 0, bench: str = "procedural-test", progress: bool = False) -> dict[str, float]:
    """pass@1 of the chain (cfg.chain_roles; a debugger rewrites once per code and round) on `tasks`, records under out_dir/name: greedy (samples=0), or
    the unbiased estimate from `samples` (plan, code) samples per task at rl.temperature."""

    if samples < 0:
        raise ValueError(f"evaluate_pass1: samples must be >= 0, got {samples}")
    ecfg = EvalConfig(bench=bench, workflow="chain", limit=len(tasks),
                      temperature=cfg.rl.temperature if samples else 0.0, samples_per_task=max(samples, 1),
                      max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, debug_rounds=cfg.debug_rounds,
                      tasks_per_batch=max(1, cfg.eval_batch_samples // max(samples, 1)),
                      out_dir=str(Path(cfg.out_dir) / name))

    # sampled evaluation draws with its own seed streams (EVAL_STEP), never ones an RL step used
    agents = make_agents(cfg, policies, greedy=not samples)
    return run_eval(ecfg, tasks=tasks, agents=agents, sandbox=sandbox, progress=progress, step=EVAL_STEP)


def evaluate_sets(cfg: CoReCodeConfig, policies: dict[str, HFPolicy], sets: Sequence[EvalSet], sandbox: SandboxProtocol,
                  when: str, say: Callable[[str], None], progress: bool = False) -> dict[str, Any]:
    """Every set at one point of the run ("sft" or "rl"): {directory name: its summary}; with `progress`, each
    evaluation shows a row (tasks done, running pass rate, ETA)."""
    out = {}
    for s in sets:
        name = s.dir_name(when)
        out[name] = evaluate_pass1(cfg, policies, s.tasks, sandbox, name, samples=s.samples_per_task, bench=s.bench,
                                   progress=progress)
        before, after = ("SFT", "SFT + RL") if cfg.cold_start == "sft" else ("nothing (the model as loaded)", "RL")
        say(f"pass@1 after {before if when == 'sft' else after}, held out, {s.what}, "
            f"{s.how(cfg.rl.temperature)}: {out[name]['pass@1']:.3f}")
    return out


def paired_change_between(out_dir: str | Path, before: str, after: str) -> dict[str, float]:
    """Per-task change of pass rates between two evaluations under `out_dir` (metrics.paired_change):
    mean, paired standard error, tasks up and down."""

    out_dir = Path(out_dir)
    change = paired_change(task_pass_rates(out_dir / before / "samples.jsonl"),
                           task_pass_rates(out_dir / after / "samples.jsonl"))
    return asdict(change)


def fmt_change(change: dict[str, float]) -> str:
    return (f"change {change['mean']:+.3f}, paired standard error {change['se']:.3f}; "
            f"{change['up']} tasks up, {change['down']} down")
