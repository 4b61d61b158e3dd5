"""bench/corecode_rollout_batch.py: a tiny run prints one row per batch size (bad directories:
test_policy_dir_benches.py)."""

from __future__ import annotations

import sys


def test_prints_a_row_per_batch_size(load_bench, untrained_pair, monkeypatch, capsys):
    bench = load_bench("corecode_rollout_batch")
    monkeypatch.setattr(sys, "argv", ["corecode_rollout_batch.py", str(untrained_pair), "--batches", "32", "128",
                                      "--steps", "1", "--repeats", "1", "--n-train-tasks", "40"])
    bench.main()
    out = capsys.readouterr().out
    assert "batch   32: median" in out and "ratio to batch 32: 1.00" in out
    assert "batch  128: median" in out
