"""The chain with a retriever and a debugger that rewrites each code several times per round."""

import pytest
from test_chain import BAD, GOOD, _task

from coral.agents import make_agent
from coral.policy import ScriptedPolicy
from coral.sandbox import Sandbox
from coral.workflows.chain import EXAMPLES_HEADER, ChainConfig, run_chain

HALF = "```python\ndef f(x):\n    return x * 2 if x != 1 else 0\n```"  # fails the public test only


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


def test_retrievals_reach_planner_and_coder_and_trajectories_are_retrieval_major(sandbox):
    retriever = make_agent("retriever", ScriptedPolicy(["Triple x.\nEXAMPLE-A", "Add one.\nEXAMPLE-B"]))
    planner_policy, coder_policy = ScriptedPolicy(["1. a"]), ScriptedPolicy([GOOD, BAD])
    trajs = run_chain([_task(0)], make_agent("coder", coder_policy), sandbox,
                      ChainConfig(retrievals_per_task=2, plans_per_task=2, codes_per_plan=2),
                      planner=make_agent("planner", planner_policy), retriever=retriever)
    assert len(trajs) == 8
    retrievals = [tr.turns[0] for tr in trajs]
    assert retrievals[0] is retrievals[3] and retrievals[4] is retrievals[7] and retrievals[0] is not retrievals[4]
    assert [t.credit.retrieval_id for t in retrievals] == [0] * 4 + [1] * 4
    assert [tr.turns[1].credit.retrieval_id for tr in trajs] == [0] * 4 + [1] * 4
    assert [tr.turns[2].credit.plan_id for tr in trajs] == [0, 0, 1, 1, 2, 2, 3, 3]
    plan_prompts = [c[-1]["content"] for c in planner_policy.calls]
    assert all(EXAMPLES_HEADER in p for p in plan_prompts)
    assert ["EXAMPLE-A" in p for p in plan_prompts] == [True, True, False, False]
    assert ["EXAMPLE-B" in c[-1]["content"] for c in coder_policy.calls] == [False] * 4 + [True] * 4
    assert all(tr.turns[-1].verdicts is not None for tr in trajs)


def test_each_round_rewrites_a_failing_code_several_times_and_goes_on_with_the_best_on_public_tests(sandbox):
    debugger_policy = ScriptedPolicy([BAD, HALF, GOOD, BAD])
    coder = make_agent("coder", ScriptedPolicy([BAD, GOOD]))
    trajs = run_chain([_task(0)], coder, sandbox, ChainConfig(codes_per_plan=2, debug_rounds=2, rewrites_per_code=2),
                      debugger=make_agent("debugger", debugger_policy))
    failing, passing = trajs
    assert [t.role for t in passing.turns] == ["coder"]  # public tests pass: not debugged
    rewrites = failing.turns_of("debugger")
    # round 1 rewrites BAD, HALF: both fail the public test, the first goes on (HALF passes the private tests,
    # which the chain never looks at); round 2: GOOD, BAD
    assert [(t.credit.debug_round, t.credit.rewrite, t.rewrite.chosen) for t in rewrites] == \
        [(1, 0, True), (1, 1, False), (2, 0, True), (2, 1, False)]
    assert rewrites[2].rewrite.given_code == rewrites[0].parsed  # round 2 saw round 1's chosen code
    assert failing.passed and failing.code == rewrites[2].parsed
    assert rewrites[1].verdicts.private.passed and rewrites[1].verdicts.public.pass_fraction == 0
    assert failing.metrics["coder_passed"] == 0.0 and failing.metrics["debug_turns"] == 4.0
    assert len(debugger_policy.calls) == 4


def test_the_best_public_rewrite_wins_even_when_it_is_not_the_first(sandbox):
    debugger = make_agent("debugger", ScriptedPolicy([BAD, GOOD]))
    [traj] = run_chain([_task(0)], make_agent("coder", ScriptedPolicy([BAD])), sandbox,
                       ChainConfig(debug_rounds=1, rewrites_per_code=2), debugger=debugger)
    assert [t.rewrite.chosen for t in traj.turns_of("debugger")] == [False, True] and traj.passed


def test_debug_when_always_rewrites_codes_that_already_pass(sandbox):
    debugger = make_agent("debugger", ScriptedPolicy([BAD]))
    [traj] = run_chain([_task(0)], make_agent("coder", ScriptedPolicy([GOOD])), sandbox,
                       ChainConfig(debug_rounds=1, debug_when="always"), debugger=debugger)
    [rewrite] = traj.turns_of("debugger")
    assert rewrite.rewrite.given.private.passed and not traj.passed and traj.metrics["coder_passed"] == 1.0
    with pytest.raises(ValueError, match="debug_when"):
        ChainConfig(debug_when="sometimes")
