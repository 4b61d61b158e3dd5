"""The RecursiveMAS recipe: build records and frozen agents, train the links (inner loop, then outer
loop), evaluate the latent system against its text baselines. `coral train` with `recipe:
recursivemas` calls `train_recursivemas`.

Writes to cfg.out_dir: metrics.jsonl (one line per step, then one per evaluation), state.pt (links,
optimisers, step: resumable), agents/ROLE (the frozen agents, so a resumed or evaluated run uses the
same ones) and summary.json. This module does NOT define the losses (train.py) or the workflows
(evaluate.py).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coral.config import UserInputError
from coral.latent.agents import build_agents, build_records
from coral.latent.evaluate import EvalResult, evaluate
from coral.latent.patterns import get_pattern
from coral.latent.system import RecursiveMAS
from coral.latent.tools import SandboxTool
from coral.latent.train import RecursiveMASConfig, TrainState, load_state, new_state, run_steps

CONFIG_FILE = "config.json"


def load_or_build_agents(cfg: RecursiveMASConfig, train: Any, progress: bool) -> dict[str, Any]:
    """The run's agents: loaded from out_dir/agents when saved by an earlier (interrupted) run."""
    from coral.policy.hf import HFPolicy

    root = Path(cfg.out_dir) / "agents"
    roles = get_pattern(cfg.pattern).roles
    if all((root / r).is_dir() for r in roles):
        return {r: HFPolicy.load(root / r) for r in roles}
    agents = build_agents(cfg, train, progress=progress)
    for role, policy in agents.items():
        tmp = root / f".{role}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        policy.save(tmp)
        os.replace(tmp, root / role)  # a half-written agent is never taken for a saved one
    return agents


def _jsonl(path: Path):
    def log(metrics: dict[str, Any]) -> None:
        with path.open("a") as fh:
            fh.write(json.dumps(metrics) + "\n")
    return log


def _eval_all(state: TrainState, records: Any, sandbox: Any, tag: str) -> dict[str, float]:
    cfg = state.cfg
    out: dict[str, float] = {}
    for workflow in ("recursive", "single"):
        res = evaluate(workflow, state.system, records, cfg.rounds, sandbox, cfg.max_new_tokens, cfg.batch_size)
        out.update({f"{tag}/{workflow}/{k}": v for k, v in res.summary().items()})
    return out


def train_recursivemas(cfg: RecursiveMASConfig, progress: bool = True) -> dict[str, float]:
    """Train the links of cfg.pattern's agents; returns the summary (also in out_dir/summary.json)."""
    from coral.sandbox import Sandbox
    from coral.scale import ScaleOut

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(json.dumps(asdict(cfg), indent=1))  # what eval_run rebuilds the run from
    train, test = build_records(cfg)
    agents = load_or_build_agents(cfg, train, progress)
    with Sandbox(workers=2) as sandbox, ScaleOut(cfg.ray_address) as scale:
        # frozen agents: text decoding and judging on Ray; latent rollouts and link training stay here
        agents, sandbox = scale.distribute(agents, sandbox)
        pattern = get_pattern(cfg.pattern)
        tool = SandboxTool(sandbox, [*train, *test]) if pattern.name == "deliberation" else None
        system = RecursiveMAS(pattern, agents, cfg.latent_steps, tool=tool,
                              gradient_checkpointing=cfg.gradient_checkpointing, link_init=cfg.link_init)
        print(system.describe())
        print(f"records: {len(train)} train, {len(test)} test; batch {cfg.batch_size}; "
              f"{cfg.inner_steps} inner + {cfg.outer_steps} outer steps; R={cfg.rounds}, m={cfg.latent_steps}")
        state = new_state(cfg, system, train)
        log = _jsonl(out / "metrics.jsonl")
        summary: dict[str, float] = {}
        if load_state(state, out):
            print(f"resumed at step {state.step}")
        else:
            summary.update(_eval_all(state, train, sandbox, "before/train"))
            log(summary)

        def echo(m: dict[str, Any]) -> None:
            log(m)
            if progress:
                print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items()))

        run_steps(state, cfg.inner_steps + cfg.outer_steps, echo,
                  lambda s: _eval_all(s, test, sandbox, "test"))
        final = {**_eval_all(state, train, sandbox, "after/train"), **_eval_all(state, test, sandbox, "after/test")}
        log(final)
        summary.update(final)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def load_trained(cfg: RecursiveMASConfig, tool: Any = None) -> RecursiveMAS:
    """The system of a run in cfg.out_dir: its saved agents and, when present, its trained links."""
    import torch

    from coral.latent.train import STATE_FILE
    from coral.policy.hf import HFPolicy

    root = Path(cfg.out_dir)
    pattern = get_pattern(cfg.pattern)
    missing = [r for r in pattern.roles if not (root / "agents" / r).is_dir()]
    if missing:
        raise FileNotFoundError(f"{root / 'agents' / missing[0]}: no saved agent (run `coral train` first)")
    agents = {r: HFPolicy.load(root / "agents" / r) for r in pattern.roles}
    system = RecursiveMAS(pattern, agents, cfg.latent_steps, tool=tool, link_init=cfg.link_init)
    if (root / STATE_FILE).is_file():
        system.load_state_dict(torch.load(root / STATE_FILE, weights_only=False)["links"])
    return system


