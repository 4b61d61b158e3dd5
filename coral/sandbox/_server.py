"""The fork server: one per worker, started inside bubblewrap (or bare in the fallback).

It reads run requests from the host over a unix socket (file descriptors for the program's source,
stdin/payload, stdout, stderr and verdict arrive with each request), has the forker (`_forker`) fork one
confined candidate per job (its assert tests) or per stdio test, hands assert tests to a persistent,
confined judge (also forked by the forker, and respawned when it misses a deadline or dies), enforces the
wall-clock deadline, measures CPU time and peak memory, has the forker kill and reap everything, gets the
next candidate a fresh run directory and answers with the raw outcome.

The server never reads programs, test payloads, expected outputs or verdicts: they live in memfds that
only a candidate (its own program), the judge and the host touch. And it never forks after starting the
forker: what it learns about a job (exit status, peak memory, CPU time, a candidate's setup messages)
stays in a process no later candidate is forked from. A candidate reads and compiles its program itself,
after confinement, and reports "confined" or "cannot compile" on a pipe it closes before the program runs:
the only word on infrastructure the host takes from a candidate process.

Start-up with bubblewrap: a private mount namespace; a directory fd on /proc, then an empty read-only
tmpfs over /proc (bubblewrap's shows the sandbox's outer pid namespace, whose pids earlier jobs move, and
candidates and the judge see this covered one); a new pid namespace whose pid 1 is the forker. Workers pin
themselves to one CPU: a forked child then starts on a warm CPU (on small VMs a cross-CPU wake-up cost
milliseconds per fork).

This module does NOT decide verdicts (the host does) and does NOT import coral: it is started as
a script with only its sibling stdlib-only modules on sys.path.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import signal
import socket
import struct
import sys
import time

import _confine
import _forker
import _landlock
import _measure
import _rundir
from _wire import recv_request

# Imported once here, so a program importing them finds them in sys.modules instead of executing
# them again in every candidate (`typing` alone costs a forked child ~6 ms). Only stateless,
# common modules: `random` is left out on purpose, or every candidate and the judge would share
# one generator state and a program could predict the inputs a test draws.
PRELOAD = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string")


class ForkerGone(Exception):
    """The forker died: the worker cannot run anything more (the host restarts it)."""


class _Child:
    """A process the forker made: its pidfd, and its pid in the server's namespace (for /proc)."""

    def __init__(self, pidfd: int) -> None:
        self.pidfd, self.pid = pidfd, _measure.pid_of(pidfd)

    def alive(self) -> bool:
        return _measure.alive(self.pidfd)


class _Live:
    """The candidate serving the assert tests of one job; the server keeps the judge's ends of its
    pipes, so the candidate waits for the next test instead of seeing EOF."""

    def __init__(self, job: str | None, child: _Child, judge_fds: tuple[int, int], forked_at: float) -> None:
        self.job, self.child, self.judge_fds, self.forked_at = job, child, judge_fds, forked_at
        self.served = False


