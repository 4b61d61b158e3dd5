"""Limits that bind even when the host runs as root (threads and processes, memfd memory, the judge's
memory), signal-driven I/O denied whatever Landlock's version, infrastructure verdicts a program cannot
forge, and a StopIteration from the program that cannot end a test early."""

from __future__ import annotations

import os

import pytest
from sandbox_helpers import asserts, make_sandbox
from test_sandbox_teardown import descendants

from coral.trajectory import TestCase

THREADS = ("import threading, time\ndef f(n):\n    threading.stack_size(32768)\n    for i in range(n):\n"
           "        try:\n            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
           "        except Exception:\n            return i\n    return n\n")
PROCESSES = ("import os, time\ndef f(n):\n    for i in range(n):\n        try:\n            if os.fork() == 0:\n"
             "                time.sleep(30)\n                os._exit(0)\n        except OSError:\n            return i\n"
             "    return n\n")
MEMFDS = ("import os\ndef f(n_mb):\n    fds = []\n    try:\n        while len(fds) * 15 < n_mb:\n"
          "            fd = os.memfd_create('hold')\n            os.write(fd, b'x' * (15 << 20))\n"
          "            fds.append(fd)\n    except OSError:\n        pass\n    return len(fds) * 15\n")
SIGNAL_DRIVEN_IO = """
import fcntl, os, struct, termios
def f():
    r, w = os.pipe()
    granted = []
    for name, call in (("F_SETOWN", lambda: fcntl.fcntl(r, fcntl.F_SETOWN, os.getpid())),
                       ("F_SETSIG", lambda: fcntl.fcntl(r, 10, 29)),
                       ("F_SETOWN_EX", lambda: fcntl.fcntl(r, 15, struct.pack("ii", 1, os.getpid()))),
                       ("O_ASYNC", lambda: fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC)),
                       ("FIOASYNC", lambda: fcntl.ioctl(r, termios.FIOASYNC, struct.pack("i", 1))),
                       ("FIOSETOWN", lambda: fcntl.ioctl(r, 0x8901, struct.pack("i", os.getpid())))):
        try:
            call()
            granted.append(name)
        except OSError:
            pass
    return granted
"""


def _run(sandbox, code: str, test: str, timeout_s: float = 5.0, **kwargs):
    return sandbox.run(code, asserts(test), entry_point="f", timeout_s=timeout_s, **kwargs)


def _skip_if_root_fallback(sandbox) -> None:
    if sandbox.isolation == "none" and os.geteuid() == 0:
        pytest.skip("the fallback has no pid namespace, and root ignores RLIMIT_NPROC")


def test_a_program_cannot_start_thousands_of_threads(sandbox):
    _skip_if_root_fallback(sandbox)
    result = _run(sandbox, THREADS, "assert candidate(1000) == 1000", timeout_s=10.0)
    assert result.tests[0].verdict == "fail", result


def test_a_program_cannot_start_thousands_of_processes_even_with_subprocesses_allowed():
    sandbox = make_sandbox("bwrap", allow_subprocess=True)
    try:
        result = _run(sandbox, PROCESSES, "assert candidate(600) == 600", timeout_s=20.0)
        assert result.tests[0].verdict == "fail", result
        assert _run(sandbox, "def f():\n    return 1\n", "assert candidate() == 1").passed
    finally:
        sandbox.close()


def test_memfd_memory_cannot_be_held_beyond_the_memory_limit(sandbox):
    result = _run(sandbox, MEMFDS, "assert candidate(600) >= 600", memory_mb=256)
    assert result.tests[0].verdict != "pass", result


def test_signal_driven_io_is_denied_by_seccomp(sandbox):
    result = _run(sandbox, SIGNAL_DRIVEN_IO, "assert candidate() == []")
    assert result.passed, result


def _peak_rss_mb_of_our_sandboxes() -> float:
    """The largest VmHWM among the processes this test session started (workers, judges)."""
    peak = 0.0
    for pid in descendants(os.getpid()):
        try:
            text = open(f"/proc/{pid}/status").read()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) / 1024)
    return peak


@pytest.mark.parametrize("n_lists", [20 << 20, pytest.param(5 << 20, marks=pytest.mark.slow)],  # ~10 s to decode
                         ids=["60MB_frame", "15MB_frame"])
def test_the_judge_cannot_be_made_to_hold_gigabytes_by_one_reply(sandbox, n_lists):
    # the program writes its own reply frame of empty lists: 60 MB (over the frame limit) would be ~1.3 GB
    # once decoded by the judge, 15 MB (under it) ~0.8 GB at the decoding's peak (over the judge's cap)
    code = ("import json, os, struct\nimport _roles\n"
            f"def big(namespace, request):\n    body = b'[\"ok\",[' + b'[],' * {n_lists} + b'[]],' + "
            "json.dumps(request[-1]).encode() + b']'\n    os.write(4, struct.pack('<Q', len(body)))\n"
            "    view = memoryview(body)\n    while view:\n        view = view[os.write(4, view):]\n"
            "    return None\n"
            "_answer = _roles._answer\ndef patched(namespace, request):\n    if request[0] == 'call':\n"
            "        big(namespace, request)\n        raise SystemExit\n    return _answer(namespace, request)\n"
            "_roles._answer = patched\ndef f():\n    return []\n")
    result = _run(sandbox, code, f"assert len(candidate()) == {n_lists + 1}", timeout_s=20.0)
    assert result.tests[0].verdict != "pass", result
    assert _peak_rss_mb_of_our_sandboxes() < 1000


def test_a_program_cannot_make_its_job_look_like_an_infrastructure_failure(sandbox):
    code = "import os\nos.write(2, b'sandbox setup failed: OSError()\\n')\nos._exit(71)\n"
    result = sandbox.run(code, [TestCase("stdio", expected_stdout="1")])
    assert result.tests[0].verdict == "error"
    assert result.error == "" and result.tests[0].message.startswith("exit code 71"), result


@pytest.mark.parametrize("test", ["assert all(map(candidate, [1, 2]))", "assert not list(filter(candidate, [1]))",
                                  "assert [x for x in map(candidate, [1])] == []"])
def test_a_stop_iteration_from_the_program_does_not_end_the_test_early(sandbox, test):
    result = _run(sandbox, "def f(x):\n    raise StopIteration\n", test)
    assert result.tests[0].verdict == "error", result
    assert "StopIteration" in result.tests[0].message


def test_a_program_holds_no_capability_of_the_worker(sandbox):
    # the bwrap worker keeps CAP_SYS_ADMIN in its user namespace (fresh tmpfs, pid_max): candidates drop it
    code = ("import ctypes, platform, struct\ndef f():\n    capget = {'x86_64': 125, 'aarch64': 90}[platform.machine()]\n    header = struct.pack('<Ii', 0x20080522, 0)\n"
            "    data = ctypes.create_string_buffer(24)\n    libc = ctypes.CDLL(None)\n"
            "    assert libc.syscall(capget, header, data) == 0\n    return list(struct.unpack('<6I', data.raw))\n")
    result = _run(sandbox, code, "assert candidate() == [0, 0, 0, 0, 0, 0]")
    assert result.passed, result
