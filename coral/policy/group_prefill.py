"""One prefill per group of identical prompts in HFPolicy's decoding loop, and a KV cache the group's
samples share in place.

GRPO samples several completions of one prompt. The prompt is run through the model once; its keys
and values are kept once per group ([groups, kv heads, prompt width, head dim]), and each decoding row
keeps only its own new tokens. At every decoding step the attention of row b is split in two
(cascade attention): over its group's prompt, where all the rows of a group are one batch entry of
a single attention call (their queries side by side, so the prompt's keys are read once per group, not
once per sample), and over its own tokens; the two partial softmaxes are merged exactly by their
log-sum-exp:  out = (o_p e^(l_p) + o_o e^(l_o)) / (e^(l_p) + e^(l_o)).  The prompt's left padding is
masked. Rows that finish leave the batch (only their own keys are dropped; the prompt stays).

It runs as a transformers attention function (`AttentionInterface`), switched on for the decoding
steps only (the prefill uses the model's own attention and masks). On a CPU each partial attention is
torch's flash kernel, which returns the log-sum-exp; elsewhere a float32 softmax.

This module does NOT decide which rows share a prompt (hf.py groups identical prompt ids), and does NOT
cover models whose attention is not plain causal softmax attention over one cache per layer: sliding
windows, logit soft-capping, attention sinks, or modules outside the AttentionInterface (`supports`
says so, and HFPolicy then copies the prefilled cache to every sample instead).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from coral.policy.hf_model import base_model

ATTENTION = "coral_group_prefill"
PREFIX_KW = "coral_group_prefix"  # the model-call keyword that carries the GroupPrefix to the attention
UNSUPPORTED_CONFIG = ("sliding_window", "attn_logit_softcapping", "use_sliding_window")


def supports(model: Any) -> bool:
    """Whether `model`'s attention can run over a shared prompt cache (see the module docstring)."""
    if not REGISTERED:
        return False
    inner = base_model(model)
    config = inner.config
    can_switch = getattr(type(inner), "_can_set_attn_implementation", None)
    if can_switch is None or not can_switch():
        return False
    return not any(getattr(config, name, None) for name in UNSUPPORTED_CONFIG)


class GroupPrefix:
    """The prompts of a decoding batch, stored once per group: per layer keys and values
    [groups, kv heads, width, head dim], the left padding of each prompt, and each row's group."""

    def __init__(self, keys: list[Tensor], values: list[Tensor], prompt_mask: Tensor, groups: Tensor) -> None:
        self.keys, self.values = keys, values
        self.count = prompt_mask.shape[0]
        # additive bias over the prompt positions: -inf on padding (every prompt has a token, so no row is empty)
        bias = torch.zeros(prompt_mask.shape, dtype=keys[0].dtype, device=prompt_mask.device)
        self.bias = bias.masked_fill(prompt_mask == 0, float("-inf"))[:, None, None, :]
        self.select_rows(groups)

    def select_rows(self, groups: Tensor) -> None:
        """Set each row's group: row b takes slot `slot[b]` = group x width + its rank within the group."""
        self.groups = groups
        counts = torch.bincount(groups, minlength=self.count)
        self.width = int(counts.max())
        order = torch.argsort(groups, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.empty_like(groups)
        rank[order] = torch.arange(len(groups), device=groups.device) - starts[groups[order]]
        self.slot = groups * self.width + rank

    def attend(self, layer: int, query: Tensor, own_keys: Tensor, own_values: Tensor, scale: float) -> Tensor:
        """Attention of one decoding step: query [rows, heads, 1, dim] over the row's prompt and its own
        keys/values [rows, kv heads, own length, dim]; returns [rows, 1, heads, dim]."""
        rows, heads, length, dim = query.shape
        if length != 1:
            raise ValueError(f"group prefill attention decodes one token per step, got {length}")
        kv_heads = own_keys.shape[1]
        rep = heads // kv_heads
        q = query.reshape(rows, kv_heads, rep, dim)  # query head h reads kv head h // rep
        # prompt part: the queries of a group's rows side by side, one batch entry per group
        slots = q.new_zeros(self.count * self.width, kv_heads, rep, dim)
        slots[self.slot] = q
        packed = slots.view(self.count, self.width, kv_heads, rep, dim).transpose(1, 2)
        packed = packed.reshape(self.count, kv_heads, self.width * rep, dim)
        out_p, lse_p = partial_attention(packed, self.keys[layer], self.values[layer], self.bias, scale)
        out_p = _unpack(out_p, self.count, self.width, rep)[self.slot]
        lse_p = _unpack(lse_p[..., None], self.count, self.width, rep)[self.slot].squeeze(-1)
        out_o, lse_o = partial_attention(q, own_keys, own_values, None, scale)
        total = torch.logaddexp(lse_p, lse_o)
        out = out_p.float() * (lse_p - total).exp()[..., None] + out_o.float() * (lse_o - total).exp()[..., None]
        return out.to(query.dtype).reshape(rows, 1, heads, dim)


def _unpack(packed: Tensor, count: int, width: int, rep: int) -> Tensor:
    """[groups, kv heads, width x rep, d] -> [groups x width, kv heads, rep, d] (slot-major)."""
    kv_heads, last = packed.shape[1], packed.shape[-1]
    return packed.reshape(count, kv_heads, width, rep, last).transpose(1, 2).reshape(count * width, kv_heads, rep, last)


def partial_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, scale: float) -> tuple[Tensor, Tensor]:
    """softmax(q k^T scale + bias) v and the float32 log-sum-exp of each query's scores; q [B, H, L, d],
    k and v [B, H, S, d], bias broadcast to [B, H, L, S]."""
    if q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=bias, scale=scale)
        return out, lse
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias.float()
    lse = scores.logsumexp(dim=-1)
    return ((scores - lse[..., None]).exp() @ v.float()).to(q.dtype), lse


def _attention(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
               scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Tensor, None]:
    """The AttentionInterface function: the group prefix attention when the call carries one."""
    prefix = kwargs.get(PREFIX_KW)
    if prefix is None:
        raise RuntimeError(f"attention {ATTENTION!r} was called without {PREFIX_KW!r} (only HFPolicy's decoding uses it)")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return prefix.attend(module.layer_idx, query, key, value, scale), None


def _register() -> bool:
    """Register the attention function; False for a transformers without AttentionInterface (< 4.48)."""
    try:
        # lazy: transformers only when a group prefill runs
        from transformers import AttentionInterface
    except ImportError:
        return False
    AttentionInterface.register(ATTENTION, _attention)
    return True


REGISTERED = _register()


@contextlib.contextmanager
def group_attention(model: Any) -> Iterator[None]:
    """The model's attention is the group prefix attention inside the block (decoding steps only)."""
    config = base_model(model).config
    before = config._attn_implementation
    config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before
