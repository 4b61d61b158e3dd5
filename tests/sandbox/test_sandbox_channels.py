"""Channels between jobs (fourth red-team round, 2026-12-05): a correct job that knows the answer tries to
hand it to a wrong program running at the same time on another worker, or right after it on the same
worker. The wrong program passes only if the channel works. Before the fixes each of these passed:
- file locks (flock, POSIX record locks, OFD locks) and dnotify on the shared read-only interpreter files;
- futexes on a page of a shared file (one kernel key for every process that maps it);
- page-cache residency of shared files, set by reading or dropping pages and read back with cachestat,
  mincore or RWF_NOWAIT reads;
- the pid of the next candidate (threads advance the counter) and everything else a job sees of pids;
- the previous job's outcome in the memory a candidate inherits, and the state of that memory's allocator;
- the CPU time of the judge and of the process candidates are forked from.
Both isolation modes where it applies (the `pair` fixture has two workers)."""

from __future__ import annotations

import pytest
from sandbox_helpers import asserts, make_sandbox

from coral.sandbox import Job

ANSWER = 0xA5  # 8 bits a correct job knows and hands over; the wrong program returns what it received

# Eight shared read-only files every job can open: stdlib modules that no test run imports.
SHARED_FILES = ("import os\nSHARED = sorted(os.path.join(os.path.dirname(os.__file__), 'lib2to3', 'fixes', n)\n"
                "                for n in os.listdir(os.path.join(os.path.dirname(os.__file__), 'lib2to3', 'fixes'))\n"
                "                if n.startswith('fix_'))[:8]\n")

LOCK_HOLDER = SHARED_FILES + """
import fcntl, struct, time
def f(answer, how):
    held = []
    if how == "dnotify":  # after the prober watches
        time.sleep(0.4)
    for bit, path in enumerate(SHARED):
        if answer >> bit & 1:
            fd = os.open(path, os.O_RDONLY)
            held.append(fd)
            try:
                if how == "flock":
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                elif how == "posix":
                    fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 1, 0))
                elif how == "ofd":
                    fcntl.fcntl(fd, 37, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 1, 0))  # F_OFD_SETLK
                else:  # dnotify: the prober watches the directory; reading the file tells it
                    os.read(fd, 1)
            except OSError:
                pass
    time.sleep(1.0)
    return answer
"""
LOCK_PROBER = SHARED_FILES + """
import fcntl, signal, struct, time
def _held(path, how):
    fd = os.open(path, os.O_RDONLY)
    try:
        if how == "flock":
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return False
            except BlockingIOError:
                return True
        cmd = fcntl.F_GETLK if how == "posix" else 36  # F_OFD_GETLK
        got = fcntl.fcntl(fd, cmd, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 1, 0))
        return struct.unpack("hhqqi", got)[0] != fcntl.F_UNLCK
    except OSError:
        return False
    finally:
        os.close(fd)
def f(how):
    if how == "dnotify":  # one directory per bit would be needed for more: the first file's read is the bit
        seen = []
        signal.signal(signal.SIGIO, lambda *a: seen.append(1))
        try:
            fcntl.fcntl(os.open(os.path.dirname(SHARED[0]), os.O_RDONLY), fcntl.F_NOTIFY,
                        fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)
        except OSError:
            return None
        time.sleep(0.9)
        return ANSWER if seen else None
    time.sleep(0.4)  # the holder has its locks by then
    return sum(_held(path, how) << bit for bit, path in enumerate(SHARED))
""".replace("ANSWER", str(ANSWER))


@pytest.fixture(scope="module", params=["bwrap", "none"])
def pair(request):
    sandbox = make_sandbox(request.param, workers=2, timeout_s=5.0)
    yield sandbox
    sandbox.close()


def _concurrently(sandbox, first: Job, second: Job):
    return sandbox.run_many([first, second])


@pytest.mark.parametrize("how", ["flock", "posix", "ofd", "dnotify"])
def test_a_job_cannot_signal_a_concurrent_job_through_locks_or_dnotify_on_shared_files(pair, how):
    holder = Job(LOCK_HOLDER, asserts(f"assert candidate({ANSWER}, {how!r}) == {ANSWER}"), "f")
    prober = Job(LOCK_PROBER, asserts(f"assert candidate({how!r}) == {ANSWER}"), "f")
    held, probed = _concurrently(pair, holder, prober)
    assert held.passed, held  # a correct program that tries to lock is still judged correct
    assert probed.tests[0].verdict == "fail", (how, probed)


FUTEX = """
import ctypes, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
FUTEX = {"x86_64": 202, "aarch64": 98}[os.uname().machine]
def _word():  # a page of a shared file: one futex key for every process that maps it
    address = libc.mmap(None, 4096, 1, 1, os.open(os.__file__, os.O_RDONLY), 0)  # PROT_READ, MAP_SHARED
    return address, ctypes.c_uint32.from_address(address).value
def wake(answer):
    address, _ = _word()
    time.sleep(0.8)
    libc.syscall(FUTEX, ctypes.c_void_p(address), 1, 1, None, None, 0)  # FUTEX_WAKE, shared
    return answer
def wait():
    address, value = _word()
    woken = libc.syscall(FUTEX, ctypes.c_void_p(address), 0, value, struct.pack("qq", 3, 0), None, 0) == 0
    return ANSWER if woken else None  # 0: woken; -1: timed out, or refused
""".replace("ANSWER", str(ANSWER))


