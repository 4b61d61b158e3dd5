"""Golden rewards and GRPO groups of the retriever and the debugger on hand-built trajectories."""

import pytest

from coral.corecode.recipe import CoReCodeConfig, fix_counts, group_key
from coral.corecode.rewards import score_chain, score_debugger, written_result
from coral.train.grpo import assign_advantages, unique_turns
from coral.train.rewards import CodeReward
from coral.trajectory import Credit, ExecutionResult, Rewrite, TestResult, Trajectory, Turn, Verdicts

FRACTION = CodeReward("fraction", 0.0)


def _v(public, private):
    """(public, private) verdicts from strings of p (pass) and f (fail): _v("pf", "ff")."""
    res = lambda s: ExecutionResult(tuple(TestResult("pass" if c == "p" else "fail") for c in s))  # noqa: E731
    return Verdicts(res(public), res(private))


def _turn(role, verdicts=None, given=None, given_code=None, chosen=False, **credit):
    rewrite = Rewrite(given_code, given, chosen) if given is not None else None
    return Turn(role, role, 0, "", "x", completion_ids=[1], logprobs=[0.0], parsed="code", credit=Credit(**credit),
                verdicts=verdicts, rewrite=rewrite)


def _rewrites(traj, given, round_index, verdicts, best=0):
    """Append one round of rewrites of the trajectory's current code, as the chain does."""
    k = traj.turns_of("coder")[0].credit.sample_id
    for i, v in enumerate(verdicts):
        traj.turns.append(_turn("debugger", task_id="t", plan_id=0, sample_id=k, debug_round=round_index, rewrite=i,
                                chosen=i == best, verdicts=v, given=given, given_code="code"))
    traj.verdicts = verdicts[best]


def _debug_trajectories():
    """Code 0 fails (reward 0.25 with fraction correctness); two rounds of two rewrites. Code 1 already
    passes (reward 1) and is rewritten anyway (debug_when "always"): one rewrite keeps it, one breaks it."""
    a_coder, b_coder = _v("pf", "ff"), _v("pp", "pp")
    a = Trajectory("t", [_turn("coder", task_id="t", plan_id=0, sample_id=0, verdicts=a_coder)])
    b = Trajectory("t", [_turn("coder", task_id="t", plan_id=0, sample_id=1, verdicts=b_coder)])
    _rewrites(a, a_coder, 1, [_v("pp", "pf"), _v("ff", "ff")])  # 0.75, 0.0
    _rewrites(a, _v("pp", "pf"), 2, [_v("pp", "pp"), _v("pp", "pf")])  # 1.0, 0.75
    _rewrites(b, b_coder, 1, [_v("pp", "pp"), _v("pp", "ff")])  # 1.0, 0.5
    return [a, b]


def _debugger_rewards(mode):
    trajs = _debug_trajectories()
    score_debugger(trajs, {}, {"t": None}, FRACTION, mode)
    return trajs, [[t.reward for t in tr.turns_of("debugger")] for tr in trajs]


def test_an_improving_debugger_earns_its_gain_over_the_code_of_its_own_round():
    _, rewards = _debugger_rewards("improvement")
    # code 0: round 1 from 0.25 to 0.75 / 0; round 2 from round 1's chosen 0.75 to 1.0 / 0.75
    assert rewards[0] == pytest.approx([0.5, -0.25, 0.25, 0.0])
    # a code that already passed: keeping it earns nothing, breaking it costs half the tests
    assert rewards[1] == pytest.approx([0.0, -0.5])


def test_a_pass_debugger_earns_its_rewrites_own_reward_even_for_a_code_that_already_passed():
    _, rewards = _debugger_rewards("pass")
    assert rewards == [pytest.approx([0.75, 0.0, 1.0, 0.75]), pytest.approx([1.0, 0.5])]


def test_debugger_groups_are_one_codes_rewrites_per_round_or_one_tasks_per_round():
    trajs, _ = _debugger_rewards("improvement")
    turns = unique_turns([tr.turns_of("debugger") for tr in trajs])
    assign_advantages(turns, group_key(CoReCodeConfig(debugger_group="code")), "dr_grpo")
    # groups {0.5, -0.25}, {0.25, 0}, {0, -0.5}: reward minus the group mean
    assert [t.advantage for t in turns] == pytest.approx([0.375, -0.375, 0.125, -0.125, 0.25, -0.25])
    assign_advantages(turns, group_key(CoReCodeConfig(debugger_group="task")), "dr_grpo")
    # round 1: {0.5, -0.25, 0, -0.5} (mean -0.0625); round 2: {0.25, 0}
    assert [t.advantage for t in turns] == pytest.approx([0.5625, -0.1875, 0.125, -0.125, 0.0625, -0.4375])


