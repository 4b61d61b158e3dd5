"""Helpers for the sandbox tests: build a started Sandbox in a chosen isolation mode."""

from __future__ import annotations

import os

import pytest

from coral.sandbox import Sandbox
from coral.trajectory import TestCase

HOST_SECRET = "coral-host-secret-7f3a"


def make_sandbox(isolation: str, **kwargs) -> Sandbox:
    """A started Sandbox in the given mode ("bwrap" or the "none" fallback)."""
    previous = os.environ.get("CORAL_SANDBOX_FORCE_FALLBACK")
    os.environ["CORAL_SANDBOX_SECRET"] = HOST_SECRET  # must never reach a candidate
    if isolation == "none":
        os.environ["CORAL_SANDBOX_FORCE_FALLBACK"] = "1"
    try:
        sandbox = Sandbox(**{"workers": 1, "timeout_s": 1.0, "memory_mb": 256, "cache": False, **kwargs})
        sandbox.run("pass", [TestCase("stdio", expected_stdout="")])
    finally:
        if previous is None:
            os.environ.pop("CORAL_SANDBOX_FORCE_FALLBACK", None)
        else:
            os.environ["CORAL_SANDBOX_FORCE_FALLBACK"] = previous
    if isolation == "bwrap" and sandbox.isolation != "bwrap":
        sandbox.close()
        pytest.skip("bubblewrap cannot start on this host")
    assert sandbox.isolation == isolation
    return sandbox


def asserts(*codes: str) -> tuple[TestCase, ...]:
    return tuple(TestCase("assert", code=c) for c in codes)


def processes_named(root: int, name: str) -> list[int]:
    """The descendants of `root` whose name (comm) is `name`: the worker names its processes coral-zygote,
    coral-server (one per job), coral-judge and coral-candidate."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo += [int(child) for child in fh.read().split()]
            with open(f"/proc/{pid}/comm") as fh:
                if fh.read().strip() == name:
                    found.append(pid)
        except OSError:  # gone meanwhile
            continue
    return sorted(found)
