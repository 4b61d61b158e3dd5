"""Policy-gradient losses: per-token logprobs + sequence advantages -> scalar loss and metrics.

One entry point, `policy_loss(cfg, logprobs, old_logprobs, advantages, mask, ...)`, built from
pure pieces:
- the policy term, looked up once in `LOSSES`:
  `ppo_clip`: token-level ratio r_t = exp(lp_t - old_t), loss_t = -min(r_t A, clip(r_t) A);
  `gspo`: sequence-level ratio s_i = exp(mean over masked t of (lp_t - old_t)), clipped the same
  way; the per-sequence loss is broadcast to that sequence's tokens so that one normalisation code
  path serves both (with norm="sequence" this is exactly the GSPO paper's objective; gradients
  reach every per-token logprob through the mean);
- optional truncated importance sampling (TIS): when the sampling engine (vLLM, ...) differs from
  the trainer, the policy term of each token is multiplied by w_t = min(exp(old_t - sampler_t), cap),
  detached. The KL term is not weighted (it regularises the current policy, as in verl);
- optional k3 KL to a reference policy, `kl_k3`, added per token with coefficient beta_kl;
- normalisation (`norm`): "token" (sum over all masked tokens / their count), "sequence" (mean over
  each sequence's tokens, then mean over sequences that have at least one token), "constant"
  (Dr.GRPO: sum / (B * max_tokens), max_tokens a fixed budget, so no length bias).

old_logprobs, ref_logprobs, sampler_logprobs and advantages are treated as constants (detached).
Padded positions (mask 0) may hold any value, even -inf: they are zeroed before any exp.

This module does NOT compute logprobs, advantages or entropy bonuses, and does NOT step optimisers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

NORMS = ("token", "sequence", "constant")


@dataclass(frozen=True)
class LossConfig:
    """What loss to compute. eps_* are clip widths around 1 (GSPO uses ~3e-4 / 4e-4); tis_cap=None
    disables the importance correction; max_tokens is the per-sequence budget for norm="constant"."""

    kind: str = "ppo_clip"  # policy term: ppo_clip (token ratio) or gspo (sequence ratio)
    eps_low: float = 0.2  # clip width below 1 of the ratio
    eps_high: float = 0.2  # clip width above 1 of the ratio
    beta_kl: float = 0.0  # weight of the k3 KL to the reference policy (0: no KL term)
    norm: str = "token"  # loss normalisation: token, sequence or constant (Dr.GRPO)
    tis_cap: float | None = None  # cap of truncated importance sampling weights (None: no correction)
    max_tokens: int | None = None  # per-sequence token budget of norm=constant

    def __post_init__(self) -> None:
        if self.kind not in LOSSES:
            raise ValueError(f"LossConfig.kind must be one of {sorted(LOSSES)}, got {self.kind!r}")
        if self.norm not in NORMS:
            raise ValueError(f"LossConfig.norm must be one of {list(NORMS)}, got {self.norm!r}")
        if not 0 <= self.eps_low < 1:
            raise ValueError(f"LossConfig.eps_low must be in [0, 1), got {self.eps_low}")
        if self.eps_high < 0:
            raise ValueError(f"LossConfig.eps_high must be >= 0, got {self.eps_high}")
        if self.beta_kl < 0:
            raise ValueError(f"LossConfig.beta_kl must be >= 0, got {self.beta_kl}")
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ValueError(f"LossConfig.tis_cap must be > 0 or None, got {self.tis_cap}")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"LossConfig.max_tokens must be > 0 or None, got {self.max_tokens}")
        if self.norm == "constant" and self.max_tokens is None:
            raise ValueError(f"LossConfig.max_tokens must be > 0 when norm='constant', got {self.max_tokens}")


class PolicyTerm(NamedTuple):
    """Per-token policy loss and diagnostics, all [B, T] (GSPO broadcasts its per-sequence values)."""

    loss: Tensor
    ratio: Tensor
    clipped_low: Tensor  # bool: ratio < 1 - eps_low and A < 0, so the clip zeroes the gradient
    clipped_high: Tensor  # bool: ratio > 1 + eps_high and A > 0


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(policy || ref): exp(ref - lp) - (ref - lp) - 1 (>= 0, unbiased)."""
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1


