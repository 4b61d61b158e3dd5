"""The fork server: one per worker, started inside bubblewrap (or bare in the fallback).

It reads run requests from the host over a unix socket (file descriptors for the program's source,
stdin/payload, stdout, stderr and verdict arrive with each request), forks one confined candidate
per test, hands assert tests to a persistent, confined judge process (forked from this server,
respawned when it misses a deadline or dies), enforces the wall-clock deadline, reaps everything,
measures CPU time and peak memory from `wait4`, gives the next candidate a fresh run directory
(`_rundir`) and answers with the raw outcome. The server never reads programs, test payloads,
expected outputs or verdicts: they live in memfds that only a candidate (its own program), the
judge and the host touch, so a candidate forked from it finds nothing of another job in the memory
it inherits. A candidate reads and compiles its program itself, after confinement, and reports
"confined" or "cannot compile" on a pipe it closes before the program runs: the only word on
infrastructure the host takes from a candidate process.
Workers pin themselves to one CPU: a forked child then starts on a warm CPU (on small VMs a
cross-CPU wake-up cost milliseconds per fork).

This module does NOT decide verdicts (the host does) and does NOT import coral: it is started as
a script with only its sibling stdlib-only modules on sys.path.
"""

from __future__ import annotations

import fcntl
import gc
import importlib
import json
import math
import os
import resource
import signal
import socket
import sys
import time
import warnings

import _confine
import _measure
import _rundir
from _judge import JUDGE_CONTROL_FD, serve_judge
from _roles import run_candidate_assert, run_candidate_stdio
from _wire import recv_request

# Imported once here, so a program importing them finds them in sys.modules instead of executing
# them again in every candidate (`typing` alone costs a forked child ~6 ms). Only stateless,
# common modules: `random` is left out on purpose, or every candidate and the judge would share
# one generator state and a program could predict the inputs a test draws.
PRELOAD = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string")
JUDGE_MEMORY_MB = 512  # address space the judge may add to its own (replies are at most 16 MB of JSON)
RUN_DIR_INODES = 16384
EXIT_SETUP_FAILED = 71


class _Live:
    """The candidate serving the assert tests of one job; the server keeps the judge's ends of its
    pipes, so the candidate waits for the next test instead of seeing EOF."""

    def __init__(self, job: str | None, pid: int, judge_fds: tuple[int, int], forked_at: float) -> None:
        self.job, self.pid, self.judge_fds, self.forked_at = job, pid, judge_fds, forked_at
        self.served = False


