"""Multi-agent GRPO: each agent has its own policy, optimiser and step counter, and updates only on
its own turns, with advantages computed inside groups given by a declared key function.

The step is: rollout (a workflow) -> rewards (the recipe, e.g. corecode.py) -> `assign_advantages`
-> `AgentLearner.update` per agent -> log. This module does NOT roll out or score; it turns scored
turns into parameter updates.

Old policy of the PPO ratio. By default the sampler is taken to be the trainer (HFPolicy sampling with
the weights being trained), so each turn's logprobs are the old policy's. When the sampler differs from
the trainer (vLLM, an OpenAI-compatible server, a stale copy, or HFPolicy's own bfloat16 rollouts under
a float32 or autocast trainer), set `LossConfig.tis_cap`: the turns' logprobs are then the sampler's, the
old policy is the trainer's own logprobs before the batch's first step (with one step per batch, the
first step's own forward, detached: no extra pass), and the loss is weighted by
w = min(exp(old - sampler), tis_cap) per token (truncated importance sampling).
Either way each update logs `logp_mismatch`, the token mean of |sampler logprob - trainer logprob| at the
batch's first step (the gap TIS corrects), and with TIS `tis_capped_fraction`, the share of tokens whose
weight the cap clipped.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from coral.policy.base import TrainablePolicy
from coral.policy.hf import HFPolicy
from coral.train.advantages import ADVANTAGES, group_ids
from coral.train.losses import LossConfig, kl_k3, policy_loss
from coral.train.sft import SFTConfig
from coral.trajectory import Turn

GroupKey = Callable[[Turn], Hashable]


def required(value: float | None, what: str) -> float:
    """A turn's reward or advantage as a float, for code past the point where every turn has one; a turn
    without it is a TypeError, as float(None) was."""
    if value is None:
        raise TypeError(f"a turn has no {what}")
    return float(value)


def assign_advantages(turns: Sequence[Turn], key: GroupKey, estimator: str = "grpo") -> None:
    """Set `turn.advantage` from `turn.reward` within groups of equal `key(turn)`.

    Batch statistics (REINFORCE++-baseline's whitening) are taken per agent (`turn.agent`), never over
    several agents' turns pooled: each agent's update sees the advantages it would get trained alone.
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
                         f"task {t.credit.task_id if t.credit else None!r})")
    rewards = torch.tensor([required(t.reward, "reward") for t in turns], dtype=torch.float32)
    adv = ADVANTAGES[estimator](rewards, group_ids([key(t) for t in turns]), scopes=[t.agent for t in turns])
    for t, a in zip(turns, adv.tolist(), strict=True):
        t.advantage = a


def reward_spread(groups: Iterable[Sequence[float]]) -> dict[str, float]:
    """One step's groups, for the analysis of what RL could learn: the mean within-group reward standard
    deviation (population) and the share of groups whose rewards are all equal, whose samples get a zero
    group-relative advantage (no learning signal). Empty when there is no group."""
    stds, flat = [], 0
    for rewards in groups:
        r = torch.tensor([float(x) for x in rewards], dtype=torch.float64)
        stds.append(float(r.std(unbiased=False)) if len(r) > 1 else 0.0)
        flat += bool(r.max() - r.min() <= 1e-12)
    return {"group_reward_std": sum(stds) / len(stds), "zero_variance_groups": flat / len(stds)} if stds else {}


