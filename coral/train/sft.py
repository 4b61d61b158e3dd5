"""Supervised fine-tuning (cold start) of one policy on (chat prompt, completion) pairs.

Loss is the mean cross-entropy of completion tokens only (prompt tokens are context), with an
end-of-sequence token appended so the policy learns to stop. Data comes from the procedural family's
gold plans and codes (coral/corecode/data.py) or any JSONL of {"prompt"|"messages", "completion"}.
A crash-safe checkpoint holds the whole training state. This module does NOT sample or score anything,
and does NOT train several policies at once (train/sft_parallel.py does).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from coral.benchmarks.records import parse_jsonl
from coral.config import check_at_least
from coral.policy.base import Message, TrainablePolicy, user
from coral.terminal import Bar

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy


@dataclass(frozen=True)
class SFTExample:
    messages: tuple[Message, ...]
    completion: str


@dataclass(frozen=True)
class SFTConfig:
    epochs: float = 1.0  # passes over the examples (fractions allowed)
    batch_size: int = 16  # examples per optimiser step
    lr: float = 3e-3  # AdamW peak learning rate (linear warmup, then cosine to 0)
    weight_decay: float = 0.0  # AdamW weight decay
    warmup_steps: int = 20  # optimiser steps of linear learning-rate warmup
    max_grad_norm: float = 1.0  # gradient norm clip
    seed: int = 0  # data-order seed
    # batches of similar length when > 1 (1: plain shuffled batches). Each epoch's shuffled examples are cut into windows of
    # length_window x batch_size, sorted by length inside a window, cut into batches, and the epoch's
    # batches shuffled. 8 pads the demo's coder batches with 14% fewer tokens; its cold starts with 8 started
    # lower both times measured: held-out pass@1 0.556 against 0.798 (seed 0, 500 tasks; a plain cold start in
    # the earlier batch order reached 0.664), and at 2 epochs 0.105 against 0.160 on validation
    # (docs/results/efficacy.md, "The demo's time budget on a second CPU"): off by default.
    length_window: int = 1
    # forward under bfloat16 autocast: the forward runs under torch.autocast(bfloat16) (weights, optimiser state and
    # the loss stay float32). On a CPU with avx512_bf16 a tiny-model SFT step takes 9-24% less time.
    bf16: bool = False

    def __post_init__(self) -> None:
        check_at_least(self, 0, ("epochs", "lr", "max_grad_norm"), above=True)
        check_at_least(self, 1, ("batch_size",))
        if self.length_window < 1:
            raise ValueError(f"SFTConfig field 'length_window' must be >= 1, got {self.length_window}")
        check_at_least(self, 0, ("weight_decay", "warmup_steps", "seed"))


def code_block(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def load_sft_jsonl(path: str | Path) -> list[SFTExample]:
    """JSONL lines with "completion" and either "messages" (chat) or "prompt" (one user message)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SFT data file not found: {path}")
    out = []
    for index, rec in enumerate(parse_jsonl(path.read_text(), str(path)), 1):
        if not isinstance(rec.get("completion"), str):
            raise ValueError(f"{path}: record {index} needs a string field 'completion'")
        if "messages" in rec:
            messages = tuple(rec["messages"])
        elif isinstance(rec.get("prompt"), str):
            messages = user(rec["prompt"])
        else:
            raise ValueError(f"{path}: record {index} needs 'messages' or a string 'prompt'")
        out.append(SFTExample(messages, rec["completion"]))
    if not out:
        raise ValueError(f"{path}: no SFT records")
    return out


def tokenize_examples(policy: HFPolicy, examples: Sequence[SFTExample]) -> list[tuple[list[int], list[int]]]:
    eos = policy.tokenizer.eos_token_id
    return [(policy.encode(policy.render(ex.messages)), policy.encode(ex.completion) + [eos]) for ex in examples]


def sft_loss(policy: TrainablePolicy, batch: Sequence[tuple[list[int], list[int]]]) -> torch.Tensor:
    logprobs, mask = policy.forward([p for p, _ in batch], [c for _, c in batch])
    return -(logprobs * mask).sum() / mask.sum().clamp(min=1)


