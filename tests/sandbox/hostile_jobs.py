"""Hostile programs that attack *other* jobs on the same worker: steal a sibling's code, stash answers for
a later job, break the run dir for later jobs. Each is a (code, test) pair run with entry point `f`.

SECRET is a value only the "sibling" programs hold; a program that passes a test expecting it has learnt
it from another job. The thief never spells the secret's marker literally, so it cannot find itself.
"""

from __future__ import annotations

SECRET = "Q7Z-" + "5e1f0c2a9b7d3e84"

# A correct program whose source holds the secret; the thief then looks for it.
SIBLING = f"def f():\n    return {SECRET!r}\n"

# Looks for the sibling's code in everything it inherited: frames and their locals, gc-tracked
# objects, then raw memory around the heap (each page copied with write(2) into a pipe, which fails
# with EFAULT on an unreadable page instead of crashing).
THIEF = r'''
import ctypes, gc, os, re, sys
MARK = "Q7Z" + "-"
PATTERN = re.compile((MARK + "[0-9a-f]{16}").encode())

def _in_objects():
    seen, todo = set(), [sys._getframe()]
    todo += gc.get_objects()
    while todo:
        o = todo.pop()
        if id(o) in seen or len(seen) > 300000:
            continue
        seen.add(id(o))
        if isinstance(o, (str, bytes)):
            m = PATTERN.search(o.encode() if isinstance(o, str) else o)
            if m:
                return m.group().decode()
        elif type(o).__name__ == "frame":
            todo += [o.f_back, o.f_locals, o.f_globals]
        elif isinstance(o, dict):
            todo += list(o.keys()) + list(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            todo += list(o)
        elif hasattr(o, "__dict__") and not isinstance(o, type):
            todo.append(vars(o))
        elif type(o).__name__ == "code":
            todo += list(o.co_consts)
    return None

def _in_memory():
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    centre = id(gc.get_objects()[len(gc.get_objects()) // 2]) & ~0xFFF
    for base in (centre, id(sys) & ~0xFFF):
        tail = b""
        for addr in range(base - (64 << 20), base + (64 << 20), 4096):
            if addr <= 0 or libc.write(w, ctypes.c_void_p(addr), 4096) != 4096:
                tail = b""
                continue
            page = os.read(r, 4096)
            m = PATTERN.search(tail + page)
            if m:
                return m.group().decode()
            tail = page[-32:]
    return None

def f():
    return _in_objects() or _in_memory()
'''

# A correct program that also leaves the secret for later jobs, in ways a wipe with the candidate's own
# rights misses: a directory made unreadable, the run dir itself made read-only, a SysV shared memory
# segment. Each returns 1 (and its test expects 1), so it is a passing, "innocent" job.
STASH_IN_LOCKED_DIR = f"""
import os
def f():
    os.mkdir("stash")
    with open("stash/answer", "w") as fh:
        fh.write({SECRET!r})
    os.chmod("stash", 0)
    return 1
"""
STASH_IN_READONLY_RUN_DIR = f"""
import os
def f():
    with open("answer", "w") as fh:
        fh.write({SECRET!r})
    os.chmod(".", 0o555)
    return 1
"""
STASH_IN_SHARED_MEMORY = f"""
import ctypes
def f():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    shmid = libc.shmget(0x5EC2E7, 4096, 0o1666)  # IPC_CREAT | 0666
    if shmid < 0:
        return 1
    addr = libc.shmat(shmid, None, 0)
    if addr not in (None, ctypes.c_void_p(-1).value):
        ctypes.memmove(addr, {SECRET.encode()!r}, {len(SECRET)})
    return 1
"""
# In the run dir's own metadata, which a wipe of its entries keeps: an extended attribute, a POSIX ACL
# (owner-settable, entries carry ids), the group, the times, and a size that only grows (ext4 directories).
STASH_IN_RUN_DIR_METADATA = f"""
import os, struct
def f():
    secret = {SECRET!r}.encode()
    for call in (lambda: os.setxattr(".", "user.stash", secret),
                 lambda: os.setxattr(".", "system.posix_acl_default", struct.pack("<I", 2) + b"".join(
                     struct.pack("<HHI", tag, 7, ident) for tag, ident in ((1, 0xFFFFFFFF), (2, 4242),
                                                                          (4, 0xFFFFFFFF), (16, 0xFFFFFFFF),
                                                                          (32, 0xFFFFFFFF)))),
                 lambda: os.utime(".", ns=(int.from_bytes(secret[:8], "big"), int.from_bytes(secret[8:16], "big")))):
        try:
            call()
        except OSError:
            pass
    for i in range(400):  # grows an ext4 directory for good
        open(f"{{i:0>200}}", "w").close()
    return 1
"""
# Reads back whatever a stasher left; a wrong program that passes only with a stolen answer.
STASH_READER = f"""
import ctypes, os
def f():
    try:
        return os.getxattr(".", "user.stash").decode()
    except OSError:
        pass
    for path in ("stash", "."):
        try:
            os.chmod(path, 0o700)
            return open(os.path.join(path, "answer")).read()
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    shmid = libc.shmget(0x5EC2E7, 4096, 0)
    if shmid >= 0:
        addr = libc.shmat(shmid, None, 0)
        if addr not in (None, ctypes.c_void_p(-1).value):
            return ctypes.string_at(addr, {len(SECRET)}).decode(errors="replace")
    return None
"""

