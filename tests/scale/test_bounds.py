"""Every wait on Ray has a bound, and what fails midway leaves no actor behind: a dead actor with no room
for its replacement (a lost node), a shard that never returns, an actor that fails to start, a
distribute that fails after its rollout actors started; and `local` starts a Ray of its own on loopback
whatever a crashed run left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from coral.policy import ScriptedPolicy
from coral.policy.base import GenerationRequest, user
from coral.scale import ActorLostError, RayPolicy, RaySandbox, ScaleOut
from coral.scale.actors import ActorGroup
from coral.scale.rollout import RolloutWorker
from tests.scale.ray_support import kill_dead

ROOT = Path(__file__).resolve().parents[2]


def free_cpus(ray) -> float:
    return ray.available_resources().get("CPU", 0.0)


def back_to(ray, cpus: float, timeout_s: float = 30.0) -> bool:
    """Whether the free CPUs are back to `cpus` within `timeout_s` (Ray frees a killed actor's late)."""
    deadline = time.monotonic() + timeout_s
    while free_cpus(ray) < cpus - 1e-9:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.timeout(120, method="thread")  # before the room check the replacement stayed pending and generate never returned
def test_a_dead_actor_with_no_room_for_its_replacement_fails_the_call_naming_the_cpus(ray_cluster, monkeypatch):
    import coral.scale.actors as actors

    monkeypatch.setattr(actors, "ROOM_WAIT_S", 1.0)
    cpus = round(free_cpus(ray_cluster), 4)  # every free CPU, as the default share leaves after a node loss
    policy = RayPolicy(ScriptedPolicy(["x"]), 1, cpus_per_worker=cpus)
    squatter = None
    try:
        kill_dead(ray_cluster, policy.group.actors[0])
        # another client's actor (any importable class) takes the dead actor's CPUs
        squatter = ray_cluster.remote(ScriptedPolicy).options(num_cpus=cpus).remote(["y"])
        ray_cluster.get(squatter.__ray_ready__.remote(), timeout=60)
        with pytest.raises(ActorLostError, match=rf"^rollout: actor 0 died and cannot be replaced: it needs {cpus:g} "
                                                 r"CPU, the Ray cluster has 0 CPU free of 2 \(a lost node"):
            policy.generate([GenerationRequest(user("a"))])
    finally:
        if squatter is not None:
            ray_cluster.kill(squatter)
        policy.close()


def test_a_shard_that_returns_nothing_in_time_fails_the_call_and_its_actor_is_replaced(ray_cluster):
    from coral.trajectory import TestCase

    check = [TestCase("assert", "assert candidate() == 1")]
    sandbox = RaySandbox(1, workers=1, timeout_s=60.0, call_timeout_s=2.0, cpus_per_actor=0.25)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"sandbox: run_many of shard 0 on actor 0 gave no result within "
                                               r"call_timeout_s=2 s; the actor was killed"):
            sandbox.run("def f():\n    while True:\n        pass\n", check, entry_point="f")
        assert time.monotonic() - start < 30
        assert sandbox.run("def f():\n    return 1\n", check, entry_point="f").passed
        assert sandbox.restarts == 1
    finally:
        sandbox.close()


def test_an_actor_that_fails_to_start_fails_its_group_and_no_actor_of_the_group_stays(ray_cluster):
    before = free_cpus(ray_cluster)
    specs = iter([{}, {"broken": "/no/such/model"}])  # the second actor's replica cannot be built

    def make_args():
        return {"s": ScriptedPolicy(["a"])}, next(specs), {}, 1

    with pytest.raises(ActorLostError, match=r"rollout: actor 1 failed to start: .*not a model directory"):
        ActorGroup("rollout", RolloutWorker, make_args, 2, num_cpus=0.25)
    assert back_to(ray_cluster, before), "the actor that did start still holds its CPU"


def test_a_distribute_that_fails_after_its_rollout_actors_started_stops_them(ray_cluster):
    class BadSandbox:  # settings the sandbox actors cannot take: RaySandbox fails after the pool started
        workers, timeout_s = 0, 1.0

    before = free_cpus(ray_cluster)
    scale = ScaleOut("local", rollout_workers=1, sandbox_actors=1, cpus_per_worker=0.25)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        scale.distribute(ScriptedPolicy(["x"]), BadSandbox())
    assert scale.started == []
    assert back_to(ray_cluster, before), "the rollout actor still holds its CPU"


# each starts Ray in a subprocess (5-9 s); the address file is what a crashed run leaves behind
@pytest.mark.parametrize("left_behind", ["address file", pytest.param("RAY_ADDRESS", marks=pytest.mark.slow)])
def test_local_starts_a_ray_of_its_own_on_loopback_whatever_a_crashed_run_left_behind(left_behind):
    # `ray.init()` joins the cluster named by RAY_ADDRESS, else the one a crashed run's address file names
    ray_tmp = tempfile.mkdtemp(prefix="coral-ray-")  # short: Ray's socket paths live below it
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_TMPDIR": ray_tmp}
    if left_behind == "RAY_ADDRESS":
        env["RAY_ADDRESS"] = "127.0.0.1:9"
    else:
        env.pop("RAY_ADDRESS", None)
        Path(ray_tmp, "ray_current_cluster").write_text("127.0.0.1:9\n")
    script = ("import json; from coral.scale.cluster import connect; ray = connect('local', num_cpus=1); "
              "print(json.dumps([ray.util.get_node_ip_address(), [n['NodeManagerAddress'] for n in ray.nodes()], "
              "ray.get_runtime_context().gcs_address])); ray.shutdown()")
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-1500:]
    node_ip, nodes, gcs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert node_ip == "127.0.0.1" and nodes == ["127.0.0.1"]
    assert gcs.startswith("127.0.0.1:") and gcs != "127.0.0.1:9"
