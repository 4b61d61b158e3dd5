"""Choosing the isolation mode: bwrap when it works, otherwise a loud (or refused) fallback."""

from __future__ import annotations

import logging

import pytest
from sandbox_helpers import asserts

from coral.sandbox import Sandbox


def test_fallback_is_announced_with_a_loud_warning(monkeypatch, caplog):
    monkeypatch.setenv("CORAL_SANDBOX_FORCE_FALLBACK", "1")
    with caplog.at_level(logging.WARNING, logger="coral.sandbox"), Sandbox(workers=1) as sb:
        assert sb.isolation == "none"
        assert sb.run("def f():\n    return 1\n", asserts("assert candidate() == 1"), entry_point="f").passed
    assert any("ISOLATION DEGRADED" in r.getMessage() for r in caplog.records)


def test_require_isolation_refuses_the_fallback(monkeypatch):
    monkeypatch.setenv("CORAL_SANDBOX_FORCE_FALLBACK", "1")
    sb = Sandbox(workers=1, require_isolation=True)
    with pytest.raises(RuntimeError, match="require_isolation"):
        sb.run("def f():\n    return 1\n", asserts("assert candidate() == 1"), entry_point="f")


def test_bwrap_workers_also_load_seccomp_and_landlock(bwrap_sandbox):
    info = bwrap_sandbox._all[0].info
    assert info["seccomp"] is True
    assert info["landlock"] is (info["landlock_abi"] > 0)


def test_subprocesses_run_when_explicitly_allowed():
    code = "import subprocess, sys\ndef f():\n    return subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True).stdout\n"
    with Sandbox(workers=1, allow_subprocess=True) as sb:
        result = sb.run(code, asserts("assert candidate() == b'7\\n'"), entry_point="f", timeout_s=10.0)
    assert result.passed, result
