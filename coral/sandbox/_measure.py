"""Measurements of a forked child from the fork server: CPU time, resident and peak memory.

Values come from the kernel (the per-process CPU clock, /proc/<pid>/statm and status, and
clear_refs to reset the peak), never from the child itself, except the report a fresh candidate
writes before any untrusted code runs (its RSS right after the fork, then whether confinement and
compiling worked).

This module does NOT decide verdicts or limits. Stdlib-only: it runs inside the sandbox.
"""

from __future__ import annotations

import os
import select
import time

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def wait_readable(fd: int, deadline: float, close: bool = False) -> bool:
    """Wait until `fd` is readable or the deadline passes; True when it passed."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return True
            if poller.poll(left_s * 1000):
                return False
    finally:
        if close:
            os.close(fd)


def alive(pid: int) -> bool:
    """The child has not exited (it is not reaped here)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


def read_start_report(report_r: int, fallback_pages: int) -> tuple[int, dict]:
    """What a fresh candidate wrote on its report pipe before any untrusted code ran (it closes the
    pipe first): its RSS right after the fork, then "ok", "setup:<why>" or "compile:<error>".
    (RSS in kB, {"setup_error": why} / {"compile_error": error} / {}); closes the pipe."""
    raw = b""
    try:
        while chunk := os.read(report_r, 4096):
            raw += chunk
    except BlockingIOError:  # a candidate killed early (deadline) may not have written everything
        pass
    finally:
        os.close(report_r)
    rss, _, status = raw.partition(b"\n")
    rss_kb = (int(rss) if rss.isdigit() else fallback_pages) * PAGE_KB
    kind, _, message = status.decode(errors="replace").partition(":")
    return rss_kb, {f"{kind}_error": message} if kind in ("setup", "compile") else {}


def _read_proc(pid: int, name: str) -> bytes:
    fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def proc_cpu_s(pid: int) -> float | None:
    """CPU time of a live child, all its threads, from the kernel's per-process CPU clock."""
    try:
        return time.clock_gettime((~pid << 3) | 2)  # CPUCLOCK_SCHED of the whole process
    except OSError:
        return None


def proc_rss_kb(pid: int) -> int | None:
    try:
        return int(_read_proc(pid, "statm").split()[1]) * PAGE_KB
    except (OSError, IndexError, ValueError):
        return None


def proc_hwm_kb(pid: int) -> int | None:
    """Peak RSS (VmHWM) of a live child since its last reset; None when it is gone."""
    try:
        for line in _read_proc(pid, "status").splitlines():
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_peak(pid: int) -> None:
    """Reset the child's VmHWM to its current RSS, so the next test's peak is its own."""
    try:
        fd = os.open(f"/proc/{pid}/clear_refs", os.O_WRONLY)
        try:
            os.write(fd, b"5")
        finally:
            os.close(fd)
    except OSError:
        pass


def rss_pages() -> bytes:
    """Resident pages of the calling process, as ASCII digits (os-level: few objects touched)."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        return os.read(fd, 256).split()[1]
    finally:
        os.close(fd)


def statm_pages() -> tuple[int, int]:
    """(virtual size, resident) of the calling process, in pages."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        fields = os.read(fd, 256).split()
    finally:
        os.close(fd)
    return int(fields[0]), int(fields[1])
