"""experiments/corecode_compare.py: two pairs on both held-out sets, the second compared with the first."""

from __future__ import annotations

import sys

import pytest

# slow: a smoke run of an experiment script (evaluates two pairs on two held-out sets);
# 30-50 s in a fresh clone (2026-12-05, load ~8),
# and the default suite keeps to the library's tests to stay under 10 minutes
pytestmark = pytest.mark.slow


def test_the_same_pair_twice_reads_no_change(load_experiment, untrained_pair, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["corecode_compare.py", str(untrained_pair), str(untrained_pair),
                                      "--n-test-tasks", "3", "--n-fresh-tasks", "2", "--samples-per-task", "2",
                                      "--out", str(tmp_path / "out")])
    load_experiment("corecode_compare").main()
    out = capsys.readouterr().out
    assert out.count("test split (new skeletons), 3 tasks, greedy: pass@1") == 2
    assert out.count("(SE 0.000)") == 8  # 2 pairs x 2 sets x greedy/sampled; untrained pairs pass nothing: no spread
    assert out.count("training skeletons, unseen tasks, 2 tasks, 2 samples/task: pass@1") == 2
    # the same weights and the same seeds give the same samples: every paired change is zero
    assert out.count("change vs") == 4 and out.count("+0.000 (paired SE 0.000; 0 tasks up, 0 down)") == 4