def test_per_code_groups_give_pass_and_improvement_the_same_advantages():
    """The given code's reward is one constant per group: subtracting it moves no advantage."""
    out = []
    for mode in ("pass", "improvement"):
        trajs, _ = _debugger_rewards(mode)
        turns = unique_turns([tr.turns_of("debugger") for tr in trajs])
        assign_advantages(turns, group_key(CoReCodeConfig()), "dr_grpo")
        out.append([t.advantage for t in turns])
    assert out[0] == pytest.approx(out[1])


def test_the_coder_is_rewarded_for_its_own_code_not_for_the_debuggers_fix():
    trajs = _debug_trajectories()
    results = [written_result(tr.turns_of("coder")[-1]) for tr in trajs]
    score_chain(trajs, results, {}, {"t": None}, FRACTION)
    assert [tr.turns_of("coder")[0].reward for tr in trajs] == [0.25, 1.0]
    assert trajs[0].private.passed  # the debugger's fix passes; the coder's reward did not change
    final = [tr.verdicts.all for tr in trajs]
    counts = fix_counts(results, final, trajs)
    assert counts == {"debugger/fix_rate": 1.0, "debugger/fixable": 1.0, "debugger/break_rate": 0.0}


def test_a_debugger_turn_without_verdicts_is_refused():
    trajs = _debug_trajectories()
    trajs[0].turns_of("debugger")[0].verdicts = None
    with pytest.raises(ValueError, match="debugger turn of agent 'debugger' has no verdicts"):
        score_debugger(trajs, {}, {"t": None}, FRACTION)


def _retrieval_trajectories():
    """Task t: retrieval 0 with plans 0 and 1, retrieval 1 with plans 2 and 3, two codes per plan."""
    trajs, results = [], []
    codes = {0: ["pp", "ff"], 1: ["pp", "pp"], 2: ["ff", "ff"], 3: ["pf", "ff"]}
    for r in (0, 1):
        retrieval = _turn("retriever", task_id="t", retrieval_id=r)
        for p in (2 * r, 2 * r + 1):
            plan = _turn("planner", task_id="t", plan_id=p, retrieval_id=r)
            for c, verdict in enumerate(codes[p]):
                coder = _turn("coder", task_id="t", plan_id=p, retrieval_id=r, sample_id=2 * p + c)
                trajs.append(Trajectory("t", [retrieval, plan, coder]))
                results.append(ExecutionResult(_v(verdict, "").public.tests))
    return trajs, results


def test_a_retrieval_earns_the_mean_or_max_of_every_code_written_below_it():
    trajs, results = _retrieval_trajectories()
    score_chain(trajs, results, {}, {"t": None}, FRACTION)
    # codes below retrieval 0: 1, 0, 1, 1; below retrieval 1: 0, 0, 0.5, 0
    assert [trajs[i].turns[0].reward for i in (0, 4)] == [0.75, 0.125]
    assert [trajs[i].turns[1].reward for i in (0, 2, 4, 6)] == [0.5, 1.0, 0.0, 0.25]
    score_chain(trajs, results, {}, {"t": None}, FRACTION, "max")
    assert [trajs[i].turns[0].reward for i in (0, 4)] == [1.0, 0.5]


def test_retrievals_group_by_task_and_plans_by_retrieval():
    trajs, results = _retrieval_trajectories()
    score_chain(trajs, results, {}, {"t": None}, FRACTION)
    turns = unique_turns([tr.turns for tr in trajs])
    assign_advantages(turns, group_key(CoReCodeConfig()), "dr_grpo")
    by_role = {role: [t.advantage for t in turns if t.role == role] for role in ("retriever", "planner")}
    assert by_role["retriever"] == pytest.approx([0.3125, -0.3125])  # 0.75, 0.125 around 0.4375
    assert by_role["planner"] == pytest.approx([-0.25, 0.25, -0.125, 0.125])  # within each retrieval


def test_a_retriever_turn_without_retrieval_id_is_refused():
    trajs, results = _retrieval_trajectories()
    trajs[0].turns[0].credit = Credit("t")  # no retrieval_id
    with pytest.raises(ValueError, match="retriever turn .* no task_id/retrieval_id"):
        score_chain(trajs, results, {}, {"t": None}, FRACTION)


def test_roles_must_be_in_the_chain_and_have_groups_to_be_trained():
    with pytest.raises(ValueError, match="'debugger' is not in the chain; set debug_rounds > 0"):
        CoReCodeConfig(train_roles=("debugger",))
    with pytest.raises(ValueError, match="'rewrites_per_code' must be >= 2 to train the debugger"):
        CoReCodeConfig(train_roles=("debugger",), debug_rounds=1, rewrites_per_code=1)
    with pytest.raises(ValueError, match="'retrievals_per_task' must be >= 2 to train the retriever"):
        CoReCodeConfig(train_roles=("retriever",), retrieved_examples=1, retrievals_per_task=1)
    cfg = CoReCodeConfig(train_roles=("retriever", "debugger"), retrieved_examples=1, debug_rounds=2)
    assert cfg.chain_roles == ("planner", "coder", "retriever", "debugger")
