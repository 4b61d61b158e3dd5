"""experiments/corecode_seeds.py: one tiny seed prints all four held-out comparisons and their means."""

from __future__ import annotations

import json
import sys

import pytest

# slow: a smoke run of an experiment script (a whole tiny CoRe-Code seed);
# 30-50 s in a fresh clone (2026-12-05, load ~8),
# and the default suite keeps to the library's tests to stay under 10 minutes
pytestmark = pytest.mark.slow


def test_one_tiny_seed_prints_both_held_out_sets(load_experiment, tmp_path, monkeypatch, capsys):
    bench = load_experiment("corecode_seeds")
    tiny = {"n_train_tasks": 40, "n_test_tasks": 4, "n_fresh_tasks": 3, "d_model": 32, "n_layers": 1,
            "sft": {"epochs": 0.5}, "tasks_per_step": 2, "plans_per_task": 2, "codes_per_plan": 2, "max_new_tokens": 16,
            "sandbox_workers": 1}
    monkeypatch.setattr(sys, "argv", ["corecode_seeds.py", "--seeds", "0", "--rl-steps", "1", "--eval-samples-per-task", "2",
                                      "--set", json.dumps(tiny), "--out", str(tmp_path)])
    bench.main()
    out = capsys.readouterr().out
    for label in bench.LABELS.values():
        assert f"  {label}: " in out and f"mean held-out pass@1, {label}: SFT" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["0"]["change"]) == {"greedy", "sampled", "fresh_greedy", "fresh_sampled"}
    assert results["0"]["change"]["fresh_greedy"]["tasks"] == 3
