"""The forker: the one process every candidate and the judge are forked from, and which holds nothing a job did.

The fork server (`_server.py`) measures candidates and builds replies, so its memory holds what earlier
jobs did (their exit codes, peak memory, CPU time, messages), and a process forked from it would inherit
that: a job could leave an answer there for the next one. The server therefore forks this forker once,
at start, and never forks again. The forker receives only limits and descriptors from the server; it
forks, kills and reaps, and wait statuses and resource usage pass through fixed ctypes buffers that it
sends to the server and zeroes, never through Python objects.

With bubblewrap the forker is pid 1 of a pid namespace of its own, owned by the sandbox's user namespace
where it holds CAP_SYS_ADMIN, so it sets the namespace's last pid before each fork: every candidate is
pid 300 (its threads and children 301 up to the namespace's pid_max, which caps them), the judge pid 2,
whatever earlier jobs did. Before a fork it has reaped every process of the previous candidate's group,
so those pids are free; a fork that fails with EAGAIN (pids of the machine, not ours, still dying) is
tried again for FORK_RETRY_S. It also mounts each candidate's fresh run dir (a new tmpfs).

This module does NOT measure, judge or read anything a candidate wrote. Stdlib-only: it runs inside the
sandbox.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import json
import os
import resource
import signal
import socket
import time
import warnings

import _confine
import _landlock
import _rundir
from _judge import JUDGE_CONTROL_FD, serve_judge
from _roles import run_candidate_assert, run_candidate_stdio

CANDIDATE_PID, JUDGE_PID = 300, 2  # in the forker's pid namespace (bwrap); _rundir.PID_MAX_RESERVED = 300
FORK_RETRY_S = 2.0
EXIT_SETUP_FAILED = 71
JUDGE_MEMORY_MB = 512  # address space the judge may add to its own (replies are at most 16 MB of JSON)
RUN_DIR_INODES = 16384
RUSAGE_BYTES = 144  # struct rusage on LP64 (x86_64, aarch64): two timevals and 14 longs
_libc = ctypes.CDLL(None, use_errno=True)
_P_PGID, _WEXITED = 2, 4
_STATUS, _USAGE, _INFO = ctypes.c_int(0), ctypes.create_string_buffer(RUSAGE_BYTES), ctypes.create_string_buffer(128)


class Forker:
    """The forker's state: its channel to the server, the confinement it hands to each child, and the pids
    of the candidate and judge it forked."""

    def __init__(self, config: dict, proc_fd: int, channel: socket.socket) -> None:
        self.channel, self.run_dir = channel, config["run_dir"]
        self.fresh_tmpfs, self.tmpfs_mb = config["fresh_tmpfs"], config["tmpfs_mb"]
        self.seccomp = _confine.build_seccomp(config["allow_subprocess"], host_files_visible=not self.fresh_tmpfs)
        self.judge_seccomp = _confine.build_seccomp(False, host_files_visible=not self.fresh_tmpfs)
        # bwrap already mounts an empty file system over each hidden path; the fallback needs Landlock for it
        hidden = [] if self.fresh_tmpfs else config.get("hidden_paths", [])
        self.landlock_rules = _landlock.Landlock(config["read_paths"], config["device_files"], hidden)
        self.statm = os.open("self/statm", os.O_RDONLY, dir_fd=proc_fd)  # the forker's own, read before each fork
        self.last_pid, self.pid_max = None, 0
        if os.getpid() == 1:  # bwrap: our own pid namespace
            self.pid_max = _rundir.limit_pids(proc_fd, config["processes"])
            self.last_pid = os.open("sys/kernel/ns_last_pid", os.O_WRONLY, dir_fd=proc_fd)
        if self.fresh_tmpfs:
            _rundir.mount_fresh(self.run_dir, self.tmpfs_mb, RUN_DIR_INODES, replace=False)
        self.landlock = self.landlock_rules.ruleset(self.run_dir)
        self.children: dict[str, int] = {}  # "candidate" / "judge" -> pid

    def serve(self) -> None:
        """Answer the server's commands until it hangs up; never returns."""
        self._reply({"pid_max": self.pid_max, "landlock": self.landlock is not None, "seccomp": self.seccomp is not None})
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.channel, 4096, 8)
            except OSError:
                os._exit(1)
            if not message:
                os._exit(0)
            request = json.loads(message)
            try:
                getattr(self, "_" + request["op"])(request, fds)
            except OSError as exc:  # a fork that kept failing: the server reports it, this job gets errors
                self._reply({"error": f"{type(exc).__name__}: {exc}"[:300]})
            finally:
                for fd in fds:
                    os.close(fd)

    def _reply(self, message: dict, fds: tuple[int, ...] = ()) -> None:
        socket.send_fds(self.channel, [json.dumps(message).encode()], list(fds))

    # ------------------------------------------------------------------------------------- commands
    def _candidate(self, request: dict, fds: list[int]) -> None:
        """fds: [source, stdin (stdio only), stdout, stderr, (calls in, replies out: assert only,) report]."""
        assert_kind = request["assert"]
        vsize_pages, rss_pages = _statm(self.statm)
        limits = dict(request["limits"], address_space_bytes=vsize_pages * _PAGE + request["memory_mb"] * 2**20)
        pid = self._fork(CANDIDATE_PID, lambda: self._run_candidate(fds, assert_kind, limits))
        self.children["candidate"] = pid
        self._reply_child(pid, {"rss_pages": rss_pages})

    def _judge(self, request: dict, fds: list[int]) -> None:
        """fds: [the judge's end of its control socket]."""
        vsize_pages, _ = _statm(self.statm)
        pid = self._fork(JUDGE_PID, lambda: self._run_judge(fds[0], vsize_pages))
        self.children["judge"] = pid
        self._reply_child(pid, {})

    def _end(self, request: dict, fds: list[int]) -> None:
        """Kill the candidate's (or judge's) process group, reap all of it, send the leader's wait status and
        rusage as raw bytes; then give the next candidate a fresh run dir (bwrap)."""
        who = request["who"]
        pid = self.children.pop(who, None)
        if pid is not None:
            _kill_and_reap_group(pid)
        self.channel.sendmsg([_STATUS, _USAGE])
        _STATUS.value = 0
        ctypes.memset(_USAGE, 0, RUSAGE_BYTES)
        if who == "candidate" and self.fresh_tmpfs:  # while the server writes its reply
            _rundir.mount_fresh(self.run_dir, self.tmpfs_mb, RUN_DIR_INODES, replace=True)
            self._renew_landlock()

    def _ruleset(self, request: dict, fds: list[int]) -> None:
        """The fallback's run dir was made anew: a rule names its root inode."""
        self._renew_landlock()
        self._reply({})

    def _renew_landlock(self) -> None:
        if self.landlock is not None:
            os.close(self.landlock)
            self.landlock = self.landlock_rules.ruleset(self.run_dir)

    def _reply_child(self, pid: int, message: dict) -> None:
        pidfd = os.pidfd_open(pid)
        try:
            self._reply(message, (pidfd,))
        finally:
            os.close(pidfd)

    def _fork(self, wanted_pid: int, child) -> int:
        """Fork and run `child()` in the child (it never returns); with our own pid namespace the child is
        `wanted_pid`, which is free: the processes that held it were reaped."""
        deadline = time.monotonic() + FORK_RETRY_S
        while True:
            if self.last_pid is not None:
                os.pwrite(self.last_pid, str(wanted_pid - 1).encode(), 0)
            gc.freeze()  # children's collections then skip (and do not copy-on-write) inherited objects
            try:
                pid = os.fork()
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
                continue
            if pid == 0:
                try:
                    child()
                finally:
                    os._exit(EXIT_SETUP_FAILED)
            try:  # also done by the child: a kill right after the fork reaches its group
                os.setpgid(pid, pid)
            except OSError:  # it has already died
                pass
            if self.last_pid is not None and pid != wanted_pid:  # would tell the child about earlier jobs
                _kill_and_reap_group(pid)
                raise OSError(errno.EBUSY, f"pid {wanted_pid} was taken; the fork got {pid}")
            return pid

    # ------------------------------------------------------------------------------------- in the child
    def _run_candidate(self, fds: list[int], assert_kind: bool, limits: dict) -> None:
        """Read the program, confine, compile, report on the report pipe (closed before the program runs),
        then run it."""
        report = fds[-1]
        try:
            source = _read_all(fds[0])
            os.setpgid(0, 0)
            _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
            null = os.open("/dev/null", os.O_RDWR)
            _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
            if self.landlock is not None:  # before the fd shuffle, which may reuse its number
                _landlock.restrict_landlock(self.landlock)
            streams = [null, fds[1], fds[2]] if assert_kind else fds[1:4]
            keep = streams + (fds[3:5] if assert_kind else []) + [report]
            _place_fds(keep)  # -> 0, 1, 2, (RPC_IN, RPC_OUT,) report
            report = len(keep) - 1
            os.closerange(len(keep), 1 << 16)
            os.chdir(self.run_dir)
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; we want the kill
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the server's clean-up handler
            _confine.set_rlimits(**limits)
            _confine.drop_capabilities()
            if self.seccomp is not None:
                _confine.install_seccomp(self.seccomp, os.getpid())
        except BaseException as exc:
            os.write(report, f"setup:sandbox setup failed: {exc!r}"[:1000].encode())
            os._exit(EXIT_SETUP_FAILED)
        try:  # compiled here, under the candidate's limits: neither the server nor the forker holds a program
            with warnings.catch_warnings():  # a program's SyntaxWarnings are not worth its stderr
                warnings.simplefilter("ignore")
                code = compile(source, "<solution>", "exec", dont_inherit=True)  # not our __future__ imports
        except BaseException as exc:
            os.write(report, f"compile:{type(exc).__name__}: {exc}"[:1000].encode(errors="replace"))
            os._exit(1)
        del source
        os.write(report, b"ok")
        os.close(report)
        if assert_kind:
            run_candidate_assert(code)
        run_candidate_stdio(code)

    def _run_judge(self, control_fd: int, vsize_pages: int) -> None:
        """The judge runs trusted test code on values from candidates: it may read what the interpreter
        needs and nothing else, write nowhere, start no process, hold at most JUDGE_MEMORY_MB more than
        now, and it keeps none of the forker's capabilities."""
        try:
            os.setpgid(0, 0)
            _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.chdir("/")  # not the fallback's run dir, where programs write (Landlock hides it, if there is Landlock)
            null = os.open("/dev/null", os.O_RDWR)
            _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
            ruleset = self.landlock_rules.ruleset(None)
            if ruleset is not None:
                _landlock.restrict_landlock(ruleset)
            _place_fds([null, null, null, null, null, control_fd])
            os.closerange(JUDGE_CONTROL_FD + 1, 1 << 16)
            _confine.set_rlimits(cpu_s=resource.RLIM_INFINITY, processes=64, open_files=64, file_size_bytes=2**20,
                                 address_space_bytes=vsize_pages * _PAGE + JUDGE_MEMORY_MB * 2**20)
            _confine.drop_capabilities()
            if self.judge_seccomp is not None:
                _confine.install_seccomp(self.judge_seccomp, os.getpid())
            serve_judge()
        except BaseException as exc:
            os.write(2, f"judge failed: {exc!r}\n".encode())
        os._exit(72)


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _statm(fd: int) -> tuple[int, int]:
    """(virtual size, resident) of the forker, in pages."""
    fields = os.pread(fd, 256, 0).split()
    return int(fields[0]), int(fields[1])


