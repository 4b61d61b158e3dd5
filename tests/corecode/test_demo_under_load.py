"""The demo's first RL steps, with its efficiency bonus on, end in the same weights bit for bit on a quiet machine
and beside processes that load every CPU (the bonus counts executed lines, it does not time them)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_corecode import _final_weights

from coral.config import load_config
from coral.corecode.recipe import CoReCodeConfig, train_corecode
from coral.train.rewards import CodeReward

DEMO = Path(__file__).resolve().parents[2] / "coral" / "configs" / "corecode_tiny.yaml"


class RecordedReward:
    """The demo's reward, keeping every value it gave."""

    def __init__(self, reward: CodeReward) -> None:
        self.reward, self.given = reward, []

    def __call__(self, *args, **kwargs) -> float:
        value = self.reward(*args, **kwargs)
        self.given.append(value)
        return value


def _demo(out: Path, **fields) -> CoReCodeConfig:
    """The demo's settings and its SFT (a smaller one, 1000 tasks for 3 epochs, passes no code in two RL steps, and
    only a code that passes earns the bonus), two RL steps and small held-out sets."""
    demo = load_config(CoReCodeConfig, str(DEMO))
    small = {"rl_steps": 2, "n_test_tasks": 8, "n_fresh_tasks": 0, "eval_samples_per_task": 0}
    return dataclasses.replace(demo, **{**small, **fields}, out_dir=str(out))


def _rl_from(cold: Path, out: Path) -> list[float]:
    cfg = _demo(out, cold_start_from=str(cold))
    reward = RecordedReward(CodeReward(cfg.correctness, cfg.efficiency_weight, cfg.efficiency_measure))
    train_corecode(cfg, progress=False, reward_fn=reward)
    return reward.given


@pytest.mark.timeout(3600)
@pytest.mark.slow  # the demo's SFT: about 7 minutes on a quiet 2-core machine
def test_the_demos_first_rl_steps_end_in_the_same_weights_beside_a_cpu_hog(tmp_path):
    cfg = _demo(tmp_path / "cold", rl_steps=0)
    assert cfg.efficiency_weight > 0 and cfg.efficiency_measure == "steps"  # the demo's reward, bonus on
    train_corecode(cfg, progress=False)
    # both runs start from that cold start: SFT reads no clock; the RL steps are what a measured bonus would move
    quiet = _rl_from(tmp_path / "cold", tmp_path / "quiet")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = _rl_from(tmp_path / "cold", tmp_path / "loaded")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert any(r > 1.0 for r in quiet), "no code earned the bonus: the comparison would not test it"
    assert loaded == quiet
    a, b = _final_weights(tmp_path / "quiet"), _final_weights(tmp_path / "loaded")
    assert all(torch.equal(a[role][k], b[role][k]) for role in a for k in a[role])
