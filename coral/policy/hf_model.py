"""What HFPolicy needs to know about, or set on, a transformers model: peft or not, its eos ids, eval
mode for a block, dropout off, and quiet progress bars.

This module does NOT load or build models (see hf.py, tiny.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def is_peft(model: Any) -> bool:
    return hasattr(model, "get_base_model") and hasattr(model, "peft_config")


def base_model(model: Any) -> Any:
    return model.get_base_model() if is_peft(model) else model


def eos_ids(tokenizer: Any, model: Any) -> set[int]:
    ids: set[int] = set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (tokenizer.eos_token_id, config_eos):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(value)
    return ids


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def no_hf_progress_bars():
    """transformers' tqdm bars off for the block, then back to what they were."""
    # lazy: transformers (seconds) only when a model is loaded
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def disable_dropout(model: Any) -> int:
    """Set every dropout of `model` to 0, in train mode too, and return how many were on.

    Two kinds exist in transformers models: torch.nn.Dropout modules (GPT-2, peft's lora_dropout) and
    float attributes that the forward passes to a functional dropout only in train mode (Llama's
    `attention_dropout`, many `*_dropout` fields). The model's config is left as it was."""
    # lazy: torch only when a model is prepared for training
    import torch

    zeroed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            zeroed += module.p > 0
            module.p = 0.0
            continue
        for name, value in vars(module).items():
            if "dropout" in name and isinstance(value, float) and not isinstance(value, bool):
                zeroed += value > 0
                setattr(module, name, 0.0)
    return zeroed
