"""No two sampled requests of a run share a seed: eval, search and the CoRe-Code and MARS2 steps, with a
policy that records the seed of every request it is asked."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from scripted_tasks import InProcessSandbox, add_task, correct, half_right

from coral.agents import make_agent
from coral.mars2.tree import TreeConfig, search
from coral.policy.base import GenerationRequest, SamplingParams
from coral.policy.scripted import ScriptedPolicy
from coral.workflows.chain import ChainConfig, run_chain

SAMPLED = SamplingParams(temperature=1.0, seed=0)


class RecordingPolicy(ScriptedPolicy):
    """Scripted replies; `seeds` holds the seed of every request, in order."""

    def __init__(self, replies) -> None:
        super().__init__(replies)
        self.seeds: list[int | None] = []

    def generate(self, requests: Sequence[GenerationRequest]):
        self.seeds += [r.sampling.seed for r in requests]
        return super().generate(requests)


def chain_reply(messages) -> str:
    """A plan, a half-right code (public tests fail, so the debugger runs), a correct fix."""
    prompt = messages[-1]["content"]
    if "Fixed code:" in prompt:
        return correct(messages)
    return half_right(messages) if "Code:" in prompt else "1. add k to x"


def assert_all_distinct(seeds: list[int | None], expected: int) -> None:
    assert len(seeds) == expected and None not in seeds
    assert len(set(seeds)) == len(seeds), f"{len(seeds) - len(set(seeds))} requests reused a seed"


def test_an_eval_over_several_batches_never_reuses_a_seed(tmp_path):
    from coral.evaluation import EvalConfig, run_eval

    policy = RecordingPolicy(chain_reply)
    agents = {role: make_agent(role, policy, sampling=SAMPLED) for role in ("planner", "coder", "debugger")}
    cfg = EvalConfig(samples_per_task=3, ks=(1,), temperature=1.0, tasks_per_batch=2, debug_rounds=1,
                     out_dir=str(tmp_path))
    run_eval(cfg, tasks=[add_task(k) for k in range(1, 6)], agents=agents, sandbox=InProcessSandbox(), progress=False)
    assert_all_distinct(policy.seeds, 3 * 5 * 3)  # plans, codes, fixes of 5 tasks x 3 samples


def test_a_sample_keeps_its_stream_whatever_batch_it_is_in():
    policy = RecordingPolicy(chain_reply)
    coder = make_agent("coder", policy, sampling=SAMPLED)
    tasks = [add_task(k) for k in range(1, 4)]
    run_chain(tasks, coder, InProcessSandbox(), ChainConfig(codes_per_plan=2))
    together = list(policy.seeds)
    policy.seeds.clear()
    for task in reversed(tasks):
        run_chain([task], coder, InProcessSandbox(), ChainConfig(codes_per_plan=2))
    alone = policy.seeds[4:] + policy.seeds[2:4] + policy.seeds[:2]
    assert alone == together


def test_a_task_twice_in_one_batch_samples_two_streams():
    policy = RecordingPolicy(chain_reply)
    run_chain([add_task(1), add_task(1)], make_agent("coder", policy, sampling=SAMPLED), InProcessSandbox())
    assert_all_distinct(policy.seeds, 2)


def test_a_seeded_agent_refuses_to_act_without_request_keys():
    agent = make_agent("coder", RecordingPolicy(chain_reply), sampling=SAMPLED)
    with pytest.raises(ValueError, match="no request keys"):
        agent.act([{"problem": "p", "plan": ""}])
    with pytest.raises(ValueError, match="'k' appears twice"):
        agent.act([{"problem": "p", "plan": ""}] * 2, keys=["k", "k"])


def test_a_search_never_reuses_a_seed_across_agents_lockstep_steps_or_training_steps():
    policies = [RecordingPolicy(correct), RecordingPolicy(half_right)]
    agents = [make_agent("solver", p, agent_id=f"agent{i}", sampling=SAMPLED) for i, p in enumerate(policies)]
    tasks = [add_task(k) for k in range(1, 5)]
    for step in (1, 2):
        search(tasks, agents, InProcessSandbox(), TreeConfig(max_nodes=5), step=step)
    assert_all_distinct(policies[0].seeds + policies[1].seeds, 2 * 4 * 5)


def test_corecode_rl_steps_and_their_evaluation_never_reuse_a_seed(tmp_path):
    from coral.corecode.evaluate import evaluate_pass1
    from coral.corecode.recipe import CoReCodeConfig, rl_step

    # 26 tasks x 4 plans: more than 101 requests per role in one step, where the old role offsets collided
    cfg = CoReCodeConfig(tasks_per_step=26, plans_per_task=4, codes_per_plan=2, efficiency_weight=0.0,
                         out_dir=str(tmp_path))
    policy = RecordingPolicy(chain_reply)
    policies = {"planner": policy, "coder": policy}
    tasks = [add_task(k) for k in range(1, 27)]
    sandbox = InProcessSandbox()
    for step in (1, 2):
        rl_step(cfg, step, tasks, policies, {}, sandbox)  # no learners: the rollout alone
    evaluate_pass1(cfg, policies, tasks[:4], sandbox, "eval", samples=2)
    assert_all_distinct(policy.seeds, 2 * (26 * 4 + 26 * 4 * 2) + 2 * 4 * 2)


class _NoLearning:
    def update(self, turns) -> dict[str, float]:
        return {}


def test_mars2_steps_and_their_evaluation_never_reuse_a_seed():
    from coral.mars2.recipe import MARS2Config, evaluate_search, mars2_step

    # 110 trees: one agent's batch holds more than 101 requests, where the old agent offsets collided
    cfg = MARS2Config(max_nodes_per_tree=2, tasks_per_step=110, algorithm="best_of_n", eval_algorithm="best_of_n")
    policies = [RecordingPolicy(half_right), RecordingPolicy(half_right)]
    tasks = [add_task(k) for k in range(1, 111)]
    sandbox = InProcessSandbox()
    for step in (1, 2):
        mars2_step(cfg, step, tasks, policies, [_NoLearning(), _NoLearning()], sandbox)
    evaluate_search(cfg, policies, tasks[:3], sandbox)
    assert_all_distinct(policies[0].seeds + policies[1].seeds, 2 * 110 * 2 + 3 * 2)
