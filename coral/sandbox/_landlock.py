"""Landlock for one candidate (or the judge), via ctypes: read-only interpreter paths, less hidden ones
(benchmark data), plus one writable run directory; TCP and signals out of the domain blocked where the
kernel's ABI supports it.

This module does NOT choose the paths (see `worker.py`) and does nothing on kernels without Landlock
(`landlock_abi() == 0`: rulesets are None). Stdlib-only: it is imported inside the sandbox.
"""

from __future__ import annotations

import ctypes
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_LL_READ = 1 | 4 | 8  # EXECUTE | READ_FILE | READ_DIR
_LL_READ_DIR = 8
_LL_FILE_RW = 2 | 4  # WRITE_FILE | READ_FILE


def landlock_abi() -> int:
    """Landlock ABI version of the running kernel, 0 when unavailable."""
    version = _libc.syscall(_LL_CREATE, None, 0, 1)
    return max(int(version), 0)


class Landlock:
    """Landlock rules for reads below `read_paths` and of `device_files`; `ruleset(write_dir)` makes a
    ruleset fd that also allows everything below write_dir. The paths are opened once here: a ruleset
    must be made again for each fresh run dir (a rule names an inode, and each tmpfs has its own root)."""

    def __init__(self, read_paths: list[str], device_files: list[str], hidden: list[str] | tuple[str, ...] = ()) -> None:
        self.abi = landlock_abi()
        self.handled_fs = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1,
                           4: (1 << 15) - 1}.get(self.abi, (1 << 16) - 1)
        self.rules: list[tuple[int, int]] = []  # (O_PATH fd, allowed access)
        if self.abi < 1:
            return
        for path, access in _read_rules(read_paths, hidden) + [(p, _LL_FILE_RW) for p in device_files]:
            if os.path.exists(path):
                access &= (1 << 16) - 1 if os.path.isdir(path) else _LL_FILE_RW | 1
                self.rules.append((os.open(path, os.O_PATH | os.O_CLOEXEC), access))

    def ruleset(self, write_dir: str | None) -> int | None:
        """A new ruleset fd (the caller closes it); None when the kernel has no Landlock."""
        if self.abi < 1:
            return None
        if self.abi >= 6:  # also TCP bind/connect and signals/abstract sockets leaving the domain
            attr = struct.pack("<QQQ", self.handled_fs, 3, 3)
        elif self.abi >= 4:
            attr = struct.pack("<QQ", self.handled_fs, 3)
        else:
            attr = struct.pack("<Q", self.handled_fs)
        ruleset = _libc.syscall(_LL_CREATE, attr, len(attr), 0)
        if ruleset < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
        write = [] if write_dir is None else [(os.open(write_dir, os.O_PATH | os.O_CLOEXEC), self.handled_fs)]
        try:
            for fd, access in self.rules + write:
                rule = struct.pack("<Qi", access, fd)  # struct landlock_path_beneath_attr is packed
                if _libc.syscall(_LL_ADD_RULE, int(ruleset), 1, rule, 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule(fd {fd}) failed")
        finally:
            for fd, _ in write:
                os.close(fd)
        return int(ruleset)


def _read_rules(read_paths: list[str], hidden: list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    """(path, access) read rules for everything below `read_paths` except the `hidden` real paths.
    Landlock only adds rights, and a rule covers all beneath its directory: a directory above a hidden
    path gets READ_DIR alone (listing it is harmless) and each of its entries a rule of its own."""
    def covers(top: str, path: str) -> bool:
        return path == top or path.startswith(top.rstrip("/") + "/")

    rules, todo, expanded = [], list(read_paths), set()
    while todo:
        path = todo.pop()
        real = os.path.realpath(path)  # a symlink's rule names its target's inode
        if any(covers(h, real) for h in hidden):
            continue
        if not any(covers(real, h) for h in hidden):
            rules.append((path, _LL_READ))
        elif real not in expanded:  # a symlink back up the tree is expanded once
            expanded.add(real)
            rules.append((path, _LL_READ_DIR))
            todo += [os.path.join(real, name) for name in os.listdir(real)]
    return rules


def restrict_landlock(ruleset_fd: int) -> None:
    if _libc.syscall(_LL_RESTRICT, ruleset_fd, 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
