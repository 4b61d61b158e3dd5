"""Bench and experiment scripts that read a trained planner/ and coder/ refuse a directory missing one,
by name."""

from __future__ import annotations

import sys

import pytest


@pytest.mark.parametrize("folder, script", [("bench", "corecode_rollout_batch"), ("experiments", "corecode_failures"),
                                            ("experiments", "corecode_compare")])
@pytest.mark.parametrize("present, missing", [("planner", "coder"), ("coder", "planner")])
def test_a_directory_without_a_policy_is_refused_by_name(request, tmp_path, monkeypatch, folder, script, present,
                                                         missing):
    load = request.getfixturevalue("load_bench" if folder == "bench" else "load_experiment")
    (tmp_path / present).mkdir()
    monkeypatch.setattr(sys, "argv", [f"{script}.py", str(tmp_path)])
    with pytest.raises(SystemExit, match=f"no {missing}/ directory"):
        load(script).main()
