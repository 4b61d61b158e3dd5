"""Shared Ray fixtures: one local Ray instance for the session (ray.init costs seconds), the bench
module whose CoRe-Code-style step the equivalence and fault tests run, and one set of rollout and
sandbox actors reused by those tests (each actor start imports torch: seconds on a loaded machine)."""

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

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
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
def actors(ray_cluster, make_policies):
    """Trainer policies (planner, coder), a 2-actor RolloutPool of them and a 2-actor RaySandbox."""
    from coral.scale import RaySandbox, RolloutPool

    trainers = make_policies()
    initial = {r: {n: t.clone() for n, t in p.model.state_dict().items()} for r, p in trainers.items()}
    pool = RolloutPool(trainers, 2, cpus_per_worker=0.25)
    sandbox = RaySandbox(2, workers=1, timeout_s=TIMEOUT_S, cpus_per_actor=0.25)
    yield SimpleNamespace(trainers=trainers, initial=initial, pool=pool, sandbox=sandbox,
                          policies={r: pool.policy(r) for r in trainers})
    pool.close()
    sandbox.close()


@pytest.fixture
def local_sandbox():
    """The sandbox of the runs without Ray, with the limits of the shared RaySandbox."""
    from coral.sandbox import Sandbox

    with Sandbox(workers=2, timeout_s=TIMEOUT_S) as sandbox:
        yield sandbox


@pytest.fixture
def ray_run(actors, step_bench):
    """The shared actors with the trainers back at their initial weights (pushed at the next
    generate) and fresh learners."""
    for role, policy in actors.trainers.items():
        policy.model.load_state_dict(actors.initial[role])
    actors.learners = step_bench.make_learners(actors.trainers)
    return actors
