"""The deliberation patterns' tools in the sandbox, where their output goes, and judging."""

from __future__ import annotations

import torch

from coral.benchmarks.procedural import make_tasks
from coral.recursivemas.data import Record, procedural_records
from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.system import RecursiveMAS
from coral.recursivemas.tools import SandboxTool, judge
from coral.sandbox import Sandbox


def test_the_sandbox_tool_reports_public_tests_and_judge_uses_private_tests():
    rec = procedural_records(make_tasks(1, "train"))[0]
    wrong = rec.answer.replace("return", "return 0 and")
    with Sandbox(workers=1) as sandbox:
        notes = SandboxTool(sandbox, [rec])([rec.answer, wrong, "no code here"], [rec.question] * 3)
        verdicts = judge(sandbox, [rec, rec], [f"```python\n{rec.answer}\n```", wrong])
    n = len(rec.task.public_tests)
    assert notes[0] == f"public tests passed: {n}/{n}"
    assert notes[1].startswith("public tests passed: ") and "first failure" in notes[1]
    assert notes[2] == "no code found in the attempt"
    assert verdicts == [True, False]


def test_judge_without_a_task_is_exact_match():
    rec = Record("r", "q", "p", "rp", "a1")
    assert judge(None, [rec, rec], [" a1\n", "a2"]) == [True, False]


def test_deliberation_public_tests_feeds_the_tool_report_to_the_reflectors_next_prompt(two_width_agents):
    calls: list[tuple[list[str], list[str]]] = []

    def tool(attempts, questions):
        calls.append((list(attempts), list(questions)))
        return [f"REPORT-{i}" for i in range(len(attempts))]

    agents = {"reflector": two_width_agents["critic"], "tool_caller": two_width_agents["solver"]}
    mas = RecursiveMAS(PATTERNS["deliberation_public_tests"], agents, latent_steps=2, tool=tool,
                       tool_max_new_tokens=4)
    seen = []
    original = mas.prompt
    mas.prompt = lambda role, q, r, notes=None: seen.append((role, r, notes)) or original(role, q, r, notes)
    with torch.no_grad():
        mas.unroll(["q0", "q1"], rounds=3)
    assert len(calls) == 2 and calls[0][1] == ["q0", "q1"]  # rounds 1 and 2, not the last
    assert ("reflector", 1, "REPORT-1") in seen and ("reflector", 2, "REPORT-0") in seen
    assert all(notes is None for role, r, notes in seen if role == "tool_caller" or r == 0)


def test_humaneval_records_are_judged_by_their_tests():
    from coral.benchmarks import load_benchmark
    from coral.recursivemas.data import benchmark_records

    tasks = load_benchmark("humaneval", limit=2)
    recs = benchmark_records(tasks)
    assert [r.id for r in recs] == ["HumanEval/0", "HumanEval/1"] and recs[0].question == tasks[0].prompt
    assert (recs[0].plan, recs[0].refined_plan) == ("", "")
    gold = f"```python\n{recs[0].answer}\n```"
    wrong = gold.replace("return False", "return True")
    with Sandbox(workers=1) as sandbox:
        assert judge(sandbox, [recs[0], recs[0]], [gold, wrong]) == [True, False]
