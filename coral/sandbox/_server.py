"""The fork server: one per worker, started inside bubblewrap (or bare in the fallback).

It reads run requests from the host over a unix socket (file descriptors for the program's source,
stdin/payload, stdout, stderr and verdict arrive with each request), has the zygote (`_zygote`) fork one
confined candidate per job (its assert tests) or per stdio test and hands it its descriptors (`_children`),
hands assert tests to a persistent, confined judge (also forked by the zygote, and replaced when it misses a
deadline or dies), enforces the wall-clock deadline, measures CPU time and peak memory, has the zygote kill
and reap everything, gives the next candidate a fresh run directory and answers with the raw outcome.

The server never forks after it started the zygote: what it learns about a job (exit status, peak memory,
CPU time, the fallback run dir's file names) stays in a process no candidate is forked from. It never reads
programs, test payloads, expected outputs or verdicts either: they live in memfds that only a candidate (its
own program), the judge and the host touch. A candidate reads and compiles its program itself, after
confinement, and reports "confined" or "cannot compile" on a pipe it closes before the program runs: the only
word on infrastructure the host takes from a candidate process.

Start-up with bubblewrap: a private mount namespace; a directory fd on /proc, then an empty read-only tmpfs
over /proc (bubblewrap's shows the sandbox's outer pid namespace, whose pids earlier jobs move); a new pid
namespace whose pid 1 is the zygote. Workers pin themselves to one CPU: a forked child then starts on a warm
CPU (on small VMs a cross-CPU wake-up cost milliseconds per fork).

This module does NOT decide verdicts (the host does) and does NOT import coral: it is started as
a script with only its sibling stdlib-only modules on sys.path.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import signal
import socket
import struct
import sys
import time

import _children
import _confine
import _landlock
import _measure
import _rundir
import _zygote
from _wire import recv_request

# Imported once here, so a program importing them finds them in sys.modules instead of executing
# them again in every candidate (`typing` alone costs a forked child ~6 ms). Only stateless,
# common modules: `random` is left out on purpose, or every candidate and the judge would share
# one generator state and a program could predict the inputs a test draws.
PRELOAD = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string")
HELLO_TIMEOUT_S = 5.0  # the zygote tries a fork that fails with EAGAIN for 2 s
JUDGE_MEMORY_MB = 512  # address space the judge may add to its own (replies are at most 16 MB of JSON)


class ZygoteGone(Exception):
    """The zygote died: the worker cannot run anything more (the host restarts it)."""


class _Child:
    """A candidate or the judge: a pidfd, and its pid in the server's pid namespace (for /proc and its CPU
    clock; in the zygote's namespace it has another)."""

    def __init__(self, pidfd: int) -> None:
        self.pidfd, self.pid = pidfd, _measure.pid_of(pidfd)


class _Live:
    """The candidate serving the assert tests of one job; the server keeps the judge's ends of its
    pipes, so the candidate waits for the next test instead of seeing EOF."""

    def __init__(self, job: str | None, child: _Child, judge_fds: tuple[int, int], forked_at: float) -> None:
        self.job, self.child, self.judge_fds, self.forked_at = job, child, judge_fds, forked_at
        self.served = False


