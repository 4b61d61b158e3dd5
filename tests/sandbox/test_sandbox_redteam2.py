"""Second red-team round: attacks that span jobs (what one job leaves for the next, the result cache) and
the verdict path. Each test is a hostile situation; both isolation modes where it applies."""

from __future__ import annotations

import dataclasses
import inspect
import os
import signal
import time

import pytest
from sandbox_helpers import asserts, make_sandbox, processes_named

from coral.sandbox import Job, Sandbox
from coral.trajectory import TestCase, TestCost

ADD_ONE = "def f(x):\n    return x + 1\n"
ADD_ONE_TESTS = asserts("assert candidate(1) == 2", "assert candidate(2) == 3")


def _kill_the_judge(sandbox: Sandbox) -> None:
    """What a program with subprocesses can do on kernels whose Landlock does not scope signals (before
    6.12), or the OOM killer anywhere: the worker's judge dies between two jobs."""
    judges = processes_named(sandbox._all[0].proc.pid, "coral-judge")
    assert len(judges) == 1, judges
    os.kill(judges[0], signal.SIGKILL)
    time.sleep(0.2)


@pytest.mark.parametrize("between", ["nothing", "a stdio job"])
def test_a_judge_that_died_between_jobs_costs_the_next_job_nothing(between):
    # The next assert job used to get "killed by SIGKILL while loading" on every test, an error the result
    # cache then kept for that program; after a stdio job the dead judge was reaped by pid, which the
    # worker's small pid space soon hands to a candidate that a later stop_judge would kill.
    for isolation in ("bwrap", "none"):
        with make_sandbox(isolation, cache=True) as sandbox:
            assert sandbox.run(ADD_ONE, ADD_ONE_TESTS[:1], entry_point="f").passed
            _kill_the_judge(sandbox)
            if between == "a stdio job":
                assert sandbox.run("print(1)", [TestCase("stdio", expected_stdout="1")]).passed
            result = sandbox.run(ADD_ONE, ADD_ONE_TESTS, entry_point="f")
            assert [t.verdict for t in result.tests] == ["pass", "pass"], (isolation, result)


def _count_runs(monkeypatch, sandbox: Sandbox) -> list[Job]:
    ran: list[Job] = []
    real = sandbox._run_on
    monkeypatch.setattr(sandbox, "_run_on", lambda worker, job: ran.append(job) or real(worker, job))
    return ran


def test_a_timeout_the_program_did_not_spend_on_its_cpu_is_not_cached(monkeypatch):
    # A neighbour holding the CPU (workers share CPUs when there are more workers than cores) makes an honest
    # program miss its wall deadline; the cache used to keep that "timeout" for the program's every later run.
    with make_sandbox("bwrap", cache=True, timeout_s=0.5) as sandbox:
        ran = _count_runs(monkeypatch, sandbox)
        waits = Job("import time\ntime.sleep(3)\n", (TestCase("stdio"),))
        verdicts = [sandbox.run_many([waits])[0].tests[0].verdict for _ in range(2)]
        assert verdicts == ["timeout", "timeout"] and len(ran) == 2


def test_a_program_that_times_out_while_loading_without_using_its_cpu_is_not_cached(monkeypatch):
    # its "error" on every test used to be cached like any error, though a neighbour may have held the CPU
    with make_sandbox("bwrap", cache=True, timeout_s=0.5) as sandbox:
        ran = _count_runs(monkeypatch, sandbox)
        slow = Job("import time\ntime.sleep(3)\n" + ADD_ONE, ADD_ONE_TESTS, entry_point="f")
        results = [sandbox.run_many([slow])[0] for _ in range(2)]
        assert [t.verdict for r in results for t in r.tests] == ["error"] * 4 and len(ran) == 2
        assert results[0].error == "the program timed out while loading"


def test_the_cache_keeps_timeouts_that_used_their_cpu_and_every_other_verdict():
    from coral.sandbox.sandbox import LOAD_TIMEOUT, _cacheable
    from coral.trajectory import ExecutionResult, TestResult

    def result(*tests: tuple[str, float]) -> ExecutionResult:
        return ExecutionResult(tests=tuple(TestResult(verdict, cost=TestCost(cpu_s=cpu_s)) for verdict, cpu_s in tests))

    assert _cacheable(result(("pass", 0.0), ("fail", 0.1), ("memory", 0.0), ("error", 0.0)), timeout_s=1.0)
    assert _cacheable(result(("pass", 0.0), ("timeout", 0.95)), timeout_s=1.0)
    assert not _cacheable(result(("pass", 0.0), ("timeout", 0.5)), timeout_s=1.0)
    assert not _cacheable(result(("timeout", 1.7)), timeout_s=2.0)
    loading = ExecutionResult(tests=(TestResult("error", cost=TestCost(cpu_s=0.2)),) * 2, error=LOAD_TIMEOUT)
    assert not _cacheable(loading, timeout_s=1.0)
    assert _cacheable(dataclasses.replace(loading, tests=(TestResult("error", cost=TestCost(cpu_s=0.95)),) * 2), timeout_s=1.0)


