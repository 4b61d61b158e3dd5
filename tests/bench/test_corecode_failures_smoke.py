"""bench/corecode_failures.py: its table on untrained tiny policies, and its error for a bad directory."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "corecode_failures.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("corecode_failures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_directory_without_the_policies_is_refused_by_name(bench, tmp_path, monkeypatch):
    (tmp_path / "planner").mkdir()
    monkeypatch.setattr(sys, "argv", ["corecode_failures.py", str(tmp_path)])
    with pytest.raises(SystemExit, match="no coder/ directory"):
        bench.main()


def test_every_task_lands_in_one_cell(bench, tmp_path, monkeypatch, capsys):
    from coral.policy import tiny_policy

    for i, role in enumerate(("planner", "coder")):
        tiny_policy(seed=i, d_model=32, n_layers=1).save(tmp_path / role)
    monkeypatch.setattr(sys, "argv", ["corecode_failures.py", str(tmp_path), "--n-test-tasks", "3"])
    bench.main()
    out = capsys.readouterr().out
    assert "held-out: 3 tasks, greedy pass@1 0.000" in out  # an untrained pair passes nothing
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["yes"], ["no"])]
    assert sum(int(r[-1]) for r in rows) == 3
    assert "failures with a plan other than the gold one: 3 of 3" in out
