"""Group-level advantage estimators: rewards [N] + group ids [N] -> advantages [N].

Every estimator is a pure function `fn(rewards, groups, scopes=None) -> advantages` looked up once
in `ADVANTAGES`. `groups` is either a LongTensor of group ids or a sequence of hashable keys (e.g.
`(task_id, role)` per sample); `group_ids` turns keys into ids in order of first appearance.
`scopes` (same forms, optional) says which samples share batch statistics: the trainer passes each
turn's agent, so that one agent's rewards never rescale another's advantages. Only
REINFORCE++-baseline takes batch statistics; the group-local estimators (grpo, dr_grpo, rloo) give
the same result whatever the scopes and accept them so that every estimator is called alike.

Conventions (shared by every estimator and by `coral.mars2.tree_rewards`):
- std is the unbiased sample std (Bessel's correction, divide by n - 1), as `torch.std` computes it
  and as TRL's and verl's GRPO use it: group-normalised advantages have unit *sample* std within
  each group (up to eps), not unit population std.
- eps (default 1e-6) is added to the std, never to the variance.
- A group of size 1 has no baseline to compare against: its advantage is exactly 0 for every
  estimator (never NaN).
- Computation runs in float64 and the result is cast back to the rewards' dtype.

This module does NOT compute rewards, broadcast sequence advantages to tokens, or decide which
samples form a group; the caller's key function does that.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from torch import Tensor

Groups = Tensor | Sequence[Hashable]
AdvantageFn = Callable[..., Tensor]  # fn(rewards, groups, scopes=None) -> advantages

DEFAULT_EPS = 1e-6


def group_ids(keys: Sequence[Hashable]) -> Tensor:
    """Dense group ids (LongTensor [N]) in order of first appearance: ["b", "a", "b"] -> [0, 1, 0]."""
    ids: dict[Hashable, int] = {}
    return torch.tensor([ids.setdefault(k, len(ids)) for k in keys], dtype=torch.long)


def _dense_ids(groups: Groups, n: int, device: torch.device, what: str) -> Tensor:
    """Dense ids [N] (0..G-1) of a tensor of ids or a sequence of keys, checked against N samples."""
    ids = groups if isinstance(groups, Tensor) else group_ids(groups)
    if ids.dim() != 1 or ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{what} ids must be an integer tensor [N], got {ids.dtype} {tuple(ids.shape)}")
    if ids.shape[0] != n:
        raise ValueError(f"rewards has {n} entries but {what} ids have {ids.shape[0]}")
    inverse: Tensor = torch.unique(ids, return_inverse=True)[1]
    return inverse.to(device)


def _validated(rewards: Tensor, groups: Groups) -> tuple[Tensor, Tensor]:
    """(rewards as float64 [N], dense group ids [N]) after checking shapes and values."""
    if not isinstance(rewards, Tensor):
        raise TypeError(f"rewards must be a torch.Tensor, got {type(rewards).__name__}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be a float tensor, got dtype {rewards.dtype}")
    if not torch.isfinite(rewards).all():
        bad = torch.nonzero(~torch.isfinite(rewards)).flatten().tolist()
        raise ValueError(f"rewards must be finite; non-finite at indices {bad}")
    return rewards.to(torch.float64), _dense_ids(groups, rewards.shape[0], rewards.device, "group")


def _group_stats(r: Tensor, ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample (group size, group sum, group mean), each [N] float64."""
    num_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    counts = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, ids, torch.ones_like(r))
    sums = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, ids, r)
    n, s = counts[ids], sums[ids]
    return n, s, s / n


def _group_std(r: Tensor, ids: Tensor) -> Tensor:
    """Per-sample unbiased std of its group, [N]; 0 for groups of size 1."""
    n, _, mean = _group_stats(r, ids)
    _, sq_sum, _ = _group_stats((r - mean) ** 2, ids)
    var = torch.where(n > 1, sq_sum / (n - 1).clamp(min=1), torch.zeros_like(r))
    return var.sqrt()


def grpo(rewards: Tensor, groups: Groups, eps: float = DEFAULT_EPS, scopes: Groups | None = None) -> Tensor:
    """GRPO: A_i = (r_i - mean_g) / (std_g + eps), std unbiased; size-1 groups -> 0."""
    r, ids = _validated(rewards, groups)
    _, _, mean = _group_stats(r, ids)
    return ((r - mean) / (_group_std(r, ids) + eps)).to(rewards.dtype)


def dr_grpo(rewards: Tensor, groups: Groups, scopes: Groups | None = None) -> Tensor:
    """Dr.GRPO: A_i = r_i - mean_g (no std division, so no difficulty bias); size-1 groups -> 0."""
    r, ids = _validated(rewards, groups)
    _, _, mean = _group_stats(r, ids)
    return (r - mean).to(rewards.dtype)


def rloo(rewards: Tensor, groups: Groups, scopes: Groups | None = None) -> Tensor:
    """RLOO: A_i = r_i - (sum_g - r_i) / (n_g - 1), the mean of the other members; size-1 -> 0."""
    r, ids = _validated(rewards, groups)
    n, s, _ = _group_stats(r, ids)
    loo_mean = (s - r) / (n - 1).clamp(min=1)
    return torch.where(n > 1, r - loo_mean, torch.zeros_like(r)).to(rewards.dtype)


def reinforce_pp_baseline(
    rewards: Tensor, groups: Groups, eps: float = DEFAULT_EPS, scopes: Groups | None = None
) -> Tensor:
    """REINFORCE++-baseline: A_i = (r_i - mean_g) / (std_s + eps), s the scope of sample i.

    std_s is the unbiased std of the centred values over the whole scope (the whole batch when
    `scopes` is None; size-1 groups count as zeros). Their mean over a scope is exactly 0 because
    every group's centred values sum to 0, so dividing by the std is the full whitening. A group
    must therefore lie inside one scope (else its centred values would not sum to 0 in each).
    """
    r, ids = _validated(rewards, groups)
    _, _, mean = _group_stats(r, ids)
    centred = r - mean
    scope = torch.zeros_like(ids) if scopes is None else _dense_ids(scopes, r.shape[0], r.device, "scope")
    if ids.numel():
        low = torch.zeros(int(ids.max()) + 1, dtype=torch.long, device=r.device)
        low = low.scatter_reduce(0, ids, scope, reduce="amin", include_self=False)
        spans = torch.nonzero(low[ids] != scope).flatten().tolist()
        if spans:
            raise ValueError(f"the group of sample {spans[0]} spans scopes; a group must lie inside one scope")
    n, sq_sum, _ = _group_stats(centred**2, scope)
    std = torch.where(n > 1, sq_sum / (n - 1).clamp(min=1), torch.zeros_like(r)).sqrt()
    return (centred / (std + eps)).to(rewards.dtype)


ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "reinforce_pp_baseline": reinforce_pp_baseline,
}
