"""Fourth red-team round (2026-12-05), the findings that are not channels between jobs (those are in
test_sandbox_channels.py). Before the fixes:
- a test that expects an exception and catches broadly (`except Exception`, a bare `except:`, unittest's
  `assertRaises(Exception)`) passed a program that exited, returned a value the judge cannot check or
  garbled its reply: the judge's own failure signals were ordinary exceptions that the test swallowed;
- `io_setup` was allowed: one program could hold every Linux AIO context of the machine (fs.aio-max-nr);
- with subprocesses allowed, the hundreds of processes of a killed fork bomb still filled the worker's pid
  namespace when the server forked next: fork() raised EAGAIN, the server died, and the next, honest job
  got "sandbox failure" on every test;
- a correct program that kept 48 MB in run-dir files reported a peak of about 3 MB: the files' tmpfs pages
  were memory off the books of the efficiency reward.
Both isolation modes where it applies."""

from __future__ import annotations

import threading
import time

import pytest
from sandbox_helpers import asserts, make_sandbox

from coral.trajectory import TestCase

BROAD_CATCHES = {
    "except_exception": "try:\n    candidate(-1)\nexcept Exception:\n    pass\nelse:\n    raise AssertionError('no error')",
    "bare_except": "try:\n    candidate(-1)\nexcept:\n    pass\nelse:\n    raise AssertionError('no error')",
    "base_exception_then_more_asserts": ("try:\n    candidate(-1)\nexcept BaseException:\n    pass\n"
                                         "else:\n    raise AssertionError('no error')\nassert True"),
    "unittest_assert_raises": "import unittest\nunittest.TestCase().assertRaises(Exception, candidate, -1)",
}
# programs that never raise what the test expects, yet made the judging fail
JUDGE_FAILURES = {
    "os_exit": "import os\ndef f(x):\n    os._exit(0)\n",
    "value_the_judge_cannot_check": "class O:\n    pass\ndef f(x):\n    return O()\n",
    "garbled_reply": "import os, struct\ndef f(x):\n    os.write(4, struct.pack('<Q', 5) + b'xxxxx')\n    return 1\n",
    "forged_reply_with_a_wrong_token": ("import json, os, struct\ndef f(x):\n    body = json.dumps(['ok', 1, 'x' * 32]).encode()\n"
                                        "    os.write(4, struct.pack('<Q', len(body)) + body)\n    return 1\n"),
    "no_entry_point": "def g(x):\n    raise ValueError(x)\n",
    "entry_point_not_callable": "f = 3\n",
}


@pytest.mark.parametrize("catch", sorted(BROAD_CATCHES))
@pytest.mark.parametrize("program", sorted(JUDGE_FAILURES))
def test_a_broad_except_in_the_test_does_not_pass_a_program_that_made_the_judging_fail(sandbox, program, catch):
    result = sandbox.run(JUDGE_FAILURES[program], asserts(BROAD_CATCHES[catch]), entry_point="f", timeout_s=2.0)
    assert result.tests[0].verdict == "error", (program, catch, result)


@pytest.mark.parametrize("catch", sorted(BROAD_CATCHES))
def test_a_broad_except_still_passes_a_program_that_raises_and_fails_one_that_does_not(sandbox, catch):
    raises = sandbox.run("def f(x):\n    raise ValueError(x)\n", asserts(BROAD_CATCHES[catch]), entry_point="f")
    assert raises.passed, raises
    returns = sandbox.run("def f(x):\n    return x\n", asserts(BROAD_CATCHES[catch]), entry_point="f")
    assert returns.tests[0].verdict == "fail", returns


def test_a_test_whose_arguments_cannot_be_sent_is_an_error_for_every_program(sandbox):
    test = "try:\n    candidate(lambda: 0)\nexcept Exception:\n    pass\nelse:\n    raise AssertionError('no error')"
    result = sandbox.run("def f(x):\n    return x()\n", asserts(test), entry_point="f")
    assert result.tests[0].verdict == "error" and "cannot send" in result.tests[0].message, result


AIO_HOARDER = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
IO_SETUP = {"x86_64": 206, "aarch64": 0}[os.uname().machine]
def f(events):
    context = ctypes.c_ulong(0)
    took = libc.syscall(IO_SETUP, events, ctypes.byref(context)) == 0
    time.sleep(1.0)  # holds them while the job runs
    return took
"""


def _aio_contexts_in_use() -> int:
    with open("/proc/sys/fs/aio-nr") as fh:
        return int(fh.read())


def test_a_program_cannot_take_the_machines_aio_contexts(sandbox):
    # fs.aio-max-nr (65536 by default) is one pool for the whole machine: half of it here, to show the
    # program took them without leaving the host's own io_setup failing for a second
    with open("/proc/sys/fs/aio-max-nr") as fh:
        half = int(fh.read()) // 2
    before, seen = _aio_contexts_in_use(), []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(_aio_contexts_in_use())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = sandbox.run(AIO_HOARDER, asserts(f"assert candidate({half}) is False"), entry_point="f", timeout_s=5.0)
    finally:
        done.set()
        watcher.join()
    assert result.passed, result
    assert max(seen) - before < half, (before, max(seen))


FORK_BOMB = "import os\ndef f():\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n"


def test_an_honest_job_after_a_fork_bomb_with_subprocesses_allowed_is_judged_normally():
    # bwrap only: the fallback has no pid namespace, and as root (this test machine) a fork bomb there is
    # bounded only by its deadline, not a limit a test should take the shared machine to
    with make_sandbox("bwrap", allow_subprocess=True) as sandbox:
        for _ in range(2):
            bomb = sandbox.run(FORK_BOMB, asserts("assert candidate() == 1"), entry_point="f", timeout_s=1.0)
            assert bomb.tests[0].verdict == "timeout", bomb
            honest = sandbox.run("def f():\n    return 1\n", asserts("assert candidate() == 1"), entry_point="f")
            assert honest.passed, honest


KEEPS_FILES = ("import uuid\ndef f(n_mb):\n    for i in range(n_mb):  # files of at most 8 MB (each is capped at 16)\n"
               "        if i % 8 == 0:\n            fh = open(uuid.uuid4().hex, 'wb')\n"
               "        fh.write(b'x' * 2**20)\n        fh.flush()\n    return n_mb\n")


def test_memory_held_in_run_dir_files_counts_in_the_peak(bwrap_sandbox):
    # bwrap only: the fallback's run dir is on the host disk, where files are not memory
    tests = asserts("assert candidate(48) == 48", "assert candidate(9) == 9")
    first, second = bwrap_sandbox.run(KEEPS_FILES, tests, entry_point="f", timeout_s=5.0).tests
    assert first.passed and 48 <= first.cost.peak_memory_mb < 64, first
    assert second.passed and 9 <= second.cost.peak_memory_mb < 16, second  # its own 9 MB: 48 were there before
    stdio = KEEPS_FILES + "print(f(40))\n"
    result = bwrap_sandbox.run(stdio, [TestCase("stdio", expected_stdout="40")], timeout_s=5.0).tests[0]
    assert result.passed and 40 <= result.cost.peak_memory_mb < 56, result
