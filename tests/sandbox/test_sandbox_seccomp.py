"""The seccomp program decides every syscall number exactly as the deny-list specifies.

A small BPF interpreter runs the assembled program (a binary search over syscall numbers) for
every number below 1024 and the argument values the rules look at, and compares the result with
the specification written out independently below.
"""

from __future__ import annotations

import errno
import platform
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "coral" / "sandbox"))
import _confine  # noqa: E402  (the server-side modules are top-level inside the sandbox)

PID = 4242
EPERM, ENOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
EAGAIN, EOPNOTSUPP, ZERO = (0x00050000 | code for code in (errno.EAGAIN, errno.EOPNOTSUPP, 0))
COLUMN = {"x86_64": 0, "aarch64": 1}.get(platform.machine())
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(platform.machine())
pytestmark = pytest.mark.skipif(COLUMN is None, reason="no syscall table for this architecture")


def run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...]) -> int:
    data = struct.pack("<IIQ6Q", nr, arch, 0, *(a & 0xFFFFFFFFFFFFFFFF for a in args))
    pc = acc = 0
    while True:
        code, jt, jf, k = struct.unpack_from("<HBBI", program, pc * 8)
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc &= k
        elif code == 0x74:  # BPF_ALU | BPF_RSH | BPF_K
            acc >>= k
        elif code == 0xA4:  # BPF_ALU | BPF_XOR | BPF_K
            acc ^= k
        elif code in (0x15, 0x35, 0x45):  # JEQ, JGE, JSET with a constant
            taken = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += jt if taken else jf
        elif code == 0x05:  # JA
            pc += k
        else:
            raise AssertionError(f"unexpected BPF instruction {code:#x}")


# Landlock does not cover file metadata: with host files visible (the fallback) every way to change it is denied
METADATA = {"chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
            "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr",
            "lremovexattr", "fremovexattr", "removexattrat", "file_setattr"}
