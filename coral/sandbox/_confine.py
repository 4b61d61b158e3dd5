"""Kernel confinement for one candidate process: seccomp-BPF, Landlock and rlimits, via ctypes.

The seccomp program is assembled once (`build_seccomp`) in the fork server and installed by each
forked child after patching in its own pid (`install_seccomp`). It is a deny-list returning EPERM
for networking, process creation (unless subprocesses are allowed), signalling other processes,
tracing, namespaces, mounts, io_uring, bpf, keyrings and module loading; an unknown architecture
or the x32 ABI is killed outright. The program is a binary search over syscall numbers: the
kernel pre-evaluates each new filter for every syscall number when it is installed, and a linear
chain of ~70 comparisons made that cost ~0.3 ms per child. Landlock (when the kernel has it)
limits the filesystem to read-only interpreter paths plus one writable run directory, and blocks
TCP and signals out of the domain where the ABI supports it.

This module does NOT choose limits or verdicts, and it is NOT a complete syscall allow-list:
syscalls outside the deny-list (file I/O, mmap, futex...) stay available to the candidate.
Syscall tables exist for x86_64 and aarch64 only; elsewhere `build_seccomp` returns None.
Stdlib-only: it is imported inside the sandbox.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 38, 22
PR_SET_CHILD_SUBREAPER = 36
SECCOMP_MODE_FILTER = 2
RET_ALLOW, RET_KILL = 0x7FFF0000, 0x80000000
CLONE_THREAD = 0x00010000

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
    "modify_ldt": (154, None),
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
    "fsmount", "fspick", "pidfd_open", "pidfd_getfd", "mount_setattr", "iopl", "ioperm",
    "modify_ldt", "tkill",
)
_SUBPROCESS = ("fork", "vfork", "execve", "execveat")


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


_LD_ABS, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06


def _errno(code: int) -> int:
    return 0x00050000 | code


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class SeccompProgram:
    """An assembled filter; `pid_slot` is the instruction whose constant is the child's pid.

    The ctypes view and `sock_fprog` are built once here, in the server, so a forked child only
    patches its pid and makes one prctl call (each Python object a child touches costs it a
    copy-on-write page fault)."""

    def __init__(self, program: bytearray, pid_slot: int) -> None:
        self.program, self.pid_slot = program, pid_slot
        self._buffer = (ctypes.c_char * len(program)).from_buffer(program)
        self.fprog = _SockFprog(len(program) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))
        self.fprog_ref = ctypes.byref(self.fprog)


_PID_PLACEHOLDER = 0x7FFFFFF0  # replaced by the child's pid in install_seccomp


def _arg_rule(arg: int, op: int, value: int, if_true: int, if_false: int) -> list[bytes]:
    """Leaf block: return if_true when (syscall argument `arg` <op> value) else if_false."""
    return [_ins(_LD_ABS, 16 + 8 * arg), _ins(op, value, 0, 1), _ins(_RET, if_true), _ins(_RET, if_false)]


def _search_tree(rules: list[tuple[int, list[bytes]]]) -> list[bytes]:
    """Binary search over the syscall number in A (rules sorted by number); numbers without a rule
    are allowed. O(log n) per syscall, and the kernel's per-filter pre-evaluation of every syscall
    number (its allow-bitmap cache, paid at each install) stays short."""
    if len(rules) == 1:
        nr, block = rules[0]
        return [_ins(_JEQ, nr, 0, len(block))] + block + [_ins(_RET, RET_ALLOW)]
    mid = len(rules) // 2
    left, right = _search_tree(rules[:mid]), _search_tree(rules[mid:])
    if len(left) > 255:
        raise ValueError("seccomp search tree too deep for 8-bit BPF jumps")
    return [_ins(_JGE, rules[mid][0], len(left), 0)] + left + right


def build_seccomp(allow_subprocess: bool) -> SeccompProgram | None:
    """Assemble the deny-list filter for this machine, or None on an unsupported architecture."""
    machine = platform.machine()
    if machine not in ("x86_64", "aarch64"):
        return None
    col, arch = (0, 0xC000003E) if machine == "x86_64" else (1, 0xC00000B7)
    nr = {name: nums[col] for name, nums in _SYSCALLS.items() if nums[col] is not None}
    eperm = _errno(errno.EPERM)
    out = [_ins(_LD_ABS, 4), _ins(_JEQ, arch, 1, 0), _ins(_RET, RET_KILL), _ins(_LD_ABS, 0)]
    if machine == "x86_64":  # x32 syscalls alias the 64-bit table: refuse them wholesale
        out += [_ins(_JGE, 0x40000000, 0, 1), _ins(_RET, RET_KILL)]
    denied = list(_ALWAYS_DENIED) + ([] if allow_subprocess else list(_SUBPROCESS))
    rules = {nr[name]: [_ins(_RET, eperm)] for name in denied if name in nr}
    rules[nr["clone3"]] = [_ins(_RET, _errno(errno.ENOSYS))]  # libc falls back to clone
    if not allow_subprocess:  # clone only for threads
        rules[nr["clone"]] = _arg_rule(0, _JSET, CLONE_THREAD, RET_ALLOW, eperm)
    if allow_subprocess:  # kill(-1) would reach every process of this uid
        rules[nr["kill"]] = _arg_rule(0, _JEQ, 0xFFFFFFFF, eperm, RET_ALLOW)
    else:  # only the own process group (pid 0)
        rules[nr["kill"]] = _arg_rule(0, _JEQ, 0, RET_ALLOW, eperm)
    for name, arg in (("prlimit64", 0), ("setpriority", 1), ("sched_setaffinity", 0)):
        rules[nr[name]] = _arg_rule(arg, _JEQ, 0, RET_ALLOW, eperm)
    rules[nr["tgkill"]] = _arg_rule(0, _JEQ, _PID_PLACEHOLDER, RET_ALLOW, eperm)  # own threads only
    out += _search_tree(sorted(rules.items()))
    slots = [i for i, ins in enumerate(out) if ins == _ins(_JEQ, _PID_PLACEHOLDER, 0, 1)]
    if len(slots) != 1:
        raise ValueError(f"seccomp program must have one pid slot, found {len(slots)}")
    return SeccompProgram(bytearray(b"".join(out)), slots[0])


def install_seccomp(prog: SeccompProgram, pid: int) -> None:
    """Load the filter into the calling process (after PR_SET_NO_NEW_PRIVS)."""
    struct.pack_into("<I", prog.program, prog.pid_slot * 8 + 4, pid)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog.fprog_ref, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


# ------------------------------------------------------------------------------------ landlock
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_LL_READ = 1 | 4 | 8  # EXECUTE | READ_FILE | READ_DIR
_LL_FILE_RW = 2 | 4  # WRITE_FILE | READ_FILE


def landlock_abi() -> int:
    """Landlock ABI version of the running kernel, 0 when unavailable."""
    version = _libc.syscall(_LL_CREATE, None, 0, 1)
    return max(int(version), 0)


def build_landlock(read_paths: list[str], write_dir: str, device_files: list[str]) -> int | None:
    """Ruleset fd allowing reads below read_paths and everything below write_dir; None if no Landlock."""
    abi = landlock_abi()
    if abi < 1:
        return None
    handled_fs = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}.get(abi, (1 << 16) - 1)
    if abi >= 6:  # also TCP bind/connect and signals/abstract sockets leaving the domain
        attr = struct.pack("<QQQ", handled_fs, 3, 3)
    elif abi >= 4:
        attr = struct.pack("<QQ", handled_fs, 3)
    else:
        attr = struct.pack("<Q", handled_fs)
    ruleset = _libc.syscall(_LL_CREATE, attr, len(attr), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    rules = [(p, _LL_READ) for p in read_paths] + [(write_dir, handled_fs)]
    rules += [(p, _LL_FILE_RW) for p in device_files]
    for path, access in rules:
        if not os.path.exists(path):
            continue
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            if not os.path.isdir(path):
                access &= _LL_FILE_RW | 1
            rule = struct.pack("<Qi", access, fd)  # struct landlock_path_beneath_attr is packed
            if _libc.syscall(_LL_ADD_RULE, int(ruleset), 1, rule, 0) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
        finally:
            os.close(fd)
    return int(ruleset)


def restrict_landlock(ruleset_fd: int) -> None:
    if _libc.syscall(_LL_RESTRICT, ruleset_fd, 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")


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
def set_rlimits(cpu_s: int, address_space_bytes: int, file_size_bytes: int, open_files: int,
                processes: int) -> None:
    """Set soft = hard for each limit, so the candidate cannot raise them back."""
    for res, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, address_space_bytes),
                       (resource.RLIMIT_FSIZE, file_size_bytes), (resource.RLIMIT_NOFILE, open_files),
                       (resource.RLIMIT_NPROC, processes), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))
