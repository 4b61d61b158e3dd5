"""The RecursiveMAS recipe: build records and frozen agents, train the links (inner loop, then outer
loop), evaluate the latent system against its text baselines. `coral train` with `recipe:
recursivemas` calls `train_recursivemas`.

Writes to cfg.out_dir, through the shared run loop (coral/train/loop.py): config.json, metrics.jsonl and
tb/ (one line per step), ckpt/step_N (links, optimisers, schedules, RNG, step: a run killed at any moment
resumes from its latest one), and agents/ROLE (the frozen agents, so a resumed or evaluated run uses the
same ones) and summary.json (evaluations before and after training). This module does NOT define the
losses (train.py) or the workflows (evaluate.py).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from coral.benchmarks import load_benchmark
from coral.benchmarks.metrics import paired_change
from coral.config import UserInputError, from_mapping
from coral.evaluation import EvalConfig
from coral.jsonl import JsonlWriter
from coral.recursivemas.agents import (
    build_agents,
    build_records,
    load_saved_agents,
    save_agents,
    saved_agents_present,
)
from coral.recursivemas.config import RecursiveMASConfig
from coral.recursivemas.data import benchmark_records
from coral.recursivemas.evaluate import EvalResult, evaluate
from coral.recursivemas.patterns import get_pattern
from coral.recursivemas.system import RecursiveMAS
from coral.recursivemas.tools import pattern_tool
from coral.recursivemas.train import TrainState, load_links, new_state, restore, train_links
from coral.report.recipes import finish, recursivemas_report
from coral.samples import answer_record
from coral.sandbox import Sandbox
from coral.sandbox.protocol import SandboxProtocol
from coral.scale import ScaleOut
from coral.terminal import Bar
from coral.train.loop import Run, check_resumable_config
from coral.train.loop import new_state as new_trainer_state

CONFIG_FILE = "config.json"
# fields a resumed run may change: where and how often to log and evaluate, and how long the outer loop runs
# (the restored outer schedule then follows the new length from there on)
RESUMABLE_CHANGES = ("out_dir", "outer.steps", "eval_every_steps", "checkpoint_every_steps", "max_new_tokens",
                     "ray_address", "resume", "dtype")


def load_or_build_agents(cfg: RecursiveMASConfig, train: Any, progress: bool) -> dict[str, Any]:
    """The run's agents: loaded from out_dir/agents when saved by an earlier (interrupted) run."""
    root = Path(cfg.out_dir) / "agents"
    if saved_agents_present(cfg, root):
        return load_saved_agents(cfg, root)
    agents = build_agents(cfg, train, progress=progress)
    save_agents(cfg, agents, root)
    return agents


def _eval_all(state: TrainState, records: Any, sandbox: SandboxProtocol, tag: str, per_record: dict | None = None,
              progress: bool = False) -> dict[str, float]:
    """Accuracy, decoded tokens and time of the latent system and of its final agent alone on `records`,
    as {tag/workflow/figure: value}; with `per_record`, each record's verdict lands there under tag/workflow
    (what a paired change before/after pairs)."""
    cfg = state.cfg
    out: dict[str, float] = {}
    with Bar(progress) as bar:
        row = bar.row(f"evaluation {tag} ({len(records)} records): latent, then single agent", 2)
        for workflow in ("recursive", "single"):
            res = evaluate(workflow, state.system, records, cfg.rounds, sandbox, cfg.max_new_tokens, cfg.batch_size)
            out.update({f"{tag}/{workflow}/{k}": v for k, v in res.summary().items()})
            if per_record is not None:
                per_record[f"{tag}/{workflow}"] = {r.id: float(ok) for r, ok in zip(records, res.correct, strict=True)}
            bar.advance(row)
    return out