# FIOASYNC, FIOSETOWN, SIOCSPGRP (signal-driven I/O); FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR (chattr);
# FS_IOC_SETVERSION, FS_IOC32_SETVERSION (inode generation)
DENIED_IOCTLS = (0x5452, 0x8901, 0x8902, 0x40086602, 0x40046602, 0x401C5820, 0x40087602, 0x40047602)
# fcntl: F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_GETOWN, F_GETSIG, F_GETOWN_EX, F_DUPFD_QUERY, F_CREATED_QUERY,
# F_DUPFD_CLOEXEC, F_SETPIPE_SZ, F_GETPIPE_SZ, F_ADD_SEALS, F_GET_SEALS, and F_SETFL (4) without O_ASYNC
FCNTL_ALLOWED = {0, 1, 2, 3, 9, 11, 16, 1027, 1028, 1030, 1031, 1032, 1033, 1034}
FCNTL_LOCKS = {5, 6, 7, 12, 13, 14, 36, 37, 38}  # F_GETLK, F_SETLK, F_SETLKW, their 64-bit forms, F_OFD_*
CPU_CLOCK_CALLS = {"clock_gettime", "clock_getres", "clock_nanosleep", "timer_create"}
UNREPORTED = {"futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "cachestat", "mincore"}  # ENOSYS


def _cpu_clock(clock_id: int) -> int:
    """Clock ids naming another process's CPU clock ((~pid << 3) | type, pid not 0 or the caller's) are refused."""
    clock_id &= 0xFFFFFFFF
    if not clock_id & 0x80000000 or clock_id & 4 or clock_id & 7 == 3:  # not a CPU clock; a thread's; an fd's
        return _confine.RET_ALLOW
    return _confine.RET_ALLOW if ((clock_id >> 3) ^ 0x1FFFFFFF) in (0, PID) else 0x00050000 | errno.EINVAL


def _futex(op: int) -> int:
    """Private futexes as asked; shared ones (a page of a shared file is one key for every job) never block
    and never wake anybody."""
    if op & 128:
        return _confine.RET_ALLOW
    return EAGAIN if op & 127 in (0, 9) else ZERO if op & 127 in (1, 3, 4, 10) else ENOSYS


def expected(nr: int, args: tuple[int, ...], allow_subprocess: bool, host_files_visible: bool = False) -> int:
    names = {nums[COLUMN]: name for name, nums in _confine._SYSCALLS.items() if nums[COLUMN] is not None}
    name = names.get(nr, "")
    args = tuple(args) + (0,) * (6 - len(args))
    denied = set(_confine._ALWAYS_DENIED) | (set() if allow_subprocess else set(_confine._SUBPROCESS))
    if name in denied or (host_files_visible and name in METADATA):
        return EPERM
    new_namespace = args[0] & _confine.CLONE_NEW_NAMESPACES
    fcntl_allowed = args[1] in FCNTL_ALLOWED or (args[1] == 4 and not args[2] & 0o20000)  # O_ASYNC: signal-driven
    if name in UNREPORTED:
        return ENOSYS
    rules = {
        "clone3": ENOSYS,
        "clone": EPERM if new_namespace else _confine.RET_ALLOW if allow_subprocess or args[0] & _confine.CLONE_THREAD
        else EPERM,
        "fcntl": ENOSYS if args[1] in FCNTL_LOCKS else _confine.RET_ALLOW if fcntl_allowed else EPERM,
        "flock": ENOSYS,  # locks: not implemented here
        "futex": _futex(args[1]),
        "preadv2": EOPNOTSUPP if args[5] & 8 else _confine.RET_ALLOW,  # RWF_NOWAIT
        "pwritev2": EOPNOTSUPP if args[5] & 8 else _confine.RET_ALLOW,
        "fadvise64": ZERO if args[3] == 4 else _confine.RET_ALLOW,  # POSIX_FADV_DONTNEED
        "madvise": ZERO if args[2] in (12, 20, 21) else _confine.RET_ALLOW,  # MADV_MERGEABLE, COLD, PAGEOUT
        **{name: _cpu_clock(args[0]) for name in CPU_CLOCK_CALLS},
        "ioctl": EPERM if args[1] in DENIED_IOCTLS else _confine.RET_ALLOW,
        "kill": (EPERM if args[0] == -1 else _confine.RET_ALLOW) if allow_subprocess
        else (_confine.RET_ALLOW if args[0] == 0 else EPERM),
        "prlimit64": _confine.RET_ALLOW if args[0] == 0 else EPERM,
        "setpriority": EPERM if args[0] == 2 else _confine.RET_ALLOW if args[1] == 0 else EPERM,  # 2: PRIO_USER
        **{name: _confine.RET_ALLOW if args[0] == 0 else EPERM
           for name in ("sched_setparam", "sched_setscheduler", "sched_setattr")},
        "tgkill": _confine.RET_ALLOW if args[0] == PID else EPERM,
    }
    return rules.get(name, _confine.RET_ALLOW)


ARGS = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (-1, 0, 0), (PID, 0, 0), (_confine.CLONE_THREAD | 0x100, 0, 0), (0x100, 0, 0),
        (_confine.CLONE_THREAD | 0x10000000, 0, 0), (0x20000000, 0, 0), (3, 8, 0), (3, 10, 29), (3, 15, 0), (3, 4, 0o20000),
        (3, 4, 0o4000), (3, 2, 0o20000), (3, 0x5452, 0), (3, 0x8901, 0), (3, 0x8902, 0), (3, 0x5421, 0),
        (2, 0, 19), (2, 5, 19),  # setpriority(PRIO_USER, ...)
        (3, 0x40086602, 0), (3, 0x40046602, 0), (3, 0x401C5820, 0), (3, 0x80086601, 0),  # chattr set, get
        (3, 0x40087602, 0), (3, 0x40047602, 0), (3, 0x80087601, 0),  # inode generation set, get
        *((3, cmd, 0) for cmd in (3, 5, 6, 7, 9, 12, 14, 16, 36, 37, 38, 1024, 1025, 1026, 1027, 1030, 1031, 1034,
                                   1035, 1036, 1037, 1038)),  # fcntl: dup, locks, leases, dnotify, pipes, hints
        *((0, op, 0) for op in (0, 1, 3, 4, 5, 6, 9, 10, 13, 128, 129, 137, 134, 256, 265, 384)),  # futex ops
        (3, 0, 0, 4), (3, 0, 0, 3), (0, 4096, 21), (0, 4096, 20), (0, 4096, 4),  # fadvise, madvise advice
        (3, 0, 1, 0, 0, 8), (3, 0, 1, 0, 0, 0x10), (3, 0, 1, 0, 0, 9),  # preadv2/pwritev2 flags (RWF_NOWAIT 8)
        (0, 4096, 12),  # MADV_MERGEABLE
        *((clock,) for clock in (1, 2, 3, (~0 << 3) | 2, (~0 << 3) | 0, (~PID << 3) | 2, (~1 << 3) | 2, (~2 << 3),
                                 (~300 << 3) | 1, (~1 << 3) | 6, (~7 << 3) | 3))]  # clocks: own, others', threads', fd


@pytest.mark.parametrize("host_files_visible", [False, True])
@pytest.mark.parametrize("allow_subprocess", [False, True])
def test_every_syscall_number_gets_the_specified_action(allow_subprocess, host_files_visible):
    prog = _confine.build_seccomp(allow_subprocess, host_files_visible)
    for slot in prog.pid_slots:
        struct.pack_into("<I", prog.program, slot * 8 + 4, PID)
    program = bytes(prog.program)
    full = [args + (0,) * (6 - len(args)) for args in ARGS]
    names = {nums[COLUMN]: name for name, nums in _confine._SYSCALLS.items() if nums[COLUMN] is not None}
    # every argument tuple for the calls the spec looks into, a sample for the rest (the full product takes ~8 s)
    wrong = [(nr, args) for nr in range(1024) for args in (full if names.get(nr) in ARGUMENT_RULES else full[::9])
             if run_bpf(program, nr, ARCH, args) != expected(nr, args, allow_subprocess, host_files_visible)]
    assert wrong == []


ARGUMENT_RULES = {"clone", "fcntl", "futex", "preadv2", "pwritev2", "fadvise64", "madvise", *CPU_CLOCK_CALLS, "ioctl",
                  "kill", "prlimit64", "setpriority", "sched_setparam", "sched_setscheduler", "sched_setattr", "tgkill"}