def _clipped_objective(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> PolicyTerm:
    """-min(ratio A, clip(ratio, 1-eps_low, 1+eps_high) A), elementwise; `adv` broadcasts to ratio."""
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high)
    loss = -torch.minimum(ratio * adv, clipped * adv)
    with torch.no_grad():
        low = (ratio < 1 - eps_low) & (adv < 0)
        high = (ratio > 1 + eps_high) & (adv > 0)
    return PolicyTerm(loss, ratio, low, high)


def ppo_clip(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, cfg: LossConfig
) -> PolicyTerm:
    """Token-level PPO clip: ratio_t = exp(lp_t - old_t); each token clipped on its own."""
    log_ratio = torch.where(mask, logprobs - old_logprobs, torch.zeros_like(logprobs))
    return _clipped_objective(torch.exp(log_ratio), advantages[:, None], cfg.eps_low, cfg.eps_high)


def gspo(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, cfg: LossConfig
) -> PolicyTerm:
    """GSPO: s_i = exp(mean_t(lp_t - old_t) over masked tokens), clipped per sequence, broadcast to tokens."""
    log_ratio = torch.where(mask, logprobs - old_logprobs, torch.zeros_like(logprobs))
    num_tokens = mask.sum(dim=1).clamp(min=1)
    seq_ratio = torch.exp(log_ratio.sum(dim=1) / num_tokens)
    term = _clipped_objective(seq_ratio, advantages, cfg.eps_low, cfg.eps_high)
    shape = logprobs.shape
    return PolicyTerm(*(t[:, None].expand(shape) for t in term))


LossFn = Callable[[Tensor, Tensor, Tensor, Tensor, LossConfig], PolicyTerm]
LOSSES: dict[str, LossFn] = {"ppo_clip": ppo_clip, "gspo": gspo}


def aggregate(loss: Tensor, mask: Tensor, norm: str, max_tokens: int | None = None) -> Tensor:
    """Reduce a per-token loss [B, T] to a scalar over masked tokens (see the module docstring)."""
    masked = torch.where(mask, loss, torch.zeros_like(loss))
    if norm == "token":
        return masked.sum() / mask.sum()
    if norm == "sequence":
        per_seq_tokens = mask.sum(dim=1)
        nonempty = per_seq_tokens > 0
        return (masked.sum(dim=1)[nonempty] / per_seq_tokens[nonempty]).mean()
    if norm == "constant":
        if max_tokens is None:
            raise ValueError("norm='constant' needs max_tokens")
        return masked.sum() / (loss.shape[0] * max_tokens)
    raise ValueError(f"norm must be one of {list(NORMS)}, got {norm!r}")


def _check_inputs(cfg: LossConfig, tensors: dict[str, Tensor | None], advantages: Tensor) -> None:
    """Shapes: every [B, T] input equals logprobs' shape; advantages is [B]."""
    logprobs = tensors["logprobs"]
    if logprobs is None:
        raise ValueError("logprobs are required")
    shape = tuple(logprobs.shape)
    if len(shape) != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {shape}")
    for name, t in tensors.items():
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but logprobs has shape {shape}")
        if t is not None and name != "mask" and not t.is_floating_point():
            raise ValueError(f"{name} must be a float tensor, got dtype {t.dtype}")
    if not advantages.is_floating_point():
        raise ValueError(f"advantages must be a float tensor, got dtype {advantages.dtype}")
    if tuple(advantages.shape) != shape[:1]:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)} but logprobs has shape {shape}; expected ({shape[0]},)"
        )
    if cfg.beta_kl > 0 and tensors["ref_logprobs"] is None:
        raise ValueError(f"LossConfig.beta_kl={cfg.beta_kl} > 0 but ref_logprobs is None")
    if (cfg.tis_cap is None) != (tensors["sampler_logprobs"] is None):
        raise ValueError(
            f"LossConfig.tis_cap={cfg.tis_cap} and sampler_logprobs must be given together "
            f"(sampler_logprobs is {'missing' if tensors['sampler_logprobs'] is None else 'given'})"
        )