class Server:
    def __init__(self, config: dict) -> None:
        self.run_dir: str = config["run_dir"]
        self.allow_subprocess: bool = config["allow_subprocess"]
        self.fresh_tmpfs: bool = config["fresh_tmpfs"]  # bwrap: a new tmpfs per candidate
        self.tmpfs_mb: int = config["tmpfs_mb"]
        self.seccomp = _confine.build_seccomp(self.allow_subprocess, host_files_visible=not self.fresh_tmpfs)
        # bwrap already mounts an empty file system over each hidden path; the fallback needs Landlock for it
        hidden = [] if self.fresh_tmpfs else config.get("hidden_paths", [])
        self.landlock_rules = _confine.Landlock(config["read_paths"], config["device_files"], hidden)
        self.pid_max = 0
        if self.fresh_tmpfs:
            _rundir.private_mounts()
            self.pid_max = _rundir.limit_pids(config["processes"])
            _rundir.mount_fresh(self.run_dir, self.tmpfs_mb, RUN_DIR_INODES, replace=False)
        self.landlock = self.landlock_rules.ruleset(self.run_dir)
        self.run_dir_made = _rundir.metadata(self.run_dir)  # fallback: what a fresh run dir looks like
        self.dirty = False  # a candidate used the run dir since it was made fresh
        self.restart = False  # the run dir could not be emptied: the host replaces this worker
        self.judge: tuple[int, socket.socket] | None = None  # (pid, control socket), spawned lazily
        self.live: _Live | None = None  # the candidate of the job being run, between its tests

    def info(self) -> dict:
        return {"seccomp": self.seccomp is not None, "landlock": self.landlock is not None,
                "landlock_abi": _confine.landlock_abi(), "pid": os.getpid(), "pid_max": self.pid_max,
                "fresh_tmpfs": self.fresh_tmpfs}

    def renew_run_dir(self) -> None:
        """A fresh run dir for the next candidate: a new tmpfs (bwrap), or the old one emptied with the
        owner's rights (fallback; what cannot be removed makes the host replace this worker)."""
        if not self.dirty:
            return
        self.dirty = False
        if not self.fresh_tmpfs:
            self.restart = self.restart or not self._renew_fallback_run_dir()
            return
        # Always a new tmpfs, even when the candidate seemed to leave it untouched: its inode counter
        # and root timestamps would tell the next candidate whether its predecessor wrote files.
        _rundir.mount_fresh(self.run_dir, self.tmpfs_mb, RUN_DIR_INODES, replace=True)
        self._renew_landlock()

    def _renew_landlock(self) -> None:
        if self.landlock is not None:  # a rule names the run dir's root inode, which is new
            os.close(self.landlock)
            self.landlock = self.landlock_rules.ruleset(self.run_dir)

    def _renew_fallback_run_dir(self) -> bool:
        """Empty the host-disk run dir; one whose own metadata changed (an extended attribute or ACL, its
        group, a size grown by many entries) is made anew. False when that fails: the host then replaces
        this worker."""
        try:
            if not _rundir.wipe(self.run_dir):
                return False
            if _rundir.metadata(self.run_dir) != self.run_dir_made:
                os.rmdir(self.run_dir)
                os.mkdir(self.run_dir, 0o700)
                self._renew_landlock()
            _rundir.reset_times(self.run_dir)
            return _rundir.metadata(self.run_dir) == self.run_dir_made
        except OSError:
            return False

    # ------------------------------------------------------------------------------ one test
    def run(self, req: dict, fds: list[int]) -> dict:
        """One test; fds = [stdin or payload, stdout, stderr, (verdict,) source of the program]."""
        source_fd = fds.pop()
        try:
            if req["kind"] == "assert":
                return self._run_assert(req, source_fd, fds)
            self.end_live()
            start = time.monotonic()
            c_pid, base_r, rss_pages = self._fork(req, source_fd, fds, None)
        finally:
            os.close(source_fd)
            for fd in fds:
                os.close(fd)
        timed_out = _measure.wait_readable(os.pidfd_open(c_pid), start + req["timeout_s"], close=True)
        _kill_group(c_pid)
        _, c_status, usage = os.wait4(c_pid, 0)
        self._reap_orphans()
        self.dirty = True
        rss_kb, report = _measure.read_start_report(base_r, rss_pages)
        return {"timed_out": timed_out, "c_status": c_status, "wall_s": time.monotonic() - start,
                "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": max(0.0, (usage.ru_maxrss - rss_kb) / 1024),
                **report}

    def _fork(self, req: dict, source_fd: int, fds: list[int], rpc) -> tuple[int, int, int]:
        """Fork a confined candidate in a fresh run dir; (pid, pipe on which it reports its RSS right after
        the fork and then its confinement, server RSS)."""
        self.renew_run_dir()
        vsize_pages, rss_pages = _measure.statm_pages()
        tests = req.get("tests_left", 1) if rpc is not None else 1  # the assert tests it may serve
        limits = {"cpu_s": math.ceil(req["timeout_s"] * tests) + 1,
                  "address_space_bytes": vsize_pages * _measure.PAGE_KB * 1024 + req["memory_mb"] * 2**20,
                  "file_size_bytes": req["output_limit_bytes"], "open_files": 64, "processes": 64}
        base_r, base_w = os.pipe()  # the candidate reports on it before any untrusted code runs
        gc.freeze()  # children's collections then skip (and do not copy-on-write) inherited objects
        c_pid = os.fork()
        if c_pid == 0:
            os.write(base_w, _measure.rss_pages() + b"\n")  # read by the server later: no round trip
            self._candidate(source_fd, rpc is not None, fds, rpc, limits, base_w)
        os.close(base_w)
        os.set_blocking(base_r, False)
        return c_pid, base_r, rss_pages

    def _run_assert(self, req: dict, source_fd: int, fds: list[int]) -> dict:
        """One assert test, in the job's live candidate when the previous test left one."""
        self._judge_socket()  # forked before this test's pipes exist
        job = req.get("job")  # a request without a job id never reuses a candidate
        live = self.live if self.live is not None and job is not None and self.live.job == job else None
        if live is not None and not _measure.alive(live.pid):  # died after its last test: start afresh
            live = None
        if live is None:
            self.end_live()
            rpc, forked_at = (os.pipe(), os.pipe()), time.monotonic()
            c_pid, base_r, rss_pages = self._fork(req, source_fd, fds, rpc)
            os.close(rpc[0][0])
            os.close(rpc[1][1])
            live = self.live = _Live(req.get("job"), c_pid, (rpc[1][0], rpc[0][1]), forked_at)
            start, cpu_start, rss_start_kb = live.forked_at, 0.0, None
        else:
            base_r = -1
            start, cpu_start = time.monotonic(), _measure.proc_cpu_s(live.pid)
            rss_start_kb = _measure.proc_rss_kb(live.pid) or 0
            _measure.reset_peak(live.pid)
        try:
            socket.send_fds(self._judge_socket(), [b"r" if live.served else b"t"], [fds[0], fds[3], *live.judge_fds])
            sent = True
        except OSError:  # the judge died between tests; this test gets no verdict
            self.stop_judge()
            sent = False
        live.served = True
        timed_out = sent and _measure.wait_readable(self.judge[1].fileno(), start + req["timeout_s"])
        answer = self.judge[1].recv(1) if sent and not timed_out else b""
        if answer not in (b"d", b"u"):
            self.stop_judge()  # stuck in a test or dead: a fresh one next time
            sent = False
        report: dict = {}
        if base_r >= 0:  # a fresh candidate wrote its RSS and confinement before any untrusted code ran
            rss_start_kb, report = _measure.read_start_report(base_r, rss_pages)
        # a fresh candidate that ends now is measured by wait4 alone, as cheaply as possible
        alive = (req.get("keep") or base_r < 0) and _measure.alive(live.pid)
        cpu_end = _measure.proc_cpu_s(live.pid) if alive else None
        hwm_kb = _measure.proc_hwm_kb(live.pid) if alive else None
        c_status = 0  # an exiting candidate may still look alive, but has no memory to report
        if not (alive and sent and answer == b"d" and req.get("keep") and cpu_end is not None and hwm_kb is not None):
            c_status, usage = self.end_live()
            cpu_end = cpu_end if cpu_end is not None else usage.ru_utime + usage.ru_stime
            hwm_kb = hwm_kb if hwm_kb is not None else usage.ru_maxrss
        return {"timed_out": timed_out, "c_status": c_status, "wall_s": time.monotonic() - start,
                "cpu_s": max(0.0, cpu_end - (cpu_start or 0.0)),
                "peak_mb": max(0.0, (hwm_kb - (rss_start_kb or 0)) / 1024), **report}

    def end_live(self) -> tuple[int, object]:
        """Kill and reap the job's live candidate, if any; (wait status, rusage)."""
        live, self.live = self.live, None
        if live is None:
            return 0, None
        _kill_group(live.pid)
        _, c_status, usage = os.wait4(live.pid, 0)
        self._reap_orphans()
        for fd in live.judge_fds:
            os.close(fd)
        self.dirty = True
        return c_status, usage

    def _candidate(self, source_fd: int, assert_kind: bool, fds: list[int], rpc, limits: dict, report: int) -> None:
        """In the forked child: read the program, confine, compile, report on `report`, then run it."""
        try:
            source = _read_all(source_fd)
            os.setpgid(0, 0)
            _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
            null = os.open("/dev/null", os.O_RDWR)
            _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
            if self.landlock is not None:  # before the fd shuffle, which may reuse its number
                _confine.restrict_landlock(self.landlock)
            stdin = null if assert_kind else fds[0]
            keep = [stdin, fds[1], fds[2]] + ([rpc[0][0], rpc[1][1]] if assert_kind else []) + [report]
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
        try:  # compiled here, under the candidate's limits: the server never holds a program
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

    def _reap_orphans(self) -> None:
        """Reap every exited child. A judge that died on its own (the OOM killer, or a program that may
        signal it where Landlock cannot scope signals) is among them: it is forgotten here, as its pid,
        once reaped, may soon belong to a candidate that stop_judge would then kill."""
        if self.judge is not None and self.judge[0] in _reap_orphans():
            self.judge[1].close()
            self.judge = None

    def _judge_socket(self) -> socket.socket:
        """The persistent judge's control socket; the judge is forked from this server, which
        never holds test data, so nothing secret is inherited by later candidates. A judge that died
        since its last test is replaced first: the next job's tests must not pay for it."""
        if self.judge is not None and not _measure.alive(self.judge[0]):
            self.stop_judge()
        if self.judge is None:
            server_end, judge_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            pid = os.fork()
            if pid == 0:
                try:
                    self._confine_judge(judge_end.fileno())
                    serve_judge()
                except BaseException as exc:
                    os.write(2, f"judge failed: {exc!r}\n".encode())
                os._exit(72)
            judge_end.close()
            self.judge = (pid, server_end)
        return self.judge[1]

    def _confine_judge(self, control_fd: int) -> None:
        """The judge runs trusted test code on values from candidates: it may read what the
        interpreter needs and nothing else, write nowhere, start no process, hold at most
        JUDGE_MEMORY_MB more than now, and it keeps none of this server's capabilities."""
        os.setpgid(0, 0)
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir("/")  # not the fallback's run dir, where programs write (Landlock hides it, if there is Landlock)
        null = os.open("/dev/null", os.O_RDWR)
        vsize_pages, _ = _measure.statm_pages()  # before Landlock, which hides /proc
        _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
        ruleset = self.landlock_rules.ruleset(None)
        if ruleset is not None:
            _confine.restrict_landlock(ruleset)
        _place_fds([null, null, null, null, null, control_fd])
        os.closerange(JUDGE_CONTROL_FD + 1, 1 << 16)
        _confine.set_rlimits(cpu_s=resource.RLIM_INFINITY, processes=64, open_files=64, file_size_bytes=2**20,
                             address_space_bytes=vsize_pages * _measure.PAGE_KB * 1024 + JUDGE_MEMORY_MB * 2**20)
        _confine.drop_capabilities()
        if self.seccomp is not None:
            _confine.install_seccomp(_confine.build_seccomp(False, not self.fresh_tmpfs), os.getpid())

    def stop_judge(self) -> None:
        if self.judge is not None:
            pid, sock = self.judge
            sock.close()
            _kill_group(pid)
            os.waitpid(pid, 0)
            self.judge = None


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


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap_orphans() -> set[int]:
    """Reap every exited child; their pids."""
    reaped = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.add(pid)


