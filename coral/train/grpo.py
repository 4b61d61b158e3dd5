"""Multi-agent GRPO: each agent has its own policy, optimiser and step counter, and updates only on
its own turns, with advantages computed inside groups given by a declared key function.

The step is: rollout (a workflow) -> rewards (the recipe, e.g. corecode.py) -> `assign_advantages`
-> `AgentLearner.update` per agent -> log. This module does NOT roll out or score; it turns scored
turns into parameter updates.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from coral.train.advantages import ADVANTAGES, group_ids
from coral.train.losses import LossConfig, policy_loss
from coral.trajectory import Turn

GroupKey = Callable[[Turn], Hashable]


def assign_advantages(turns: Sequence[Turn], key: GroupKey, estimator: str = "grpo") -> None:
    """Set `turn.advantage` from `turn.reward` within groups of equal `key(turn)`.

    Every turn must carry a reward: a missing one is an error, never a silent zero.
    """
    if not turns:
        return
    if estimator not in ADVANTAGES:
        raise ValueError(f"unknown advantage estimator {estimator!r}; known: {sorted(ADVANTAGES)}")
    missing = [t for t in turns if t.reward is None]
    if missing:
        t = missing[0]
        raise ValueError(f"{len(missing)} turns have no reward (first: agent {t.agent!r}, "
                         f"task {t.metadata.get('task_id')!r})")
    rewards = torch.tensor([float(t.reward) for t in turns], dtype=torch.float32)
    adv = ADVANTAGES[estimator](rewards, group_ids([key(t) for t in turns]))
    for t, a in zip(turns, adv.tolist(), strict=True):
        t.advantage = a


OPTIMIZERS: dict[str, Callable[[list[torch.nn.Parameter], float], torch.optim.Optimizer]] = {
    "adamw": lambda params, lr: torch.optim.AdamW(params, lr=lr, weight_decay=0.0),
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),
}


@dataclass(frozen=True)
class GRPOConfig:
    lr: float = 1e-3  # optimiser learning rate
    micro_batch_size: int = 32  # turns per forward/backward pass (gradients accumulate over the batch)
    max_grad_norm: float = 1.0  # gradient norm clip per optimiser step
    advantage: str = "grpo"  # advantage estimator: grpo, dr_grpo, rloo, reinforce_pp_baseline
    loss: LossConfig = field(default_factory=LossConfig)  # the policy-gradient loss
    skip_zero_advantage: bool = True  # zero-advantage turns give zero policy gradient (no KL term)
    temperature: float = 1.0  # the sampling temperature: trainer logprobs must be of the sampled distribution
    # "sgd": plain SGD (step = -lr x gradient), so parameters with small gradients barely move; AdamW's
    # first steps move every parameter by about lr whatever its gradient's size
    optimizer: str = "adamw"
    # optimiser steps on each batch of turns (PPO epochs; TRL's num_iterations). Steps after the first
    # are off-policy: the ratio to the sampling logprobs is no longer 1, and the clip bounds the change
    updates_per_batch: int = 1

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"GRPOConfig.optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.updates_per_batch < 1:
            raise ValueError(f"GRPOConfig.updates_per_batch must be >= 1, got {self.updates_per_batch}")


@dataclass
class AgentLearner:
    """One trainable agent: its policy, optimiser and counters. `frozen` agents act but never update."""

    name: str
    policy: Any
    cfg: GRPOConfig
    frozen: bool = False
    reference: Any = None  # a frozen copy for the KL term, when cfg.loss.beta_kl > 0
    step: int = 0
    optimizer: torch.optim.Optimizer | None = None

    def __post_init__(self) -> None:
        if not self.frozen and self.optimizer is None:
            params = [p for p in self.policy.parameters() if p.requires_grad]
            if not params:
                raise ValueError(f"agent {self.name!r} has no trainable parameters; pass frozen=True")
            self.optimizer = OPTIMIZERS[self.cfg.optimizer](params, self.cfg.lr)
        if self.cfg.loss.beta_kl > 0 and self.reference is None and not self.frozen:
            raise ValueError(f"agent {self.name!r}: beta_kl > 0 needs a reference policy")

    def update(self, turns: Sequence[Turn]) -> dict[str, float]:
        """`cfg.updates_per_batch` optimiser steps on `turns` (all must be this agent's and carry an
        advantage). Logged losses, ratios and clip fractions are the mean over those steps, `loss_first`
        the first (on-policy) step's loss; `step` counts calls, not optimiser steps."""
        if self.frozen:
            return {}
        foreign = [t.agent for t in turns if t.agent != self.name]
        if foreign:
            raise ValueError(f"agent {self.name!r} was given turns of {sorted(set(foreign))}")
        if any(t.advantage is None for t in turns):
            raise ValueError(f"agent {self.name!r}: some turns have no advantage")
        usable = [t for t in turns if t.completion_ids and len(t.logprobs) == len(t.completion_ids)]
        if len(usable) < len(turns):
            raise ValueError(f"agent {self.name!r}: {len(turns) - len(usable)} turns lack token ids/logprobs "
                             "(a policy without logprobs cannot be trained)")
        if self.cfg.skip_zero_advantage and self.cfg.loss.beta_kl == 0:
            usable = [t for t in usable if t.advantage != 0.0]
        metrics = {"turns": float(len(turns)), "trained_turns": float(len(usable))}
        if not usable:
            return metrics
        self.policy.train()
        total_tokens = sum(len(t.completion_ids) for t in usable)
        params = [p for p in self.policy.parameters() if p.requires_grad]
        passes = self.cfg.updates_per_batch
        sums: dict[str, float] = {}
        for n in range(passes):
            step_sums: dict[str, float] = {}
            for lo in range(0, len(usable), self.cfg.micro_batch_size):
                micro = usable[lo:lo + self.cfg.micro_batch_size]
                loss, m = self._micro_loss(micro)
                tokens = sum(len(t.completion_ids) for t in micro)
                weight = tokens / total_tokens if self.cfg.loss.norm == "token" else len(micro) / len(usable)
                (loss * weight).backward()
                for k, v in m.items():  # m["loss"] is this micro-batch's loss: its weighted sum is the step's
                    step_sums[k] = step_sums.get(k, 0.0) + float(v) * weight
            step_sums["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            if n == 0 and passes > 1:
                metrics["loss_first"] = step_sums["loss"]
            for k, v in step_sums.items():
                sums[k] = sums.get(k, 0.0) + v / passes
        self.policy.eval()
        self.step += 1
        metrics.update(sums)
        return metrics

    def _micro_loss(self, micro: Sequence[Turn]) -> tuple[torch.Tensor, dict[str, float]]:
        prompts = [t.prompt_ids for t in micro]
        completions = [t.completion_ids for t in micro]
        logprobs, mask = self.policy.forward(prompts, completions, temperature=self.cfg.temperature)
        old = torch.zeros_like(logprobs)
        for i, t in enumerate(micro):
            old[i, : len(t.logprobs)] = torch.tensor(t.logprobs, dtype=logprobs.dtype)
        ref = None
        if self.cfg.loss.beta_kl > 0:
            with torch.no_grad():
                ref, _ = self.reference.forward(prompts, completions, temperature=self.cfg.temperature)
        adv = torch.tensor([float(t.advantage) for t in micro], dtype=logprobs.dtype)
        return policy_loss(self.cfg.loss, logprobs, old.detach(), adv, mask, ref_logprobs=ref)

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "optimizer": self.optimizer.state_dict() if self.optimizer else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        if self.optimizer is not None and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])


def unique_turns(turn_lists: Sequence[Sequence[Turn]]) -> list[Turn]:
    """Turns shared between trajectories (one plan, many codes) counted once, in first-seen order."""
    seen: set[int] = set()
    out = []
    for turns in turn_lists:
        for t in turns:
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
    return out
