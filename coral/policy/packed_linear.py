"""Linear layers on prepacked bfloat16 weights for CPU inference: oneDNN's blocked layout made once per
weight copy instead of on every call.

A bfloat16 matrix product on the CPU (`F.linear`) reorders the weight into oneDNN's blocked layout on
each call. At a decoding step's shape (64 rows) that reorder is a second pass over the weight, and the
step is bound by memory traffic: prepacked, SmolLM2's linears ran 1.4x faster (26 -> 18 ms for the
decoder's 212 MB, 4.5 -> 2.8 ms for the output head; bench/rollout_speed.py has the whole-rollout
figure). The outputs are the same bits (checked for the shapes a decoder uses, tests/policy/
test_packed_linear.py).

`packed_linears(model, copies)` runs every `nn.Linear` whose weight is one of `copies` (the bfloat16
rollout copies of precision.py) on a packed version of that copy, made on first use and kept as long as
the copy lives: when a master weight changes, precision.py makes a new copy and so a new pack. Packing
needs oneDNN's `_reorder_linear_weight` (torch's CPU builds have it) and a CPU its bfloat16 path runs on
(AVX-512 or AVX-NE-CONVERT), and applies to CPU bfloat16 only; elsewhere `packing_available` is False and the
block changes nothing. Memory: one more copy of the
linears' weights (SmolLM2: about 270 MB).

This module does NOT pack for training (the packed op has no autograd), float32 (not measured: on a CPU
with bf16 units the rollouts run in bfloat16) or GPUs, and does NOT fuse layers.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

PACK_ROWS_HINT = 64  # the row count oneDNN tunes the layout for (any row count runs): a GRPO decoding batch

# bfloat16 copy (by identity) -> its packed weight; the entry goes when the copy is dropped
_PACKED = WeakIdKeyDictionary()


@functools.cache
def packing_available() -> bool:
    """Whether this torch on this CPU can prepack bfloat16 linear weights: oneDNN's two ops exist, and packing
    and running a small weight works (oneDNN's bfloat16 path needs AVX512-BW/VL/DQ or AVX-NE-CONVERT; on a CPU
    without them, an AVX2-only EPYC say, it raises, and the linears keep F.linear: the same bits, unpacked)."""
    ops = torch.ops.mkldnn
    try:
        if not (torch.backends.mkldnn.is_available() and all(
                callable(getattr(ops, name)) for name in ("_reorder_linear_weight", "_linear_pointwise"))):
            return False
        weight, rows = torch.ones(8, 8, dtype=torch.bfloat16), torch.ones(2, 8, dtype=torch.bfloat16)
        _packed_forward(ops._reorder_linear_weight(weight, PACK_ROWS_HINT), None, rows)
    except (AttributeError, RuntimeError):
        return False
    return True


def _packed(copy: torch.Tensor) -> torch.Tensor:
    held = _PACKED.get(copy)
    if held is None:
        held = torch.ops.mkldnn._reorder_linear_weight(copy, PACK_ROWS_HINT)
        _PACKED[copy] = held
    return held


def _packed_forward(packed: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@contextlib.contextmanager
def packed_linears(model: Any, copies: dict[int, torch.Tensor]) -> Iterator[int]:
    """Inside the block, each `nn.Linear` of `model` whose weight parameter's id is a key of `copies`
    (id -> its bfloat16 CPU copy) computes on the packed copy; yields how many layers do. Inference only
    (no autograd through the packed op: a forward under grad raises). Nothing changes where
    `packing_available()` is False."""
    patched = []
    if packing_available():
        for module in model.modules():
            # the exact class: a subclass may compute something else in its forward
            if type(module) is not torch.nn.Linear or id(module.weight) not in copies:
                continue
            copy = copies[id(module.weight)]
            if copy.dtype != torch.bfloat16 or copy.device.type != "cpu":
                continue
            module.forward = _inference_forward(_packed(copy), module.bias)  # type: ignore[method-assign]
            patched.append(module)
    try:
        yield len(patched)
    finally:
        for module in patched:
            del module.forward  # the class's forward again


def _inference_forward(packed: torch.Tensor, bias: torch.Tensor | None) -> Any:
    """A Linear's forward on `packed` that refuses to run under grad (the packed op has no autograd)."""
    def run(x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            raise RuntimeError("packed linear weights are for inference: run under torch.no_grad()")
        return _packed_forward(packed, bias, x)
    return run