def test_a_job_cannot_wake_a_concurrent_job_through_a_futex_on_a_shared_file(pair):
    waker = Job(FUTEX.replace("def wake", "def f"), asserts(f"assert candidate({ANSWER}) == {ANSWER}"), "f")
    waiter = Job(FUTEX.replace("def wait", "def f"), asserts(f"assert candidate() == {ANSWER}"), "f")
    woke, waited = _concurrently(pair, waiter, waker)[::-1]
    assert woke.passed, woke
    assert waited.tests[0].verdict == "fail", waited


PAGE_CACHE = SHARED_FILES + """
import ctypes, mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def write(answer):  # drop each file's pages, then read back those of the 1 bits
    for bit, path in enumerate(SHARED):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if answer >> bit & 1:
            os.read(fd, 4096)
        os.close(fd)
    return answer
def _cached(path, how):
    fd = os.open(path, os.O_RDONLY)
    try:
        if how == "nowait":
            try:
                return os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT) == 1
            except BlockingIOError:
                return False
        if how == "cachestat":
            stats = ctypes.create_string_buffer(40)
            if libc.syscall(451, fd, struct.pack("QQ", 0, 4096), stats, 0) != 0:
                raise OSError(ctypes.get_errno(), "cachestat")
            return struct.unpack("Q", stats.raw[:8])[0] > 0
        address, vector = libc.mmap(None, 4096, 1, 1, fd, 0), ctypes.create_string_buffer(1)
        if libc.mincore(ctypes.c_void_p(address), 4096, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return vector.raw[0] & 1 == 1
    finally:
        os.close(fd)
def read(how):
    try:
        return sum(_cached(path, how) << bit for bit, path in enumerate(SHARED))
    except OSError:
        return None
""".replace("import ctypes, mmap", "import ctypes, mmap, struct")


@pytest.mark.parametrize("how", ["nowait", "cachestat", "mincore"])
def test_a_job_cannot_leave_bits_in_the_page_cache_of_shared_files(pair, how):
    writer = Job(PAGE_CACHE.replace("def write", "def f"), asserts(f"assert candidate({ANSWER}) == {ANSWER}"), "f")
    reader = Job(PAGE_CACHE.replace("def read", "def f"), asserts(f"assert candidate({how!r}) == {ANSWER}"), "f")
    assert pair.run_many([writer])[0].passed
    result = pair.run_many([reader])[0]
    assert result.tests[0].verdict == "fail", (how, result)


# ------------------------------------------------------------------ sequential jobs on one worker
PID_SETTER = """
import os, threading
ANSWER = ANSWER_MOD_64
# pids are handed out in order (after 427 the namespace wraps to 300): start threads until the next
# candidate's pid is the answer modulo 64
n, next_pid = 0, os.getpid() + 1
while next_pid % 64 != ANSWER:
    next_pid, n = (next_pid + 1 if next_pid + 1 < 428 else 300), n + 1
threads = [threading.Thread(target=lambda: None) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(ANSWER)
""".replace("ANSWER_MOD_64", str(ANSWER % 64))
PID_READER = "import os\nprint(os.getpid() % 64)\n"


def _stdio(code: str, expected: str, **kwargs) -> Job:
    from coral.trajectory import TestCase

    return Job(code, (TestCase("stdio", expected_stdout=expected),), keep_output=True, **kwargs)


def test_a_job_cannot_choose_the_pid_of_the_next_job_on_its_worker(bwrap_sandbox):
    # bwrap only: the fallback has no pid namespace, and the host's pids move with everything on the machine
    assert bwrap_sandbox.run_many([_stdio(PID_SETTER, str(ANSWER % 64))])[0].passed
    result = bwrap_sandbox.run_many([_stdio(PID_READER, str(ANSWER % 64))])[0]
    assert result.tests[0].verdict == "fail", result


PID_VIEW = """
import os
seen = []
for pid in [*range(1, 8), *range(296, 312)]:
    try:
        os.sched_getscheduler(pid)
        seen.append(pid)
    except OSError:
        pass
try:
    self_link = os.readlink("/proc/self")
except OSError as exc:
    self_link = type(exc).__name__
in_proc = [n for n in (1, 2, 3, 4, 5, 300) if os.path.exists(f"/proc/{n}")]  # stat: Landlock does not cover it
print(os.getpid(), os.getppid(), seen, self_link, in_proc)
"""
PID_MOVERS = {
    "threads": "import threading\nfor _ in range(50):\n    threading.Thread(target=lambda: None).start()\n",
    "a_judge_that_timed_out": "def f():\n    while True:\n        pass\n",
    "a_thread_left_running": "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
}