class Server:
    """The worker's server (see the module docstring); `run` serves one test."""

    def __init__(self, config: dict, proc_fd: int) -> None:
        self.run_dir, self.fresh_tmpfs = config["run_dir"], config["fresh_tmpfs"]
        self.kids, kids_zygote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.kids.settimeout(HELLO_TIMEOUT_S)
        self.setup = _children.Setup(config, proc_fd, config["fresh_tmpfs"], kids_zygote)
        self.zygote, self.answers, zygote_pid, self.pid_max = _start_zygote(self.setup, config)
        self.zygote_statm = os.open(f"{zygote_pid}/statm", os.O_RDONLY, dir_fd=proc_fd)
        kids_zygote.close()
        self.dirty = False  # a candidate that used the run dir ended since it was renewed
        self.restart = False  # the fallback's run dir could not be emptied: the host replaces this worker
        self.judge: tuple[_Child, socket.socket] | None = None  # (the judge, its control socket), spawned lazily
        self.live: _Live | None = None  # the candidate of the job being run, between its tests

    def info(self) -> dict:
        return {"seccomp": self.setup.seccomp is not None, "landlock": self.setup.landlock_rules.abi > 0,
                "landlock_abi": _landlock.landlock_abi(), "pid": os.getpid(), "pid_max": self.pid_max,
                "fresh_tmpfs": self.fresh_tmpfs}

    # ------------------------------------------------------------------------------ the zygote's children
    def _spawn(self, command: bytes, part: bytes, fds: list[int]) -> _Child:
        """Have the zygote fork a child (b"c" a candidate, b"j" the judge) and hand it its part."""
        os.write(self.zygote, command)
        socket.send_fds(self.kids, [part], fds)
        try:
            word, got, _, _ = socket.recv_fds(self.kids, 16, 1)
        except TimeoutError:
            raise OSError("the zygote could not fork (EAGAIN)") from None
        if word != b"hello" or len(got) != 1:
            raise OSError("a new child did not say hello")
        return _Child(got[0])

    def _zygote_statm(self) -> tuple[int, int]:
        """(virtual size, resident) of the zygote, in pages: what a child of it starts with."""
        fields = os.pread(self.zygote_statm, 256, 0).split()
        return int(fields[0]), int(fields[1])

    def _end(self, child: _Child) -> tuple[int, float, int]:
        """The zygote kills and reaps the candidate's whole process group: (its wait status, CPU s, peak RSS kB).
        Its run dir is renewed after the reply (not while the candidate lives: its files stay for later tests)."""
        os.write(self.zygote, b"k")
        raw = _read_exact(self.answers, _zygote.OUTCOME_BYTES)
        os.close(child.pidfd)
        self.dirty = True
        status = int.from_bytes(raw[:4], "little", signed=True)
        user_s, user_us, system_s, system_us, maxrss_kb = struct.unpack_from("<5q", raw, 4)
        return status, user_s + system_s + (user_us + system_us) / 1e6, maxrss_kb

    # ------------------------------------------------------------------------------ the run dir
    def renew_run_dir(self) -> None:
        """A fresh run dir for the next candidate: a new tmpfs (bwrap), or the old one emptied with the owner's
        rights (fallback): one whose own metadata changed (an extended attribute or ACL, its group, a size grown by
        many entries) is made anew; what cannot be removed makes the host replace this worker."""
        if not self.dirty:
            return
        self.dirty = False
        if self.fresh_tmpfs:  # even when it looks untouched: its inode counter and times would tell
            _rundir.mount_fresh(self.run_dir, self.setup.tmpfs_mb, _children.RUN_DIR_INODES, replace=True)
            return
        try:
            if not _rundir.wipe(self.run_dir):
                self.restart = True
                return
            if _rundir.metadata(self.run_dir) != self.setup.run_dir_made:
                os.rmdir(self.run_dir)
                os.mkdir(self.run_dir, 0o700)
            _rundir.reset_times(self.run_dir)
            self.restart = self.restart or _rundir.metadata(self.run_dir) != self.setup.run_dir_made
        except OSError:
            self.restart = True

    def _files_kb(self) -> int:
        """Memory the run dir's files hold (bwrap: its tmpfs pages). The fallback's run dir is on the host
        disk: its files are not memory."""
        return _measure.files_kb(self.run_dir) if self.fresh_tmpfs else 0

    # ------------------------------------------------------------------------------ one test
    def run(self, req: dict, fds: list[int]) -> dict:
        """One test; fds = [stdin or payload, stdout, stderr, (verdict,) source of the program]."""
        source_fd = fds.pop()
        try:
            if req["kind"] == "assert":
                return self._run_assert(req, source_fd, fds)
            self.end_live()
            self._judge_socket()  # every candidate finds the judge there, as pid 2
            start = time.monotonic()
            child, rss_kb, report_r = self._fork(req, [source_fd, *fds[:3]], False)
        finally:
            for fd in [source_fd, *fds]:
                os.close(fd)
        timed_out = _measure.wait_readable(child.pidfd, start + req["timeout_s"])
        files_kb = self._files_kb()  # before the run dir is renewed
        c_status, cpu_s, maxrss_kb = self._end(child)
        report = _measure.read_start_report(report_r)
        return {"timed_out": timed_out, "c_status": c_status, "wall_s": time.monotonic() - start, "cpu_s": cpu_s,
                "peak_mb": max(0.0, (maxrss_kb - rss_kb) / 1024), "files_mb": files_kb / 1024, **report}

    def _fork(self, req: dict, fds: list[int], assert_kind: bool) -> tuple[_Child, int, int]:
        """A confined candidate given `fds` (a Landlock ruleset and its report pipe are added); (it, the RSS in kB it
        starts with, the read end of its report pipe, non-blocking)."""
        tests = req.get("tests_left", 1) if assert_kind else 1  # the assert tests it may serve
        vsize_pages, rss_pages = self._zygote_statm()  # a child starts with the zygote's memory
        limits = {"cpu_s": math.ceil(req["timeout_s"] * tests) + 1, "file_size_bytes": req["output_limit_bytes"],
                  "open_files": 64, "processes": 64,
                  "address_space_bytes": vsize_pages * _measure.PAGE_KB * 1024 + req["memory_mb"] * 2**20}
        report_r, report_w = os.pipe()
        landlock = self.setup.landlock_rules.ruleset(self.run_dir)  # a rule names the run dir's root inode
        try:
            child = self._spawn(b"c", _children.candidate_part(assert_kind, landlock is not None, limits),
                                [*fds, *([] if landlock is None else [landlock]), report_w])
        except BaseException:
            os.close(report_r)
            raise
        finally:
            os.close(report_w)
            if landlock is not None:
                os.close(landlock)
        os.set_blocking(report_r, False)
        return child, rss_pages * _measure.PAGE_KB, report_r

    def _run_assert(self, req: dict, source_fd: int, fds: list[int]) -> dict:
        """One assert test, in the job's live candidate when the previous test left one."""
        self._judge_socket()  # spawned before this test's pipes exist
        job = req.get("job")  # a request without a job id never reuses a candidate
        live = self.live if self.live is not None and job is not None and self.live.job == job else None
        if live is not None and not _measure.alive(live.child.pidfd):  # died after its last test: start afresh
            live = None
        report_r = -1
        if live is None:
            self.end_live()
            calls, replies = os.pipe(), os.pipe()  # judge -> candidate, candidate -> judge
            forked_at = time.monotonic()
            try:
                child, rss_start_kb, report_r = self._fork(req, [source_fd, fds[1], fds[2], calls[0], replies[1]], True)
            finally:
                os.close(calls[0])
                os.close(replies[1])
            live = self.live = _Live(job, child, (replies[0], calls[1]), forked_at)
            start, cpu_start, files_start_kb = live.forked_at, 0.0, 0
        else:
            start, cpu_start = time.monotonic(), _measure.proc_cpu_s(live.child.pid)
            rss_start_kb, files_start_kb = _measure.proc_rss_kb(live.child.pid) or 0, self._files_kb()
            _measure.reset_peak(live.child.pid)
        sent, timed_out = self._judge_one(live, fds, start + req["timeout_s"])
        report = _measure.read_start_report(report_r) if report_r >= 0 else {}  # written before untrusted code ran
        # a fresh candidate that ends now is measured by its rusage alone, as cheaply as possible
        alive = (req.get("keep") or report_r < 0) and _measure.alive(live.child.pidfd)
        cpu_end = _measure.proc_cpu_s(live.child.pid) if alive else None
        hwm_kb = _measure.proc_hwm_kb(live.child.pid) if alive else None
        files_kb = self._files_kb() - files_start_kb  # what this test added to the run dir, before it is renewed
        c_status = 0  # an exiting candidate may still look alive, but has no memory to report
        if not (alive and sent and req.get("keep") and cpu_end is not None and hwm_kb is not None):
            c_status, cpu_total_s, maxrss_kb = self.end_live()
            cpu_end = cpu_end if cpu_end is not None else cpu_total_s
            hwm_kb = hwm_kb if hwm_kb is not None else maxrss_kb
        return {"timed_out": timed_out, "c_status": c_status, "wall_s": time.monotonic() - start,
                "cpu_s": max(0.0, cpu_end - (cpu_start or 0.0)),
                "peak_mb": max(0.0, (hwm_kb - (rss_start_kb or 0)) / 1024), "files_mb": max(0, files_kb) / 1024,
                **report}

    def _judge_one(self, live: _Live, fds: list[int], deadline: float) -> tuple[bool, bool]:
        """Hand the test to the judge and wait for it: (whether the judge answered b"d", whether the deadline
        passed). A judge that missed the deadline, died or answered b"u" (the program never loaded) is ended."""
        # the index ignores below: _run_assert called _judge_socket() first, so the judge is up (not None)
        try:
            socket.send_fds(self.judge[1], [b"r" if live.served else b"t"], [fds[0], fds[3], *live.judge_fds])  # type: ignore[index]
        except OSError:  # the judge died between tests; this test gets no verdict
            self.stop_judge()
            return False, False
        live.served = True
        timed_out = _measure.wait_readable(self.judge[1].fileno(), deadline)  # type: ignore[index]
        answer = self.judge[1].recv(1) if not timed_out else b""  # type: ignore[index]
        if answer not in (b"d", b"u"):
            self.stop_judge()  # stuck in a test or dead: a fresh one next time
        return answer == b"d", timed_out

    def end_live(self) -> tuple[int, float, int]:
        """Kill and reap the job's live candidate, if any: (wait status, CPU s, peak RSS kB)."""
        live, self.live = self.live, None
        if live is None:
            return 0, 0.0, 0
        for fd in live.judge_fds:
            os.close(fd)
        return self._end(live.child)

    # ------------------------------------------------------------------------------ the judge
    def _judge_socket(self) -> socket.socket:
        """The persistent judge's control socket. A judge that died since its last test is replaced first:
        the next job's tests must not pay for it."""
        if self.judge is not None and not _measure.alive(self.judge[0].pidfd):
            self.stop_judge()
        if self.judge is None:
            server_end, judge_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            vsize_pages, _ = self._zygote_statm()
            try:
                address_space_bytes = vsize_pages * _measure.PAGE_KB * 1024 + JUDGE_MEMORY_MB * 2**20
                child = self._spawn(b"j", address_space_bytes.to_bytes(8, "little"), [judge_end.fileno()])
            finally:
                judge_end.close()
            self.judge = (child, server_end)
        return self.judge[1]

    def stop_judge(self) -> None:
        """Kill the judge; the zygote reaps it, so the next one gets its pid."""
        if self.judge is not None:
            child, sock = self.judge
            self.judge = None
            sock.close()
            try:
                signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(child.pidfd)
            os.write(self.zygote, b"r")
            _read_exact(self.answers, 1)


