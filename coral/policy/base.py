"""The Policy protocol: text in, sampled tokens (with their log-probabilities) out.

A policy does NOT know about agents, roles, tasks or rewards. Trainable policies additionally expose
`forward` (per-token log-probabilities under the current weights) and `parameters`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}
DTYPE_CHOICES = ("auto", "float32", "bfloat16")  # the precisions of an HF policy (precision.py says what auto is)
DTYPE_HELP = ("precision of the models that run in this process: auto (bfloat16 where the CPU has bf16 units, "
              "AVX512-BF16 or AMX, or on a GPU; float32 elsewhere), float32 or bfloat16")


def check_dtype(value: str, field: str = "dtype") -> None:
    """A one-line error naming `field` unless `value` is one of DTYPE_CHOICES (for configs and flags)."""
    if value not in DTYPE_CHOICES:
        raise ValueError(f"field {field!r} must be one of {list(DTYPE_CHOICES)}, got {value!r}")


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens <= 0:
            raise ValueError(f"SamplingParams.max_new_tokens must be > 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to complete. `messages` is a chat; policies render it with their chat template."""

    messages: tuple[Message, ...]
    sampling: SamplingParams = SamplingParams()


@dataclass
class Completion:
    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # of each sampled token, under the sampler
    finish_reason: str = "stop"  # "stop" | "length"
    usage: dict[str, int] = field(default_factory=dict)  # prompt_tokens, completion_tokens


@runtime_checkable
class Policy(Protocol):
    name: str

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One completion per request, in order."""
        ...


@runtime_checkable
class TrainablePolicy(Policy, Protocol):
    """What a trainer (train/grpo.py's AgentLearner, train/sft.py) calls on a policy it updates, with
    exactly the arguments it passes."""

    def forward(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                temperature: float = 1.0) -> tuple[Any, Any]:
        """Per-token log-probs of each completion given its prompt, under the current weights, of the
        distribution sampled at `temperature` (logits / temperature). Returns (logprobs [B, T] float
        tensor, mask [B, T] bool tensor), right padded."""
        ...

    def parameters(self) -> Iterator[Any]:
        """The torch parameters; those with requires_grad are trained."""
        ...

    def train(self) -> Any:
        """Training mode (before an update)."""
        ...

    def eval(self) -> Any:
        """Inference mode (after an update, for rollouts)."""
        ...


def user(content: str, system: str | None = None) -> tuple[Message, ...]:
    """The common case: an optional system message and one user message."""
    msgs: list[Message] = []
    if system:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": content})
    return tuple(msgs)
