"""The zygote: the one process every candidate and the judge are forked from, and which holds nothing of any job.

Candidates must not inherit anything of earlier jobs, and the process that serves jobs keeps traces of them:
values in freed memory (the fork server's replies held the previous job's exit code and peak memory), and the
state of its allocator (the address a new object gets alternated with the parity of the forks it had made,
which a job chooses by crashing between its tests). So the server (`_server`) forks this zygote once, before
any job, and never forks again. The zygote takes one-byte commands: b"c" forks a candidate, b"j" the judge,
b"k" kills the candidate's process group and reaps all of it (it answers the leader's wait status and rusage,
raw, from buffers it zeroes), b"r" reaps a judge the server stopped. Its loop allocates nothing that outlives
a turn: every candidate starts from the same zygote whatever ran before (`test_sandbox_channels.py` checks the
addresses a program's first objects get; CPython's specializing interpreter warms the loop up once, after a
few dozen turns). A new child gets what it needs (descriptors, limits) from the server itself (`_children`).

With bubblewrap the zygote is pid 1 of a pid namespace of its own, owned by the sandbox's user namespace where
it holds CAP_SYS_ADMIN: it sets the namespace's last pid before each fork, so every candidate is pid 300 (its
threads and children 301 up to the namespace's pid_max, which caps them) and the judge pid 2. Orphans of a
candidate's group come to it (pid 1, or a subreaper in the fallback), and b"k" reaps them all before it answers,
so no process of a candidate holds a pid, or anything else, when the next is forked; a fork that fails with
EAGAIN all the same (pids of the machine, not ours) is tried again for FORK_TRIES turns.

This module does NOT measure, judge or read anything a job wrote. Stdlib-only: it runs inside the sandbox.
"""

from __future__ import annotations

import array
import ctypes
import gc
import os
import signal
import time

import _children
import _confine
import _rundir

RUSAGE_BYTES = 144  # struct rusage on LP64 (x86_64, aarch64): two timevals and 14 longs
OUTCOME_BYTES = 4 + RUSAGE_BYTES  # the wait status, then the rusage, as b"k" answers them
FORK_TRIES = 200  # 10 ms apart
_LAST_PID = {b"c": str(_children.CANDIDATE_PID - 1).encode(), b"j": str(_children.JUDGE_PID - 1).encode()}
_P_PGID, _WEXITED, _EINTR = 2, 4, 4
_libc = ctypes.CDLL(None, use_errno=True)
# Everything a turn passes to libc is made here, once: a Python int or bytes made per turn would be an allocation
_OUTCOME = ctypes.create_string_buffer(OUTCOME_BYTES)
_OUTCOME_ADDRESS = ctypes.addressof(_OUTCOME)
_STATUS_REF, _USAGE_REF = ctypes.byref(_OUTCOME), ctypes.byref(_OUTCOME, 4)
_INFO = ctypes.create_string_buffer(128)  # siginfo_t of the group's other members, zeroed after each
_INFO_ADDRESS, _INFO_REF = ctypes.addressof(_INFO), ctypes.byref(_INFO)
_PID = ctypes.c_int(0)  # the pid being reaped


def main(setup: _children.Setup, commands_fd: int, answers_fd: int, processes: int) -> None:
    """Run the zygote in the process just forked from the server; never returns. Its hello: b"z" and the pid_max
    it set on its pid namespace (8 digits; 0 without one, or before Linux 6.14)."""
    _confine.set_name(b"coral-zygote")
    _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    _confine.prctl(_confine.PR_SET_CHILD_SUBREAPER, 1)  # the fallback: orphans of a candidate's group come here
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    last_pid = os.open("sys/kernel/ns_last_pid", os.O_WRONLY, dir_fd=setup.proc_fd) if setup.own_namespace else -1
    pids = array.array("i", [0, 0])  # the candidate's and the judge's, kept without an object
    children = {b"c": lambda: _children.run_candidate(setup), b"j": lambda: _children.run_judge(setup)}
    slots = {b"c": 0, b"j": 1}
    pid_max = _rundir.limit_pids(setup.proc_fd, processes) if setup.own_namespace else 0
    os.write(answers_fd, b"z%08d" % pid_max)
    gc.collect()
    gc.freeze()  # children's collections then skip (and do not copy-on-write) what the zygote holds
    while True:
        command = os.read(commands_fd, 1)
        if command in children:
            pids[slots[command]] = _fork(last_pid, command, children[command])
        elif command == b"k":  # the candidate's group
            _PID.value = pids[0]
            _reap_group()
            os.write(answers_fd, _OUTCOME)
            ctypes.memset(_OUTCOME_ADDRESS, 0, OUTCOME_BYTES)
        elif command == b"r":  # the judge the server killed
            _PID.value = pids[1]
            _libc.wait4(_PID, _STATUS_REF, 0, _USAGE_REF)
            ctypes.memset(_OUTCOME_ADDRESS, 0, OUTCOME_BYTES)
            os.write(answers_fd, b"r")
        else:
            os._exit(0)  # the server hung up
        del command


def _fork(last_pid: int, command: bytes, child) -> int:
    """Fork `child()` (it never returns), with our pid namespace as its fixed pid, which is free: what held it
    was reaped. 0 when the fork kept failing (the child's server then gets no hello and reports it)."""
    for _ in range(FORK_TRIES):
        if last_pid >= 0:
            os.pwrite(last_pid, _LAST_PID[command], 0)
        try:
            pid = os.fork()
        except BlockingIOError:  # EAGAIN
            time.sleep(0.01)
            continue
        if pid == 0:
            try:
                child()
            finally:
                os._exit(_children.EXIT_SETUP_FAILED)
        try:  # also done by the child: a kill right after the fork reaches its group
            os.setpgid(pid, pid)
        except OSError:  # it has already died
            pass
        return pid
    return 0


def _reap_group() -> None:
    """SIGKILL the process group _PID leads, reap it into _OUTCOME (status, rusage), then every other member of
    the group, which come to us as their parents die, into _INFO (zeroed each time)."""
    if _PID.value <= 0:  # no candidate (its fork failed): killpg(0) would be our own group
        return
    _libc.killpg(_PID, signal.SIGKILL)
    _libc.kill(_PID, signal.SIGKILL)
    while _libc.wait4(_PID, _STATUS_REF, 0, _USAGE_REF) < 0 and ctypes.get_errno() == _EINTR:
        pass
    while _libc.waitid(_P_PGID, _PID, _INFO_REF, _WEXITED) == 0 or ctypes.get_errno() == _EINTR:
        ctypes.memset(_INFO_ADDRESS, 0, 128)  # ECHILD: no member of the group is left