def _changes(records: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Paired per-record change of accuracy, before -> after, of every split and workflow evaluated at both."""
    return {key[len("after/"):]: asdict(paired_change(records[f"before/{key[len('after/'):]}"], after))
            for key, after in records.items() if key.startswith("after/") and f"before/{key[len('after/'):]}" in records}


def build_system(cfg: RecursiveMASConfig, agents: dict[str, Any], tool: Any = None) -> RecursiveMAS:
    """cfg.pattern's links on `agents`, initialised from cfg.seed (torch's global RNG is seeded here: its
    state after building or loading agents differs from process to process)."""
    torch.manual_seed(cfg.seed)
    return RecursiveMAS(get_pattern(cfg.pattern), agents, cfg.latent_steps, tool=tool,
                        tool_max_new_tokens=cfg.max_new_tokens,  # a public-tests attempt is an answer
                        gradient_checkpointing=cfg.outer.gradient_checkpointing, link_init=cfg.link_init)


def check_resumable(cfg: RecursiveMASConfig, run: Run) -> None:
    """Refuse to resume a checkpointed run in cfg.out_dir that another config wrote, naming the field."""
    if (run.out / "state.pt").is_file():  # the recipe's own checkpoint before the shared run loop
        raise UserInputError(f"{run.out / 'state.pt'}: a run of an older coral (links in state.pt, not ckpt/); "
                             "it cannot be resumed: use another out_dir")
    if run.latest() is not None:
        check_resumable_config(run.out / CONFIG_FILE, cfg, RESUMABLE_CHANGES)


def train_recursivemas(cfg: RecursiveMASConfig, progress: bool = True) -> dict[str, float]:
    """Train the links of cfg.pattern's agents; returns the summary (also in out_dir/summary.json)."""

    if not cfg.resume:
        shutil.rmtree(Path(cfg.out_dir) / "agents", ignore_errors=True)
    run = Run(cfg.out_dir, start_over=not cfg.resume)
    if cfg.resume:
        check_resumable(cfg, run)
    (run.out / CONFIG_FILE).write_text(json.dumps(asdict(cfg), indent=1))  # what eval_run rebuilds the run from
    train, test = build_records(cfg)
    agents = load_or_build_agents(cfg, train, progress)
    with Sandbox(workers=2) as sandbox, ScaleOut(cfg.ray_address) as scale:
        # frozen agents: text decoding and judging on Ray; latent rollouts and link training stay here
        agents, sandbox = scale.distribute(agents, sandbox)
        pattern = get_pattern(cfg.pattern)
        tool = pattern_tool(pattern, sandbox, [*train, *test])
        system = build_system(cfg, agents, tool)
        print(system.describe())
        print(f"records: {len(train)} train, {len(test)} test; batch {cfg.batch_size}; "
              f"{cfg.inner.steps} inner + {cfg.outer.steps} outer steps; R={cfg.rounds}, m={cfg.latent_steps}")
        state = new_state(cfg, system)
        trainer = restore(state, run) if cfg.resume else None
        if trainer is not None:
            print(f"resumed from {run.latest()} (step {trainer['step']}, {state.phase(trainer['step'] + 1)} loop)")
        else:  # the untrained links' accuracy, kept in the checkpoints so a resumed run still reports it
            records: dict[str, dict[str, float]] = {}
            trainer = new_trainer_state(before={**_eval_all(state, train, sandbox, "before/train", records, progress),
                                                **_eval_all(state, test, sandbox, "before/test", records, progress)},
                                        before_records=records)
        with Bar(progress, {"loss": "loss {:.3f}"}) as bar:
            row = bar.row("link training (inner, then outer loop)", cfg.total_steps, done=trainer["step"])

            def echo(m: dict[str, float], history: list[dict[str, float]]) -> None:
                bar.advance(row, loss=m.get("inner/loss", m.get("outer/loss")))

            trainer = train_links(state, train, run, trainer, lambda s: _eval_all(s, test, sandbox, "test"), echo)
        records = dict(trainer.get("before_records") or {})
        summary = {**trainer["before"], **_eval_all(state, train, sandbox, "after/train", records, progress),
                   **_eval_all(state, test, sandbox, "after/test", records, progress)}
    summary.update(seed=cfg.seed, steps=cfg.total_steps, train_records=len(train), test_records=len(test),
                   change=_changes(records), wall_s=run.elapsed_s(),
                   outer_ce=[m["outer/ce_last_round"] for m in trainer["metrics"] if "outer/ce_last_round" in m])
    (run.out / "summary.json").write_text(json.dumps(summary, indent=1))
    finish(recursivemas_report(run.out, summary))
    return summary


def load_trained(cfg: RecursiveMASConfig, tool: Any = None) -> RecursiveMAS:
    """The system of a run in cfg.out_dir: its saved agents and, when it has a checkpoint, its latest links."""
    root = Path(cfg.out_dir)
    system = build_system(cfg, load_saved_agents(cfg, root / "agents"), tool)
    load_links(system, root)
    return system


