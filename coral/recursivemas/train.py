"""RecursiveMAS link training: the inner loop, then the outer loop; the language models stay frozen.

Inner loop (each agent alone): teacher-force the role's gold text after its text prompt and train the
inner link so inner(h_t) points at the input embedding of token t+1: loss = mean(1 - cos). The LM
runs under no_grad here (the inner link sits after it: no gradient has to cross it).
Outer loop (the whole system): inner links frozen (requires_grad False, still differentiable), all R
rounds unrolled with gradients, loss = cross-entropy of the final agent's gold answer (teacher forced)
in the last round + `earlier_round_weight` x the mean of the same loss in earlier rounds. One set of
outer links serves every round, so round 1's links get gradient through rounds 2..R.

Both loops run through the shared run loop (coral/train/loop.py `drive`) as one stream of steps: steps
1..inner.steps are the inner phase, the rest the outer phase, so a resumed run continues in the phase and
step where it stopped. A checkpoint keeps the links of each loop with its optimiser and schedule (two
`TrainedAgent`s, "inner" and "outer"), RNG states, step and data position. The batches are the records in
`record_order`, reshuffled each epoch from the seed. This module does NOT evaluate (evaluate.py) or build
agents (agents.py).
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from coral.recursivemas.agents import text_sources
from coral.recursivemas.config import InnerLoopConfig, OuterLoopConfig, RecursiveMASConfig
from coral.recursivemas.data import Record
from coral.recursivemas.rollout import answer_nll, assemble, split_prompt, teacher_forced
from coral.recursivemas.system import RecursiveMAS
from coral.train.checkpoints import TrainedAgent, latest_checkpoint
from coral.train.loop import Run, drive

PHASES = ("inner", "outer")


@dataclass
class LinkLearner:
    """One loop's optimiser and learning-rate schedule: the learner state a checkpoint keeps for it."""

    opt: torch.optim.Optimizer
    sched: Any

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.opt.state_dict(), "schedule": self.sched.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["schedule"])


@dataclass
class TrainState:
    cfg: RecursiveMASConfig
    system: RecursiveMAS
    inner: LinkLearner
    outer: LinkLearner

    def phase(self, step: int) -> str:
        """The loop that step `step` (from 1) belongs to."""
        return "inner" if step <= self.cfg.inner.steps else "outer"

    def agents(self) -> dict[str, TrainedAgent]:
        """What a checkpoint keeps: each loop's links with its learner (the LMs are frozen: not kept)."""
        return {name: TrainedAgent(getattr(self.system, name), getattr(self, name)) for name in PHASES}


def _schedule(opt: torch.optim.Optimizer, warmup: int, total: int) -> Any:
    """Linear warm-up, then cosine decay to 0 at `total`."""
    def factor(s: int) -> float:
        return min(1.0, (s + 1) / max(1, warmup)) * 0.5 * (1 + math.cos(math.pi * min(s, total) / max(1, total)))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _learner(links: torch.nn.Module, loop: InnerLoopConfig | OuterLoopConfig) -> LinkLearner:
    opt = torch.optim.AdamW(links.parameters(), lr=loop.lr, weight_decay=loop.weight_decay)
    return LinkLearner(opt, _schedule(opt, loop.warmup_steps, loop.steps))


def new_state(cfg: RecursiveMASConfig, system: RecursiveMAS) -> TrainState:
    return TrainState(cfg, system, _learner(system.inner, cfg.inner), _learner(system.outer, cfg.outer))