def train_sft(policy: HFPolicy, examples: Sequence[SFTExample], cfg: SFTConfig = SFTConfig(),
              log: Callable[[dict[str, float]], None] | None = None, progress: bool = True,
              checkpoint: str | Path | None = None, checkpoint_every: int = 50) -> list[float]:
    """Train `policy` in place; returns the loss of every step.

    With `checkpoint` (a file path), the whole training state (weights, optimiser, schedule, batch
    order, losses) is written there every `checkpoint_every` steps and at the end, and a run that finds
    the file resumes from it: a crash loses at most `checkpoint_every` steps, and the resumed run ends
    in the state the uninterrupted one would have reached. A file written for other data or settings
    is refused by name."""
    if not examples:
        raise ValueError("train_sft: no examples")
    if checkpoint_every < 1:
        raise ValueError(f"train_sft: checkpoint_every must be >= 1, got {checkpoint_every}")
    data = tokenize_examples(policy, examples)
    lengths = [len(p) + len(c) for p, c in data]
    plan = batch_plan(lengths, cfg)
    total = len(plan)
    params = [p for p in policy.parameters() if p.requires_grad]
    if not params:
        raise ValueError("train_sft: the policy has no trainable parameters")
    device = params[0].device
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps))
                                              * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    losses: list[float] = []
    # what a checkpoint must match to be resumed; the examples are hashed only when there is a checkpoint
    run_id = {"config": repr(cfg), "examples": _fingerprint(data), "total": total} if checkpoint is not None else {}
    start = 0
    if checkpoint is not None and Path(checkpoint).is_file():
        start, losses = _load_sft_state(Path(checkpoint), run_id, policy, opt, sched)
        if log is not None:
            log({"sft/resumed_at": start, **({"sft/loss": losses[-1]} if losses else {})})
    policy.train()
    bar = ProgressBar(progress, total, "sft", done=start)
    for step in range(start, total):
        batch = [data[i] for i in plan[step]]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            loss = sft_loss(policy, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log is not None:
            log({"sft/step": step, "sft/loss": losses[-1], "sft/lr": float(sched.get_last_lr()[0])})
        bar(losses[-1])
        if checkpoint is not None and (step + 1 == total or (step + 1) % checkpoint_every == 0):
            _save_sft_state(Path(checkpoint), run_id, step + 1, losses, policy, opt, sched)
    bar.close()
    policy.eval()
    return losses


def _fingerprint(data: Sequence[tuple[list[int], list[int]]]) -> str:
    digest = hashlib.sha256()
    for prompt, completion in data:
        digest.update(repr((prompt, completion)).encode())
    return digest.hexdigest()


def _save_sft_state(path: Path, run_id: dict, step: int, losses: list[float], policy: HFPolicy, opt: Any,
                    sched: Any) -> None:
    """Written to a temporary name and renamed, so a crash mid-save leaves the previous state (the name
    holds the pid: a trainer orphaned by a killed run cannot clobber the file its successor writes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    # only what training changes: a LoRA run's frozen base weights are not copied every 50 steps
    trained = {name: p.detach() for name, p in policy.model.named_parameters() if p.requires_grad}
    torch.save({"run": run_id, "step": step, "losses": losses, "trained": trained, "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict()}, tmp)
    tmp.replace(path)


def _load_sft_state(path: Path, run_id: dict, policy: HFPolicy, opt: Any, sched: Any) -> tuple[int, list[float]]:
    state = torch.load(path, weights_only=False)
    for key in ("config", "examples", "total"):
        if state.get("run", {}).get(key) != run_id[key]:
            what = {"config": "SFT settings", "examples": "examples", "total": "number of steps"}[key]
            raise ValueError(f"SFT checkpoint {path} was written by a run with other {what}; "
                             "delete it to start this SFT over")
    trainable = {name for name, p in policy.model.named_parameters() if p.requires_grad}
    if set(state["trained"]) != trainable:
        raise ValueError(f"SFT checkpoint {path} holds other trainable parameters than this policy's; "
                         "delete it to start this SFT over")
    policy.model.load_state_dict(state["trained"], strict=False)
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    return state["step"], list(state["losses"])


def total_steps(n_examples: int, cfg: SFTConfig) -> int:
    """Optimiser steps of an SFT run: ceil(N / batch_size) per epoch, times epochs, at least 1."""
    return max(1, int(math.ceil(n_examples / cfg.batch_size) * cfg.epochs))


def batch_plan(lengths: Sequence[int], cfg: SFTConfig) -> list[list[int]]:
    """Every step's batch (indices into the examples), in training order: ceil(N / batch_size) x epochs
    steps drawn from seeded per-epoch orders (`epoch_batches`, last batch first). A resumed run and the
    thread schedule of parallel trainers read the same plan."""
    if not lengths:
        raise ValueError("batch_plan: no examples")
    rng = random.Random(cfg.seed)
    total = total_steps(len(lengths), cfg)
    plan: list[list[int]] = []
    batches: list[list[int]] = []
    while len(plan) < total:
        if not batches:
            batches = epoch_batches(lengths, cfg.batch_size, cfg.length_window, rng)
        plan.append(batches.pop())
    return plan


def epoch_batches(lengths: Sequence[int], batch_size: int, window: int, rng: random.Random) -> list[list[int]]:
    """One epoch of batches (indices into `lengths`), every example once; see SFTConfig.length_window."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches = []
    for start in range(0, len(order), batch_size * window):
        chunk = sorted(order[start:start + batch_size * window], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


class ProgressBar:
    """One SFT run's progress row (steps, running loss, elapsed, ETA); does nothing when disabled."""

    def __init__(self, enabled: bool, total: int, name: str, done: int = 0):
        self.bar = Bar(enabled, {"loss": "loss {:.3f}"})
        self.row = self.bar.row(name, total, done)

    def __call__(self, loss: float) -> None:
        self.bar.advance(self.row, loss=loss)

    def close(self) -> None:
        self.bar.close()
