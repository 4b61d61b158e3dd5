import pytest

from coral.agents import make_agent
from coral.policy import ScriptedPolicy
from coral.policy.base import SamplingParams
from coral.sandbox import Sandbox
from coral.trajectory import Task, TestCase
from coral.workflows.chain import ChainConfig, run_chain, run_single

GOOD = "```python\ndef f(x):\n    return x * 2\n```"
BAD = "```python\ndef f(x):\n    return x + 2\n```"


def _task(i: int = 0) -> Task:
    return Task(id=f"t{i}", prompt="Double x.\ndef f(x):", entry_point="f",
                public_tests=(TestCase("assert", "assert candidate(1) == 2"),),
                private_tests=(TestCase("assert", "assert candidate(3) == 6"),
                               TestCase("assert", "assert candidate(0) == 0")))


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


def test_planner_output_reaches_the_coder_prompt_and_code_is_judged(sandbox):
    planner = make_agent("planner", ScriptedPolicy(["1. multiply x by two"]))
    coder_policy = ScriptedPolicy([GOOD])
    coder = make_agent("coder", coder_policy)
    [traj] = run_chain([_task()], coder, sandbox, planner=planner)
    assert "1. multiply x by two" in coder_policy.calls[0][-1]["content"]
    assert [t.role for t in traj.turns] == ["planner", "coder"]
    assert traj.public.passed and traj.private.passed and traj.passed
    assert len(traj.private.tests) == 2


def test_plans_times_codes_layout_and_shared_planner_turns(sandbox):
    planner = make_agent("planner", ScriptedPolicy(["1. a", "1. b"]))
    coder = make_agent("coder", ScriptedPolicy([GOOD, BAD, BAD]))
    trajs = run_chain([_task(0), _task(1)], coder, sandbox, ChainConfig(plans_per_task=2, codes_per_plan=3),
                      planner=planner)
    assert len(trajs) == 2 * 2 * 3
    assert [t.task_id for t in trajs] == ["t0"] * 6 + ["t1"] * 6
    # the three codes of one plan share one planner Turn object
    assert trajs[0].turns[0] is trajs[1].turns[0] is trajs[2].turns[0]
    assert trajs[0].turns[0] is not trajs[3].turns[0]
    assert [t.passed for t in trajs[:3]] == [True, False, False]
    assert {t.turns[-1].credit.plan_id for t in trajs[:3]} == {0}


def test_unparseable_code_is_judged_as_errors_not_skipped(sandbox):
    coder = make_agent("coder", ScriptedPolicy(["I don't know."]))
    [traj] = run_single([_task()], coder, sandbox)
    assert traj.code is None and traj.turns[-1].parse_error
    assert not traj.passed and all(t.verdict == "error" for t in traj.private.tests)


def test_debugger_sees_feedback_and_its_fix_replaces_the_code(sandbox):
    coder = make_agent("coder", ScriptedPolicy([BAD]))
    debug_policy = ScriptedPolicy([GOOD])
    debugger = make_agent("debugger", debug_policy)
    [traj] = run_chain([_task()], coder, sandbox, ChainConfig(debug_rounds=2), debugger=debugger)
    prompt = debug_policy.calls[0][-1]["content"]
    assert "return x + 2" in prompt and "assert candidate(1) == 2" in prompt
    assert [t.role for t in traj.turns] == ["coder", "debugger"]  # second round not needed
    assert traj.passed and traj.turns[-1].rewrite.given.public.pass_fraction == 0.0


def test_chain_with_tiny_policies_runs_end_to_end(sandbox):
    from coral.policy import tiny_policy

    policy = tiny_policy(seed=0, d_model=64, n_layers=2)
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, seed=3)
    planner = make_agent("planner", policy, sampling=sampling)
    coder = make_agent("coder", policy, sampling=sampling)
    trajs = run_chain([_task(0), _task(1)], coder, sandbox, ChainConfig(plans_per_task=2), planner=planner)
    assert len(trajs) == 4
    for traj in trajs:
        coder_turn = traj.turns[-1]
        assert 0 < len(coder_turn.completion_ids) <= 12
        assert len(coder_turn.logprobs) == len(coder_turn.completion_ids)
        assert traj.private is not None and len(traj.private.tests) == 2
    again = run_chain([_task(0), _task(1)], coder, sandbox, ChainConfig(plans_per_task=2), planner=planner)
    assert [t.turns[-1].text for t in again] == [t.turns[-1].text for t in trajs]  # seeded
