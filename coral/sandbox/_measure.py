"""Measurements of a candidate from the fork server: CPU time, resident and peak memory, run-dir files.

Values come from the kernel (the per-process CPU clock, /proc/<pid>/statm and status, clear_refs to
reset the peak, statvfs of the run dir's tmpfs), never from the candidate itself, except its report, written
before any untrusted code runs: whether confinement and compiling worked. A candidate starts with the memory of
the zygote it is forked from, which the server reads.
/proc is read through a directory fd opened before the server covered /proc (candidates see an empty
directory there), with the pid the candidate has in the server's namespace, read from its pidfd.

This module does NOT decide verdicts or limits. Stdlib-only: it runs inside the sandbox.
"""

from __future__ import annotations

import os
import select
import time

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
_PROC: list[int | None] = [None]  # a directory fd of the server's /proc (use_proc); None: the path /proc


def use_proc(proc_fd: int) -> None:
    _PROC[0] = proc_fd


def _proc_path(pid: int | str, name: str) -> tuple[str, int | None]:
    """(path, dir_fd) of /proc/<pid>/<name>: through the server's fd, or the path /proc on the host
    (coral.procmem uses these readers there)."""
    return (f"{pid}/{name}", _PROC[0]) if _PROC[0] is not None else (f"/proc/{pid}/{name}", None)


def wait_readable(fd: int, deadline: float) -> bool:
    """Wait until `fd` is readable or the deadline passes; True when it passed."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return True
        if poller.poll(left_s * 1000):
            return False


def alive(pidfd: int) -> bool:
    """The process has not exited (a pidfd is readable once it has)."""
    return not select.select([pidfd], [], [], 0)[0]


def pid_of(pidfd: int) -> int:
    """The pid of the pidfd's process in the server's pid namespace (the candidate's own may differ)."""
    for line in read_proc("self", f"fdinfo/{pidfd}").splitlines():
        if line.startswith(b"Pid:"):
            return int(line.split()[1])
    raise OSError(f"no Pid in the fdinfo of pidfd {pidfd}")


def read_start_report(report_r: int) -> dict:
    """What a fresh candidate wrote on its report pipe before any untrusted code ran (it closes the pipe
    first): "ok", "setup:<why>" or "compile:<error>". {"setup_error": why} / {"compile_error": error} / {};
    closes the pipe."""
    raw = b""
    try:
        while chunk := os.read(report_r, 4096):
            raw += chunk
    except BlockingIOError:  # a candidate killed early (deadline) may not have written everything
        pass
    finally:
        os.close(report_r)
    kind, _, message = raw.decode(errors="replace").partition(":")
    return {f"{kind}_error": message} if kind in ("setup", "compile") else {}


def read_proc(pid: int | str, name: str) -> bytes:
    path, dir_fd = _proc_path(pid, name)
    fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def proc_cpu_s(pid: int) -> float | None:
    """CPU time of a live candidate, all its threads, from the kernel's per-process CPU clock."""
    try:
        return time.clock_gettime((~pid << 3) | 2)  # CPUCLOCK_SCHED of the whole process
    except OSError:
        return None


def proc_rss_kb(pid: int) -> int | None:
    try:
        return int(read_proc(pid, "statm").split()[1]) * PAGE_KB
    except (OSError, IndexError, ValueError):
        return None


def proc_hwm_kb(pid: int) -> int | None:
    """Peak RSS (VmHWM) of a live candidate since its last reset; None when it is gone."""
    try:
        for line in read_proc(pid, "status").splitlines():
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_peak(pid: int) -> None:
    """Reset the candidate's VmHWM to its current RSS, so the next test's peak is its own."""
    try:
        path, dir_fd = _proc_path(pid, "clear_refs")
        fd = os.open(path, os.O_WRONLY, dir_fd=dir_fd)
        try:
            os.write(fd, b"5")
        finally:
            os.close(fd)
    except OSError:
        pass


def files_kb(run_dir: str) -> int:
    """kB the run dir's files hold in memory: the pages its tmpfs has allocated (bwrap only: the fallback's
    run dir is on the host disk, where this would be the disk's use)."""
    stats = os.statvfs(run_dir)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize // 1024