class Server:
    def __init__(self, config: dict, proc_fd: int) -> None:
        self.run_dir: str = config["run_dir"]
        self.fresh_tmpfs: bool = config["fresh_tmpfs"]  # bwrap: a new tmpfs per candidate (the forker's)
        self.forker, hello = _start_forker(config, proc_fd)
        self.forker_info = {key: hello[key] for key in ("pid_max", "landlock", "seccomp")}
        self.run_dir_made = None if self.fresh_tmpfs else _rundir.metadata(self.run_dir)  # what a fresh one looks like
        self.dirty = False  # fallback: a candidate used the run dir since it was emptied
        self.restart = False  # the run dir could not be emptied: the host replaces this worker
        self.judge: tuple[_Child, socket.socket] | None = None  # (the judge, its control socket), spawned lazily
        self.live: _Live | None = None  # the candidate of the job being run, between its tests

    def info(self) -> dict:
        return {**self.forker_info, "landlock_abi": _landlock.landlock_abi(), "pid": os.getpid(),
                "fresh_tmpfs": self.fresh_tmpfs}

    # ------------------------------------------------------------------------------ the forker
    def _ask(self, message: dict, fds: list[int] = ()) -> tuple[dict, list[int]]:
        socket.send_fds(self.forker, [json.dumps(message).encode()], list(fds))
        raw, got, _, _ = socket.recv_fds(self.forker, 4096, 2)
        if not raw:
            raise ForkerGone("the forker hung up")
        reply = json.loads(raw)
        if "error" in reply:
            for fd in got:
                os.close(fd)
            raise OSError(reply["error"])
        return reply, got

    def _end(self, who: str) -> tuple[int, float, int]:
        """The forker kills and reaps `who` ("candidate" or "judge") and its whole process group: (wait status,
        CPU s, peak RSS kB) of its leader."""
        socket.send_fds(self.forker, [json.dumps({"op": "end", "who": who}).encode()], [])
        raw = self.forker.recv(4 + _forker.RUSAGE_BYTES)
        if len(raw) != 4 + _forker.RUSAGE_BYTES:
            raise ForkerGone("the forker hung up")
        status = int.from_bytes(raw[:4], "little", signed=True)
        user_s, user_us, system_s, system_us, maxrss_kb = struct.unpack_from("<5q", raw, 4)
        return status, user_s + system_s + (user_us + system_us) / 1e6, maxrss_kb

    def _fork_candidate(self, req: dict, fds: list[int], assert_kind: bool) -> tuple[_Child, int, int]:
        """A confined candidate (see _forker) given `fds` (its report pipe is added); (it, the RSS in kB it
        starts with, the read end of its report pipe, non-blocking)."""
        tests = req.get("tests_left", 1) if assert_kind else 1  # the assert tests it may serve
        limits = {"cpu_s": math.ceil(req["timeout_s"] * tests) + 1, "file_size_bytes": req["output_limit_bytes"],
                  "open_files": 64, "processes": 64}
        report_r, report_w = os.pipe()
        try:
            reply, got = self._ask({"op": "candidate", "assert": assert_kind, "limits": limits,
                                    "memory_mb": req["memory_mb"]}, [*fds, report_w])
        except BaseException:
            os.close(report_r)
            raise
        finally:
            os.close(report_w)
        self.dirty = True
        os.set_blocking(report_r, False)
        return _Child(got[0]), reply["rss_pages"] * _measure.PAGE_KB, report_r

    # ------------------------------------------------------------------------------ the run dir
    def _files_kb(self) -> int:
        """Memory the run dir's files hold (bwrap: its tmpfs pages). The fallback's run dir is on the host
        disk: its files are not memory."""
        return _measure.files_kb(self.run_dir) if self.fresh_tmpfs else 0

    def renew_run_dir(self) -> None:
        """Fallback: empty the host-disk run dir with the owner's rights; one whose own metadata changed (an
        extended attribute or ACL, its group, a size grown by many entries) is made anew. What cannot be
        removed makes the host replace this worker. (With bwrap the forker mounts a new tmpfs instead.)"""
        if self.fresh_tmpfs or not self.dirty:
            return
        self.dirty = False
        try:
            if not _rundir.wipe(self.run_dir):
                self.restart = True
                return
            if _rundir.metadata(self.run_dir) != self.run_dir_made:
                os.rmdir(self.run_dir)
                os.mkdir(self.run_dir, 0o700)
                self._ask({"op": "ruleset"})  # a Landlock rule names the run dir's root inode, which is new
            _rundir.reset_times(self.run_dir)
            self.restart = self.restart or _rundir.metadata(self.run_dir) != self.run_dir_made
        except OSError:
            self.restart = True

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
            child, rss_kb, report_r = self._fork_candidate(req, [source_fd, *fds[:3]], False)
        finally:
            for fd in [source_fd, *fds]:
                os.close(fd)
        try:
            timed_out = _measure.wait_readable(child.pidfd, start + req["timeout_s"])
            files_kb = self._files_kb()  # before the forker renews the run dir
            c_status, cpu_s, maxrss_kb = self._end("candidate")
        finally:
            os.close(child.pidfd)
        return {"timed_out": timed_out, "c_status": c_status, "wall_s": time.monotonic() - start, "cpu_s": cpu_s,
                "peak_mb": max(0.0, (maxrss_kb - rss_kb) / 1024), "files_mb": files_kb / 1024,
                **_measure.read_start_report(report_r)}

    def _run_assert(self, req: dict, source_fd: int, fds: list[int]) -> dict:
        """One assert test, in the job's live candidate when the previous test left one."""
        self._judge_socket()  # forked before this test's pipes exist
        job = req.get("job")  # a request without a job id never reuses a candidate
        live = self.live if self.live is not None and job is not None and self.live.job == job else None
        if live is not None and not live.child.alive():  # died after its last test: start afresh
            live = None
        report_r = -1
        if live is None:
            self.end_live()
            calls, replies = os.pipe(), os.pipe()  # judge -> candidate, candidate -> judge
            forked_at = time.monotonic()
            try:
                child, rss_start_kb, report_r = self._fork_candidate(
                    req, [source_fd, fds[1], fds[2], calls[0], replies[1]], True)
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
        # a fresh candidate wrote its report before any untrusted code ran
        report = _measure.read_start_report(report_r) if report_r >= 0 else {}
        # a fresh candidate that ends now is measured by its rusage alone, as cheaply as possible
        alive = (req.get("keep") or report_r < 0) and live.child.alive()
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
        try:
            socket.send_fds(self.judge[1], [b"r" if live.served else b"t"], [fds[0], fds[3], *live.judge_fds])
        except OSError:  # the judge died between tests; this test gets no verdict
            self.stop_judge()
            return False, False
        live.served = True
        timed_out = _measure.wait_readable(self.judge[1].fileno(), deadline)
        answer = self.judge[1].recv(1) if not timed_out else b""
        if answer not in (b"d", b"u"):
            self.stop_judge()  # stuck in a test or dead: a fresh one next time
        return answer == b"d", timed_out

    def end_live(self) -> tuple[int, float, int]:
        """Kill and reap the job's live candidate, if any: (wait status, CPU s, peak RSS kB)."""
        live, self.live = self.live, None
        if live is None:
            return 0, 0.0, 0
        try:
            return self._end("candidate")
        finally:
            os.close(live.child.pidfd)
            for fd in live.judge_fds:
                os.close(fd)

    def _judge_socket(self) -> socket.socket:
        """The persistent judge's control socket. A judge that died since its last test is replaced first:
        the next job's tests must not pay for it."""
        if self.judge is not None and not self.judge[0].alive():
            self.stop_judge()
        if self.judge is None:
            server_end, judge_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                _, got = self._ask({"op": "judge"}, [judge_end.fileno()])
            finally:
                judge_end.close()
            self.judge = (_Child(got[0]), server_end)
        return self.judge[1]

    def stop_judge(self) -> None:
        if self.judge is not None:
            child, sock = self.judge
            self.judge = None
            sock.close()
            try:
                self._end("judge")
            finally:
                os.close(child.pidfd)