def _read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise ZygoteGone("the zygote died")
        data += chunk
    return data


def _start_zygote(setup: _children.Setup, config: dict) -> tuple[int, int, int, int]:
    """Fork the zygote (with bwrap the pid 1 of a new pid namespace): (the pipe we send it commands on, the pipe
    it answers on, its pid here, the pid_max it set)."""
    commands_r, commands_w = os.pipe()
    answers_r, answers_w = os.pipe()
    if config["fresh_tmpfs"]:
        _rundir.new_pid_namespace()
    pid = os.fork()
    if pid == 0:
        os.close(commands_w)
        os.close(answers_r)
        os.close(config["control_fd"])  # the host's channel is the server's alone
        _zygote.main(setup, commands_r, answers_w, config["processes"])
    os.close(commands_r)
    os.close(answers_w)
    hello = _read_exact(answers_r, 1)
    if hello != b"z":
        raise OSError("the zygote failed to start")
    return commands_w, answers_r, pid, int(_read_exact(answers_r, 8).decode())


def _exit_removing(run_dir: str) -> None:
    """The host died or closed the channel: children die with us (their death signal); leave no temp files
    behind (the host, when it lives, may be removing the same dir)."""
    _rundir.wipe(run_dir)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(run_dir)
    os._exit(0)


