"""Kernel confinement for one candidate process: seccomp-BPF, Landlock and rlimits, via ctypes.

The seccomp program is assembled once (`build_seccomp`) in the fork server and installed by each
forked child after patching in its own pid (`install_seccomp`). It is a deny-list returning EPERM
for networking, process creation (unless subprocesses are allowed), signalling other processes or
changing their scheduling, tracing, namespaces, mounts, io_uring and Linux AIO, bpf, keyrings, inotify and
module loading, and it closes channels between jobs through shared kernel state (file locks, leases,
dnotify, shared futexes, page-cache residency: `_channel_rules`); an unknown architecture
or the x32 ABI is killed outright. The program is a binary search over syscall numbers: the
kernel pre-evaluates each new filter for every syscall number when it is installed, and a linear
chain of ~70 comparisons made that cost ~0.3 ms per child. Landlock is in `_landlock`.

This module does NOT choose limits or verdicts, and it is NOT a complete syscall allow-list:
syscalls outside the deny-list (file I/O, mmap, futex...) stay available to the candidate.
Syscall tables exist for x86_64 and aarch64 only; elsewhere `build_seccomp` returns None.
Stdlib-only: it is imported inside the sandbox.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import resource
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 38, 22
PR_SET_CHILD_SUBREAPER, PR_SET_NAME = 36, 15
SECCOMP_MODE_FILTER = 2
RET_ALLOW, RET_KILL = 0x7FFF0000, 0x80000000
CLONE_THREAD = 0x00010000
CLONE_NEW_NAMESPACES = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
# Signal-driven I/O: an fd owner set by F_SETOWN(_EX) / FIOSETOWN / SIOCSPGRP receives SIGIO (or the
# F_SETSIG signal) once O_ASYNC / FIOASYNC is on -- a way to signal processes outside the candidate that
# only Landlock ABI 6+ scopes. Denied here whatever the kernel's Landlock.
F_SETFL, F_SETOWN, F_SETSIG, F_SETOWN_EX, O_ASYNC = 4, 8, 10, 15, 0o20000
FIOASYNC, FIOSETOWN, SIOCSPGRP = 0x5452, 0x8901, 0x8902
PRIO_USER = 2

# name -> (x86_64, aarch64); aarch64 has no fork/vfork (None).
_SYSCALLS: dict[str, tuple[int | None, int | None]] = {
    "socket": (41, 198), "socketpair": (53, 199), "connect": (42, 203), "bind": (49, 200),
    "listen": (50, 201), "accept": (43, 202), "accept4": (288, 242), "clone": (56, 220),
    "fork": (57, None), "vfork": (58, None), "execve": (59, 221), "execveat": (322, 281),
    "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131), "ptrace": (101, 117),
    "setpgid": (109, 154), "setsid": (112, 157), "setpriority": (141, 140),
    "personality": (135, 92), "chroot": (161, 51), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "quotactl": (179, 60), "sched_setaffinity": (203, 122), "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240), "kexec_load": (246, 104), "add_key": (248, 217),
    "request_key": (249, 218), "keyctl": (250, 219), "migrate_pages": (256, 238),
    "unshare": (272, 97), "move_pages": (279, 239), "perf_event_open": (298, 241),
    "fanotify_init": (300, 262), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "setns": (308, 268), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "kcmp": (312, 272), "bpf": (321, 280),
    "userfaultfd": (323, 282), "prlimit64": (302, 261), "acct": (163, 89),
    "pidfd_send_signal": (424, 424), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "pidfd_open": (434, 434), "clone3": (435, 435), "pidfd_getfd": (438, 438),
    "mount_setattr": (442, 442), "iopl": (172, None), "ioperm": (173, None),
    "modify_ldt": (154, None), "memfd_create": (319, 279), "memfd_secret": (447, 447),
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "shmdt": (67, 197),
    "semget": (64, 190), "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183), "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
    "fcntl": (72, 25), "ioctl": (16, 29), "sched_setparam": (142, 118), "sched_setscheduler": (144, 119),
    "sched_setattr": (314, 274), "ioprio_set": (251, 30), "open_tree_attr": (467, 467),
    "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "fchmodat2": (452, 452),
    "chown": (92, None), "fchown": (93, 55), "lchown": (94, None), "fchownat": (260, 54),
    "utime": (132, None), "utimes": (235, None), "futimesat": (261, None), "utimensat": (280, 88),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "fsetxattr": (190, 7), "setxattrat": (463, 463),
    "removexattr": (197, 14), "lremovexattr": (198, 15), "fremovexattr": (199, 16), "removexattrat": (466, 466),
    "file_setattr": (469, 469), "inotify_init": (253, None), "inotify_init1": (294, 26),
    "inotify_add_watch": (254, 27), "flock": (73, 32), "io_setup": (206, 0), "io_destroy": (207, 1),
    "io_getevents": (208, 4), "io_submit": (209, 2), "io_cancel": (210, 3), "io_pgetevents": (333, 292),
    "futex": (202, 98), "futex_waitv": (449, 449), "futex_wake": (454, 454), "futex_wait": (455, 455),
    "futex_requeue": (456, 456), "preadv2": (327, 286), "pwritev2": (328, 287), "cachestat": (451, 451),
    "mincore": (27, 232), "fadvise64": (221, 223), "madvise": (28, 233), "clock_gettime": (228, 113),
    "clock_getres": (229, 114), "clock_nanosleep": (230, 115), "timer_create": (222, 107),
}
_NETWORK = ("socket", "socketpair", "connect", "bind", "listen", "accept", "accept4")
_ALWAYS_DENIED = _NETWORK + (
    "ptrace", "setpgid", "setsid", "personality", "chroot", "mount", "umount2", "pivot_root",
    "swapon", "swapoff", "reboot", "init_module", "finit_module", "delete_module", "quotactl",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "kexec_load", "add_key", "request_key", "keyctl",
    "migrate_pages", "unshare", "move_pages", "perf_event_open", "fanotify_init",
    "name_to_handle_at", "open_by_handle_at", "setns", "process_vm_readv", "process_vm_writev",
    "kcmp", "bpf", "userfaultfd", "acct", "pidfd_send_signal", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "pidfd_open", "pidfd_getfd", "mount_setattr", "open_tree_attr", "iopl", "ioperm",
    "modify_ldt", "tkill",
    # the worker's CPU: a candidate's threads stay where its worker is pinned, not on other workers' CPUs;
    # I/O priority: ioprio_set(IOPRIO_WHO_USER, 0) reaches every process of the uid
    "sched_setaffinity", "ioprio_set",
    # memory outside RLIMIT_AS (memfd), and state that outlives a process in the worker's IPC
    # namespace (SysV IPC, POSIX message queues): one job could leave data there for the next
    "memfd_create", "memfd_secret", "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl",
    "semtimedop", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedreceive", "mq_notify", "mq_getsetattr",
    # inotify instances (128) and watches are counted per user, the host's user even from inside bwrap's
    # user namespace: two programs holding them left the host's file watchers without any
    "inotify_init", "inotify_init1", "inotify_add_watch",
    # Linux AIO contexts count against fs.aio-max-nr, machine-wide: one program could take every one
    "io_setup", "io_destroy", "io_getevents", "io_submit", "io_cancel", "io_pgetevents",
)
_SUBPROCESS = ("fork", "vfork", "execve", "execveat")
# File metadata, which Landlock does not cover: denied when host files are visible (the fallback), where the
# host user owns them and a program could chmod 0 its venv. bwrap's candidates see only read-only mounts.
_METADATA = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime",
             "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
             "removexattr", "lremovexattr", "fremovexattr", "removexattrat", "file_setattr")
# chattr (inode flags, fsxattr) and the inode generation on any file the program can open and owns (with bwrap
# as root, the kernel counts the sandbox's uid as the owner of root's files)
FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR = 0x40086602, 0x40046602, 0x401C5820
FS_IOC_SETVERSION, FS_IOC32_SETVERSION = 0x40087602, 0x40047602
# Channels between jobs through kernel state every job can reach (see docs/sandbox.md). fcntl: an allow-list;
# record locks (POSIX, OFD) answer ENOSYS, as `flock` does: a lock on a shared read-only file is seen by every
# job, and failing at once is kinder than ENOLCK (sqlite retries that as "busy" for 5 s; filelock forever);
# leases, dnotify and write-life hints are refused. Futexes on shared keys (a page of a shared file is one) would let a waiter in
# one job be woken by another: without FUTEX_PRIVATE_FLAG a wait returns EAGAIN at once (callers retry: they
# spin instead of sleeping) and a wake or requeue wakes nobody and returns 0. Page-cache residency of shared
# files is not reported (cachestat, mincore, RWF_NOWAIT reads) nor dropped on request (fadvise DONTNEED,
# madvise COLD/PAGEOUT: advice that may be ignored, so 0).
FCNTL_ALLOWED = (0, 1, 2, 3, 9, 11, 16, 1027, 1028, 1030, 1031, 1032, 1033, 1034)  # F_SETFL (4) is checked apart
FCNTL_LOCKS = (5, 6, 7, 12, 13, 14, 36, 37, 38)  # F_GETLK, F_SETLK(W), their 64-bit and OFD forms
FUTEX_PRIVATE_FLAG, FUTEX_CMD_MASK = 128, 127
FUTEX_WAITS, FUTEX_WAKES = (0, 9), (1, 3, 4, 10)  # WAIT, WAIT_BITSET; WAKE, REQUEUE, CMP_REQUEUE, WAKE_BITSET
RWF_NOWAIT, POSIX_FADV_DONTNEED, MADV_COLD, MADV_PAGEOUT, MADV_MERGEABLE = 8, 4, 20, 21, 12
# The CPU clock of another process, (~pid << 3) | type, is readable without any permission: the judge's and
# the zygote's CPU time grow with what earlier jobs made them do. Only the caller's own process clocks (pid 0
# or its own pid), thread clocks (bit 2: the kernel allows only the caller's threads) and fd clocks (type 3).
_CPU_CLOCK_CALLS = ("clock_gettime", "clock_getres", "clock_nanosleep", "timer_create")


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


_LD_ABS, _JEQ, _JSET, _JGE, _JA, _RET, _AND, _RSH, _XOR = 0x20, 0x15, 0x45, 0x35, 0x05, 0x06, 0x54, 0x74, 0xA4


def _errno(code: int) -> int:
    return 0x00050000 | code


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class SeccompProgram:
    """An assembled filter; `pid_slots` are the instructions whose constant is the child's pid.

    The ctypes view and `sock_fprog` are built once here, in the server, so a forked child only
    patches its pid and makes one prctl call (each Python object a child touches costs it a
    copy-on-write page fault)."""

    def __init__(self, program: bytearray, pid_slots: list[int]) -> None:
        self.program, self.pid_slots = program, pid_slots
        self._buffer = (ctypes.c_char * len(program)).from_buffer(program)
        self.fprog = _SockFprog(len(program) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))
        self.fprog_ref = ctypes.byref(self.fprog)


_PID_PLACEHOLDER = 0x7FFFFFF0  # replaced by the child's pid in install_seccomp


def _arg_rule(arg: int, op: int, value: int, if_true: int, if_false: int) -> list[bytes]:
    """Leaf block: return if_true when (syscall argument `arg` <op> value) else if_false."""
    return [_ins(_LD_ABS, 16 + 8 * arg), _ins(op, value, 0, 1), _ins(_RET, if_true), _ins(_RET, if_false)]


def _arg_rules(checks: list[tuple[int, int, int, int]], default: int) -> list[bytes]:
    """Leaf block: the action of the first (arg, op, value, action) whose test holds, else `default`.
    Only the low 32 bits of an argument are tested (commands and flags are ints)."""
    out = []
    for arg, op, value, action in checks:
        out += [_ins(_LD_ABS, 16 + 8 * arg), _ins(op, value, 0, 1), _ins(_RET, action)]
    return out + [_ins(_RET, default)]


def _value_rules(actions: dict[int, int], default: int) -> list[bytes]:
    """Leaf block on the value already in A: the action of the value it equals, else `default`."""
    out = []
    for value, action in actions.items():
        out += [_ins(_JEQ, value, 0, 1), _ins(_RET, action)]
    return out + [_ins(_RET, default)]


def _fcntl_rule(eperm: int) -> list[bytes]:
    """fcntl: the commands of FCNTL_ALLOWED, and F_SETFL without O_ASYNC (signal-driven I/O); record locks
    ENOSYS; anything else (F_SETOWN, F_SETSIG, leases, dnotify, write hints, ...) EPERM."""
    setfl = [_ins(_JEQ, F_SETFL, 0, 4), _ins(_LD_ABS, 16 + 8 * 2), _ins(_JSET, O_ASYNC, 0, 1), _ins(_RET, eperm),
             _ins(_RET, RET_ALLOW)]
    actions = {cmd: RET_ALLOW for cmd in FCNTL_ALLOWED} | {cmd: _errno(errno.ENOSYS) for cmd in FCNTL_LOCKS}
    return [_ins(_LD_ABS, 16 + 8 * 1)] + setfl + _value_rules(actions, eperm)


def _futex_rule() -> list[bytes]:
    """futex: private operations as asked; a shared wait EAGAIN, a shared wake or requeue 0 (nobody woken),
    any other shared operation (WAKE_OP, PI) ENOSYS."""
    actions = {cmd: _errno(errno.EAGAIN) for cmd in FUTEX_WAITS} | {cmd: _errno(0) for cmd in FUTEX_WAKES}
    return ([_ins(_LD_ABS, 16 + 8 * 1), _ins(_JSET, FUTEX_PRIVATE_FLAG, 0, 1), _ins(_RET, RET_ALLOW),
             _ins(_AND, FUTEX_CMD_MASK)] + _value_rules(actions, _errno(errno.ENOSYS)))


def _search_tree(rules: list[tuple[int, list[bytes]]]) -> list[bytes]:
    """Binary search over the syscall number in A (rules sorted by number); numbers without a rule
    are allowed. O(log n) per syscall, and the kernel's per-filter pre-evaluation of every syscall
    number (its allow-bitmap cache, paid at each install) stays short."""
    if len(rules) == 1:
        nr, block = rules[0]
        return [_ins(_JEQ, nr, 0, len(block))] + block + [_ins(_RET, RET_ALLOW)]
    mid = len(rules) // 2
    left, right = _search_tree(rules[:mid]), _search_tree(rules[mid:])
    if len(left) <= 255:
        return [_ins(_JGE, rules[mid][0], len(left), 0)] + left + right
    # conditional jumps reach 255 instructions; an unconditional one (32-bit offset) skips a longer left half
    return [_ins(_JGE, rules[mid][0], 0, 1), _ins(_JA, len(left))] + left + right


def build_seccomp(allow_subprocess: bool, host_files_visible: bool = False) -> SeccompProgram | None:
    """Assemble the deny-list filter for this machine, or None on an unsupported architecture.
    `host_files_visible` (the fallback) also denies changing file metadata (`_METADATA`)."""
    machine = platform.machine()
    if machine not in ("x86_64", "aarch64"):
        return None
    col, arch = (0, 0xC000003E) if machine == "x86_64" else (1, 0xC00000B7)
    # a type checker does not narrow nums[col] by the comprehension's condition
    nr: dict[str, int] = {name: nums[col] for name, nums in _SYSCALLS.items() if nums[col] is not None}  # type: ignore[misc]
    eperm = _errno(errno.EPERM)
    out = [_ins(_LD_ABS, 4), _ins(_JEQ, arch, 1, 0), _ins(_RET, RET_KILL), _ins(_LD_ABS, 0)]
    if machine == "x86_64":  # x32 syscalls alias the 64-bit table: refuse them wholesale
        out += [_ins(_JGE, 0x40000000, 0, 1), _ins(_RET, RET_KILL)]
    denied = list(_ALWAYS_DENIED) + ([] if allow_subprocess else list(_SUBPROCESS))
    denied += list(_METADATA) if host_files_visible else []
    rules = {nr[name]: [_ins(_RET, eperm)] for name in denied if name in nr}
    rules[nr["clone3"]] = [_ins(_RET, _errno(errno.ENOSYS))]  # libc falls back to clone
    # no new namespaces (a new user namespace would give the child every capability inside it), and
    # without subprocesses clone only for threads
    clone_checks = [(0, _JSET, CLONE_NEW_NAMESPACES, eperm)]
    if not allow_subprocess:
        clone_checks.append((0, _JSET, CLONE_THREAD, RET_ALLOW))
    rules[nr["clone"]] = _arg_rules(clone_checks, RET_ALLOW if allow_subprocess else eperm)
    rules[nr["fcntl"]] = _fcntl_rule(eperm)
    ioctls = (FIOASYNC, FIOSETOWN, SIOCSPGRP, FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR,
              FS_IOC_SETVERSION, FS_IOC32_SETVERSION)
    rules[nr["ioctl"]] = _arg_rules([(1, _JEQ, cmd, eperm) for cmd in ioctls], RET_ALLOW)
    rules.update(_channel_rules(nr))
    if allow_subprocess:  # kill(-1) would reach every process of this uid
        rules[nr["kill"]] = _arg_rule(0, _JEQ, 0xFFFFFFFF, eperm, RET_ALLOW)
    else:  # only the own process group (pid 0)
        rules[nr["kill"]] = _arg_rule(0, _JEQ, 0, RET_ALLOW, eperm)
    # Only the calling process: the judge is shared by every later job of the worker, and in the fallback
    # a same-uid process without capabilities may be another worker's judge or the host itself.
    for name in ("prlimit64", "sched_setparam", "sched_setscheduler", "sched_setattr"):
        rules[nr[name]] = _arg_rule(0, _JEQ, 0, RET_ALLOW, eperm)
    # setpriority(PRIO_USER, 0) means every process of the caller's uid: only PRIO_PROCESS/PGRP with who 0
    rules[nr["setpriority"]] = _arg_rules([(0, _JEQ, PRIO_USER, eperm), (1, _JEQ, 0, RET_ALLOW)], eperm)
    rules[nr["tgkill"]] = _arg_rule(0, _JEQ, _PID_PLACEHOLDER, RET_ALLOW, eperm)  # own threads only
    out += _search_tree(sorted(rules.items()))
    slots = [i for i, ins in enumerate(out) if ins[:1] == bytes([_JEQ]) and ins[4:] == struct.pack("<I", _PID_PLACEHOLDER)]
    if len(slots) != 1 + len(_CPU_CLOCK_CALLS):  # tgkill, and each call taking a clock id
        raise ValueError(f"seccomp program has {len(slots)} pid slots")
    return SeccompProgram(bytearray(b"".join(out)), slots)


def _channel_rules(nr: dict[str, int]) -> dict[int, list[bytes]]:
    """The rules that keep jobs from signalling each other through shared kernel state (FCNTL_ALLOWED and
    below): locks, shared futexes, page-cache residency."""
    enosys, nothing = [_ins(_RET, _errno(errno.ENOSYS))], _errno(0)
    rules = {nr[name]: enosys for name in ("futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "cachestat",
                                           "mincore")}
    rules[nr["flock"]] = enosys
    rules[nr["futex"]] = _futex_rule()
    for name in ("preadv2", "pwritev2"):
        rules[nr[name]] = _arg_rules([(5, _JSET, RWF_NOWAIT, _errno(errno.EOPNOTSUPP))], RET_ALLOW)
    rules[nr["fadvise64"]] = _arg_rule(3, _JEQ, POSIX_FADV_DONTNEED, nothing, RET_ALLOW)
    rules[nr["madvise"]] = _arg_rules([(2, _JEQ, advice, nothing) for advice in (MADV_COLD, MADV_PAGEOUT, MADV_MERGEABLE)],
                                      RET_ALLOW)
    for name in _CPU_CLOCK_CALLS:
        rules[nr[name]] = _cpu_clock_rule()
    return rules


def _cpu_clock_rule() -> list[bytes]:
    """A clock id (argument 0) that is another process's CPU clock: EINVAL; anything else allowed."""
    allow, einval = _ins(_RET, RET_ALLOW), _ins(_RET, _errno(errno.EINVAL))
    return [_ins(_LD_ABS, 16), _ins(_JSET, 0x80000000, 1, 0), allow,  # not negative: no CPU clock
            _ins(_JSET, 4, 0, 1), allow,  # a thread's clock: the kernel allows only the caller's threads
            _ins(_AND, 7), _ins(_JEQ, 3, 0, 1), allow,  # an fd clock (CLOCKFD)
            _ins(_LD_ABS, 16), _ins(_RSH, 3), _ins(_XOR, 0x1FFFFFFF),  # the pid
            _ins(_JEQ, 0, 1, 0), _ins(_JEQ, _PID_PLACEHOLDER, 0, 1), allow, einval]


