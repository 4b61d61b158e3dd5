"""Probe one CoRe-Code RL setting from a cached SFT checkpoint: greedy pass@1 on held-out tasks and on
training tasks, before and after RL, each with its standard error over tasks, and the paired per-task
change of held-out pass@1. Used for the learning-rate / group sweeps.

    python -m experiments.corecode_rl_probe --rl-steps 40 --set '{"rl": {"lr": 5e-5}}'
    python -m experiments.corecode_rl_probe --rl-steps 20 --fixed-tasks 48 --set '{"train_roles": ["coder"]}'

--set holds CoReCodeConfig fields (nested as mappings). --fixed-tasks N: RL on the first N training tasks
only, and the "train" evaluation on those same N (0: the usual stream and the first 200).
--sampled-per-task K: also held-out pass@1 estimated from K samples per task at rl.temperature.
--eval-every-steps N: also held-out greedy pass@1 every N steps. "fresh" is pass@1 on the config's
n_fresh_tasks held-out tasks of the training skeletons. The SFT weights are cached in
runs/probe_sft_e<epochs>_b<batch>_lr<lr>_s<seed>[_rl<fraction>][_d<d_model>_l<layers>] so that settings
share one cold start. --from RUN probes the cold start a `coral demo` / train run kept in RUN/sft/cold_start
instead: the config is RUN's config.json with --set on top, which may change RL settings (as cold_start_from)
and the held-out evaluation (held_out_split, n_test_tasks: choose RL settings on validation from a run evaluated
on test), and the evaluations go to runs/probe_from_<RUN's name> unless --set names an out_dir:

    python -m experiments.corecode_rl_probe --from runs/demo --rl-steps 40 --fixed-tasks 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from coral.benchmarks.splits import build_tasks, fresh_tasks, rl_tasks
from coral.config import from_mapping, merge
from coral.corecode.evaluate import evaluate_pass1, fmt_change, paired_change_between
from coral.corecode.fork import fork_cold_start
from coral.corecode.recipe import CoReCodeConfig, rl_step
from coral.corecode.setup import (
    build_policies,
    frozen_copy,
    make_learners,
    sft_checkpoint_dir,
    sft_corecode,
)
from coral.policy.hf import HFPolicy
from coral.report.error_bars import rate_se
from coral.sandbox import Sandbox
from coral.train.loop import next_batch
from coral.trajectory import Task


def main() -> None:
    args = _parser().parse_args()
    kw = json.loads(args.set)
    if args.source:
        kw = source_config(Path(args.source), kw)
    cfg = from_mapping(CoReCodeConfig, kw, "--set")
    train, test = build_tasks(cfg.splits)
    fixed = args.fixed_tasks
    pool = train[:fixed] if fixed else rl_tasks(cfg.splits, train)
    fresh = fresh_tasks(cfg.splits, train, pool)  # cfg.n_fresh_tasks held-out tasks of the training skeletons
    cache = sft_cache(cfg)
    if "out_dir" not in kw:  # evaluations and the SFT checkpoints (resumable, removed once cached) per cold start
        cfg = replace(cfg, out_dir=f"{cache}_probe")
    with Sandbox() as sb:
        pols = cold_start(cfg, train, cache)
        for p in pols.values():
            p.batch_size = 128  # as build_policies sets it for the demo
        probe = Evaluations(cfg, pols, sb, test, train[:fixed] if fixed else train[:200], fresh, args.sampled_per_task)
        print(f"before: {probe.all('before')}", flush=True)
        if args.rl_steps == 0:
            return
        train_rl(cfg, pols, pool, sb, args.rl_steps, args.eval_every_steps, probe)
        print(f"after:  {probe.all('after')}", flush=True)
        print(f"held-out greedy, before -> after: {fmt_change(paired_change_between(cfg.out_dir, 'before', 'after'))}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rl-steps", type=int, default=20, help="RL steps (0: evaluate the cold start only)")
    ap.add_argument("--fixed-tasks", type=int, default=0, help="RL on the first N training tasks only (0: the stream)")
    ap.add_argument("--sampled-per-task", type=int, default=0, help="also held-out pass@1 from K samples per task")
    ap.add_argument("--eval-every-steps", type=int, default=0, help="also held-out greedy pass@1 every N steps")
    ap.add_argument("--set", default="{}", help="JSON of CoReCodeConfig fields")
    ap.add_argument("--from", dest="source", default=None,
                    help="a run's out_dir: probe the cold start it kept (--set may change RL and held-out "
                         "evaluation settings only)")
    return ap


@dataclass
class Evaluations:
    """The probe's evaluations of `pols` at one point (`when` names its folders under cfg.out_dir)."""

    cfg: CoReCodeConfig
    pols: dict[str, HFPolicy]
    sandbox: Sandbox
    test: list[Task]
    train: list[Task]
    fresh: list[Task]
    sampled: int  # samples per task of the sampled evaluations (0: none)
    t0: float = field(default_factory=time.time)

    def rate(self, tasks: list[Task], when: str, samples: int = 1) -> float:
        return float(evaluate_pass1(self.cfg, self.pols, tasks, self.sandbox, when, samples=samples)["pass@1"])

    def all(self, when: str) -> str:
        held_out, on_train = self.rate(self.test, when), self.rate(self.train, when + "_train")
        out = (f"held-out {held_out:.3f} (SE {rate_se(held_out, len(self.test)):.3f})  "
               f"train {on_train:.3f} (SE {rate_se(on_train, len(self.train)):.3f})")
        if self.sampled:
            rate = self.rate(self.test, when + "_sampled", self.sampled)
            out += f"  held-out sampled (n={self.sampled}, T={self.cfg.rl.temperature}) {rate:.3f}"
        return out + self.on_fresh(when) + f"  ({time.time() - self.t0:.0f}s)"

    def on_fresh(self, when: str) -> str:
        if not self.fresh:
            return ""
        out = f"  fresh {self.rate(self.fresh, when + '_fresh'):.3f}"
        if self.sampled:
            out += f"  fresh sampled {self.rate(self.fresh, when + '_fresh_sampled', self.sampled):.3f}"
        return out


