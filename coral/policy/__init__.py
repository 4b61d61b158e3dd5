"""Policies: text in, sampled tokens with logprobs out (see base.py for the protocol).

Heavy modules (torch/transformers, openai) load on first use of the name that needs them, so that
`from coral.policy import ScriptedPolicy` stays cheap. This package does NOT pick a policy for
you; `load_policy(spec)` builds the one a spec string names.
"""

from __future__ import annotations

import importlib
from typing import Any

from coral.policy.base import (
    Completion,
    GenerationRequest,
    Message,
    Policy,
    SamplingParams,
    TrainablePolicy,
    user,
)
from coral.policy.loading import load_policy
from coral.policy.scripted import ScriptedPolicy

_LAZY = {
    "HFPolicy": "coral.policy.hf",
    "DEFAULT_CHAT_TEMPLATE": "coral.policy.hf",
    "OpenAIPolicy": "coral.policy.openai",
    "VLLMPolicy": "coral.policy.vllm",
    "tiny_policy": "coral.policy.tiny",
}

__all__ = [
    "Completion",
    "GenerationRequest",
    "Message",
    "Policy",
    "SamplingParams",
    "TrainablePolicy",
    "user",
    "load_policy",
    "ScriptedPolicy",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'coral.policy' has no attribute {name!r}")
