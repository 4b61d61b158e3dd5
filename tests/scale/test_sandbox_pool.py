"""RaySandbox: Sandbox's settings and verdicts, on Ray actors."""

from __future__ import annotations

from pathlib import Path

import pytest

from coral.sandbox import Job, Sandbox
from coral.scale import RaySandbox
from coral.trajectory import TestCase

ADD = TestCase("assert", "assert candidate(2, 3) == 5")


def test_an_unknown_sandbox_argument_fails_before_any_actor_starts():
    with pytest.raises(TypeError, match="unknown Sandbox argument 'workerz'"):
        RaySandbox(1, workerz=2)
    with pytest.raises(ValueError, match="Sandbox.workers must be >= 1"):
        RaySandbox(1, workers=0)


def test_a_ray_sandbox_like_a_local_one_has_its_settings_and_gives_its_verdicts(ray_cluster):
    hidden = Path(pytest.__file__).parent  # below the interpreter's directories, which programs may read
    peek = f"def add(a, b):\n    open({str(hidden / '__init__.py')!r}).read()\n    return a + b\n"
    jobs = [Job("def add(a, b):\n    return a + b\n", (ADD,), "add"),
            Job("def add(a, b):\n    return a - b\n", (ADD,), "add"),
            Job("def add(a, b):\n    while True: pass\n", (ADD,), "add"),
            Job("def add(a, b)\n", (ADD,), "add"),
            Job(peek, (ADD,), "add")]
    with Sandbox(workers=1, timeout_s=1.5, memory_mb=512, cache=False, hidden_paths=(str(hidden),)) as local:
        expected = [[t.verdict for t in r.tests] for r in local.run_many(jobs)]
        with RaySandbox.like(local, 2, cpus_per_actor=0.25) as remote:
            # hidden_paths was left out once: a Ray pool's programs could read what the local sandbox hides
            assert remote.sandbox_kwargs == {"workers": 1, "timeout_s": 1.5, "memory_mb": 512, "cache": False,
                                             "allow_subprocess": False, "require_isolation": False,
                                             "hidden_paths": (str(hidden),)}
            got = [[t.verdict for t in r.tests] for r in remote.run_many(jobs)]
            assert remote.run("def add(a, b):\n    return a + b\n", [ADD], entry_point="add").passed
    assert got == expected == [["pass"], ["fail"], ["timeout"], ["error"], ["error"]]


def test_actors_the_cluster_cannot_fit_fail_at_once_instead_of_hanging(ray_cluster):
    with pytest.raises(ValueError, match=r"sandbox: 2 actors x 64 CPU need 128 CPUs, the Ray cluster has .* free of 2"):
        RaySandbox(2, cpus_per_actor=64)