def _exit_removing(run_dir: str) -> None:
    """The host died: children die with us (their death signal); leave no temp files behind."""
    _rundir.wipe(run_dir)
    os.rmdir(run_dir)
    os._exit(0)


def main() -> None:
    config = json.loads(sys.argv[1])
    if config.get("remove_run_dir_on_exit"):  # fallback: the run dir is on the host disk
        signal.signal(signal.SIGTERM, lambda *_: _exit_removing(config["run_dir"]))
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGTERM)
    else:
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    _confine.prctl(_confine.PR_SET_CHILD_SUBREAPER, 1)
    _confine.prctl(_confine.PR_SET_DUMPABLE, 0)
    if config.get("cpu") is not None:  # children then start on this CPU: no cross-CPU wake-up latency
        os.sched_setaffinity(0, {config["cpu"]})
    for name in PRELOAD:
        importlib.import_module(name)
    server = Server(config)
    sock = socket.socket(fileno=config["control_fd"])
    while True:
        try:
            req, fds = recv_request(sock)
        except EOFError:
            server.end_live()
            server.stop_judge()
            return
        reply = server.info() if req["op"] == "info" else server.run(req, fds)
        if not server.fresh_tmpfs:  # emptied before the reply, which says whether that worked
            server.renew_run_dir()
            reply["restart"] = server.restart
        body = json.dumps(reply).encode()
        sock.sendall(len(body).to_bytes(8, "little") + body)
        server.renew_run_dir()  # a new tmpfs while the host reads the reply


if __name__ == "__main__":
    main()
