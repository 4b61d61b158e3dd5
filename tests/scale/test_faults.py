"""A rollout or sandbox actor killed in the middle of a step is replaced and its shard retried (same
results), or, out of retries, the step fails with a clear error: never a silent zero reward."""

from __future__ import annotations

import threading
import time

import pytest

from coral.policy import ScriptedPolicy
from coral.policy.base import GenerationRequest, user
from coral.scale import ActorLostError, RayPolicy, RaySandbox


def kill_when_busy(ray, groups, timeout_s: float = 60.0) -> threading.Thread:
    """A thread that, for each group in turn, kills the first actor seen running a shard."""

    def work():
        for group in groups:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                busy = group.in_flight()
                if busy:
                    ray.kill(busy[0])
                    break
                time.sleep(0.0005)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_a_step_with_actors_killed_mid_step_gives_the_results_of_a_step_without_ray(ray_run, ray_cluster,
                                                                                   step_bench, local_sandbox):
    from coral.benchmarks import load_benchmark

    tasks = load_benchmark("procedural-train", limit=2, seed=0)
    local = step_bench.make_policies()
    expected = step_bench.rl_step(local, step_bench.make_learners(local), local_sandbox, tasks, 0, max_new_tokens=16)

    restarts = ray_run.pool.restarts, ray_run.sandbox.restarts
    killer = kill_when_busy(ray_cluster, [ray_run.pool.group, ray_run.sandbox.group])
    got = step_bench.rl_step(ray_run.policies, ray_run.learners, ray_run.sandbox, tasks, 0, max_new_tokens=16)
    killer.join(timeout=5)
    assert (ray_run.pool.restarts, ray_run.sandbox.restarts) == (restarts[0] + 1, restarts[1] + 1)
    assert got["completion_ids"] == expected["completion_ids"]
    assert got["rewards"] == expected["rewards"]
    assert len(set(got["rewards"])) > 1


def test_an_actor_that_dies_past_its_retries_fails_the_call_naming_it(ray_cluster):
    policy = RayPolicy(ScriptedPolicy(["def f(): pass"]), 1, max_retries=0, cpus_per_worker=0.25)
    try:
        assert policy.generate([GenerationRequest(user("hi"))])[0].text == "def f(): pass"
        ray_cluster.kill(policy.group.actors[0])
        with pytest.raises(ActorLostError, match=r"rollout: actor 0 died 1 times .* max_retries=0"):
            policy.generate([GenerationRequest(user("hi"))])
    finally:
        policy.close()


def test_sandbox_actors_that_keep_dying_fail_the_batch_instead_of_returning_verdicts(ray_cluster):
    from coral.trajectory import TestCase

    sandbox = RaySandbox(1, max_retries=1, workers=1, cpus_per_actor=0.25)
    stop = threading.Event()

    def keep_killing():
        while not stop.is_set():
            for actor in sandbox.group.in_flight():
                ray_cluster.kill(actor)
            time.sleep(0.0005)

    thread = threading.Thread(target=keep_killing, daemon=True)
    thread.start()
    try:
        with pytest.raises(ActorLostError, match="sandbox: actor 0 died 2 times"):
            sandbox.run("def f():\n    return 1\n", [TestCase("assert", "assert candidate() == 1")], entry_point="f")
    finally:
        stop.set()
        thread.join()
        sandbox.close()