def eval_workflow(cfg: RecursiveMASConfig, workflow: str, rounds: int | None = None, split: str = "test",
                  samples_path: str | Path | None = None, bench: str | None = None,
                  limit: int | None = None) -> dict[str, float]:
    """`coral eval --workflow recursive | text-mas | single` on a trained run's agents, batch by batch
    (cfg.batch_size records, each batch timed on its own): writes one JSON line per sample to
    `samples_path` (default out_dir/eval_WORKFLOW_R{rounds}.jsonl; coral eval's sample schema, answer_record:
    the answer as code and text, passed, decoded tokens, and metrics rounds and wall_s = its batch's wall
    time / the batch's size) and returns accuracy, decoded tokens and wall time per
    sample. `bench` (e.g. "humaneval", first `limit` tasks) evaluates on that benchmark's tasks instead of
    the run's records `split`."""
    rounds = rounds or cfg.rounds
    train, test = build_records(cfg)
    records = {"train": train, "test": test}.get(split)
    if records is None:
        raise UserInputError(f"split must be 'train' or 'test', got {split!r}")
    if bench is not None:
        records = test = benchmark_records(load_benchmark(bench, limit=limit, seed=cfg.seed))
    path = Path(samples_path) if samples_path is not None else Path(cfg.out_dir) / f"eval_{workflow}_R{rounds}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    correct: list[bool] = []
    tokens: list[int] = []
    wall_s = 0.0
    with Sandbox(workers=2) as sandbox, JsonlWriter(path, truncate=True) as fh:
        tool = pattern_tool(get_pattern(cfg.pattern), sandbox, [*train, *test])
        system = load_trained(cfg, tool)
        for lo in range(0, len(records), cfg.batch_size):
            batch = records[lo : lo + cfg.batch_size]
            res = evaluate(workflow, system, batch, rounds, sandbox, cfg.max_new_tokens, cfg.batch_size)
            for rec, ans, ok, n in zip(batch, res.answers, res.correct, res.tokens, strict=True):
                fh.write(answer_record(rec.id, workflow, ans, ok, n, {
                    "rounds": rounds, "wall_s": res.wall_s / len(batch), "batch_wall_s": res.wall_s}))
            correct += res.correct
            tokens += res.tokens
            wall_s += res.wall_s
    return EvalResult(workflow, rounds, [], correct, tokens, wall_s).summary()


def eval_run(run_dir: str | Path, workflow: str, rounds: int | None = None, split: str = "test",
             samples_path: str | Path | None = None, bench: str | None = None,
             limit: int | None = None, dtype: str | None = None) -> dict[str, float]:
    """`eval_workflow` on the run in `run_dir` (written by `coral train` with recipe recursivemas), its
    agents in precision `dtype` (None: the run's own)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise UserInputError(f"{path}: not a RecursiveMAS run directory (no {CONFIG_FILE}; "
                             f"`coral train` with recipe recursivemas writes one)")
    saved = {**json.loads(path.read_text()), "out_dir": str(run_dir), **({"dtype": dtype} if dtype else {})}
    cfg = from_mapping(RecursiveMASConfig, saved, str(path))
    return eval_workflow(cfg, workflow, rounds, split, samples_path, bench, limit)


def run_latent_eval(cfg: EvalConfig) -> dict[str, float]:
    """`--workflow recursive | text-mas`: coral.recursivemas's evaluation of a trained RecursiveMAS run;
    writes `<out_dir>/samples.jsonl` (coral eval's sample schema: answer, passed, decoded tokens, wall time) and
    `<out_dir>/summary.json`."""
    if cfg.latent_run_dir is None:
        raise UserInputError(f"workflow {cfg.workflow!r} needs field 'latent_run_dir' (a run of `coral train` "
                             f"with recipe recursivemas)")
    out_dir = Path(cfg.out_dir)
    # no bench: the run's own records; a bench given (humaneval, procedural-test) is evaluated instead
    summary = eval_run(cfg.latent_run_dir, cfg.workflow, cfg.latent_rounds or None, cfg.latent_split,
                       samples_path=out_dir / "samples.jsonl", bench=cfg.bench, limit=cfg.limit, dtype=cfg.dtype)
    n = len((out_dir / "samples.jsonl").read_text().splitlines())
    # wall_s: the workflows' own time (loading the agents and judging answers are not part of it)
    summary = {"samples": float(n), **summary, "decoded_tokens": summary["decoded_tokens_per_sample"] * n,
               "wall_s": summary["wall_s_per_sample"] * n}
    (out_dir / "summary.json").write_text(json.dumps({"config": asdict(cfg), "summary": summary}, indent=2))
    return summary
