"""bench/corecode_rollout_batch.py: a tiny run prints one row per batch size (bad directories:
test_policy_dir_benches.py)."""

from __future__ import annotations

import sys

import pytest

# slow: a smoke run of a speed bench script (SFT-free, but two rollout batches on 2 cores);
# 30-50 s in a fresh clone (2026-12-05, load ~8),
# and the default suite keeps to the library's tests to stay under 10 minutes
pytestmark = pytest.mark.slow


def test_prints_a_row_per_batch_size(load_bench, untrained_pair, monkeypatch, capsys):
    bench = load_bench("corecode_rollout_batch")
    monkeypatch.setattr(sys, "argv", ["corecode_rollout_batch.py", str(untrained_pair), "--batches", "32", "128",
                                      "--steps", "1", "--repeats", "1", "--n-train-tasks", "40"])
    bench.main()
    out = capsys.readouterr().out
    assert "batch   32: median" in out and "ratio to batch 32: 1.00" in out
    assert "batch  128: median" in out