def _kill_and_reap_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads and reap it whole: the leader into _STATUS and _USAGE, then every
    other member, which this process inherits (pid 1 of the namespace, or a subreaper) as their parents die.
    No member is left to hold a pid when the next candidate is forked."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while _libc.wait4(pid, ctypes.byref(_STATUS), 0, _USAGE) < 0 and ctypes.get_errno() == errno.EINTR:
        pass
    while _libc.waitid(_P_PGID, pid, _INFO, _WEXITED) == 0 or ctypes.get_errno() == errno.EINTR:
        ctypes.memset(_INFO, 0, 128)  # ECHILD: no process of the group is left
    ctypes.memset(_INFO, 0, 128)


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.pread(fd, 1 << 20, sum(map(len, chunks))):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="surrogatepass")  # as the host encoded it


def _place_fds(sources: list[int]) -> None:
    """dup2 sources[i] onto fd i, safely even when the numbers overlap."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, len(sources) + 16) for fd in sources]
    for target, fd in enumerate(high):
        os.dup2(fd, target, inheritable=True)


def main(config: dict, proc_fd: int, channel: socket.socket) -> None:
    """Run the forker in the process just forked from the server; never returns."""
    _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    _confine.prctl(_confine.PR_SET_CHILD_SUBREAPER, 1)  # the fallback: orphans of a candidate's group come here
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        forker = Forker(config, proc_fd, channel)
    except BaseException as exc:
        socket.send_fds(channel, [json.dumps({"error": f"forker setup failed: {exc!r}"[:300]}).encode()], [])
        os._exit(EXIT_SETUP_FAILED)
    forker.serve()
