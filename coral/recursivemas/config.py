"""RecursiveMAS's run config: records, agents, the agents' cold start (`sft:`), the inner loop (`inner:`),
the outer loop (`outer:`), the run loop and evaluation. Nested fields are dotted in flags
(`coral train configs/recursivemas_tiny.yaml --outer.lr 0.05`); each field's comment is its `--help`
line. A key of the earlier flat config (`outer_lr`) is refused with its new dotted name.

This module does NOT build agents or train (agents.py, train.py, recipe.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from coral.config import UserInputError, check_at_least
from coral.policy.base import DTYPE_HELP, check_dtype
from coral.recursivemas.links import LINK_INITS
from coral.recursivemas.patterns import get_pattern


@dataclass(frozen=True)
class ColdStartConfig:
    epochs: float = 0.0  # SFT passes over each role's gold text before its agent is frozen (0: no cold start)
    lr: float = 3e-3  # peak learning rate of the cold start
    batch_size: int = 16  # examples per cold-start optimiser step

    def __post_init__(self) -> None:
        check_at_least(self, 0, ("epochs",))
        check_at_least(self, 0, ("lr",), above=True)
        check_at_least(self, 1, ("batch_size",))


@dataclass(frozen=True)
class InnerLoopConfig:
    steps: int = 100  # inner-loop steps: each inner link regresses the next token's input embedding
    lr: float = 1e-3  # AdamW peak learning rate of the inner links
    weight_decay: float = 0.0  # AdamW weight decay of the inner links
    warmup_steps: int = 10  # linear warm-up before the cosine schedule, in inner steps
    max_grad_norm: float = 1.0  # global gradient norm clip of each inner step

    def __post_init__(self) -> None:
        _check_loop(self)


@dataclass(frozen=True)
class OuterLoopConfig:
    steps: int = 100  # outer-loop steps: all rounds unrolled, CE on the final agent's gold answer
    lr: float = 1e-3  # AdamW peak learning rate of the outer links
    weight_decay: float = 0.0  # AdamW weight decay of the outer links
    warmup_steps: int = 10  # linear warm-up before the cosine schedule, in outer steps
    max_grad_norm: float = 1.0  # global gradient norm clip of each outer step
    earlier_round_weight: float = 0.0  # loss weight of the final agent's answer in earlier rounds (mean)
    # recompute each unrolled (round, agent) latent rollout in backward instead of keeping its activations
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        _check_loop(self)
        if self.earlier_round_weight < 0:
            raise ValueError(f"field 'earlier_round_weight' must be >= 0, got {self.earlier_round_weight}")


def _check_loop(loop: InnerLoopConfig | OuterLoopConfig) -> None:
    for name in ("steps", "warmup_steps"):
        if getattr(loop, name) < 0:
            raise ValueError(f"field {name!r} must be >= 0, got {getattr(loop, name)}")
    for name in ("lr", "max_grad_norm"):
        if getattr(loop, name) <= 0:
            raise ValueError(f"field {name!r} must be > 0, got {getattr(loop, name)}")
    if loop.weight_decay < 0:
        raise ValueError(f"field 'weight_decay' must be >= 0, got {loop.weight_decay}")


@dataclass(frozen=True)
class RecursiveMASConfig:
    # collaboration pattern: sequential, mixture, distillation, deliberation (official: tools inside the final
    # generation), deliberation_public_tests (coral's: each round's decoded attempt run on the public tests)
    pattern: str = "sequential"
    rounds: int = 3  # recursion rounds R (the last agent feeds its latents back to the first)
    latent_steps: int = 8  # latent thoughts m each agent appends per round
    data: str = "procedural"  # or a JSONL path of question / plan / refined_plan / answer records
    n_train_tasks: int = 64  # procedural training tasks (records) for the links
    n_test_tasks: int = 32  # held-out procedural tasks evaluated before and after training
    max_depth: int = 2  # deepest composition of the procedural tasks
    seed: int = 0  # base seed of the models, data and batches
    # one model spec per role, cycling over the roles: "tiny" (built here, see agent_widths) or any
    # coral.policy.load_policy spec of a local HF model ("smollm2", a model directory), loaded and frozen
    agent_models: tuple[str, ...] = ("tiny",)
    dtype: str = field(default="auto", metadata={"help": DTYPE_HELP})  # the agents' (the links stay float32)
    # tiny agents' widths, indexed by role and cycling over the roles (different hidden sizes are allowed);
    # None: the pattern's own per role (patterns.py: e.g. distillation's expert wider than its learner)
    agent_widths: tuple[int, ...] | None = None
    n_layers: int = 2  # layers of each tiny agent
    vocab_size: int = 512  # size of the tiny agents' locally trained tokenizer
    max_len_tokens: int = 2048  # longest sequence a tiny agent accepts, in tokens
    sft: ColdStartConfig = field(default_factory=ColdStartConfig)  # each agent's cold start before it is frozen
    inner: InnerLoopConfig = field(default_factory=InnerLoopConfig)  # the inner loop (first phase)
    outer: OuterLoopConfig = field(default_factory=OuterLoopConfig)  # the outer loop (second phase)
    batch_size: int = 8  # records per training step and per evaluation batch
    # link initialisation: aligned (outer links start as the ridge map between the agents' token
    # embeddings; one vocabulary), scaled (latents at token-embedding norm), random (PyTorch defaults)
    link_init: str = "aligned"
    max_new_tokens: int = 160  # longest decoded answer, in tokens
    out_dir: str = "runs/recursivemas"  # run directory: config, agents, metrics, checkpoints, evaluations
    checkpoint_every_steps: int = 50  # steps (inner and outer counted together) between checkpoints
    eval_every_steps: int = 0  # steps between held-out evaluations during training (0: only before and after)
    resume: bool = True  # continue from out_dir's latest checkpoint (false: start over, agents rebuilt)
    # "local", "auto" or a Ray address: text decoding and judging on Ray actors (coral.scale); None: no Ray
    ray_address: str | None = None

    # keys of the flat config before the nested sections: a YAML file that still has one is told the new name
    RENAMED_FIELDS: ClassVar[dict[str, str]] = {
        "sft_epochs": "sft.epochs", "sft_lr": "sft.lr", "inner_steps": "inner.steps", "outer_steps": "outer.steps",
        "inner_lr": "inner.lr", "outer_lr": "outer.lr", "weight_decay": "inner.weight_decay and outer.weight_decay",
        "warmup_steps": "inner.warmup_steps and outer.warmup_steps",
        "max_grad_norm": "inner.max_grad_norm and outer.max_grad_norm",
        "earlier_round_weight": "outer.earlier_round_weight", "gradient_checkpointing": "outer.gradient_checkpointing",
        "checkpoint_every": "checkpoint_every_steps", "eval_every": "eval_every_steps", "max_len": "max_len_tokens"}

    def __post_init__(self) -> None:
        for name in ("rounds", "latent_steps", "n_train_tasks", "batch_size", "n_layers", "max_new_tokens",
                     "checkpoint_every_steps", "max_depth", "vocab_size", "max_len_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"field {name!r} must be >= 1, got {getattr(self, name)}")
        for name in ("n_test_tasks", "eval_every_steps", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"field {name!r} must be >= 0, got {getattr(self, name)}")
        widths = self.agent_widths
        if widths is not None and (not widths or any(w < 4 or w % 4 for w in widths)):
            raise ValueError(f"field 'agent_widths': each must be a multiple of 4 (heads), got {self.agent_widths}")
        self._check_agent_models()
        check_dtype(self.dtype)
        if self.link_init not in LINK_INITS:
            raise ValueError(f"field 'link_init' must be one of {LINK_INITS}, got {self.link_init!r}")

    def _check_agent_models(self) -> None:
        """A spec is a non-empty string without spaces; at most one per role (more would be ignored)."""
        roles = get_pattern(self.pattern).roles
        if not 1 <= len(self.agent_models) <= len(roles):
            raise UserInputError(f"field 'agent_models': pattern {self.pattern!r} has {len(roles)} roles "
                                 f"{roles}, so give 1 to {len(roles)} model specs; got {list(self.agent_models)}")
        bad = next((m for m in self.agent_models if not isinstance(m, str) or not m.strip() or m != m.strip()), None)
        if bad is not None:
            raise UserInputError(f"field 'agent_models': bad model spec {bad!r} (\"tiny\", \"smollm2\" or a model "
                                 f"directory)")

    def agent_width(self, role_index: int) -> int:
        """A tiny agent's width in the pattern's `role_index`-th role: agent_widths (cycling), else the
        pattern's own."""
        if self.agent_widths is not None:
            return self.agent_widths[role_index % len(self.agent_widths)]
        pattern = get_pattern(self.pattern)
        return pattern.tiny_width(pattern.roles[role_index])

    def agent_model(self, role_index: int) -> str:
        """The model spec of the pattern's `role_index`-th role (specs cycle over the roles)."""
        return self.agent_models[role_index % len(self.agent_models)]

    @property
    def total_steps(self) -> int:
        """Inner steps 1..inner.steps, then outer steps up to inner.steps + outer.steps."""
        return self.inner.steps + self.outer.steps
