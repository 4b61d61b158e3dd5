"""experiments/efficacy_training.py: the analysis read from a run's metrics.jsonl (training reward early
and late, share of zero-advantage turns) and the study config's checks, on hand-written logs."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def training(load_experiment):
    load_experiment("efficacy_protocol")
    load_experiment("mars2_compare")
    return load_experiment("efficacy_training")


def write_log(path, steps):
    path.write_text("".join(json.dumps(m) + "\n" for m in steps))
    return path


def test_analysis_reads_the_reward_rise_and_the_zero_advantage_share_of_a_mars2_log(training, tmp_path):
    steps = [{"step": i, "reward": r, "agent0/turns": 8.0, "agent0/trained_turns": t, "agent1/turns": 8.0,
              "agent1/trained_turns": 8.0} for i, (r, t) in enumerate([(0.1, 0.0), (0.2, 4.0), (0.3, 8.0), (0.5, 8.0)], 1)]
    a = training.run_analysis(write_log(tmp_path / "metrics.jsonl", steps), window=2)
    assert a["reward_first"] == pytest.approx(0.15) and a["reward_last"] == pytest.approx(0.4)
    # turns 4 x 16 = 64; trained 0 + 4 + 8 + 8 (agent0) + 32 (agent1) = 52 -> 12 / 64 had zero advantage
    assert a["zero_advantage_turns"] == pytest.approx(12 / 64) and a["steps"] == 4


def test_analysis_uses_the_coders_reward_in_a_corecode_log(training, tmp_path):
    steps = [{"step": 1, "coder/reward": 0.2, "coder/turns": 4.0, "coder/trained_turns": 2.0, "planner/reward": 0.9}]
    a = training.run_analysis(write_log(tmp_path / "metrics.jsonl", steps))
    assert a["reward_first"] == a["reward_last"] == pytest.approx(0.2) and a["zero_advantage_turns"] == pytest.approx(0.5)


def test_analysis_of_a_missing_log_fails_loudly(training, tmp_path):
    with pytest.raises(FileNotFoundError, match="no metrics log"):
        training.run_analysis(tmp_path / "metrics.jsonl")


def test_a_run_dir_names_study_seed_variant_and_lr(training):
    cfg = training.TrainingStudyConfig(out="runs/x")
    assert training._run_dir(cfg, "mars2", 1, "MARS2 + shaping", 5e-5) == "runs/x/mars2/seed1/MARS2___shaping_lr5e-05"


def test_the_study_config_refuses_repeated_seeds_and_bad_lrs(training, load_experiment):
    from coral.config import UserInputError, from_mapping

    with pytest.raises(UserInputError, match="seeds"):
        from_mapping(training.TrainingStudyConfig, {"seeds": [0, 0]}, "--set")
    with pytest.raises(UserInputError, match="lrs"):
        from_mapping(training.TrainingStudyConfig, {"lrs": [0.0]}, "--set")
