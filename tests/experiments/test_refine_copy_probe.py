"""experiments/refine_copy_probe.py: the keep prompt holds the task's own gold code, a copier scores 1 and a
writer of other code 0, and the three losses are measured on a real (tiny) model."""

from __future__ import annotations

import math
import re

import pytest

from coral.benchmarks.procedural import make_tasks
from coral.policy import ScriptedPolicy, tiny_policy
from experiments.refine_copy_probe import copied_share, copy_probe

TASKS = make_tasks(3, "train", min_depth=1, max_depth=2, seed=0)


def _echo(messages) -> str:
    """The code the refiner prompt holds, given back."""
    return "```python\n" + re.search(r"Code:\n```python\n(.*?)\n```", messages[-1]["content"], re.S).group(1) + "\n```"


def test_a_copier_scores_one_and_a_writer_of_another_tasks_code_zero():
    seen = []
    assert copied_share(ScriptedPolicy(lambda m: (seen.append(m[-1]["content"]), _echo(m))[1], name="copier"), TASKS) == 1.0
    for prompt, task in zip(seen, TASKS, strict=True):  # each keep prompt: the task, its own gold code, all its public tests passed
        n = len(task.public_tests)
        assert prompt.startswith(task.prompt.strip()) and task.reference.strip() in prompt
        assert prompt.endswith(f"Feedback:\n{n}/{n} tests passed.\nImproved code:")
    other = TASKS[1].reference.strip()
    assert copied_share(ScriptedPolicy(lambda m: f"```python\n{other}\n```", name="other"), TASKS) == pytest.approx(1 / 3)


def test_the_three_losses_of_a_tiny_model_are_finite_and_one_task_is_refused():
    out = copy_probe(tiny_policy(seed=0, d_model=32, n_layers=1), TASKS, max_new_tokens=8)
    assert all(math.isfinite(out[k]) and out[k] > 0 for k in ("solve", "keep", "other"))
    assert out["copied"] == 0.0 and out["tasks"] == 3  # random weights copy nothing
    with pytest.raises(ValueError, match="at least 2 tasks"):
        copy_probe(tiny_policy(seed=0, d_model=32, n_layers=1), TASKS[:1])
