"""The candidate's run directory, fresh for every candidate, and the namespaces of the worker's processes.

With bubblewrap the fork server holds CAP_SYS_ADMIN in the sandbox's user namespace (nothing outside
it; candidates and the judge drop it) and works in a mount namespace of its own, where /proc is covered
(`cover_proc`): for every candidate the server detaches the previous run dir and mounts a new size-capped
tmpfs there. Whatever a candidate did to its files, their modes or the directory itself is gone at once,
in constant time, whatever it left. The same capability makes the zygote pid 1 of a pid namespace of its
own (`new_pid_namespace`) and sets its `pid_max` (Linux 6.14+), which bounds the threads and processes of
every candidate even when the host runs as root (the kernel ignores RLIMIT_NPROC for root).

In the fallback (no namespaces) `wipe` empties the directory with the rights of its owner after every
process of the candidate is dead: it makes each directory accessible again before descending,
removes entries through directory fds (no path-length limit, no recursion, never following a
symlink) and reports whether the directory is empty afterwards. The directory itself stays, so the
server compares its `metadata` with the fresh one's (a changed one is made anew) and resets its times.

This module does NOT confine the candidate and does NOT decide when to renew (see `_server`).
Stdlib-only: it runs inside the sandbox.
"""

from __future__ import annotations

import ctypes
import os
import stat

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS, _CLONE_NEWPID, _MNT_DETACH = 0x20000, 0x20000000, 2
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 0x4000, 1 << 18
PID_MAX_RESERVED = 300  # the kernel hands out pids from 300 up once a namespace's counter wrapped


def private_mounts() -> None:
    """Move the calling process into a new mount namespace whose mounts propagate nowhere."""
    if _libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
    if _libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private failed")


def mount_fresh(path: str, size_mb: int, inodes: int, replace: bool) -> None:
    """Mount a new empty tmpfs (mode 0700, owned by the caller) on `path`, first detaching the one
    mounted there by an earlier call when `replace`."""
    if replace and _libc.umount2(path.encode(), _MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), f"umount2({path}) failed")
    options = f"size={size_mb}m,nr_inodes={inodes},mode=0700".encode()
    if _libc.mount(b"coral-run", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        raise OSError(ctypes.get_errno(), f"mounting a tmpfs on {path} failed")


def limit_pids(proc_fd: int, processes: int) -> int:
    """Cap the calling process's pid namespace at about `processes` pids (pid_max = 300 + processes), through
    `proc_fd`, a directory fd of /proc; the pid_max set, or 0 when the kernel does not let this namespace
    have its own (before Linux 6.14)."""
    pid_max = PID_MAX_RESERVED + processes
    try:
        fd = os.open("sys/kernel/pid_max", os.O_RDWR, dir_fd=proc_fd)
        try:
            os.write(fd, str(pid_max).encode())
            return pid_max if int(os.pread(fd, 32, 0)) == pid_max else 0
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return 0


def new_pid_namespace() -> None:
    """The caller's next child is pid 1 of a new pid namespace (owned by the caller's user namespace), and
    every later child of the caller lands there too."""
    if _libc.unshare(_CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID) failed")


def cover_proc() -> None:
    """An empty read-only tmpfs over /proc in this mount namespace. The /proc bubblewrap mounted shows the
    sandbox's outer pid namespace, whose pids earlier jobs move; the server keeps a directory fd of it."""
    if _libc.mount(b"none", b"/proc", b"tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                   b"size=4k,mode=0555") != 0:
        raise OSError(ctypes.get_errno(), "covering /proc failed")


def wipe(directory: str) -> bool:
    """Remove everything below `directory` as its owner; True when it is empty afterwards."""
    try:
        os.chmod(directory, 0o700)
        root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    stack: list[tuple[int, str | None]] = [(root, None)]  # (dir fd, name of that dir in its parent, to rmdir once empty)
    try:
        while stack:
            fd, _ = stack[-1]
            child = _remove_entries(fd)
            if child is not None:
                stack.append(child)
                continue
            fd, name = stack.pop()
            os.close(fd)
            if stack and name is not None:
                os.rmdir(name, dir_fd=stack[-1][0])
        return not os.listdir(directory)
    except OSError:
        for fd, _ in stack:
            os.close(fd)
        return False


def metadata(directory: str) -> tuple:
    """What a program can set on its run dir itself and a wipe of its entries keeps: extended attributes
    (POSIX ACLs among them), size (an ext4 directory never shrinks), owner, group and mode."""
    st = os.stat(directory)
    return tuple(sorted(os.listxattr(directory))), st.st_size, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def reset_times(directory: str) -> None:
    """The run dir's atime and mtime to one constant: a program may have written data into them with utime,
    and whether a wipe removed anything would otherwise show in the mtime."""
    os.utime(directory, ns=(0, 0))


def _remove_entries(fd: int) -> tuple[int, str] | None:
    """Unlink the non-directories in the directory `fd`; the first subdirectory, made accessible and
    opened, if any. (Nothing changes these entries meanwhile: every candidate process is dead, so a
    directory checked not to be a symlink can be chmod-ed by name.)"""
    for entry in os.scandir(fd):
        mode = os.stat(entry.name, dir_fd=fd, follow_symlinks=False).st_mode
        if not stat.S_ISDIR(mode):
            os.unlink(entry.name, dir_fd=fd)
            continue
        if mode & 0o700 != 0o700:
            os.chmod(entry.name, 0o700, dir_fd=fd)
        return os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd), entry.name
    return None