@functools.lru_cache(maxsize=4)
def record_order(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The records' order in `epoch` (a `loop.Order`): the recipe's own shuffle, kept from before the shared
    run loop so that a seed gives the same batches as it did."""
    order = list(range(n))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return tuple(order)


# --------------------------------------------------------------------------- losses
def inner_loss(system: RecursiveMAS, batch: Sequence[Record]) -> dict[str, torch.Tensor]:
    """Per role: mean over gold-text tokens of 1 - cos(inner(h_t), embedding of token t+1)."""
    losses = {}
    for role in system.pattern.roles:
        agent = system.agents[role]
        prompts = [split_prompt(agent.render(system.pattern.prompt(role, r.question,
                                                                    text_sources(system.pattern, role, r))),
                                agent.encode) for r in batch]
        targets = [agent.encode(r.field(system.pattern.gold[role])) for r in batch]
        with torch.no_grad(), system.precision():
            h, ids, mask = teacher_forced(agent.model, assemble(agent.model, prompts, [{}] * len(batch)), targets)
            goal = agent.model.get_input_embeddings()(ids)
        with system.precision():
            cos = torch.nn.functional.cosine_similarity(system.inner[role](h), goal, dim=-1)
        losses[role] = ((1 - cos) * mask).sum() / mask.sum()
    return losses


def outer_loss(system: RecursiveMAS, batch: Sequence[Record], rounds: int,
               earlier_round_weight: float = 0.0) -> tuple[torch.Tensor, list[float]]:
    """(loss, per-round CE): CE of the final agent's gold answer after each round's latents."""
    final = system.agents[system.pattern.final]
    targets = [final.encode(r.answer) + [final.tokenizer.eos_token_id] for r in batch]
    prompts = system.unroll([r.question for r in batch], rounds)
    with system.precision():
        ces = [answer_nll(final.model, p, targets) for p in (prompts if earlier_round_weight > 0 else prompts[-1:])]
    loss = ces[-1] + (earlier_round_weight * torch.stack(ces[:-1]).mean() if len(ces) > 1 else 0.0)
    return loss, [c.item() for c in ces]


# --------------------------------------------------------------------------- steps
def _apply(loss: torch.Tensor, learner: LinkLearner, params: list, max_norm: float) -> float:
    learner.opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    learner.opt.step()
    learner.sched.step()
    return float(norm)


def inner_step(state: TrainState, batch: Sequence[Record]) -> dict[str, float]:
    system = state.system
    system.inner.requires_grad_(True)
    losses = inner_loss(system, batch)
    loss = torch.stack(list(losses.values())).sum()
    norm = _apply(loss, state.inner, list(system.inner.parameters()), state.cfg.inner.max_grad_norm)
    return {"inner/loss": loss.item() / len(losses), "inner/grad_norm": norm,
            **{f"inner/loss_{r}": v.item() for r, v in losses.items()}}


def outer_step(state: TrainState, batch: Sequence[Record]) -> dict[str, float]:
    system, cfg = state.system, state.cfg
    system.inner.requires_grad_(False)  # frozen, but gradients still pass through them
    loss, ces = outer_loss(system, batch, cfg.rounds, cfg.outer.earlier_round_weight)
    norm = _apply(loss, state.outer, list(system.outer.parameters()), cfg.outer.max_grad_norm)
    return {"outer/loss": loss.item(), "outer/ce_last_round": ces[-1], "outer/grad_norm": norm}


STEPS: dict[str, Callable[[TrainState, Sequence[Record]], dict[str, float]]] = {
    "inner": inner_step, "outer": outer_step}


# --------------------------------------------------------------------------- driver
Evaluate = Callable[[TrainState], dict[str, float]]
OnStep = Callable[[dict[str, float], list[dict[str, float]]], None]


def train_links(state: TrainState, records: Sequence[Record], run: Run, trainer: dict[str, Any],
                evaluate: Evaluate | None = None, on_step: OnStep | None = None) -> dict[str, Any]:
    """Steps trainer["step"] + 1 .. inner.steps + outer.steps through `drive` (metrics.jsonl, TensorBoard,
    checkpoints every cfg.checkpoint_every_steps steps and at the last); `trainer` is a new run's
    `loop.new_state()` or what `restore` returned. `evaluate(state)` joins the metrics every
    cfg.eval_every_steps steps. Returns the final trainer state (its "metrics": one dict per step)."""
    cfg = state.cfg
    if not records:
        raise ValueError("RecursiveMAS training: no training records")

    def step_fn(step: int, batch: Sequence[Record]) -> dict[str, float]:
        t0 = time.perf_counter()
        metrics = {"step": step, **STEPS[state.phase(step)](state, batch), "time_s": time.perf_counter() - t0}
        if evaluate is not None and cfg.eval_every_steps and step % cfg.eval_every_steps == 0:
            metrics.update(evaluate(state))
        return metrics

    return drive(run, step_fn, records, state.agents(), trainer, steps=cfg.total_steps, tasks_per_step=cfg.batch_size,
                 seed=cfg.seed, checkpoint_every_steps=cfg.checkpoint_every_steps, on_step=on_step,
                 order=record_order)


def restore(state: TrainState, run: Run) -> dict[str, Any] | None:
    """The trainer state of `run`'s latest checkpoint, with links, optimisers, schedules and RNG restored
    in place; None when the run has no checkpoint."""
    return run.restore(state.agents())


def load_links(system: RecursiveMAS, run_dir: str | Path) -> bool:
    """The links of the latest checkpoint in `run_dir`/ckpt loaded into `system`; False when there is none."""
    path = latest_checkpoint(Path(run_dir) / "ckpt")
    if path is None:
        return False
    for name in PHASES:
        getattr(system, name).load_state_dict(torch.load(path / name / "model.pt", weights_only=True))
    return True
