"""experiments/corecode_failures.py: its table on untrained tiny policies (bad directories:
test_policy_dir_benches.py)."""

from __future__ import annotations

import sys


def test_every_task_lands_in_one_cell(load_experiment, untrained_pair, monkeypatch, capsys):
    bench = load_experiment("corecode_failures")
    monkeypatch.setattr(sys, "argv", ["corecode_failures.py", str(untrained_pair), "--n-test-tasks", "3"])
    bench.main()
    out = capsys.readouterr().out
    assert "held-out: 3 tasks, greedy pass@1 0.000 (SE 0.000)" in out  # an untrained pair passes nothing
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["yes"], ["no"])]
    assert sum(int(r[-1]) for r in rows) == 3
    assert "failures with a plan other than the gold one: 3 of 3" in out
