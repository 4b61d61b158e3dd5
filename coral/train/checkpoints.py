"""Checkpoints: every agent's weights and optimiser, RNG states, step, data position, metrics so far.

A checkpoint is a directory `step_NNNNNN/` written under a temporary name and renamed when complete,
so a crash mid-save never leaves a half checkpoint that `latest` would pick. This module does NOT
decide when to save (coral/train/loop.py does).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy


@dataclass
class TrainedAgent:
    """What a checkpoint keeps of one agent: its policy's weights, and its learner's state (optimiser,
    counters) when it trains; `learner` None: an agent that acts but never updates."""

    policy: HFPolicy
    learner: Any = None

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict() if self.learner is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.learner is not None:
            self.learner.load_state_dict(state)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(root: str | Path, step: int, learners: dict[str, TrainedAgent], trainer_state: dict[str, Any],
                    keep: int = 2) -> Path:
    """Write `root/step_{step:06d}` (every agent's weights and state, RNG states, the trainer state);
    keep only the newest `keep` checkpoints."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for name, learner in learners.items():
        (tmp / name).mkdir()
        torch.save(policy_weights(learner.policy), tmp / name / "model.pt")
        torch.save(learner.state_dict(), tmp / name / "learner.pt")
    torch.save({"rng": rng_state(), **{k: v for k, v in trainer_state.items() if k != "metrics"}},
               tmp / "trainer.pt")
    (tmp / "metrics.json").write_text(json.dumps(trainer_state.get("metrics", [])))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in sorted(root.glob("step_*"))[:-keep]:
        shutil.rmtree(old)
    return final


def latest_checkpoint(root: str | Path) -> Path | None:
    found = sorted(Path(root).glob("step_*")) if Path(root).is_dir() else []
    return found[-1] if found else None


def load_checkpoint(path: str | Path, learners: dict[str, TrainedAgent]) -> dict[str, Any]:
    """Restore learners in place (weights, optimiser, step) and RNG; return the trainer state."""
    path = Path(path)
    if not (path / "trainer.pt").is_file():
        raise FileNotFoundError(f"not a coral checkpoint (no trainer.pt): {path}")
    for name, learner in learners.items():
        if not (path / name).is_dir():
            raise FileNotFoundError(f"checkpoint {path} has no agent {name!r}")
        load_weights(learner.policy, torch.load(path / name / "model.pt", weights_only=True))
        learner.load_state_dict(torch.load(path / name / "learner.pt", weights_only=False))
    state = torch.load(path / "trainer.pt", weights_only=False)
    set_rng_state(state.pop("rng"))
    state["metrics"] = json.loads((path / "metrics.json").read_text())
    return state


def policy_weights(policy: HFPolicy) -> dict[str, torch.Tensor]:
    """What a checkpoint keeps of a policy: its own state_dict() when it has one (an adapter on a shared
    base: that adapter only), else its model's."""
    return policy.state_dict() if hasattr(policy, "state_dict") else policy.model.state_dict()


def cloned_weights(policy: HFPolicy) -> dict[str, torch.Tensor]:
    """A detached copy of `policy_weights(policy)`: later training of the policy leaves it as it was."""
    return {name: t.detach().clone() for name, t in policy_weights(policy).items()}


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    """A digest of a state dict's names, dtypes, shapes and bytes: equal digests, equal weights."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def load_weights(policy: HFPolicy, state: dict[str, torch.Tensor]) -> None:
    if hasattr(policy, "load_state_dict"):
        policy.load_state_dict(state)
    else:
        policy.model.load_state_dict(state)
