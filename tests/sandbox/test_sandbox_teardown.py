"""Clean teardown: no processes or temp dirs after close(), restart after a worker dies, and
workers die with their parent."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from sandbox_helpers import asserts, make_sandbox

GOOD = ("def f(x):\n    return x\n", asserts("assert candidate(3) == 3"))


def _children(zombies: bool = False) -> dict[int, int]:
    """pid -> parent pid of every live process (and of zombies when asked)."""
    parents = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if zombies or fields[0] != "Z":
            parents[int(stat.split("/")[2])] = int(fields[1])
    return parents


def descendants(pid: int) -> set[int]:
    parents, found, frontier = _children(), set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _wait_gone(pids: set[int], timeout_s: float = 5.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = pids & set(_children())
        if not alive:
            return set()
        time.sleep(0.05)
    return alive


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_close_leaves_no_processes_and_no_temp_dirs(isolation, tmp_path, monkeypatch):
    # a private temp root: other sandboxes on the machine (a training run, another test session) come
    # and go in the shared /tmp and must not count as ours
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before_pids = descendants(os.getpid())
    before_dirs = set(glob.glob(os.path.join(tempfile.gettempdir(), "coral-sandbox-*")))
    assert before_dirs == set()
    sb = make_sandbox(isolation, workers=2)
    assert sb.run(GOOD[0], GOOD[1], entry_point="f").passed
    started = descendants(os.getpid()) - before_pids
    assert started, "the workers should be running before close()"
    if isolation == "none":  # bwrap's run dir is a tmpfs inside the sandbox, never on the host
        assert glob.glob(os.path.join(tmp_path, "coral-sandbox-*")), "the run dirs should be in the private root"
    sb.close()
    assert _wait_gone(started, timeout_s=2.0) == set()  # a zygote, a job server and a judge end in turn
    assert {pid for pid, parent in _children(zombies=True).items() if parent == os.getpid()} <= before_pids
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "coral-sandbox-*"))) == before_dirs


def test_a_killed_worker_is_restarted_for_the_next_job():
    sb = make_sandbox("bwrap")
    try:
        for worker in sb._all:
            os.killpg(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()
        assert sb.run(GOOD[0], GOOD[1], entry_point="f").passed
    finally:
        sb.close()


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_workers_die_when_the_parent_is_killed(isolation, tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from sandbox_helpers import make_sandbox, asserts
        sb = make_sandbox({isolation!r})
        assert sb.run("def f():\\n    return 1\\n", asserts("assert candidate() == 1"), entry_point="f").passed
        print("ready", flush=True)
        time.sleep(60)
    """)
    # the parent's temp dirs go to a private root (TMPDIR), so other sandboxes on the machine cannot interfere
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        assert parent.stdout.readline().strip() == "ready"
        workers = descendants(parent.pid)
        assert workers
        if isolation == "none":  # bwrap's run dir is a tmpfs inside the sandbox, never on the host
            assert glob.glob(os.path.join(tmp_path, "coral-sandbox-*")), "the run dirs should be in the private root"
        parent.kill()
        parent.wait()
        assert _wait_gone(workers) == set()
        assert glob.glob(os.path.join(tmp_path, "coral-sandbox-*")) == []
    finally:
        parent.kill()


def test_a_worker_whose_run_dir_could_not_be_emptied_is_replaced_before_the_next_job(monkeypatch):
    from coral.sandbox.worker import Worker

    sb = make_sandbox("none")
    try:
        original = Worker.request

        def flagged(self, message, fds, timeout_s):  # as if the server's wipe had left something
            reply = original(self, message, fds, timeout_s)
            self.restart_pending = message.get("op") == "run"
            return reply

        before = sb._all[0].proc.pid
        monkeypatch.setattr(Worker, "request", flagged)
        assert sb.run(GOOD[0], GOOD[1], entry_point="f").passed  # this job's verdict still stands
        monkeypatch.setattr(Worker, "request", original)
        assert sb.run(GOOD[0], GOOD[1], entry_point="f").passed
        assert sb._all[0].proc.pid != before
    finally:
        sb.close()


def test_a_fallback_worker_removes_its_run_dir_when_its_channel_closes(tmp_path, monkeypatch):
    # a killed host's socket closes before the worker's death signal comes, so the EOF alone must clean up
    # (otherwise the worker can exit on the EOF and leave its run dir on the host disk)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sb = make_sandbox("none")
    try:
        worker = sb._all[0]
        run_dir = worker.run_dir
        assert run_dir is not None and os.path.isdir(run_dir)
        worker.sock.close()  # the channel closed without Worker.stop's own cleanup, as when the host is killed
        worker.sock = None
        assert worker.proc.wait(timeout=10) == 0
        assert not os.path.exists(run_dir)
    finally:
        sb.close()