def _start_forker(config: dict, proc_fd: int) -> tuple[socket.socket, dict]:
    """Fork the forker (with bwrap the pid 1 of a new pid namespace); its channel and its hello."""
    server_end, forker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if config["fresh_tmpfs"]:
        _rundir.new_pid_namespace()
    if os.fork() == 0:
        server_end.close()
        os.close(config["control_fd"])  # the host's channel is the server's alone
        _forker.main(config, proc_fd, forker_end)
    forker_end.close()
    raw, _, _, _ = socket.recv_fds(server_end, 4096, 0)
    hello = json.loads(raw or b'{"error": "the forker died while starting"}')
    if "error" in hello:
        raise OSError(hello["error"])
    return server_end, hello


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
    server = Server(config, proc_fd)
    sock = socket.socket(fileno=config["control_fd"])
    while True:
        try:
            req, fds = recv_request(sock)
        except EOFError:
            server.end_live()
            server.stop_judge()
            return
        try:
            reply = server.info() if req["op"] == "info" else server.run(req, fds)
        except ForkerGone:
            return  # the host sees the worker die and starts a new one
        except OSError as exc:  # the forker could not fork (EAGAIN for FORK_RETRY_S): this job, not the worker
            server.end_live()
            reply = {"setup_error": f"{type(exc).__name__}: {exc}"}
        server.renew_run_dir()  # fallback: before the reply, which says whether that worked
        reply["restart"] = server.restart
        body = json.dumps(reply).encode()
        sock.sendall(len(body).to_bytes(8, "little") + body)


if __name__ == "__main__":
    main()
