"""RecursiveMAS link training: the inner loop, then the outer loop; the language models stay frozen.

Inner loop (each agent alone): teacher-force the role's gold text after its text prompt and train the
inner link so inner(h_t) points at the input embedding of token t+1: loss = mean(1 - cos). The LM
runs under no_grad here (the inner link sits after it: no gradient has to cross it).
Outer loop (the whole system): inner links frozen (requires_grad False, still differentiable), all R
rounds unrolled with gradients, loss = cross-entropy of the final agent's gold answer (teacher forced)
in the last round + `earlier_round_weight` x the mean of the same loss in earlier rounds. One set of
outer links serves every round, so round 1's links get gradient through rounds 2..R.

Shape for the shared run loop: a frozen config, a `TrainState`, step functions
`inner_step(state, batch) -> metrics` and `outer_step(state, batch) -> metrics`, `batch_at(step)`
(the data cursor is a pure function of the step, so resuming needs no cursor), and a checkpoint
written to a temporary file and renamed (`save_state` / `load_state`). `train_recursivemas` is the
thin driver. This module does NOT evaluate (evaluate.py) or build agents (agents.py).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from coral.latent.agents import text_sources
from coral.latent.data import Record
from coral.latent.links import LINK_INITS
from coral.latent.rollout import answer_nll, assemble, split_prompt, teacher_forced
from coral.latent.system import RecursiveMAS

STATE_FILE = "state.pt"


@dataclass(frozen=True)
class RecursiveMASConfig:
    pattern: str = "sequential"  # collaboration pattern: sequential, mixture, distillation, deliberation
    rounds: int = 3  # recursion rounds R (the last agent feeds its latents back to the first)
    latent_steps: int = 8  # latent thoughts m each agent appends per round
    data: str = "procedural"  # or a JSONL path of question / plan / refined_plan / answer records
    n_train_tasks: int = 64  # procedural training tasks (records) for the links
    n_test_tasks: int = 32  # held-out procedural tasks evaluated before and after training
    max_depth: int = 2  # deepest composition of the procedural tasks
    seed: int = 0  # base seed of the models, data and batches
    # tiny agents, one per role: widths cycle over the roles (different hidden sizes are allowed)
    agent_widths: tuple[int, ...] = (64, 96, 64)
    n_layers: int = 2  # layers of each tiny agent
    vocab_size: int = 512  # size of the tiny agents' locally trained tokenizer
    max_len: int = 2048  # longest sequence a tiny agent accepts, in tokens
    sft_epochs: float = 0.0  # cold start of each agent on its role's text before it is frozen (0: none)
    sft_lr: float = 3e-3  # learning rate of the agents' cold start
    inner_steps: int = 100  # inner-loop steps (each inner link regresses next-token embeddings)
    outer_steps: int = 100  # outer-loop steps (all rounds unrolled, CE on the final answer)
    batch_size: int = 8  # records per step
    inner_lr: float = 1e-3  # learning rate of the inner links
    outer_lr: float = 1e-3  # learning rate of the outer links
    weight_decay: float = 0.0  # AdamW weight decay of the links
    warmup_steps: int = 10  # linear warm-up before the cosine schedule, in steps
    max_grad_norm: float = 1.0  # gradient norm clip per step
    earlier_round_weight: float = 0.0  # loss weight of the final agent's answer in earlier rounds
    # recompute each unrolled (round, agent) latent rollout in backward instead of keeping its activations
    gradient_checkpointing: bool = False
    # link initialisation: aligned (outer links start as the ridge map between the agents' token
    # embeddings; one vocabulary), scaled (latents at token-embedding norm), random (PyTorch defaults)
    link_init: str = "aligned"
    max_new_tokens: int = 160  # longest decoded answer, in tokens
    out_dir: str = "runs/recursivemas"  # run directory: state.pt, metrics, evaluations
    checkpoint_every: int = 50  # steps between checkpoints
    eval_every: int = 0  # 0: evaluate only before and after training
    # "local", "auto" or a Ray address: text decoding and judging on Ray actors (coral.scale); None: no Ray
    ray_address: str | None = None

    def __post_init__(self) -> None:
        for name in ("rounds", "latent_steps", "n_train_tasks", "batch_size", "n_layers", "max_new_tokens",
                     "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"RecursiveMASConfig field {name!r} must be >= 1, got {getattr(self, name)}")
        for name in ("inner_steps", "outer_steps", "n_test_tasks", "warmup_steps", "eval_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"RecursiveMASConfig field {name!r} must be >= 0, got {getattr(self, name)}")
        if self.inner_lr <= 0 or self.outer_lr <= 0 or self.max_grad_norm <= 0:
            raise ValueError("RecursiveMASConfig fields 'inner_lr', 'outer_lr', 'max_grad_norm' must be > 0")
        if not self.agent_widths or any(w < 4 or w % 4 for w in self.agent_widths):
            raise ValueError(f"RecursiveMASConfig field 'agent_widths': each must be a multiple of 4 (heads), "
                             f"got {self.agent_widths}")
        if self.link_init not in LINK_INITS:
            raise ValueError(f"RecursiveMASConfig field 'link_init' must be one of {LINK_INITS}, got {self.link_init!r}")
        if self.earlier_round_weight < 0:
            raise ValueError(f"RecursiveMASConfig field 'earlier_round_weight' must be >= 0, "
                             f"got {self.earlier_round_weight}")


@dataclass
class TrainState:
    cfg: RecursiveMASConfig
    system: RecursiveMAS
    records: Sequence[Record]
    inner_opt: torch.optim.Optimizer
    outer_opt: torch.optim.Optimizer
    inner_sched: Any
    outer_sched: Any
    step: int = 0  # global: steps [0, inner_steps) are the inner loop, then the outer loop
    metrics: list[dict[str, float]] = field(default_factory=list)

    @property
    def phase(self) -> str:
        return "inner" if self.step < self.cfg.inner_steps else "outer"


def _schedule(opt: torch.optim.Optimizer, warmup: int, total: int) -> Any:
    """Linear warm-up, then cosine decay to 0 at `total`."""
    def factor(s: int) -> float:
        return min(1.0, (s + 1) / max(1, warmup)) * 0.5 * (1 + math.cos(math.pi * min(s, total) / max(1, total)))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def new_state(cfg: RecursiveMASConfig, system: RecursiveMAS, records: Sequence[Record]) -> TrainState:
    if not records:
        raise ValueError("RecursiveMAS training: no training records")
    inner_opt = torch.optim.AdamW(system.inner.parameters(), lr=cfg.inner_lr, weight_decay=cfg.weight_decay)
    outer_opt = torch.optim.AdamW(system.outer.parameters(), lr=cfg.outer_lr, weight_decay=cfg.weight_decay)
    return TrainState(cfg, system, records, inner_opt, outer_opt,
                      _schedule(inner_opt, cfg.warmup_steps, cfg.inner_steps),
                      _schedule(outer_opt, cfg.warmup_steps, cfg.outer_steps))


def batch_at(cfg: RecursiveMASConfig, records: Sequence[Record], step: int) -> list[Record]:
    """The batch of global step `step`: records in an order reshuffled every epoch from the seed."""
    n = len(records)
    out = []
    for k in range(step * cfg.batch_size, (step + 1) * cfg.batch_size):
        epoch, pos = divmod(k, n)
        order = list(range(n))
        random.Random(f"{cfg.seed}:{epoch}").shuffle(order)
        out.append(records[order[pos]])
    return out


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
        with torch.no_grad():
            h, ids, mask = teacher_forced(agent.model, assemble(agent.model, prompts, [{}] * len(batch)), targets)
            goal = agent.model.get_input_embeddings()(ids)
        cos = torch.nn.functional.cosine_similarity(system.inner[role](h), goal, dim=-1)
        losses[role] = ((1 - cos) * mask).sum() / mask.sum()
    return losses


def outer_loss(system: RecursiveMAS, batch: Sequence[Record], rounds: int,
               earlier_round_weight: float = 0.0) -> tuple[torch.Tensor, list[float]]:
    """(loss, per-round CE): CE of the final agent's gold answer after each round's latents."""
    final = system.agents[system.pattern.final]
    targets = [final.encode(r.answer) + [final.tokenizer.eos_token_id] for r in batch]
    prompts = system.unroll([r.question for r in batch], rounds)
    ces = [answer_nll(final.model, p, targets) for p in (prompts if earlier_round_weight > 0 else prompts[-1:])]
    loss = ces[-1] + (earlier_round_weight * torch.stack(ces[:-1]).mean() if len(ces) > 1 else 0.0)
    return loss, [c.item() for c in ces]


# --------------------------------------------------------------------------- steps
def _apply(loss: torch.Tensor, opt: torch.optim.Optimizer, sched: Any, params: list, max_norm: float) -> float:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    sched.step()
    return float(norm)


def inner_step(state: TrainState, batch: Sequence[Record]) -> dict[str, float]:
    system = state.system
    system.inner.requires_grad_(True)
    losses = inner_loss(system, batch)
    loss = torch.stack(list(losses.values())).sum()
    norm = _apply(loss, state.inner_opt, state.inner_sched, list(system.inner.parameters()), state.cfg.max_grad_norm)
    return {"inner/loss": loss.item() / len(losses), "inner/grad_norm": norm,
            **{f"inner/loss_{r}": v.item() for r, v in losses.items()}}


def outer_step(state: TrainState, batch: Sequence[Record]) -> dict[str, float]:
    system, cfg = state.system, state.cfg
    system.inner.requires_grad_(False)  # frozen, but gradients still pass through them
    loss, ces = outer_loss(system, batch, cfg.rounds, cfg.earlier_round_weight)
    norm = _apply(loss, state.outer_opt, state.outer_sched, list(system.outer.parameters()), cfg.max_grad_norm)
    return {"outer/loss": loss.item(), "outer/ce_last_round": ces[-1], "outer/grad_norm": norm}


STEPS: dict[str, Callable[[TrainState, Sequence[Record]], dict[str, float]]] = {
    "inner": inner_step, "outer": outer_step}


# --------------------------------------------------------------------------- checkpoints
def save_state(state: TrainState, out_dir: str | Path) -> Path:
    """Links, optimisers, schedules, step, metrics and RNG to out_dir/state.pt, atomically."""
    from coral.train.checkpoints import rng_state

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    blob = {"config": asdict(state.cfg), "step": state.step, "metrics": state.metrics,
            "links": state.system.state_dict(), "rng": rng_state(),
            **{k: getattr(state, k).state_dict() for k in ("inner_opt", "outer_opt", "inner_sched", "outer_sched")}}
    tmp = out / f".{STATE_FILE}.tmp"
    torch.save(blob, tmp)
    os.replace(tmp, out / STATE_FILE)  # a crash mid-save leaves the previous state intact
    return out / STATE_FILE


def load_state(state: TrainState, out_dir: str | Path) -> bool:
    """Restore `state` from out_dir/state.pt when there is one; refuse one written by another config."""
    from coral.train.checkpoints import set_rng_state

    path = Path(out_dir) / STATE_FILE
    if not path.is_file():
        return False
    blob = torch.load(path, weights_only=False)
    mine = json.loads(json.dumps(asdict(state.cfg)))
    theirs = json.loads(json.dumps(blob["config"]))
    # fields that may change on resume: where and how often to log, and how long to train (a longer run
    # keeps the restored schedules' state, so its cosine tail follows the new length from there on)
    free = ("out_dir", "inner_steps", "outer_steps", "eval_every", "checkpoint_every", "max_new_tokens", "ray_address")
    diff = sorted(k for k in mine if k not in free and mine[k] != theirs.get(k))
    if diff:
        raise ValueError(f"{path}: written with another config (field {diff[0]!r}: {theirs.get(diff[0])!r} "
                         f"vs {mine[diff[0]]!r}); use another out_dir")
    state.system.load_state_dict(blob["links"])
    for k in ("inner_opt", "outer_opt", "inner_sched", "outer_sched"):
        getattr(state, k).load_state_dict(blob[k])
    state.step, state.metrics = blob["step"], blob["metrics"]
    set_rng_state(blob["rng"])
    return True


# --------------------------------------------------------------------------- driver
def run_steps(state: TrainState, until: int, log: Callable[[dict[str, float]], None] | None = None,
              evaluate: Callable[[TrainState], dict[str, float]] | None = None) -> TrainState:
    """Run global steps state.step .. until-1, checkpointing every cfg.checkpoint_every steps."""
    cfg = state.cfg
    while state.step < until:
        t0 = time.perf_counter()
        metrics = STEPS[state.phase](state, batch_at(cfg, state.records, state.step))
        metrics = {"step": state.step, **metrics, "time_s": time.perf_counter() - t0}
        state.step += 1
        if evaluate is not None and cfg.eval_every and state.step % cfg.eval_every == 0:
            metrics.update(evaluate(state))
        state.metrics.append(metrics)
        if log is not None:
            log(metrics)
        if state.step % cfg.checkpoint_every == 0 or state.step == until:
            save_state(state, cfg.out_dir)
    return state
