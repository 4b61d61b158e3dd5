"""Precision of an HF policy: which dtype `auto` means on this machine, and the bfloat16 copy of the
weights that rollouts run on.

    dtype "float32"   rollouts and training in float32
    dtype "bfloat16"  rollouts on a bfloat16 copy of the weights; training with float32 master weights
                      and optimiser state, forward and backward under bfloat16 autocast
    dtype "auto"      bfloat16 on a GPU that supports it or on a CPU with bfloat16 units (AVX512-BF16 or
                      AMX), float32 elsewhere (a CPU without them emulates bfloat16 slower than float32);
                      $CORAL_AUTO_DTYPE (float32 or bfloat16), when set, decides instead (the test suite
                      sets float32, so its results do not depend on the machine's CPU)

The rollout copy is refreshed whenever a master weight changed since it was made: torch counts in-place
writes in each tensor's version and a new tensor has a new storage, so an optimiser step or a
load_state_dict is seen without being announced. Writes that bypass the version (a fused optimiser,
writes through `.data`) are not: `forget_copies` drops the copies of trainable weights, and HFPolicy
calls it whenever it leaves training mode. Copies live in a table keyed by the parameter object, so two
policies on one model (shared LoRA views) share one copy.

This module does NOT pick dtypes per layer, does NOT quantise (int8, fp8), and does NOT support float16
(no CPU has float16 matrix units worth using here, and float16 training needs loss scaling).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from coral.policy.base import DTYPE_CHOICES
from coral.policy.packed_linear import packed_linears

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of bfloat16 units
CPU_INFO = Path("/proc/cpuinfo")
AUTO_ENV = "CORAL_AUTO_DTYPE"


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 units (AVX512-BF16 or AMX): torch's own query where it has one,
    else the flags of /proc/cpuinfo; False where neither answers."""
    queries = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    answers = [q for q in queries if callable(q)]
    if len(answers) == len(queries):
        return any(q() for q in answers)
    return any(flag in cpu_flags() for flag in BF16_CPU_FLAGS)


def cpu_flags() -> set[str]:
    """The flags /proc/cpuinfo lists for this CPU (empty where it cannot be read)."""
    try:
        return {flag for line in CPU_INFO.read_text().splitlines() if line.startswith("flags")
                for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


def resolve_dtype(spec: str | torch.dtype, device: torch.device | str = "cpu") -> torch.dtype:
    """The torch dtype `spec` names on `device`: "float32", "bfloat16", or "auto" (see the module
    docstring). A torch dtype passes through if it is one of the two."""
    if isinstance(spec, torch.dtype):
        if spec not in DTYPES.values():
            raise ValueError(f"dtype must be one of {list(DTYPE_CHOICES)}, got {spec}")
        return spec
    if spec == "auto":
        forced = os.environ.get(AUTO_ENV)
        if forced:
            if forced not in DTYPES:
                raise ValueError(f"${AUTO_ENV} must be one of {list(DTYPES)}, got {forced!r}")
            return DTYPES[forced]
        return torch.bfloat16 if _has_bf16(torch.device(device)) else torch.float32
    if spec not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPE_CHOICES)}, got {spec!r}")
    return DTYPES[spec]


def _has_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_has_bf16()


def dtype_name(dtype: torch.dtype) -> str:
    """"float32" or "bfloat16"."""
    return {v: k for k, v in DTYPES.items()}[dtype]


# parameter (by identity: tensors compare elementwise) -> (version key of the master weight when copied, the copy)
_COPIES = WeakIdKeyDictionary()


def _version(p: torch.Tensor) -> tuple[int, int]:
    return p.data_ptr(), p._version


def _copy_of(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`p`'s values in `dtype`, made again only if `p` changed since the last copy."""
    key = _version(p)
    held = _COPIES.get(p)
    if held is not None and held[0] == key and held[1].dtype == dtype:
        return held[1]
    copy = p.detach().to(dtype)
    _COPIES[p] = (key, copy)
    return copy


@contextlib.contextmanager
def low_precision_weights(model: Any, dtype: torch.dtype, pack: bool = False) -> Iterator[None]:
    """Inside the block, every floating-point parameter of `model` holds its `dtype` copy (made once,
    refreshed when the master weight changed); afterwards the float32 master weights are back. Buffers
    (rotary frequencies) keep their dtype. For inference: gradients inside the block would reach the
    copies, not the masters. `pack`: the linear layers also run on prepacked copies where the CPU can
    (packed_linear.py; the same outputs, faster)."""
    if dtype == torch.float32:
        yield
        return
    params = [p for p in model.parameters() if p.is_floating_point() and p.dtype != dtype]
    copies = [_copy_of(p, dtype) for p in params]
    masters = [p.data for p in params]
    packing = (packed_linears(model, {id(p): c for p, c in zip(params, copies, strict=True)}) if pack
               else contextlib.nullcontext())
    try:
        for p, c in zip(params, copies, strict=True):
            p.data = c
        with packing:
            yield
    finally:
        for p, m in zip(params, masters, strict=True):
            p.data = m


def forget_copies(model: Any) -> None:
    """Drop the low-precision copies of `model`'s trainable parameters (made again on next use)."""
    for p in model.parameters():
        if p.requires_grad:
            _COPIES.pop(p, None)
