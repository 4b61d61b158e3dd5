"""Benches that read a trained planner/ and coder/ refuse a directory missing one, by name."""

from __future__ import annotations

import sys

import pytest


@pytest.mark.parametrize("script", ["corecode_failures", "corecode_rollout_batch", "corecode_compare"])
@pytest.mark.parametrize("present, missing", [("planner", "coder"), ("coder", "planner")])
def test_a_directory_without_a_policy_is_refused_by_name(load_bench, tmp_path, monkeypatch, script, present, missing):
    (tmp_path / present).mkdir()
    monkeypatch.setattr(sys, "argv", [f"{script}.py", str(tmp_path)])
    with pytest.raises(SystemExit, match=f"no {missing}/ directory"):
        load_bench(script).main()
