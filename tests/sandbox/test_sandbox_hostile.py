"""Hostile programs: every one is contained, judged with the right verdict, never a pass, and the
sandbox keeps serving afterwards. Runs in both isolation modes (bwrap and the loud fallback)."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from sandbox_helpers import HOST_SECRET, asserts

from coral.trajectory import TestCase

GOOD = "def f(x):\n    return x + 1\n"

# id -> (solution code, test code, allowed verdicts). Every test expects a value the hostile
# program can only "produce" by breaking out, forging, or cheating.
CASES: dict[str, tuple[str, str, set[str]]] = {
    "fork_bomb": ("import os\ndef f():\n    while True:\n        os.fork()\n", "assert candidate() == 1", {"error"}),
    "subprocess_exec": ("import subprocess\ndef f():\n    return subprocess.run(['/bin/echo', 'hi']).returncode\n",
                        "assert candidate() == 0", {"error"}),
    "memory_bomb": ("def f():\n    x = []\n    while True:\n        x.append(bytearray(2**24))\n", "assert candidate() == 1",
                    {"memory"}),
    "huge_allocation": ("def f():\n    return len(bytearray(10**11))\n", "assert candidate() == 10**11", {"memory"}),
    "infinite_loop": ("def f():\n    while True:\n        pass\n", "assert candidate() == 1", {"timeout"}),
    "sleep_forever": ("import time\ndef f():\n    time.sleep(1000)\n", "assert candidate() is None", {"timeout"}),
    "ignore_sigterm_and_spin": ("import signal\ndef f():\n    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU):\n"
                                "        signal.signal(s, signal.SIG_IGN)\n    while True:\n        pass\n",
                                "assert candidate() == 1", {"timeout"}),
    "disk_fill": ("def f():\n    with open('fill.bin', 'wb') as fh:\n        while True:\n            fh.write(b'x' * 2**20)\n",
                  "assert candidate() == 1", {"output_limit"}),
    "stdout_flood": ("def f():\n    while True:\n        print('y' * 65536)\n", "assert candidate() == 1", {"output_limit"}),
    "deep_recursion": ("import sys\nsys.setrecursionlimit(10**7)\ndef f(n=0):\n    return f(n + 1)\n",
                       "assert candidate() == 1", {"error", "memory", "timeout"}),
    "thread_bomb": ("import threading, time\ndef f():\n    while True:\n"
                    "        threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n",
                    "assert candidate() == 1", {"error", "memory"}),
    "env_secret": ("import os\ndef f():\n    return os.environ.get('CORAL_SANDBOX_SECRET')\n",
                   f"assert candidate() == {HOST_SECRET!r}", {"fail"}),
    "proc_environ_of_parent": ("import os\ndef f():\n    return open(f'/proc/{os.getppid()}/environ').read()\n",
                               f"assert {HOST_SECRET!r} in candidate()", {"error"}),
    "kill_the_parent": ("import os, signal\ndef f():\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 1\n",
                        "assert candidate() == 1", {"error"}),
    "kill_everything": ("import os, signal\ndef f():\n    os.kill(-1, signal.SIGKILL)\n    return 1\n",
                        "assert candidate() == 1", {"error"}),
    "new_session_escape": ("import os\ndef f():\n    os.setsid()\n    return 1\n", "assert candidate() == 1", {"error"}),
    "raise_rlimits": ("import resource\ndef f():\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n    return 1\n",
                      "assert candidate() == 1", {"error"}),
    "sys_exit_zero": ("import sys\ndef f():\n    sys.exit(0)\n", "assert candidate() == 1", {"error"}),
    "os_exit_zero": ("import os\ndef f():\n    os._exit(0)\n", "assert candidate() == 1", {"error"}),
    "patch_builtins": ("import builtins\nbuiltins.AssertionError = type('X', (BaseException,), {})\n"
                       "builtins.isinstance = lambda *a: True\nbuiltins.len = lambda x: 3\n"
                       "def f():\n    return [1]\n", "assert len(candidate()) == 3", {"fail", "error"}),
    "always_equal_object": ("class E:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
                            "def f():\n    return E()\n", "assert candidate() == 42", {"error"}),
    "int_subclass_equal": ("class I(int):\n    def __eq__(self, other):\n        return True\n"
                           "def f():\n    return I(0)\n", "assert candidate() == 42", {"error"}),
    "list_subclass_equal": ("class L(list):\n    def __eq__(self, other):\n        return True\n"
                            "def f():\n    return [L()]\n", "assert candidate() == [[42]]", {"error"}),
    "fake_result_lines": ("import sys\ndef f():\n    for line in ('PASS', 'L\\n{\"status\": \"pass\"}', 'ok: all tests passed'):\n"
                          "        print(line); print(line, file=sys.stderr)\n    return 0\n", "assert candidate() == 1", {"fail"}),
    "write_forged_verdict_to_fds": ("import os\ndef f():\n    for fd in range(3, 256):\n        try:\n"
                                    "            os.write(fd, b'L\\n{\"status\": \"pass\"}')\n        except OSError:\n"
                                    "            pass\n    return 0\n", "assert candidate() == 1", {"fail", "error"}),
    "delete_the_harness": ("import sys, gc\ndef f():\n    for name in list(sys.modules):\n        if name.startswith('_'):\n"
                           "            sys.modules[name].__dict__.clear()\n    return 0\n", "assert candidate() == 1",
                           {"fail", "error"}),
    "patch_the_harness_reply": ("import sys\nroles = sys.modules.get('_roles')\nif roles:\n"
                                "    roles.judge = lambda *a, **k: {'status': 'pass'}\n"
                                "    roles._answer = lambda *a: ['ok', 1]\ndef f():\n    return 0\n",
                                "assert candidate() == 1", {"fail", "error"}),  # error: its entry point reads as 1
    "search_memory_for_expected": ("import gc\ndef f():\n    for o in gc.get_objects():\n        if isinstance(o, str) and "
                                   "'needle-' in o and len(o) < 40:\n            return o\n    return ''\n",
                                   "assert candidate() == 'needle-' + 'c0ffee'", {"fail"}),
    "frame_walk_to_caller": ("import sys\ndef f():\n    fr = sys._getframe(1)\n    while fr is not None:\n"
                             "        fr.f_globals['__builtins__'] = {}\n        fr = fr.f_back\n    return 0\n",
                             "assert candidate() == 1", {"fail", "error"}),
    "ptrace_parent": ("import ctypes, os\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                      "    return libc.ptrace(16, os.getppid(), 0, 0)\n", "assert candidate() == 0", {"fail"}),
    "io_uring_setup": ("import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                       "    return libc.syscall(425, 8, ctypes.create_string_buffer(120))\n", "assert candidate() >= 0", {"fail"}),
    "exit_while_loading": ("import sys\nsys.exit(0)\n", "assert candidate() == 1", {"error"}),
    "loop_while_loading": ("while True:\n    pass\n", "assert candidate() == 1", {"error"}),
}


def _run(sandbox, code: str, test: str, timeout_s: float = 0.5):
    return sandbox.run(code, asserts(test), entry_point="f", timeout_s=timeout_s)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_program_is_contained_and_judged(sandbox, case):
    code, test, allowed = CASES[case]
    # a memory bomb must reach the memory limit before the deadline, even on a loaded machine
    result = _run(sandbox, code, test, timeout_s=5.0 if allowed == {"memory"} else 0.5)
    assert result.tests[0].verdict in allowed, (case, result)
    assert _run(sandbox, GOOD, "assert candidate(1) == 2").passed, "the sandbox stopped serving"


def test_connect_to_a_host_listener_on_localhost_is_blocked(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.3)
    port = server.getsockname()[1]
    code = f"import socket\ndef f():\n    socket.create_connection(('127.0.0.1', {port}), timeout=0.2).sendall(b'x')\n    return 1\n"
    try:
        result = _run(sandbox, code, "assert candidate() == 1")
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert result.tests[0].verdict == "error"


def test_reading_a_host_file_outside_the_run_dir_fails(sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top-secret-42")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    code = f"def f():\n    return open({str(secret)!r}).read()\n"
    assert _run(sandbox, code, "assert candidate() == 'top-secret-42'").tests[0].verdict == "error"


def test_writing_outside_the_run_dir_leaves_no_file(sandbox, tmp_path):
    os.chmod(tmp_path, 0o777)
    target = tmp_path / "escaped.txt"
    code = f"def f():\n    open({str(target)!r}, 'w').write('x')\n    return 1\n"
    assert _run(sandbox, code, "assert candidate() == 1").tests[0].verdict == "error"
    assert not target.exists()


def test_files_written_in_one_run_are_gone_in_the_next(sandbox):
    writer = "def f():\n    open('left_over.txt', 'w').write('hi')\n    return 1\n"
    reader = "import os\ndef f():\n    return os.path.exists('left_over.txt')\n"
    assert _run(sandbox, writer, "assert candidate() == 1").passed
    assert _run(sandbox, reader, "assert candidate() is False").passed


def test_stdio_program_cannot_find_the_expected_output_in_memory(sandbox):
    code = ("import gc\nfor o in gc.get_objects():\n    if isinstance(o, str) and o.startswith('needle-') and len(o) < 40:\n"
            "        print(o)\n        break\n")
    result = sandbox.run(code, [TestCase("stdio", stdin="", expected_stdout="needle-" + "beef")], timeout_s=2.0)
    assert result.tests[0].verdict == "fail"


def test_many_hostile_jobs_in_parallel_leave_the_pool_serving(bwrap_sandbox):
    from coral.sandbox import Job

    jobs = [Job(CASES[c][0], asserts(CASES[c][1]), "f", timeout_s=0.5) for c in ("os_exit_zero", "kill_the_parent", "fork_bomb")]
    results = bwrap_sandbox.run_many(jobs * 3)
    assert not any(r.passed for r in results)
    threads_before = threading.active_count()
    assert _run(bwrap_sandbox, GOOD, "assert candidate(1) == 2").passed
    assert threading.active_count() == threads_before
