"""CoRe-Code's efficiency bonus from counted costs: the same codes earn the same rewards, to the last bit, on a
quiet machine and beside processes that load every CPU, so two runs of one seed end in the same weights."""

from __future__ import annotations

import subprocess
import sys

from coral.agents import make_agent
from coral.benchmarks.procedural import make_tasks
from coral.corecode.recipe import reference_results
from coral.corecode.rewards import written_result
from coral.policy.base import SamplingParams
from coral.policy.scripted import ScriptedPolicy
from coral.sandbox import Sandbox
from coral.train.rewards import CodeReward
from coral.workflows.chain import ChainConfig, run_chain

TASKS = make_tasks(4, "train", max_depth=2, seed=3)
BY_PROMPT = {t.prompt.strip(): t for t in TASKS}


def _slowed(code: str) -> str:
    """The same function with 300 idle iterations first: correct, about 600 steps slower a call."""
    head, _, body = code.partition("\n")
    return f"{head}\n    for _ in range(300):\n        pass\n{body}"


def _coder() -> ScriptedPolicy:
    """Answers each task with its reference, then with the slowed reference, in turn."""
    seen: list[str] = []

    def reply(messages) -> str:
        task = next(t for p, t in BY_PROMPT.items() if p in messages[-1]["content"])
        seen.append(task.id)
        code = task.reference if seen.count(task.id) % 2 else _slowed(task.reference)
        return f"```python\n{code}\n```"

    return ScriptedPolicy(reply)


def _rewards() -> list[float]:
    coder = make_agent("coder", _coder(), sampling=SamplingParams(max_new_tokens=8))
    reward = CodeReward("all", efficiency_weight=0.1, efficiency_measure="steps")
    with Sandbox(workers=1, cache=False) as sandbox:
        trajs = run_chain(TASKS, coder, sandbox, ChainConfig(codes_per_plan=2, count_steps=True))
        refs = reference_results(TASKS, sandbox, count_steps=True)
    by_id = {t.id: t for t in TASKS}
    return [reward(by_id[tr.task_id], tr.code, written_result(tr.turns[-1]), refs[tr.task_id]) for tr in trajs]


def test_counted_rewards_are_the_same_on_a_quiet_and_on_a_loaded_machine():
    quiet = _rewards()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = _rewards()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert loaded == quiet
    assert all(r == 1.1 for r in quiet[::2]) and all(1.0 < r < 1.1 for r in quiet[1::2])  # the slowed codes earn less