def train_rl(cfg: CoReCodeConfig, pols: dict[str, HFPolicy], pool: list[Task], sb: Sandbox, steps: int,
             eval_every: int, probe: Evaluations) -> None:
    """`steps` RL steps on `pool`'s stream, each step's sampled pass rate printed (and held-out greedy pass@1
    every `eval_every` steps but the last)."""
    refs = {r: frozen_copy(pols[r]) for r in cfg.train_roles} if cfg.rl.loss.beta_kl > 0 else {}
    learners = make_learners(cfg, pols, refs)
    for step in range(1, steps + 1):
        batch = next_batch(pool, (step - 1) * cfg.tasks_per_step, cfg.tasks_per_step, cfg.seed)
        m = rl_step(cfg, step, batch, pols, learners, sb)
        print(f"step {step}: sampled pass {m['pass_rate']:.3f}  {m['step_s']:.1f}s", flush=True)
        if eval_every and step % eval_every == 0 and step < steps:
            print(f"step {step}: held-out {probe.rate(probe.test, f'step{step}'):.3f}{probe.on_fresh(f'step{step}')}",
                  flush=True)


def sft_cache(cfg: CoReCodeConfig) -> Path:
    """Where the probe keeps the SFT weights of `cfg`'s cold start."""
    held = f"_rl{cfg.rl_skeleton_fraction}" if cfg.rl_skeleton_fraction else ""  # SFT without the RL skeletons
    shape = "" if (cfg.d_model, cfg.n_layers) == (128, 4) else f"_d{cfg.d_model}_l{cfg.n_layers}"  # non-default model
    return Path(f"runs/probe_sft_e{cfg.sft.epochs}_b{cfg.sft.batch_size}_lr{cfg.sft.lr}_s{cfg.seed}{held}{shape}")


def cold_start(cfg: CoReCodeConfig, train: list[Task], cache: Path) -> dict[str, HFPolicy]:
    """The planner and coder after SFT: the run's in cfg.cold_start_from, else the cached ones, else trained
    now and cached."""
    if cfg.cold_start_from:
        pols = build_policies(cfg, train)
        fork_cold_start(cfg, Path(cfg.out_dir), pols, sft_dirs=())
        return pols
    if cache.exists():
        return {r: HFPolicy.load(cache / r) for r in ("planner", "coder")}
    pols = build_policies(cfg, train)
    sft_corecode(cfg, pols, train, progress=False)
    for role, policy in pols.items():
        policy.save(cache / role)
    shutil.rmtree(sft_checkpoint_dir(cfg))
    return pols


def source_config(source: Path, changes: dict[str, Any]) -> dict[str, Any]:
    """The config of the run in `source` with `changes` on top (nested mappings merged key by key), set to load
    that run's cold start; its evaluations go to runs/probe_from_<name> unless `changes` names an out_dir."""
    path = source / "config.json"
    if not path.is_file():
        raise SystemExit(f"--from: {path} does not exist (give the out_dir of a coral demo or train run)")
    kw = merge(json.loads(path.read_text()), changes)
    kw["cold_start_from"] = str(source)
    if "out_dir" not in changes:
        kw["out_dir"] = f"runs/probe_from_{source.resolve().name}"
    return kw


if __name__ == "__main__":
    main()
