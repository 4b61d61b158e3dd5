"""The fork server: one per worker, started inside bubblewrap (or bare in the fallback).

It reads run requests from the host over a unix socket (file descriptors for stdin/payload,
stdout, stderr and verdict arrive with each request), forks one confined candidate per test,
hands assert tests to a persistent judge process (forked from this server, respawned when it
misses a deadline or dies), enforces the wall-clock deadline, reaps everything, measures CPU time
and peak memory from `wait4`, empties the run directory and answers with the raw outcome. The
server never reads test payloads, expected outputs or verdicts: they live in memfds that only
the judge and the host touch, so a candidate forked from it cannot find them in inherited memory.
Workers pin themselves to one CPU: a forked child then starts on a warm CPU (on small VMs a
cross-CPU wake-up cost milliseconds per fork).

This module does NOT decide verdicts (the host does) and does NOT import coral: it is started as
a script with only its sibling stdlib-only modules on sys.path.
"""

from __future__ import annotations

import array
import fcntl
import gc
import hashlib
import json
import math
import os
import select
import shutil
import signal
import socket
import sys
import time

import _confine
from _roles import JUDGE_CONTROL_FD, run_candidate_assert, run_candidate_stdio, serve_judge

_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


class Server:
    def __init__(self, config: dict) -> None:
        self.run_dir: str = config["run_dir"]
        self.allow_subprocess: bool = config["allow_subprocess"]
        self.seccomp = _confine.build_seccomp(self.allow_subprocess)
        self.landlock = _confine.build_landlock(config["read_paths"], self.run_dir, config["device_files"])
        self.codes: dict[str, object] = {}
        self.judge: tuple[int, socket.socket] | None = None  # (pid, control socket), spawned lazily

    def info(self) -> dict:
        return {"seccomp": self.seccomp is not None, "landlock": self.landlock is not None,
                "landlock_abi": _confine.landlock_abi(), "pid": os.getpid()}

    def compiled(self, source: str) -> object:
        key = hashlib.sha256(source.encode()).hexdigest()
        if key not in self.codes:
            if len(self.codes) > 256:
                self.codes.clear()
            self.codes[key] = compile(source, "<solution>", "exec")
        return self.codes[key]

    # ------------------------------------------------------------------------------ one test
    def run(self, req: dict, fds: list[int]) -> dict:
        try:
            code = self.compiled(req["code"])
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            return {"compile_error": f"{type(exc).__name__}: {exc}"}
        with open("/proc/self/statm") as f:
            vsize_pages, rss_pages = (int(x) for x in f.read().split()[:2])
        limits = {"cpu_s": math.ceil(req["timeout_s"]) + 1,
                  "address_space_bytes": vsize_pages * _PAGE_KB * 1024 + req["memory_mb"] * 2**20,
                  "file_size_bytes": req["output_limit_bytes"], "open_files": 64, "processes": 64}
        assert_kind = req["kind"] == "assert"
        if assert_kind:
            self._judge_socket()  # forked before this test's pipes exist
        rpc = (os.pipe(), os.pipe()) if assert_kind else None
        start = time.monotonic()
        base_r, base_w = os.pipe()  # the candidate reports its RSS before any untrusted code runs
        gc.freeze()  # children's collections then skip (and do not copy-on-write) inherited objects
        c_pid = os.fork()
        if c_pid == 0:
            os.close(base_r)
            os.write(base_w, str(_rss_pages()).encode())
            os.close(base_w)
            self._candidate(code, assert_kind, fds, rpc, limits)
        os.close(base_w)
        start_rss = os.read(base_r, 64)
        os.close(base_r)
        rss_pages = int(start_rss) if start_rss.isdigit() else rss_pages
        if assert_kind:
            try:
                socket.send_fds(self._judge_socket(), [b"t"], [fds[0], fds[3], rpc[1][0], rpc[0][1]])
            except OSError:  # the judge died between tests; this test gets no verdict
                self.stop_judge()
        for fd in fds + ([fd for pair in rpc for fd in pair] if rpc else []):
            os.close(fd)
        outcome = self._wait(c_pid, assert_kind, start + req["timeout_s"])
        outcome["wall_s"] = time.monotonic() - start
        outcome["peak_mb"] = max(0.0, (outcome.pop("maxrss_kb") - rss_pages * _PAGE_KB) / 1024)
        self._wipe_run_dir()
        return outcome

    def _candidate(self, code: object, assert_kind: bool, fds: list[int], rpc, limits: dict) -> None:
        try:
            os.setpgid(0, 0)
            _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
            null = os.open("/dev/null", os.O_RDWR)
            _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
            if self.landlock is not None:  # before the fd shuffle, which may reuse its number
                _confine.restrict_landlock(self.landlock)
            stdin = null if assert_kind else fds[0]
            keep = [stdin, fds[1], fds[2]] + ([rpc[0][0], rpc[1][1]] if assert_kind else [])
            _place_fds(keep)  # -> 0, 1, 2, RPC_IN, RPC_OUT
            os.closerange(len(keep), 1 << 16)
            os.chdir(self.run_dir)
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; we want the kill
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the server's clean-up handler
            _confine.set_rlimits(**limits)
            _confine.drop_capabilities()
            if self.seccomp is not None:
                _confine.install_seccomp(self.seccomp, os.getpid())
        except BaseException as exc:
            os.write(2, f"sandbox setup failed: {exc!r}\n".encode())
            os._exit(71)
        if assert_kind:
            run_candidate_assert(code)
        run_candidate_stdio(code)

    def _judge_socket(self) -> socket.socket:
        """The persistent judge's control socket; the judge is forked from this server, which
        never holds test data, so nothing secret is inherited by later candidates."""
        if self.judge is None:
            server_end, judge_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            pid = os.fork()
            if pid == 0:
                try:
                    os.setpgid(0, 0)
                    _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    null = os.open("/dev/null", os.O_RDWR)
                    _place_fds([null, null, null, null, null, judge_end.fileno()])
                    os.closerange(JUDGE_CONTROL_FD + 1, 1 << 16)
                    serve_judge()
                except BaseException as exc:
                    os.write(2, f"judge failed: {exc!r}\n".encode())
                os._exit(72)
            judge_end.close()
            self.judge = (pid, server_end)
        return self.judge[1]

    def stop_judge(self) -> None:
        if self.judge is not None:
            pid, sock = self.judge
            sock.close()
            _kill_group(pid)
            os.waitpid(pid, 0)
            self.judge = None

    def _wait(self, c_pid: int, assert_kind: bool, deadline: float) -> dict:
        """Wait for the judge's answer (or the candidate's exit for stdio) until the deadline."""
        pidfd = os.pidfd_open(c_pid)
        lead = self.judge[1].fileno() if assert_kind and self.judge else pidfd  # no judge: wait for the candidate
        timed_out = False
        try:
            poller = select.poll()
            poller.register(lead, select.POLLIN)
            while True:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    timed_out = True
                    break
                if poller.poll(left_s * 1000):
                    break
        finally:
            os.close(pidfd)
        if assert_kind and (timed_out or self.judge is None or self.judge[1].recv(1) != b"d"):
            self.stop_judge()  # stuck in a test or dead: a fresh one next time
        _kill_group(c_pid)
        _, c_status, usage = os.wait4(c_pid, 0)
        _reap_orphans()
        return {"timed_out": timed_out, "c_status": c_status,
                "cpu_s": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss}

    def _wipe_run_dir(self) -> None:
        for entry in os.scandir(self.run_dir):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass


def _rss_pages() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1])


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


def _reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _recv(sock: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    header, ancdata, _, _ = sock.recvmsg(8, socket.CMSG_SPACE(8 * fds.itemsize))
    if not header:
        raise EOFError
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    header += _recv_exact(sock, 8 - len(header))
    body = _recv_exact(sock, int.from_bytes(header, "little"))
    return json.loads(body), list(fds)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _exit_removing(run_dir: str) -> None:
    """The host died: children die with us (their death signal); leave no temp files behind."""
    shutil.rmtree(run_dir, ignore_errors=True)
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
    server = Server(config)
    sock = socket.socket(fileno=config["control_fd"])
    while True:
        try:
            req, fds = _recv(sock)
        except EOFError:
            server.stop_judge()
            return
        reply = server.info() if req["op"] == "info" else server.run(req, fds)
        body = json.dumps(reply).encode()
        sock.sendall(len(body).to_bytes(8, "little") + body)


if __name__ == "__main__":
    main()
