"""One CoRe-Code cold start shared by several runs (`cold_start_from`): an ablation of `train_roles` or of
RL settings starts from another run's SFT weights and reuses its evaluation after SFT, instead of training
and evaluating the same cold start again.

After its cold start every run keeps it in `out_dir/sft/cold_start/`: each role's weights (the checkpoint
format, so LoRA adapters too) and `state.json` (SFT losses and time, the evaluations after SFT). A run with
`cold_start_from` loads those, copies the source's evaluation folders after SFT into its own out_dir (its
paired changes read them), and checks first that the two configs differ only in RL settings: the source's
cold start is then exactly the one this run would have trained (same seed, tasks, tokenizer, models, SFT).
`load_kept_cold_start` loads a run's kept cold start without that check, for tools that measure the
run itself (experiments/testbed.py, experiments/corecode_drift.py).

This module does NOT train or evaluate (coral/corecode/recipe.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from coral.config import UserInputError
from coral.corecode.config import CoReCodeConfig
from coral.train.checkpoints import load_weights, policy_weights
from coral.train.loop import check_resumable_config, flat_fields

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy

COLD_START_DIR = Path("sft") / "cold_start"
# fields that act only after the cold start and its evaluation (rl.* but the temperature, which the sampled
# evaluation after SFT uses), or not on any result
RL_ONLY = ("out_dir", "resume", "cold_start_from", "rl_steps", "train_roles", "tasks_per_step", "coder_group",
           "planner_reward", "correctness", "efficiency_weight", "efficiency_measure", "debugger_reward", "debugger_group",
           "checkpoint_every_steps", "sandbox_workers", "ray_address", "sft_processes", "eval_batch_samples")


# fields that act only on the held-out evaluations (the tasks SFT and RL train on do not depend on them): free
# to differ from the source when no evaluation after SFT is copied (a probe that evaluates on its own)
EVAL_ONLY = ("held_out_split", "n_test_tasks", "eval_samples_per_task", "n_fresh_tasks")


def may_differ(cfg: CoReCodeConfig) -> tuple[str, ...]:
    """Dotted config fields in which a run may differ from the run whose cold start it shares."""
    rl = tuple(f"rl.{k}" for k in flat_fields(asdict(cfg.rl)) if k != "temperature")
    return RL_ONLY + rl


def save_cold_start(out: Path, policies: dict[str, HFPolicy], state: dict[str, Any]) -> None:
    """Keep this run's cold start (every role's weights, the state after SFT and its evaluation) for runs
    that share it. Written last, to a temporary folder renamed into place: a crash leaves none or all."""
    final, tmp = out / COLD_START_DIR, out / COLD_START_DIR.with_name(".cold_start.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for role, policy in policies.items():
        torch.save(policy_weights(policy), tmp / f"{role}.pt")
    (tmp / "state.json").write_text(json.dumps({k: v for k, v in state.items() if k != "metrics"}, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def load_kept_cold_start(run: Path, policies: dict[str, HFPolicy]) -> dict[str, Any]:
    """Load the cold start the run in `run` kept (`run/sft/cold_start`) into `policies` (in place); returns its
    state after SFT. Refuses, naming the file, a run that has not finished its cold start or kept no weights
    for one of the roles. It checks no config: callers that need the run's cold start to be their own config's
    check that first (fork_cold_start)."""
    _check_kept(run, policies)
    return _load_kept(run, policies)


def _check_kept(run: Path, roles: Iterable[str], prefix: str = "") -> None:
    saved = run / COLD_START_DIR
    if not (saved / "state.json").is_file():
        raise UserInputError(f"{prefix}{saved / 'state.json'} does not exist: the run in {run} has not finished "
                             "its cold start (SFT and the evaluation after it)")
    missing = [role for role in roles if not (saved / f"{role}.pt").is_file()]
    if missing:
        raise UserInputError(f"{prefix}{saved} has no {missing[0]!r} weights (a cold start of another chain)")


def _load_kept(run: Path, policies: dict[str, HFPolicy]) -> dict[str, Any]:
    saved = run / COLD_START_DIR
    for role, policy in policies.items():
        load_weights(policy, torch.load(saved / f"{role}.pt", weights_only=True))
    state: dict[str, Any] = json.loads((saved / "state.json").read_text())
    return state


def fork_cold_start(cfg: CoReCodeConfig, out: Path, policies: dict[str, HFPolicy],
                    sft_dirs: Sequence[str]) -> dict[str, Any]:
    """Load the cold start of the run in `cfg.cold_start_from` into `policies` (in place) and copy its
    evaluations after SFT (`sft_dirs`) into `out`; returns the state after SFT. Refuses, naming the field or
    file, a source with another cold-start config or without a finished cold start, before loading anything.
    With no `sft_dirs` the held-out evaluation settings (EVAL_ONLY) may differ too."""
    assert cfg.cold_start_from is not None, "the caller forks only a config that names a run"
    src = Path(cfg.cold_start_from)
    _check_kept(src, policies, prefix="cold_start_from: ")
    if src.resolve() == out.resolve():
        raise UserInputError(f"cold_start_from: {src} is this run's own out_dir")
    check_resumable_config(src / "config.json", cfg, may_differ(cfg) + (() if sft_dirs else EVAL_ONLY),
                           advice="a cold start is shared only by runs that differ in RL settings")
    missing = [d for d in sft_dirs if not (src / d / "samples.jsonl").is_file()]
    if missing:
        raise UserInputError(f"cold_start_from: {src} has no {missing[0]!r} (a cold start of other evaluation "
                             "settings)")
    state = _load_kept(src, policies)  # checked above
    for d in sft_dirs:
        shutil.rmtree(out / d, ignore_errors=True)
        shutil.copytree(src / d, out / d)
    return {**state, "metrics": [], "cold_start_from": str(src)}