@pytest.mark.parametrize("mover", sorted(PID_MOVERS))
def test_what_a_job_sees_of_pids_does_not_depend_on_the_jobs_before_it(bwrap_sandbox, mover):
    from sandbox_helpers import asserts as assert_tests

    before = bwrap_sandbox.run_many([_stdio(PID_VIEW, "")])[0].tests[0].output
    code = PID_MOVERS[mover]
    bwrap_sandbox.run_many([Job(code, assert_tests("assert candidate() == 1"), "f", timeout_s=0.5)])
    after = bwrap_sandbox.run_many([_stdio(PID_VIEW, "")])[0].tests[0].output
    # the zygote is pid 1 (the candidate's parent), the judge 2, the candidate 300
    assert after == before and before.startswith("300 1 [1, 2, 300]"), (before, after)


# The fork server builds each reply (exit status, peak memory, CPU time) in its own memory, and candidates
# used to be forked from it: the next candidate found the previous job's outcome in the memory it inherited.
OUTCOME_SETTER = f"import os\nos._exit({ANSWER})\n"
MEMORY_READER = r'''
import ctypes, gc, os, re, sys
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
found = None
for base in (id(gc.get_objects()[len(gc.get_objects()) // 2]) & ~0xFFF, id(sys) & ~0xFFF, id(1.5) & ~0xFFF):
    for addr in range(base - (32 << 20), base + (32 << 20), 4096):
        if addr <= 0 or libc.write(w, ctypes.c_void_p(addr), 4096) != 4096:
            continue
        match = re.search(rb'"c_status": (\d+)', os.read(r, 4096))
        if match and int(match.group(1)) >> 8:
            found = int(match.group(1)) >> 8
            break
    if found:
        break
print(found)
'''


def test_a_job_cannot_find_the_previous_jobs_outcome_in_the_memory_it_inherits(sandbox):
    sandbox.run_many([_stdio(OUTCOME_SETTER, "")])
    result = sandbox.run_many([_stdio(MEMORY_READER, str(ANSWER), timeout_s=20.0)])[0]
    assert result.tests[0].verdict == "fail", result


# The CPU clock of any process is readable by pid without a permission: the judge's and the zygote's CPU time
# grow with what earlier jobs made them do (a big reply to decode, candidates to fork).
CPU_CLOCKS = """
import os, threading, time
def f():
    others = []
    for pid in (1, 2, os.getppid()):
        try:
            others.append(time.clock_gettime((~pid << 3) | 2))
        except OSError:
            pass
    own = [time.process_time(), time.thread_time(), time.clock_gettime((~os.getpid() << 3) | 2),
           time.clock_gettime(time.pthread_getcpuclockid(threading.get_ident()))]
    return len(others), len(own)
"""


def test_a_program_cannot_read_the_cpu_time_of_the_judge_or_the_zygote(sandbox):
    result = sandbox.run(CPU_CLOCKS, asserts("assert candidate() == (0, 4)"), entry_point="f")
    assert result.passed, result


# A Python process keeps traces of the work it did in its allocator: the addresses new objects get, its count of
# allocated blocks, its collector's counts. Candidates were forked from one long-lived process, whose state
# alternated with the parity of the forks it had made (a job chooses it by crashing between its tests) and
# changed when it forked a judge (a job that times out has the judge replaced).
HEAP_VIEW = ("import gc, resource, sys\nprint(sys.getallocatedblocks(), gc.get_count(), id(object()), id([]), id({}), "
             "id(1.5), resource.getrlimit(resource.RLIMIT_AS))\n")
HEAP_MOVERS = {
    "one_test": ("def f():\n    return 1\n", 1),
    "two_crashes": ("import os\ndef f():\n    os._exit(3)\n", 2),
    "three_crashes": ("import os\ndef f():\n    os._exit(3)\n", 3),
    "a_judge_that_timed_out": ("def f():\n    while True:\n        pass\n", 1),
    "a_stdio_job": (None, 1),
}


def test_what_a_job_inherits_of_the_process_it_is_forked_from_does_not_depend_on_the_jobs_before_it(sandbox):
    from sandbox_helpers import asserts as assert_tests

    # CPython specializes the bytecode of the zygote's loop after a few dozen turns (its warm-up): what a job
    # inherits changes once then, with the number of jobs the worker has run, not with what they did
    sandbox.run_many([_stdio(f"print({i})", str(i)) for i in range(64)])
    views = []
    for name in [*HEAP_MOVERS, *HEAP_MOVERS]:
        code, tests = HEAP_MOVERS[name]
        job = (_stdio("print(1)", "1") if code is None else
               Job(code, assert_tests(*["assert candidate() == 1"] * tests), "f", timeout_s=0.5))
        sandbox.run_many([job])
        views.append((name, sandbox.run_many([_stdio(HEAP_VIEW, "")])[0].tests[0].output))
    assert len({view for _, view in views}) == 1, views