# Breaks the run dir for later (correct) jobs, each returning 1 itself.
RUN_DIR_READ_ONLY = "import os\ndef f():\n    os.chmod('.', 0o500)\n    return 1\n"
DEEP_TREE = ("import os\ndef f():\n    for _ in range(1500):\n        os.mkdir('d')\n        os.chdir('d')\n"
             "    return 1\n")
FILL_AND_LOCK = ("import os\ndef f():\n    os.mkdir('full')\n    i = 0\n    try:\n        while True:\n"
                 "            with open(f'full/{i}', 'wb') as fh:\n                fh.write(b'x' * (8 << 20))\n"
                 "            i += 1\n    except OSError:\n        pass\n    os.chmod('full', 0)\n    return 1\n")
# A correct program that needs a writable run dir.
WRITER = ("import os, tempfile\ndef f():\n    with open('out.txt', 'w') as fh:\n        fh.write('x' * (1 << 20))\n"
          "    with tempfile.TemporaryFile() as fh:\n        fh.write(b'y')\n    return os.path.getsize('out.txt')\n")
WRITER_TEST = "assert candidate() == 1 << 20"

# (name, code, test): jobs that try to change what later jobs see. They may pass or fail themselves.
ATTACKS: list[tuple[str, str, str]] = [
    ("sibling", SIBLING, f"assert candidate() == {SECRET!r}"),
    ("stash_in_locked_dir", STASH_IN_LOCKED_DIR, "assert candidate() == 1"),
    ("stash_in_readonly_run_dir", STASH_IN_READONLY_RUN_DIR, "assert candidate() == 1"),
    ("stash_in_shared_memory", STASH_IN_SHARED_MEMORY, "assert candidate() == 1"),
    ("stash_in_run_dir_metadata", STASH_IN_RUN_DIR_METADATA, "assert candidate() == 1"),
    ("run_dir_read_only", RUN_DIR_READ_ONLY, "assert candidate() == 1"),
    ("deep_tree", DEEP_TREE, "assert candidate() == 1"),
]
# (name, code, test): jobs whose verdict must not depend on what ran before them.
PROBES: list[tuple[str, str, str]] = [
    ("thief", THIEF, f"assert candidate() == {SECRET!r}"),
    ("stash_reader", STASH_READER, f"assert candidate() == {SECRET!r}"),
    ("writer", WRITER, WRITER_TEST),
    ("correct", "def f(x=1):\n    return x + 1\n", "assert candidate(1) == 2"),
    ("wrong", "def f(x=1):\n    return x\n", "assert candidate(1) == 2"),
]