def test_kept_output_is_part_of_the_cache_key(bwrap_sandbox):
    with make_sandbox("bwrap", cache=True) as sandbox:
        code = "print('seen')"
        kept, plain = sandbox.run_many([Job(code, (TestCase("stdio", expected_stdout="seen"),), keep_output=keep)
                                        for keep in (True, False)])
        assert kept.tests[0].output == "seen\n" and plain.tests[0].output == ""


def test_ray_sandboxes_keep_every_setting_of_the_sandbox_they_copy():
    # RaySandbox.like(sandbox) and RaySandbox(**settings) pass only SANDBOX_FIELDS to the actors' sandboxes:
    # hidden_paths (benchmark data a program must not read) was left out, so a Ray pool's programs could read it.
    from coral.scale.sandbox_pool import SANDBOX_FIELDS

    settings = set(inspect.signature(Sandbox.__init__).parameters) - {"self"}
    assert settings <= set(SANDBOX_FIELDS), f"left out of SANDBOX_FIELDS: {sorted(settings - set(SANDBOX_FIELDS))}"


INOTIFY_HOARDER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
held, watches = [], 0
for _ in range(60):
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
    for path in ('/usr', '/usr/lib', '/usr/bin'):
        watches += libc.inotify_add_watch(fd, path.encode(), 0xFFF) >= 0
print(len(held), watches, os.strerror(ctypes.get_errno()) if not held else '')
"""


def test_a_program_cannot_hold_the_users_inotify_instances_and_watches(sandbox):
    # 128 instances and ~190k watches per user, counted for the host's user from inside bwrap's user
    # namespace too: two workers' programs held almost all of them, and the host's file watchers failed.
    output = sandbox.run_many([Job(INOTIFY_HOARDER, (TestCase("stdio"),), keep_output=True)])[0].tests[0].output
    assert output.startswith("0 0 Operation not permitted"), output


LINKER = r"""
import os
target = os.__file__  # a host file of the interpreter, read-only to programs
for how in ("link", "link through /proc/self/fd", "rename", "write through a symlink"):
    try:
        if how == "link":
            os.link(target, "l1")
        elif how == "rename":
            os.rename(target, "l3")
        elif how == "write through a symlink":
            os.symlink(target, "l4")
            open("l4", "a").write("# planted")
        else:
            os.link(f"/proc/self/fd/{os.open(target, os.O_RDONLY)}", "l2", follow_symlinks=True)
        print(how, "DONE")
    except OSError:
        pass
"""


def test_host_files_cannot_be_linked_renamed_or_written_through_a_symlink(sandbox):
    # a hard link in the fallback's run dir (same disk as the venv here) would be writable: Landlock checks
    # the path, and it refuses links and renames out of read-only trees (EXDEV)
    before = os.stat(os.__file__)
    output = sandbox.run_many([Job(LINKER, (TestCase("stdio"),), keep_output=True)])[0].tests[0].output
    assert "DONE" not in output and os.stat(os.__file__).st_mtime_ns == before.st_mtime_ns


def test_names_with_odd_bytes_are_wiped_for_the_next_job(sandbox):
    plant = ("import os\nfor name in (b'bad\\xff', b'new\\nline', b'-rf', b' ', b'.hidden', b'a' * 255):\n"
             "    open(name, 'w').write('stash')\n    os.makedirs(b'dir-' + name[:200] + b'/x', exist_ok=True)\n")
    look = "import os\nprint(sorted(os.listdir(b'.')))\n"
    planted, seen = sandbox.run_many([Job(plant, (TestCase("stdio"),)),
                                      Job(look, (TestCase("stdio", expected_stdout="[]"),), keep_output=True)])
    assert planted.passed and seen.passed, seen.tests[0].output


CAPS_AFTER_EXEC = """
import subprocess, sys
child = '''
import ctypes, struct
data = ctypes.create_string_buffer(24)
ctypes.CDLL(None).syscall({capget}, struct.pack("<Ii", 0x20080522, 0), data)
print(data.raw.hex())
'''
print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True).stdout.strip())
"""


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_an_executed_child_regains_no_capability_even_when_the_host_is_root(isolation):
    # execve as uid 0 would grant every capability of the bounding set; no_new_privs keeps the empty sets
    import platform

    capget = {"x86_64": 125, "aarch64": 90}.get(platform.machine())
    if capget is None:
        pytest.skip("capget number known for x86_64 and aarch64 only")
    with make_sandbox(isolation, allow_subprocess=True) as sandbox:
        job = Job(CAPS_AFTER_EXEC.replace("{capget}", str(capget)), (TestCase("stdio", expected_stdout="0" * 48),))
        result = sandbox.run_many([job])[0]
        assert result.passed, result.tests[0].message
