"""The running batch of HFPolicy's decoding loop: prefill, one step of new tokens, dropping finished rows.

Two layouts, one interface (`prefill() -> logits`, `step(tokens) -> logits`, `keep(rows)`):
- `PaddedRows`: every row holds its whole sequence in the KV cache, prompts left padded, an attention
  mask that grows by one column a step. With `dedupe`, identical prompts are prefilled once and their
  cache copied to each of their rows (one prefill per group, a copy of the prompt per sample); without,
  every row is prefilled on its own.
- `SharedPrompts`: one prefill per distinct prompt and one copy of its keys and values, which the rows
  of its group attend to in place (group_prefill.py); rows cache only their new tokens.
Both compute the same distributions up to float rounding. Logits are float32, of the last position.

This module does NOT sample or decide when rows finish (hf.py and sampling.py do).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from coral.policy.group_prefill import PREFIX_KW, GroupPrefix, group_attention
from coral.policy.kv_cache import buffered_cache

Step = Callable[..., tuple[Tensor, Any]]  # (input_ids, mask, positions, cache, **extra) -> (logits, cache)


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """(input ids, attention mask, position ids) of `prompts` left padded to the longest."""
    width = max(len(ids) for ids in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(ids)) + list(ids) for ids in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts], device=device)
    return input_ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def prompt_groups(prompts: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """(the first row of each distinct prompt, the group of every row), groups numbered in first-seen order."""
    first: dict[tuple[int, ...], int] = {}
    groups = [first.setdefault(tuple(ids), len(first)) for ids in prompts]
    return [groups.index(g) for g in range(len(first))], groups


class PaddedRows:
    """Every row's whole sequence in the KV cache (see the module docstring)."""

    def __init__(self, model: Any, step: Step, prompts: Sequence[Sequence[int]], budget: int, pad_id: int,
                 device: torch.device, dedupe: bool) -> None:
        self.step_fn, self.device, self.dedupe = step, device, dedupe
        self.input_ids, self.mask, self.positions = left_padded(prompts, pad_id, device)
        self.cache = buffered_cache(model, self.input_ids.shape[1] + budget)
        self.unique, groups = prompt_groups(prompts) if dedupe else (list(range(len(prompts))), list(range(len(prompts))))
        self.groups = torch.tensor(groups, device=device)

    def prefill(self) -> Tensor:
        if len(self.unique) == len(self.groups):
            logits, self.cache = self.step_fn(self.input_ids, self.mask, self.positions, self.cache)
            return logits
        rows = self.unique
        logits, self.cache = self.step_fn(self.input_ids[rows], self.mask[rows], self.positions[rows], self.cache)
        self.cache.batch_select_indices(self.groups)
        return logits[self.groups]

    def keep(self, rows: Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.mask, self.positions = self.mask[rows], self.positions[rows]

    def step(self, tokens: Tensor) -> Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        self.positions = self.positions[:, -1:] + 1
        logits, self.cache = self.step_fn(tokens[:, None], self.mask, self.positions, self.cache)
        return logits


class SharedPrompts:
    """One prefill and one stored copy per distinct prompt, attended in place (see the module docstring)."""

    def __init__(self, model: Any, step: Step, prompts: Sequence[Sequence[int]], budget: int, pad_id: int,
                 device: torch.device) -> None:
        self.model, self.step_fn, self.budget = model, step, budget
        self.unique, groups = prompt_groups(prompts)
        self.groups = torch.tensor(groups, device=device)
        self.input_ids, self.mask, positions = left_padded([prompts[i] for i in self.unique], pad_id, device)
        self.unique_positions = positions
        self.positions = positions[self.groups][:, -1:]
        self.prefix: GroupPrefix | None = None
        self.cache: Any = None

    def prefill(self) -> Tensor:
        cache = buffered_cache(self.model, self.input_ids.shape[1])
        logits, cache = self.step_fn(self.input_ids, self.mask, self.unique_positions, cache)
        layers = cache.layers
        self.prefix = GroupPrefix([layer.keys for layer in layers], [layer.values for layer in layers],
                                  self.mask, self.groups)
        self.cache = buffered_cache(self.model, self.budget)  # the rows' own tokens only
        return logits[self.groups]

    def keep(self, rows: Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.positions = self.positions[rows]
        assert self.prefix is not None, "prefill() comes before keep()"
        self.prefix.select_rows(self.prefix.groups[rows])

    def step(self, tokens: Tensor) -> Tensor:
        self.positions = self.positions + 1
        with group_attention(self.model):
            logits, self.cache = self.step_fn(tokens[:, None], None, self.positions, self.cache,
                                              **{PREFIX_KW: self.prefix})
        return logits
