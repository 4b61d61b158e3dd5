"""A rollout or sandbox actor killed in the middle of a step is replaced and its shard retried (same
results, from the trainer's current weights), or the step fails with a clear error within a bound:
never a silent zero reward, never a wait without end.

Kills happen at known points, not after a timer: an ActorGroup's `before_send` hook kills the actor
about to receive a shard and waits until Ray reports it dead, so the shard surely reaches a dead actor,
whatever the machine's load."""

from __future__ import annotations

import time

import pytest

from coral.policy import ScriptedPolicy
from coral.policy.base import GenerationRequest, SamplingParams, user
from coral.scale import ActorLostError, RayPolicy, RaySandbox, RolloutPool
from coral.scale.actors import ActorGroup
from tests.scale.ray_support import kill_dead


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


def free_cpus_return_to(ray, cpus: float, timeout_s: float = 30.0) -> bool:
    """Whether Ray's free CPUs are back to `cpus` within `timeout_s` (a killed actor's come back late)."""
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0.0) < cpus - 1e-9:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_actors_killed_in_the_second_step_come_back_with_the_updated_weights(ray_run, ray_cluster, step_bench,
                                                                           tasks, plain):
    first = step_bench.rl_step(ray_run.policies, ray_run.learners, ray_run.sandbox, tasks, 0, max_new_tokens=8)
    restarts = ray_run.pool.restarts, ray_run.sandbox.restarts
    # after the first update: the coder's first shard (sends 1-2 are the planner's) goes to a dead actor,
    # whose replacement must hold the coder's updated weights (its replica is built from a directory that
    # holds the initial ones); and the sandbox's first shard
    rollout_sends = kill_on_send(ray_cluster, ray_run.pool.group, "generate", {3})
    sandbox_sends = kill_on_send(ray_cluster, ray_run.sandbox.group, "run_many", {1})
    try:
        second = step_bench.rl_step(ray_run.policies, ray_run.learners, ray_run.sandbox, tasks, 1, max_new_tokens=8)
    finally:
        ray_run.pool.group.before_send = ray_run.sandbox.group.before_send = None
    assert (ray_run.pool.restarts, ray_run.sandbox.restarts) == (restarts[0] + 1, restarts[1] + 1)
    # every shard of a call is sent before any result is read: the lost shard 0 goes again after shard 1
    assert rollout_sends[:5] == [0, 1, 0, 1, 0]  # the planner's two shards, then the coder's
    assert sandbox_sends[:3] == [0, 1, 0]
    assert step_bench.same_steps(plain.steps, [first, second]) is None


@pytest.fixture(scope="module")
def directory_replica(ray_cluster, tmp_path_factory):
    """A trainer policy and a 1-actor pool whose replica is built from a directory holding other weights
    (a base model the trainer has moved away from, e.g. by its cold start)."""
    from coral.policy.tiny import tiny_policy

    directory = tmp_path_factory.mktemp("base")
    tiny_policy(seed=1, d_model=32, n_layers=1, n_heads=2, max_len=256).save(directory)
    trainer = tiny_policy(seed=0, d_model=32, n_layers=1, n_heads=2, max_len=256)
    pool = RolloutPool({"coder": str(directory)}, 1, trainers={"coder": trainer}, cpus_per_worker=0.25)
    yield trainer, pool
    pool.close()


def assert_serves_the_trainer(pool, trainer) -> None:
    requests = [GenerationRequest(user(f"task {i}"), SamplingParams(max_new_tokens=8, temperature=1.0, seed=i))
                for i in range(3)]
    got, expected = pool.generate("coder", requests), trainer.generate(requests)
    assert [c.completion_ids for c in got] == [c.completion_ids for c in expected]
    for a, b in zip(got, expected, strict=True):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_a_replica_built_from_a_directory_serves_the_trainer_weights_from_its_first_call(directory_replica):
    trainer, pool = directory_replica
    assert_serves_the_trainer(pool, trainer)


def test_a_replica_built_from_a_directory_and_restarted_after_a_push_serves_the_pushed_weights(
        directory_replica, ray_cluster):
    import torch

    trainer, pool = directory_replica
    with torch.no_grad():  # an update, in place as an optimiser step is
        for p in trainer.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    assert_serves_the_trainer(pool, trainer)  # pushed
    restarts = pool.restarts
    kill_dead(ray_cluster, pool.group.actors[0])
    assert_serves_the_trainer(pool, trainer)  # restarted: built from the directory, then the trainer's state
    assert pool.restarts == restarts + 1


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
