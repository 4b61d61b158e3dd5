"""RaySandbox: a Sandbox whose jobs run on Ray actors, one coral Sandbox (a pool of workers) per actor.

    sandbox = RaySandbox(actors=2, workers=2, timeout_s=4.0)   # Sandbox's arguments, per actor
    results = sandbox.run_many(jobs)                           # in job order, as Sandbox.run_many

Actors are spread over the cluster's nodes (one per node while nodes remain), so `actors` = nodes
gives one sandbox per machine. A job batch is cut into contiguous shards, one per actor. Verdicts
are those of a local Sandbox with the same settings (times and peak memory are measured where the
job ran). When an actor dies mid-batch it is replaced and its shard run again (see actors.py); its
jobs never come back as made-up "error" verdicts, so a lost actor cannot turn into a zero reward.

This module does NOT share result caches across actors: each actor caches what it ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coral.sandbox import Job, Sandbox
from coral.sandbox.protocol import SandboxProtocol
from coral.scale.actors import CALL_TIMEOUT_S, START_TIMEOUT_S, ActorGroup, import_ray, split
from coral.trajectory import ExecutionResult, TestCase

SANDBOX_FIELDS = ("workers", "timeout_s", "memory_mb", "cache", "allow_subprocess", "require_isolation", "hidden_paths")


class SandboxWorker:
    """The actor: one coral Sandbox."""

    def __init__(self, sandbox_kwargs: Mapping[str, Any]) -> None:
        self.sandbox = Sandbox(**sandbox_kwargs)

    def run_many(self, jobs: Sequence[Any]) -> list[ExecutionResult]:
        return self.sandbox.run_many(jobs)

    def isolation(self, _: Any = None) -> str:
        return self.sandbox.isolation

    def node(self, _: Any = None) -> str:
        """The id of the Ray node this actor runs on."""
        return import_ray().get_runtime_context().get_node_id()


class RaySandbox:
    """Sandbox's public methods (`run`, `run_many`, `close`, a context manager) over Ray actors.
    `start_timeout_s` and `call_timeout_s` bound an actor's start and one shard of jobs (see actors.py)."""

    def __init__(self, actors: int = 1, *, max_retries: int = 2, cpus_per_actor: float = 1.0,
                 start_timeout_s: float = START_TIMEOUT_S, call_timeout_s: float = CALL_TIMEOUT_S,
                 **sandbox_kwargs: Any) -> None:
        unknown = sorted(set(sandbox_kwargs) - set(SANDBOX_FIELDS))
        if unknown:
            raise TypeError(f"RaySandbox: unknown Sandbox argument {unknown[0]!r}; known: {list(SANDBOX_FIELDS)}")

        Sandbox(**sandbox_kwargs).close()  # bad settings fail here, in the driver, with Sandbox's message
        self.sandbox_kwargs = dict(sandbox_kwargs)
        self.group = ActorGroup("sandbox", SandboxWorker, lambda: (self.sandbox_kwargs,), actors,
                                max_retries=max_retries, num_cpus=cpus_per_actor,
                                start_timeout_s=start_timeout_s, call_timeout_s=call_timeout_s)

    @classmethod
    def like(cls, sandbox: SandboxProtocol, actors: int = 1, **kwargs: Any) -> RaySandbox:
        """A RaySandbox whose actors each hold a Sandbox with `sandbox`'s settings."""
        settings = {f: getattr(sandbox, f) for f in SANDBOX_FIELDS if hasattr(sandbox, f)}
        if "cache" not in settings and hasattr(sandbox, "_cache"):
            settings["cache"] = sandbox._cache is not None
        return cls(actors, **kwargs, **settings)

    def run(self, code: str, tests: Sequence[TestCase], *, entry_point: str = "", test_setup: str = "",
            timeout_s: float | None = None, memory_mb: int | None = None) -> ExecutionResult:
        return self.run_many([Job(code, tuple(tests), entry_point, test_setup, timeout_s, memory_mb)])[0]

    def run_many(self, jobs: Sequence[Any], progress: bool = False) -> list[ExecutionResult]:
        """Results in job order. `progress` is accepted for Sandbox compatibility and ignored."""
        if not jobs:
            return []
        shards = self.group.map("run_many", split(list(jobs), max(1, len(self.group.actors))))  # closed: map says so
        results = [r for shard in shards for r in shard]
        if len(results) != len(jobs):
            raise RuntimeError(f"RaySandbox: {len(results)} results for {len(jobs)} jobs")
        return results

    @property
    def isolation(self) -> str:
        return self.group.map("isolation", [None])[0]

    @property
    def restarts(self) -> int:
        """Sandbox actors replaced after dying, over this sandbox's life."""
        return self.group.restarts

    def close(self) -> None:
        self.group.close()

    def __enter__(self) -> RaySandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
