"""A rollout or sandbox actor killed in the middle of a step is replaced and its shard retried (same
results), or, out of retries, the step fails with a clear error: never a silent zero reward.

Kills happen at known points, not after a timer: an ActorGroup's `before_send` hook kills the actor
about to receive a shard and waits until Ray reports it dead, so the shard surely reaches a dead actor,
whatever the machine's load."""

from __future__ import annotations

import pytest

from coral.policy import ScriptedPolicy
from coral.policy.base import GenerationRequest, user
from coral.scale import ActorLostError, RayPolicy, RaySandbox
from coral.scale.actors import ActorGroup


def kill_dead(ray, actor) -> None:
    """Kill `actor` and return once Ray answers calls on it with RayActorError."""
    ray.kill(actor, no_restart=True)
    while True:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            return


def kill_on_send(ray, group: ActorGroup, method: str, sends: set[int]) -> list[int]:
    """Install a hook that kills the receiving actor before the n-th send of `method` for each n in
    `sends` (1-based, retries count); returns the list of sends seen so far (one entry per send)."""
    seen: list[int] = []

    def hook(name: str, actor: int, shard: int) -> None:
        if name == method:
            seen.append(shard)
            if len(seen) in sends:
                kill_dead(ray, group.actors[actor])

    group.before_send = hook
    return seen


def test_a_step_with_actors_killed_mid_step_gives_the_results_of_a_step_without_ray(ray_run, ray_cluster,
                                                                                   step_bench, make_policies,
                                                                                   local_sandbox):
    from coral.benchmarks import load_benchmark

    tasks = load_benchmark("procedural-train", limit=2, seed=0)
    local = make_policies()
    expected = step_bench.rl_step(local, step_bench.make_learners(local), local_sandbox, tasks, 0, max_new_tokens=8)

    restarts = ray_run.pool.restarts, ray_run.sandbox.restarts
    # the coder's first shard (sends 1-2 are the planner's), and the sandbox's first shard
    rollout_sends = kill_on_send(ray_cluster, ray_run.pool.group, "generate", {3})
    sandbox_sends = kill_on_send(ray_cluster, ray_run.sandbox.group, "run_many", {1})
    try:
        got = step_bench.rl_step(ray_run.policies, ray_run.learners, ray_run.sandbox, tasks, 0, max_new_tokens=8)
    finally:
        ray_run.pool.group.before_send = ray_run.sandbox.group.before_send = None
    assert (ray_run.pool.restarts, ray_run.sandbox.restarts) == (restarts[0] + 1, restarts[1] + 1)
    # every shard of a call is sent before any result is read: the lost shard 0 goes again after shard 1
    assert rollout_sends[:5] == [0, 1, 0, 1, 0]  # the planner's two shards, then the coder's
    assert sandbox_sends[:3] == [0, 1, 0]
    assert got["completion_ids"] == expected["completion_ids"]
    assert got["rewards"] == expected["rewards"]
    assert len(set(got["rewards"])) > 1


def test_an_actor_that_dies_past_its_retries_fails_the_call_naming_it(ray_cluster):
    policy = RayPolicy(ScriptedPolicy(["def f(): pass"]), 1, max_retries=0, cpus_per_worker=0.25)
    try:
        assert policy.generate([GenerationRequest(user("hi"))])[0].text == "def f(): pass"
        kill_dead(ray_cluster, policy.group.actors[0])
        with pytest.raises(ActorLostError, match=r"rollout: actor 0 died 1 times .* max_retries=0"):
            policy.generate([GenerationRequest(user("hi"))])
    finally:
        policy.close()
    with pytest.raises(RuntimeError, match="rollout: the actor group is closed"):
        policy.generate([GenerationRequest(user("hi"))])


def test_sandbox_actors_that_keep_dying_fail_the_batch_instead_of_returning_verdicts(ray_cluster):
    from coral.trajectory import TestCase

    sandbox = RaySandbox(1, max_retries=1, workers=1, cpus_per_actor=0.25)
    sends = kill_on_send(ray_cluster, sandbox.group, "run_many", {1, 2, 3})
    try:
        with pytest.raises(ActorLostError, match="sandbox: actor 0 died 2 times"):
            sandbox.run("def f():\n    return 1\n", [TestCase("assert", "assert candidate() == 1")], entry_point="f")
        assert len(sends) == 2 and sandbox.restarts == 1  # the first send and its one retry, then the error
    finally:
        sandbox.close()


def test_two_shards_lost_with_one_actor_replace_it_once_and_both_are_retried(ray_cluster):
    from coral.scale.rollout import RolloutWorker

    replies = ScriptedPolicy(["a"])
    group = ActorGroup("rollout", RolloutWorker, lambda: ({"s": replies}, {}, {}, 1), 1, max_retries=1,
                       num_cpus=0.25)
    try:
        kill_on_send(ray_cluster, group, "generate", {1})  # both shards go to the actor killed before the first
        shards = [("s", [GenerationRequest(user("x"))]), ("s", [GenerationRequest(user("y"))])]
        assert [[c.text for c in out] for out in group.map("generate", shards)] == [["a"], ["a"]]
        assert group.restarts == 1
    finally:
        group.close()
