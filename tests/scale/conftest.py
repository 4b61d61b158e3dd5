"""Shared Ray fixtures: one local Ray instance for the session (ray.init costs seconds), the bench
module whose CoRe-Code-style step the equivalence and fault tests run, two steps without Ray they
compare against, and one set of rollout and sandbox actors reused by those tests (each actor start
imports torch: seconds on a loaded machine). The rollout actors hold both kinds of replica: the
planner sent as an object, the coder built on the actor from a model directory (the trainer's weights
reach it only from the pool)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

# the programs tests run end in milliseconds; a generous limit keeps a starved, loaded machine from
# turning a pass into a timeout in one of two runs that must agree
TIMEOUT_S = 30.0
BENCH = Path(__file__).resolve().parents[2] / "bench" / "ray_overhead.py"


@pytest.fixture(scope="session")
def ray_cluster():
    import ray  # a dev dependency: a missing ray fails these tests, it does not skip them

    from coral.scale.cluster import start_local

    if not ray.is_initialized():  # `--ray-address local`'s instance: fresh, on loopback, joins nothing
        start_local(num_cpus=2, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def step_bench():
    """bench/ray_overhead.py as a module: its `rl_step`, `make_policies`, `make_learners`."""
    spec = importlib.util.spec_from_file_location("ray_overhead", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ray_overhead"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("ray_overhead", None)


@pytest.fixture(scope="session")
def make_policies(step_bench):
    """The bench's planner and coder at the tests' size: one layer of width 32 (a forward, a backward and an
    actor's copy cost milliseconds; the width does not change what the tests check)."""
    return functools.partial(step_bench.make_policies, d_model=32, n_layers=1)


@pytest.fixture(scope="session")
def actors(ray_cluster, make_policies, tmp_path_factory):
    """Trainer policies (planner, coder), a 2-actor RolloutPool of them (the coder's replica loaded from
    the directory its trainer was saved to) and a 2-actor RaySandbox."""
    from coral.scale import RaySandbox, RolloutPool

    trainers = make_policies()
    initial = {r: {n: t.clone() for n, t in p.model.state_dict().items()} for r, p in trainers.items()}
    coder_dir = tmp_path_factory.mktemp("coder")
    trainers["coder"].save(coder_dir)
    pool = RolloutPool({"planner": trainers["planner"], "coder": str(coder_dir)}, 2, trainers=trainers,
                       cpus_per_worker=0.25)
    sandbox = RaySandbox(2, workers=1, timeout_s=TIMEOUT_S, cpus_per_actor=0.25)
    yield SimpleNamespace(trainers=trainers, initial=initial, pool=pool, sandbox=sandbox,
                          policies={r: pool.policy(r) for r in trainers})
    pool.close()
    sandbox.close()


@pytest.fixture(scope="session")
def tasks():
    from coral.benchmarks import load_benchmark

    return load_benchmark("procedural-train", limit=2, seed=0)


@pytest.fixture(scope="session")
def plain(step_bench, make_policies, tasks):
    """Two RL steps without Ray (the reference the Ray runs must equal), the policies they trained, and
    the second step sampled from the initial weights instead: what replicas that missed the first
    update would give."""
    from coral.sandbox import Sandbox

    with Sandbox(workers=2, timeout_s=TIMEOUT_S) as sandbox:
        trained, stale = make_policies(), make_policies()
        learners = step_bench.make_learners(trained)
        steps = [step_bench.rl_step(trained, learners, sandbox, tasks, s, max_new_tokens=8) for s in range(2)]
        stale_step = step_bench.rl_step(stale, step_bench.make_learners(stale), sandbox, tasks, 1, max_new_tokens=8)
    return SimpleNamespace(steps=steps, trained=trained, stale_second_step=stale_step)


@pytest.fixture
def ray_run(actors, step_bench):
    """The shared actors with the trainers back at their initial weights (pushed at the next
    generate) and fresh learners."""
    for role, policy in actors.trainers.items():
        policy.model.load_state_dict(actors.initial[role])
    actors.learners = step_bench.make_learners(actors.trainers)
    return actors