def eval_workflow(cfg: RecursiveMASConfig, workflow: str, rounds: int | None = None, split: str = "test",
                  samples_path: str | Path | None = None) -> dict[str, float]:
    """`coral eval --workflow recursive | text-mas | single` on a trained run's agents, batch by batch
    (cfg.batch_size records, each batch timed on its own): writes one JSON line per sample to
    `samples_path` (default out_dir/eval_WORKFLOW_R{rounds}.jsonl: answer, correct, decoded tokens, and
    wall_s = its batch's wall time / the batch's size) and returns accuracy, decoded tokens and wall time per
    sample."""
    from coral.sandbox import Sandbox

    rounds = rounds or cfg.rounds
    train, test = build_records(cfg)
    records = {"train": train, "test": test}.get(split)
    if records is None:
        raise UserInputError(f"split must be 'train' or 'test', got {split!r}")
    path = Path(samples_path) if samples_path is not None else Path(cfg.out_dir) / f"eval_{workflow}_R{rounds}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    correct: list[bool] = []
    tokens: list[int] = []
    wall_s = 0.0
    with Sandbox(workers=2) as sandbox, path.open("w") as fh:
        tool = SandboxTool(sandbox, [*train, *test]) if cfg.pattern == "deliberation" else None
        system = load_trained(cfg, tool)
        for lo in range(0, len(records), cfg.batch_size):
            batch = records[lo : lo + cfg.batch_size]
            res = evaluate(workflow, system, batch, rounds, sandbox, cfg.max_new_tokens, cfg.batch_size)
            for rec, ans, ok, n in zip(batch, res.answers, res.correct, res.tokens, strict=True):
                fh.write(json.dumps({"id": rec.id, "workflow": workflow, "rounds": rounds, "answer": ans,
                                     "correct": ok, "decoded_tokens": n, "wall_s": res.wall_s / len(batch),
                                     "batch_wall_s": res.wall_s}) + "\n")
            fh.flush()
            correct += res.correct
            tokens += res.tokens
            wall_s += res.wall_s
    return EvalResult(workflow, rounds, [], correct, tokens, wall_s).summary()


def eval_run(run_dir: str | Path, workflow: str, rounds: int | None = None, split: str = "test",
             samples_path: str | Path | None = None) -> dict[str, float]:
    """`eval_workflow` on the run in `run_dir` (written by `coral train` with recipe recursivemas)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise UserInputError(f"{path}: not a RecursiveMAS run directory (no {CONFIG_FILE}; "
                             f"`coral train` with recipe recursivemas writes one)")
    fields = json.loads(path.read_text())
    cfg = RecursiveMASConfig(**{**fields, "agent_widths": tuple(fields["agent_widths"]), "out_dir": str(run_dir)})
    return eval_workflow(cfg, workflow, rounds, split, samples_path)
