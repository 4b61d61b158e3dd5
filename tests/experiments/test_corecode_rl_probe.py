"""experiments/corecode_rl_probe.py --from RUN: the probe starts from the cold start RUN kept, with RUN's config
under --set's RL changes, and refuses what would not be that cold start."""

from __future__ import annotations

import json
import sys

import pytest

from coral.benchmarks.splits import build_tasks
from coral.config import UserInputError
from coral.corecode.recipe import CoReCodeConfig, train_corecode
from coral.train.sft import SFTConfig

SMALL = dict(n_train_tasks=40, n_test_tasks=4, d_model=32, n_layers=1, sft=SFTConfig(epochs=0.3, batch_size=8),
             rl_steps=0, tasks_per_step=2, plans_per_task=2, codes_per_plan=2, max_new_tokens=24,
             efficiency_weight=0.0, eval_batch_samples=4, sandbox_workers=1, n_fresh_tasks=0, sft_processes=1)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    out = tmp_path_factory.mktemp("source")
    train_corecode(CoReCodeConfig(**SMALL, out_dir=str(out)), progress=False)
    return out


def _completions(folder):
    lines = (folder / "samples.jsonl").read_text().splitlines()
    return [[turn["text"] for turn in json.loads(line)["turns"]] for line in lines]


def test_the_probe_evaluates_the_runs_own_cold_start(load_experiment, source, tmp_path, monkeypatch, capsys):
    probe = load_experiment("corecode_rl_probe")
    out = tmp_path / "probe"
    changes = json.dumps({"out_dir": str(out), "rl": {"lr": 1e-3}})
    monkeypatch.setattr(sys, "argv", ["corecode_rl_probe.py", "--from", str(source), "--rl-steps", "1",
                                      "--fixed-tasks", "2", "--sampled-per-task", "4", "--set", changes])
    probe.main()
    said = capsys.readouterr().out
    assert "before: held-out" in said and "step 1:" in said and "after:" in said
    # the same sampled completions (same seeds) as the run's own evaluation after SFT: its weights, not a fresh
    # model's (this little SFT answers greedily with blank lines either way)
    assert _completions(out / "before_sampled") == _completions(source / "eval_sft_sampled")


def test_source_config_puts_the_changes_on_the_runs_config(load_experiment, source):
    kw = load_experiment("corecode_rl_probe").source_config(source, {"rl": {"lr": 5e-5}, "rl_steps": 7})
    saved = json.loads((source / "config.json").read_text())
    assert kw["rl"] == {**saved["rl"], "lr": 5e-5}  # merged: the other RL fields stay the run's
    assert kw["rl_steps"] == 7 and kw["cold_start_from"] == str(source)
    assert kw["out_dir"] == f"runs/probe_from_{source.name}"
    assert {k: v for k, v in kw.items() if k not in ("rl", "rl_steps", "cold_start_from", "out_dir")} == {
        k: v for k, v in saved.items() if k not in ("rl", "rl_steps", "cold_start_from", "out_dir")}


def test_a_run_without_a_config_and_a_changed_cold_start_are_refused(load_experiment, source, tmp_path, monkeypatch):
    probe = load_experiment("corecode_rl_probe")
    with pytest.raises(SystemExit, match="config.json does not exist"):
        probe.source_config(tmp_path, {})
    monkeypatch.setattr(sys, "argv", ["corecode_rl_probe.py", "--from", str(source), "--set",
                                      json.dumps({"out_dir": str(tmp_path / "p"), "sft": {"epochs": 1.0}})])
    with pytest.raises(UserInputError, match="sft.epochs"):
        probe.main()


def test_the_probe_may_evaluate_on_another_split(load_experiment, source, tmp_path, monkeypatch, capsys):
    """Nothing the cold start trained on depends on the held-out split, and the probe copies no evaluation:
    it may choose settings on validation from a run evaluated on test (a fork of the run may not)."""
    probe = load_experiment("corecode_rl_probe")
    changes = {"out_dir": str(tmp_path / "probe"), "held_out_split": "validation", "n_test_tasks": 3}
    monkeypatch.setattr(sys, "argv", ["corecode_rl_probe.py", "--from", str(source), "--rl-steps", "0",
                                      "--set", json.dumps(changes)])
    probe.main()
    assert "before: held-out" in capsys.readouterr().out
    ids = [json.loads(line)["task_id"] for line in (tmp_path / "probe" / "before" / "samples.jsonl").open()]
    splits = {split: CoReCodeConfig(**{**SMALL, **changes, "held_out_split": split}).splits for split in ("validation", "test")}
    held_out = {split: [t.id for t in build_tasks(spec)[1]] for split, spec in splits.items()}
    assert ids == held_out["validation"] != held_out["test"]
    with pytest.raises(UserInputError, match="held_out_split"):
        train_corecode(CoReCodeConfig(**{**SMALL, **changes, "out_dir": str(tmp_path / "fork"),
                                         "cold_start_from": str(source)}), progress=False)
