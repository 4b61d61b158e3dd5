"""The Sandbox plug point: what workflows, evaluation and recipes need of a code executor.

`coral.sandbox.Sandbox` (bubblewrap, fork servers, seccomp) is the implementation; a test double, a Ray
pool of sandboxes or a remote executor fits wherever a `SandboxProtocol` is taken if it provides these two
methods. This module does NOT run anything and does NOT import the sandbox's implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # the implementation module starts nothing on import, but a protocol needs only names
    from coral.sandbox.sandbox import Job
    from coral.trajectory import ExecutionResult


@runtime_checkable
class SandboxProtocol(Protocol):
    def run_many(self, jobs: Sequence[Job], progress: bool = False) -> list[ExecutionResult]:
        """One result per job, in order: per-test verdicts, times and peak memory. A job that cannot run
        is a result whose tests all carry an error verdict, never a missing entry."""
        ...

    def close(self) -> None:
        """Stop the workers; the object is not used afterwards."""
        ...