def _bool_mask(mask: Tensor) -> Tensor:
    if mask.dtype == torch.bool:
        return mask
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError("mask must hold only 0 and 1 (it selects tokens; it is not a weight)")
    return mask != 0


def tis_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Truncated importance weights min(exp(old - sampler), cap) per token, detached; 1 on padding."""
    log_w = torch.where(mask, old_logprobs - sampler_logprobs, torch.zeros_like(old_logprobs))
    return torch.exp(log_w).clamp(max=cap).detach()


def policy_loss(
    cfg: LossConfig,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ref_logprobs: Tensor | None = None,
    sampler_logprobs: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Scalar loss to minimise and float metrics (loss, policy_loss, ratio_mean, clip fractions,
    kl when ref_logprobs is given, TIS weight stats when cfg.tis_cap is set), token means over mask."""
    tensors = {
        "logprobs": logprobs,
        "old_logprobs": old_logprobs,
        "mask": mask,
        "ref_logprobs": ref_logprobs,
        "sampler_logprobs": sampler_logprobs,
    }
    _check_inputs(cfg, tensors, advantages)
    mask = _bool_mask(mask)
    num_tokens = int(mask.sum().item())
    if num_tokens == 0:
        raise ValueError("mask selects no tokens; nothing to train on")
    longest = int(mask.sum(dim=1).max().item())
    if cfg.norm == "constant" and cfg.max_tokens is not None and longest > cfg.max_tokens:
        raise ValueError(f"a sequence has {longest} masked tokens > LossConfig.max_tokens={cfg.max_tokens}")
    old = old_logprobs.detach()
    term = LOSSES[cfg.kind](logprobs, old, advantages.detach(), mask, cfg)
    per_token = term.loss
    metrics: dict[str, float] = {}
    if cfg.tis_cap is not None and sampler_logprobs is not None:
        w = tis_weights(old, sampler_logprobs.detach(), mask, cfg.tis_cap)
        per_token = per_token * w
        metrics["tis_weight_mean"] = _token_mean(w, mask)
        metrics["tis_capped_fraction"] = _token_mean((w >= cfg.tis_cap).float(), mask)
    pg_loss = aggregate(per_token, mask, cfg.norm, cfg.max_tokens)
    loss = pg_loss
    if ref_logprobs is not None:
        zeros = torch.zeros_like(logprobs)  # padding: lp = ref = 0, so k3 = 0 and no gradient
        kl = kl_k3(torch.where(mask, logprobs, zeros), torch.where(mask, ref_logprobs.detach(), zeros))
        metrics["kl"] = _token_mean(kl, mask)
        if cfg.beta_kl > 0:
            loss = loss + cfg.beta_kl * aggregate(kl, mask, cfg.norm, cfg.max_tokens)
    metrics.update(
        loss=float(loss.item()),
        policy_loss=float(pg_loss.item()),
        ratio_mean=_token_mean(term.ratio, mask),
        clip_low_fraction=_token_mean(term.clipped_low.float(), mask),
        clip_high_fraction=_token_mean(term.clipped_high.float(), mask),
        clip_fraction=_token_mean((term.clipped_low | term.clipped_high).float(), mask),
        tokens=float(num_tokens),
    )
    return loss, metrics


def _token_mean(values: Tensor, mask: Tensor) -> float:
    with torch.no_grad():
        return float(torch.where(mask, values, torch.zeros_like(values)).sum().item() / mask.sum().item())