def grouped_rewards(turns: Sequence[Turn], key: GroupKey) -> list[list[float]]:
    """The rewards of `turns` in their groups of equal `key(turn)`, in first-seen order."""
    groups: dict[Any, list[float]] = {}
    for t in turns:
        groups.setdefault(key(t), []).append(required(t.reward, "reward"))
    return list(groups.values())


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
    # zero-advantage turns add zero loss (without a KL term): skip their forward; they still count
    # in the normaliser, so the step is the same as without skipping
    skip_zero_advantage: bool = True  # skip the forward of zero-advantage turns (same update)
    temperature: float = 1.0  # the sampling temperature: trainer logprobs must be of the sampled distribution
    # "sgd": plain SGD (step = -lr x gradient), so parameters with small gradients barely move; AdamW's
    # first steps move every parameter by about lr whatever its gradient's size
    optimizer: str = "adamw"
    # optimiser steps on each batch of turns (PPO epochs; TRL's num_iterations). Steps after the first
    # are off-policy: the ratio to the sampling logprobs is no longer 1, and the clip bounds the change
    updates_per_batch: int = 1
    # keep a frozen copy of the cold start (the recipe's reference) and log `kl_ref` each step: the token
    # mean k3 estimate of KL(sampler || cold start) over the step's sampled turns, one extra no-grad
    # forward of the reference. For the analysis of what RL changed; it never enters the loss
    log_kl: bool = False

    def __post_init__(self) -> None:
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"GRPOConfig.advantage must be one of {sorted(ADVANTAGES)}, got {self.advantage!r}")
        for name in ("micro_batch_size", "lr", "max_grad_norm", "temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"GRPOConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"GRPOConfig.optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.updates_per_batch < 1:
            raise ValueError(f"GRPOConfig.updates_per_batch must be >= 1, got {self.updates_per_batch}")


def check_recipe_owned(sft: SFTConfig, rl: GRPOConfig, advantage_used: bool = True) -> None:
    """Refuse nested knobs that a recipe sets itself, rather than ignore them: sft.seed (from the recipe's
    seed) and, where the recipe computes its own advantages, rl.advantage."""
    if sft.seed != SFTConfig().seed:
        raise ValueError(f"field 'sft.seed' is set from the recipe's 'seed'; set seed instead (got {sft.seed})")
    if advantage_used and rl.advantage not in ADVANTAGES:
        raise ValueError(f"field 'rl.advantage': {rl.advantage!r} is not one of {sorted(ADVANTAGES)}")
    if not advantage_used and rl.advantage != GRPOConfig().advantage:
        raise ValueError("field 'rl.advantage' is not used by this recipe (its advantages come from its own "
                         f"reward shaping); got {rl.advantage!r}")


@dataclass
class AgentLearner:
    """One trainable agent: its policy, optimiser and counters. `frozen` agents act but never update."""

    name: str
    policy: TrainablePolicy
    cfg: GRPOConfig
    frozen: bool = False
    # a frozen copy for the KL term (cfg.loss.beta_kl > 0) or the logged KL (cfg.log_kl)
    reference: TrainablePolicy | None = None
    step: int = 0
    optimizer: torch.optim.Optimizer | None = None

    def __post_init__(self) -> None:
        if not self.frozen and self.optimizer is None:
            params = [p for p in self.policy.parameters() if p.requires_grad]
            if not params:
                raise ValueError(f"agent {self.name!r} has no trainable parameters; pass frozen=True")
            self.optimizer = OPTIMIZERS[self.cfg.optimizer](params, self.cfg.lr)
        if (self.cfg.loss.beta_kl > 0 or self.cfg.log_kl) and self.reference is None and not self.frozen:
            raise ValueError(f"agent {self.name!r}: beta_kl > 0 and log_kl need a reference policy")

    def update(self, turns: Sequence[Turn]) -> dict[str, float]:
        """`cfg.updates_per_batch` optimiser steps on `turns` (all must be this agent's and carry an
        advantage). Logged `loss` / `policy_loss` are the batch objective, ratios, clip fractions, KL and
        TIS weights the token (or sequence) means over the trained turns, each a mean over the steps;
        `loss_first` is the first (on-policy) step's loss; `step` counts calls, not optimiser steps.

        Zero-advantage turns (when `skip_zero_advantage` and no KL term) are not run through the model,
        but they still count in the loss normaliser, as in verl and TRL: they add exactly zero loss, so
        skipping them saves work without scaling the step by how many groups tied."""
        if self.frozen:
            return {}
        self._check_turns(turns)
        trained = list(turns)
        if self.cfg.skip_zero_advantage and self.cfg.loss.beta_kl == 0:
            trained = [t for t in turns if t.advantage != 0.0]
        metrics = {"turns": float(len(turns)), "trained_turns": float(len(trained)), "entropy": _sampled_entropy(turns)}
        if self.cfg.log_kl:
            metrics["kl_ref"] = self._sampler_kl(turns)
        if not trained:
            return metrics
        self.policy.train()
        try:
            passes = self.cfg.updates_per_batch
            # the trainer's old logprobs: a pass of their own only when later steps need them unchanged
            old = self._trainer_old_logprobs(trained) if self.cfg.loss.tis_cap is not None and passes > 1 else None
            for n in range(passes):
                step = self._optimizer_step(trained, self._size(turns), old, first=n == 0)
                if n == 0:
                    metrics["logp_mismatch"] = step.pop("logp_mismatch")
                    if passes > 1:
                        metrics["loss_first"] = step["loss"]
                for k, v in step.items():
                    metrics[k] = metrics.get(k, 0.0) + v / passes
        finally:
            self.policy.eval()
        self.step += 1
        return metrics

    def _check_turns(self, turns: Sequence[Turn]) -> None:
        foreign = [t.agent for t in turns if t.agent != self.name]
        if foreign:
            raise ValueError(f"agent {self.name!r} was given turns of {sorted(set(foreign))}")
        if any(t.advantage is None for t in turns):
            raise ValueError(f"agent {self.name!r}: some turns have no advantage")
        bad = sum(not t.completion_ids or len(t.logprobs) != len(t.completion_ids) for t in turns)
        if bad:
            raise ValueError(f"agent {self.name!r}: {bad} turns lack token ids/logprobs "
                             "(a policy without logprobs cannot be trained)")

    def _size(self, turns: Sequence[Turn]) -> int:
        """What the loss normalises by: tokens (norm="token"), else sequences (constant: x max_tokens,
        which `policy_loss` applies per micro-batch)."""
        return sum(len(t.completion_ids) for t in turns) if self.cfg.loss.norm == "token" else len(turns)

    def _optimizer_step(self, trained: Sequence[Turn], normaliser: int,
                        old: list[list[float]] | None, first: bool = True) -> dict[str, float]:
        """Gradients of every micro-batch, accumulated with weights that add up to the batch objective,
        then one clipped optimiser step. Returns this step's metrics (`logp_mismatch` on the `first`)."""
        assert self.optimizer is not None, "a frozen agent takes no optimiser step"
        params = [p for p in self.policy.parameters() if p.requires_grad]
        share = self._size(trained)
        sums: dict[str, float] = {}
        for lo in range(0, len(trained), self.cfg.micro_batch_size):
            micro = trained[lo:lo + self.cfg.micro_batch_size]
            loss, m = self._micro_loss(micro, None if old is None else old[lo:lo + len(micro)], first)
            size = self._size(micro)
            (loss * (size / normaliser)).backward()
            for k, v in m.items():
                # the objective's terms weigh by the whole batch; diagnostics by the trained turns
                weight = size / normaliser if k in ("loss", "policy_loss") else size / share
                sums[k] = sums.get(k, 0.0) + float(v) * weight
        sums["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
        if not math.isfinite(sums["grad_norm"]):  # one NaN step would silently ruin every weight
            self.optimizer.zero_grad(set_to_none=True)
            raise RuntimeError(f"agent {self.name!r}: non-finite gradient norm {sums['grad_norm']} at step "
                               f"{self.step} (loss {sums.get('loss')}); the weights were not changed")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sums

    def _trainer_old_logprobs(self, trained: Sequence[Turn]) -> list[list[float]]:
        """The trainer's own logprobs of each completion before this batch's first step: the old policy
        of the PPO ratio when the turns' logprobs are a different sampler's (truncated IS)."""
        out: list[list[float]] = []
        with torch.no_grad():
            for lo in range(0, len(trained), self.cfg.micro_batch_size):
                micro = trained[lo:lo + self.cfg.micro_batch_size]
                logprobs, _ = self.policy.forward([t.prompt_ids for t in micro], [t.completion_ids for t in micro],
                                                  temperature=self.cfg.temperature)
                out += [row[: len(t.completion_ids)].tolist() for row, t in zip(logprobs, micro, strict=True)]
        return out

    def _sampler_kl(self, turns: Sequence[Turn]) -> float:
        """Token mean of k3(sampled logprobs, reference logprobs) over `turns` (sampler_kl_sum)."""
        assert self.reference is not None, "__post_init__ makes one wherever a KL is asked for"
        total, tokens = sampler_kl_sum(turns, self.reference, self.cfg.temperature, self.cfg.micro_batch_size)
        return total / tokens if tokens else 0.0

    def _micro_loss(self, micro: Sequence[Turn], trainer_old: Sequence[list[float]] | None = None,
                    first: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of one micro-batch. Without TIS the turns' logprobs are the old policy (the sampler is
        taken to be the trainer); with it they are the sampler's, the old policy is the trainer's
        (`trainer_old`, or this forward's own logprobs on the `first` step) and TIS weights the loss."""
        prompts = [t.prompt_ids for t in micro]
        completions = [t.completion_ids for t in micro]
        logprobs, mask = self.policy.forward(prompts, completions, temperature=self.cfg.temperature)
        sampled = _padded([t.logprobs for t in micro], logprobs)
        tis = self.cfg.loss.tis_cap is not None
        if trainer_old is not None:
            old = _padded(trainer_old, logprobs)
        else:  # on the first step the weights are still the old policy's
            old = logprobs.detach() if tis else sampled
        mismatch = {}
        if first:
            own = old if tis else logprobs.detach()
            mismatch["logp_mismatch"] = float((own - sampled).abs()[mask].mean()) if mask.any() else 0.0
        ref = None
        if self.cfg.loss.beta_kl > 0:
            assert self.reference is not None, "__post_init__ makes one wherever a KL is asked for"
            with torch.no_grad():
                ref, _ = self.reference.forward(prompts, completions, temperature=self.cfg.temperature)
        adv = torch.tensor([required(t.advantage, "advantage") for t in micro], dtype=logprobs.dtype)
        loss, metrics = policy_loss(self.cfg.loss, logprobs, old, adv, mask, ref_logprobs=ref,
                                    sampler_logprobs=sampled if tis else None)
        return loss, metrics | mismatch

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "optimizer": self.optimizer.state_dict() if self.optimizer else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        if self.optimizer is not None and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])


P = TypeVar("P", bound=TrainablePolicy)


def frozen_copy(policy: P) -> P:
    """A copy of `policy` for a KL reference: same weights, no gradients, eval mode."""
    ref = copy.deepcopy(policy)
    for p in ref.parameters():
        p.requires_grad_(False)
    ref.eval()
    return ref


def saved_references(policies: Mapping[str, HFPolicy], dirs: Mapping[str, Path], saved: bool,
                     what: str) -> dict[str, HFPolicy]:
    """A frozen copy of each named policy for a KL reference (`frozen_copy`), also written to its folder in
    `dirs`; with `saved` (a resumed run), read back from there instead of copied from the current weights.
    A missing folder is an error naming `what` (e.g. "SFT reference") and the policy."""
    refs = {}
    for name, policy in policies.items():
        where = Path(dirs[name])
        if saved:
            if not where.is_dir():
                raise FileNotFoundError(f"a KL (rl.loss.beta_kl > 0 / rl.log_kl) needs the {what} of {name!r} at {where}, "
                                        "written before RL; it is missing, so this run cannot resume with a KL")
            refs[name] = frozen_copy(HFPolicy.load(where))
        else:
            refs[name] = frozen_copy(policy)
            refs[name].save(where)
    return refs


def _sampled_entropy(turns: Sequence[Turn]) -> float:
    """Token mean of -log p of the sampled tokens under the sampler: a Monte Carlo estimate of the per-token
    entropy of the sampling distribution (at its temperature), free of any extra forward pass."""
    tokens = sum(len(t.logprobs) for t in turns)
    return -sum(sum(t.logprobs) for t in turns) / tokens if tokens else 0.0


def sampler_kl_sum(turns: Sequence[Turn], reference: TrainablePolicy, temperature: float,
                   micro_batch_size: int) -> tuple[float, int]:
    """Sum over the turns' completion tokens of k3(sampled logprobs, reference logprobs), the sampled ones being
    the log-probs the turns carry from their sampler, and the token count: their ratio estimates KL(sampler ||
    reference) from the sampler's own samples (no gradient)."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(turns), micro_batch_size):
            micro = turns[lo:lo + micro_batch_size]
            ref, mask = reference.forward([t.prompt_ids for t in micro], [t.completion_ids for t in micro],
                                          temperature=temperature)
            sampled = _padded([t.logprobs for t in micro], ref)
            total += float(kl_k3(sampled, ref)[mask].sum())
            tokens += int(mask.sum())
    return total, tokens


def _padded(rows: Sequence[Sequence[float]], like: torch.Tensor) -> torch.Tensor:
    """Per-token values right padded with 0 to `like`'s [B, T] shape and dtype (constants, no grad)."""
    out = torch.zeros_like(like, requires_grad=False)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=like.dtype)
    return out


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