def main() -> None:
    config = json.loads(sys.argv[1])
    if config.get("remove_run_dir_on_exit"):  # fallback: the run dir is on the host disk
        signal.signal(signal.SIGTERM, lambda *_: _exit_removing(config["run_dir"]))
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGTERM)
    else:
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    _confine.prctl(_confine.PR_SET_DUMPABLE, 0)
    if config.get("cpu") is not None:  # children then start on this CPU: no cross-CPU wake-up latency
        os.sched_setaffinity(0, {config["cpu"]})
    for name in PRELOAD:
        importlib.import_module(name)
    proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    _measure.use_proc(proc_fd)
    if config["fresh_tmpfs"]:
        _rundir.private_mounts()
        _rundir.cover_proc()
        _rundir.mount_fresh(config["run_dir"], config["tmpfs_mb"], _children.RUN_DIR_INODES, replace=False)
    server = Server(config, proc_fd)
    sock = socket.socket(fileno=config["control_fd"])
    while True:
        try:
            req, fds = recv_request(sock)
        except EOFError:
            server.end_live()
            server.stop_judge()
            # a killed host closes this channel before its death signal reaches us: the EOF may come first
            if config.get("remove_run_dir_on_exit"):
                _exit_removing(config["run_dir"])
            return
        try:
            if req["op"] == "end_job":  # the host stopped a job before its last test
                server.end_live()
                reply = {}
            else:
                reply = server.info() if req["op"] == "info" else server.run(req, fds)
        except OSError as exc:  # a fork that kept failing with EAGAIN: this job gets errors, not the worker
            server.end_live()
            reply = {"setup_error": f"{type(exc).__name__}: {exc}"}
        if req.get("last"):  # nothing of the job runs when its result comes back
            server.end_live()
        if not server.fresh_tmpfs:  # emptied before the reply, which says whether that worked
            server.renew_run_dir()
        reply["restart"] = server.restart
        body = json.dumps(reply).encode()
        sock.sendall(len(body).to_bytes(8, "little") + body)
        server.renew_run_dir()  # a new tmpfs while the host reads the reply


if __name__ == "__main__":
    main()