def test_the_spec_lists_every_call_whose_arguments_it_looks_at():
    names = {name for name in _confine._SYSCALLS if _confine._SYSCALLS[name][COLUMN] is not None}
    nr = {name: _confine._SYSCALLS[name][COLUMN] for name in names}
    looked_at = {name for name in names if len({expected(nr[name], args, True) for args in ARGS}) > 1}
    assert looked_at <= ARGUMENT_RULES, looked_at - ARGUMENT_RULES


def test_the_spec_names_only_metadata_calls_the_syscall_table_knows():
    assert METADATA <= set(_confine._SYSCALLS)  # a name missing from the table would never be denied


def test_the_spec_denies_signal_driven_io_ipc_and_memfd():
    names = {nums[COLUMN]: name for name, nums in _confine._SYSCALLS.items() if nums[COLUMN] is not None}
    nr = {name: number for number, name in names.items()}
    assert expected(nr["fcntl"], (3, 8, 0), False) == EPERM
    assert expected(nr["fcntl"], (3, 4, 0o20000), False) == EPERM
    assert expected(nr["fcntl"], (3, 4, 0o4000), False) == _confine.RET_ALLOW
    assert expected(nr["ioctl"], (3, 0x5452, 0), True) == EPERM
    for name in ("memfd_create", "shmget", "msgget", "semget", "mq_open"):
        assert expected(nr[name], (0, 0, 0), True) == EPERM, name
    assert expected(nr["clone"], (0x10000000, 0, 0), True) == EPERM


def test_the_spec_confines_scheduling_to_the_calling_process():
    names = {nums[COLUMN]: name for name, nums in _confine._SYSCALLS.items() if nums[COLUMN] is not None}
    nr = {name: number for number, name in names.items()}
    for name in ("sched_setaffinity", "ioprio_set"):  # the worker's CPU; IOPRIO_WHO_USER reaches the whole uid
        assert expected(nr[name], (0, 0, 0), True) == EPERM, name
    for name in ("sched_setparam", "sched_setscheduler", "sched_setattr"):
        assert expected(nr[name], (0, 0, 0), False) == _confine.RET_ALLOW, name
        assert expected(nr[name], (PID, 0, 0), True) == EPERM, name
    assert expected(nr["setpriority"], (0, 0, 19), False) == _confine.RET_ALLOW  # PRIO_PROCESS, self
    assert expected(nr["setpriority"], (2, 0, 19), False) == EPERM  # PRIO_USER, the caller's uid


def test_another_architecture_and_x32_numbers_are_killed():
    program = bytes(_confine.build_seccomp(False).program)
    assert run_bpf(program, 0, ARCH ^ 1, (0,) * 6) == _confine.RET_KILL
    if platform.machine() == "x86_64":
        assert run_bpf(program, 0x40000000 + 1, ARCH, (0,) * 6) == _confine.RET_KILL


def test_the_spec_closes_locks_shared_futexes_and_page_cache_probes():
    names = {nums[COLUMN]: name for name, nums in _confine._SYSCALLS.items() if nums[COLUMN] is not None}
    nr = {name: number for number, name in names.items()}
    assert expected(nr["flock"], (3, 2, 0), False) == ENOSYS
    assert expected(nr["fcntl"], (3, 6, 0), True) == ENOSYS and expected(nr["fcntl"], (3, 37, 0), True) == ENOSYS
    for cmd in (1024, 1026, 1036):  # F_SETLEASE, F_NOTIFY, F_SET_RW_HINT
        assert expected(nr["fcntl"], (3, cmd, 0), True) == EPERM
    assert expected(nr["futex"], (0, 128, 0), False) == _confine.RET_ALLOW  # FUTEX_WAIT_PRIVATE
    assert expected(nr["futex"], (0, 0, 0), False) == EAGAIN and expected(nr["futex"], (0, 1, 0), False) == ZERO
    assert expected(nr["preadv2"], (3, 0, 1, 0, 0, 8), False) == EOPNOTSUPP
    for name in ("cachestat", "mincore", "io_setup", "io_submit"):
        assert expected(nr[name], (0, 0, 0), True) in (ENOSYS, EPERM), name


def test_the_spec_refuses_the_cpu_clocks_of_other_processes():
    names = {nums[COLUMN]: name for name, nums in _confine._SYSCALLS.items() if nums[COLUMN] is not None}
    nr = {name: number for number, name in names.items()}
    einval = 0x00050000 | errno.EINVAL
    assert expected(nr["clock_gettime"], ((~2 << 3) | 2, 0, 0), False) == einval  # the judge's (pid 2)
    assert expected(nr["timer_create"], ((~1 << 3) | 2, 0, 0), False) == einval  # the zygote's (pid 1)
    for own in (2, (~0 << 3) | 2, (~PID << 3) | 2, (~1 << 3) | 6):  # CLOCK_PROCESS_CPUTIME_ID, self, a thread's
        assert expected(nr["clock_gettime"], (own, 0, 0), False) == _confine.RET_ALLOW, own
