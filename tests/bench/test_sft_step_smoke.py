"""bench/sft_step.py: the FLOP count on hand-computed values, and a tiny run prints a row per thread count."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest


def test_flops_counts_weights_and_causal_attention_over_padded_tokens(load_bench):
    bench = load_bench("sft_step")
    config = SimpleNamespace(hidden_size=2, num_hidden_layers=1, intermediate_size=4, vocab_size=3)
    # weights 1 * (4*2*2 + 3*2*4) + 3*2 = 46; 2 sequences padded to 3 tokens: 6 * 46 * 6 = 1656;
    # attention per sequence 1 layer * 2 products * 2 FLOP * d 2 * (3 * 4 / 2) pairs = 48, x3 (backward) x2 = 288
    assert bench.flops(config, [2, 3]) == 1656 + 288


# slow: builds the demo's coder and times SFT steps at two thread counts, 25-45 s on 2 cores (2026-12-08, load 2)
@pytest.mark.slow
def test_prints_a_row_per_thread_count(load_bench, monkeypatch, capsys):
    bench = load_bench("sft_step")
    monkeypatch.setattr(sys, "argv", ["sft_step.py", "--threads", "1", "2", "--steps", "2", "--repeats", "1",
                                      "--n-train-tasks", "40"])
    bench.main()
    out = capsys.readouterr().out
    assert "threads 1:" in out and "ratio to threads 1: 1.00" in out and "threads 2:" in out
