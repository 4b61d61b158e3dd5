"""What the zygote forks: a confined candidate, or the judge. Each gets what it needs from the server itself.

The zygote (`_zygote`) forks without knowing what for: a new child reads its descriptors and limits from the
server over the socket pair the zygote inherited (the server sent them right after the fork command), answers
with a pidfd of itself, then confines itself and runs. So the zygote never holds a job's data, and the work
that differs from job to job happens in the child. A candidate reports whether confinement and compiling worked
on a pipe it closes before the program runs; the judge is the trusted test runner (`_judge`).

This module does NOT fork (see `_zygote`), measure or decide verdicts. Stdlib-only: it runs inside the sandbox.
"""

from __future__ import annotations

import fcntl
import os
import resource
import signal
import socket
import warnings

import _confine
import _landlock
import _rundir
from _judge import JUDGE_CONTROL_FD, serve_judge
from _roles import run_candidate_assert, run_candidate_stdio

CANDIDATE_PID, JUDGE_PID = 300, 2  # in the zygote's pid namespace (bwrap); _rundir.PID_MAX_RESERVED is 300
EXIT_SETUP_FAILED = 71
RUN_DIR_INODES = 16384


class Setup:
    """What every child is confined with (seccomp programs, Landlock rules, the run dir), built once by the
    server before it forks the zygote, and the socket on which a new child gets its part from the server."""

    def __init__(self, config: dict, proc_fd: int, own_namespace: bool, kids: socket.socket) -> None:
        self.config, self.proc_fd, self.own_namespace, self.kids = config, proc_fd, own_namespace, kids
        self.run_dir, self.fresh_tmpfs, self.tmpfs_mb = config["run_dir"], config["fresh_tmpfs"], config["tmpfs_mb"]
        self.seccomp = _confine.build_seccomp(config["allow_subprocess"], host_files_visible=not self.fresh_tmpfs)
        self.judge_seccomp = _confine.build_seccomp(False, host_files_visible=not self.fresh_tmpfs)
        # bwrap already mounts an empty file system over each hidden path; the fallback needs Landlock for it
        hidden = [] if self.fresh_tmpfs else config.get("hidden_paths", [])
        self.landlock_rules = _landlock.Landlock(config["read_paths"], config["device_files"], hidden)
        # the fallback's run dir as made: one whose own metadata changed is made anew (see _server.renew_run_dir)
        self.run_dir_made = None if self.fresh_tmpfs else _rundir.metadata(self.run_dir)


def _hello(setup: Setup) -> tuple[bytes, list[int]]:
    """In a new child: its part from the server (a few bytes and descriptors); a pidfd of itself goes back.
    Builtins only, no json or socket.py: every object a child touches first is a page it copies."""
    message, ancillary, _, _ = setup.kids.recvmsg(64, _ANCILLARY_BYTES)
    fds = [int.from_bytes(data[i:i + 4], "little") for _, _, data in ancillary for i in range(0, len(data) - 3, 4)]
    pidfd = os.pidfd_open(os.getpid())
    setup.kids.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, pidfd.to_bytes(4, "little"))])
    os.close(pidfd)
    return message, fds


_ANCILLARY_BYTES = socket.CMSG_SPACE(8 * 4)


def candidate_part(assert_kind: bool, landlock: bool, limits: dict) -> bytes:
    """What the server sends a new candidate besides descriptors (see run_candidate)."""
    return bytes([assert_kind, landlock]) + b"".join(limits[name].to_bytes(8, "little") for name in LIMITS)


LIMITS = ("cpu_s", "address_space_bytes", "file_size_bytes", "open_files", "processes")


def run_candidate(setup: Setup) -> None:
    """In the child: get the job's part from the server, read the program, confine, compile, report on the report
    pipe (closed before the program runs), then run it. fds: [source, stdin (stdio only), stdout, stderr, (calls
    in, replies out: assert only,) Landlock ruleset (when there is Landlock), report]."""
    part, fds = _hello(setup)
    report, assert_kind = fds[-1], bool(part[0])
    landlock = fds[-2] if part[1] else None
    limits = {name: int.from_bytes(part[2 + 8 * i:10 + 8 * i], "little") for i, name in enumerate(LIMITS)}
    try:
        source = _read_all(fds[0])
        _confine.set_name(b"coral-candidate")  # for `ps`; the program may rename itself
        os.setpgid(0, 0)
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
        null = os.open("/dev/null", os.O_RDWR)
        _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
        if landlock is not None:  # before the fd shuffle, which may reuse its number
            _landlock.restrict_landlock(landlock)
        streams = [null, fds[1], fds[2]] if assert_kind else fds[1:4]
        keep = streams + (fds[3:5] if assert_kind else []) + [report]
        _place_fds(keep)  # -> 0, 1, 2, (RPC_IN, RPC_OUT,) report
        report = len(keep) - 1
        os.closerange(len(keep), 1 << 16)
        os.chdir(setup.run_dir)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; we want the kill
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the server's clean-up handler
        _confine.set_rlimits(**limits)
        _confine.drop_capabilities()
        if setup.seccomp is not None:
            _confine.install_seccomp(setup.seccomp, os.getpid())
    except BaseException as exc:
        os.write(report, f"setup:sandbox setup failed: {exc!r}"[:1000].encode())
        os._exit(EXIT_SETUP_FAILED)
    try:  # compiled here, under the candidate's limits: no other process of the worker holds a program
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


def run_judge(setup: Setup) -> None:
    """The judge: it runs trusted test code on values from candidates, may read what the interpreter needs and
    nothing else, write nowhere, start no process, hold at most JUDGE_MEMORY_MB more than now, and keeps none of
    the zygote's capabilities. Never returns."""
    try:
        part, (control_fd,) = _hello(setup)
        _confine.set_name(b"coral-judge")
        os.setpgid(0, 0)
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.chdir("/")  # not the fallback's run dir, where programs write (Landlock hides it, if there is Landlock)
        null = os.open("/dev/null", os.O_RDWR)
        _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
        ruleset = setup.landlock_rules.ruleset(None)
        if ruleset is not None:
            _landlock.restrict_landlock(ruleset)
        _place_fds([null, null, null, null, null, control_fd])
        os.closerange(JUDGE_CONTROL_FD + 1, 1 << 16)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _confine.set_rlimits(cpu_s=resource.RLIM_INFINITY, processes=64, open_files=64, file_size_bytes=2**20,
                             address_space_bytes=int.from_bytes(part, "little"))
        _confine.drop_capabilities()
        if setup.judge_seccomp is not None:
            _confine.install_seccomp(setup.judge_seccomp, os.getpid())
        serve_judge()
    except BaseException as exc:
        os.write(2, f"judge failed: {exc!r}\n".encode())
    os._exit(72)


def _read_all(fd: int) -> str:
    chunks: list[bytes] = []
    while chunk := os.pread(fd, 1 << 20, sum(map(len, chunks))):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="surrogatepass")  # as the host encoded it


def _place_fds(sources: list[int]) -> None:
    """dup2 sources[i] onto fd i, safely even when the numbers overlap."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, len(sources) + 16) for fd in sources]
    for target, fd in enumerate(high):
        os.dup2(fd, target, inheritable=True)