def install_seccomp(prog: SeccompProgram, pid: int) -> None:
    """Load the filter into the calling process (after PR_SET_NO_NEW_PRIVS)."""
    for slot in prog.pid_slots:
        struct.pack_into("<I", prog.program, slot * 8 + 4, pid)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog.fprog_ref, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def set_name(name: bytes) -> None:
    """The calling thread's name (`comm`, 15 bytes), as `ps` shows it."""
    _libc.prctl(PR_SET_NAME, name[:15], 0, 0, 0)


_CAPSET_NR = {"x86_64": 126, "aarch64": 91}.get(platform.machine())
_CAP_HEADER = struct.pack("<Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
_CAP_DATA = bytes(24)  # two zeroed __user_cap_data_struct


def drop_capabilities() -> None:
    """Empty the effective, permitted and inheritable sets (matters when the host runs as root)."""
    if _CAPSET_NR is None:
        return
    if _libc.syscall(_CAPSET_NR, _CAP_HEADER, _CAP_DATA) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


# ------------------------------------------------------------------------------------- rlimits
SIGNALS_PENDING = 1024  # queued signals and POSIX timers: the kernel counts them per user, not per process


def set_rlimits(cpu_s: int, address_space_bytes: int, file_size_bytes: int, open_files: int,
                processes: int) -> None:
    """Set soft = hard for each limit, so the candidate cannot raise them back. Also no real-time
    scheduling (RLIMIT_RTPRIO 0: a SCHED_FIFO spinner would starve its worker's CPU) and few queued
    signals (each POSIX timer holds one, counted against every process of the same user)."""
    for res, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, address_space_bytes),
                       (resource.RLIMIT_FSIZE, file_size_bytes), (resource.RLIMIT_NOFILE, open_files),
                       (resource.RLIMIT_NPROC, processes), (resource.RLIMIT_CORE, 0), (resource.RLIMIT_RTPRIO, 0),
                       (resource.RLIMIT_SIGPENDING, _at_most_hard(resource.RLIMIT_SIGPENDING, SIGNALS_PENDING))):
        resource.setrlimit(res, (value, value))


def _at_most_hard(res: int, value: int) -> int:
    """`value`, or the current hard limit when that is lower (raising it would need a capability)."""
    hard = resource.getrlimit(res)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)
