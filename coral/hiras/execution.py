"""Running a command of a generated repository inside coral's sandbox, never on the host.

The sandbox job is a small launcher: it writes a copy of the workspace's files into the sandbox's
private run directory, runs the command there as a subprocess (argv split with shlex, no shell;
`python`/`python3` mean the sandbox's interpreter) with a wall-clock limit, and prints the tail of the
command's output (stdout and stderr interleaved; only the tail is ever held, so a flood cannot cost
the report), then a trailer with a random marker, the exit code and the text files the command
created or changed. Only regular files are synced (never through a symlink, never a FIFO), under
printable, non-hidden names, at most `SYNC_LIMIT_FILES` files and `SYNC_LIMIT_BYTES` of JSON in all;
what is left out is named in the output. The host checks the names again and writes the files back
through `Workspace.write`, so nothing lands outside the workspace; a file the workspace cannot take
(a directory of that name there) is reported, not raised. The trailer is trusted only when the
launcher itself exited normally: a command that kills its launcher to forge the trailer leaves an
error verdict instead, and the marker is out of its reach (the launcher's memory and descriptors are
not readable by its children).

The sandbox gives: no network, no host files beyond the interpreter's directories (read-only), a
size-capped private run dir, subprocesses allowed (`allow_subprocess=True`), rlimits per process.

This module does NOT decide what to run (the execution agent does), does NOT keep anything the
command writes outside its run directory (there is nowhere else it can write), and does NOT sync
deletions, binary files or hidden files back.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field

from coral.hiras.workspace import Workspace, WorkspaceError
from coral.sandbox import Job, Sandbox
from coral.trajectory import TestCase

OUTPUT_LIMIT_CHARS = 20_000  # of the command's output kept for the agent (the tail)
SYNC_LIMIT_BYTES = 1_000_000  # of the files synced back, as JSON (names and escapes count)
SYNC_LIMIT_FILES = 1_000
SKIPPED_NAMES_SHOWN = 20

_LAUNCHER = r'''
import json, os, select, stat, subprocess, sys, time
FILES, ARGV, TIMEOUT_S, MARK, LIMIT_BYTES, LIMIT_FILES, TAIL_BYTES, NOTES = json.loads(%(payload)r)
for rel, text in FILES.items():
    os.makedirs(os.path.dirname(rel) or ".", exist_ok=True)
    with open(rel, "w") as fh:
        fh.write(text)
if ARGV[0] in ("python", "python3"):
    ARGV[0] = sys.executable


def run():
    # only the tail of the output is kept: a flood would otherwise fill the launcher's memory or its
    # stdout cap and cost the report
    try:
        proc = subprocess.Popen(ARGV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        return str(exc).encode(), "not_run"
    tail, deadline, fd = bytearray(), time.monotonic() + TIMEOUT_S, proc.stdout.fileno()
    while time.monotonic() < deadline:
        if select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                try:
                    return bytes(tail), proc.wait(timeout=max(0.01, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    break
            tail += chunk
            del tail[:-TAIL_BYTES]
    proc.kill()
    proc.wait()
    return bytes(tail) + ("\n[timed out after " + str(TIMEOUT_S) + " s]").encode(), "timeout"


def syncable(rel):
    # what the host can encode and show on one line; hidden entries stay in the run dir, as in snapshots
    return all(part.isprintable() and not part.startswith(".") for part in rel.split("/"))


def read_regular(rel):
    # a regular file's text, or why not: a FIFO would block, a symlink leads out of the run dir
    with os.fdopen(os.open(rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        data = fh.read(LIMIT_BYTES + 1)
    return (None, "over the sync limit") if len(data) > LIMIT_BYTES else (data.decode("utf-8"), "")


out, code = run()
changed, skipped, size = {}, [], 0
for root, dirs, names in os.walk("."):
    dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
    for name in sorted(names):
        rel = os.path.normpath(os.path.join(root, name))
        if not syncable(rel):
            skipped.append(ascii(rel) + " (hidden or unprintable name)")
            continue
        try:
            text, why = read_regular(rel)
        except OSError as exc:  # ELOOP: a symlink
            text, why = None, "not a regular file" if os.path.islink(rel) else exc.strerror
        except UnicodeDecodeError:
            continue  # binary: stays in the run dir
        if text is None:
            skipped.append(ascii(rel) + " (" + str(why) + ")")
            continue
        if FILES.get(rel) != text:
            cost = len(json.dumps(rel)) + len(json.dumps(text))  # the bytes that cross, escapes included
            if len(changed) >= LIMIT_FILES or size + cost > LIMIT_BYTES:
                skipped.append(ascii(rel) + " (over the sync limit)")
            else:
                changed[rel], size = text, size + cost
sys.stdout.write(out.decode(errors="replace"))
report = {"exit": code, "files": changed, "skipped": len(skipped), "skipped_names": skipped[:NOTES]}
sys.stdout.write("\n" + MARK + json.dumps(report) + "\n")
'''


@dataclass
class CommandResult:
    command: str
    exit_code: int | str | None  # int, "timeout", "not_run", or None when the launcher itself failed
    output: str  # tail of the command's stdout+stderr, then a line naming the files not synced, if any
    files_written: list[str] = field(default_factory=list)
    error: str = ""  # why the launcher could not report (sandbox failure, killed launcher)
    files_not_synced: int = 0  # written by the command but left out of the workspace (see `output`)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def command_sandbox(command_timeout_s: float, memory_mb: int) -> Sandbox:
    """A one-worker sandbox for `run_command` (subprocesses allowed, no cache: a rerun must really run),
    its job limit a margin above the command's own wall limit so the launcher can still report."""
    return Sandbox(workers=1, allow_subprocess=True, cache=False, timeout_s=command_timeout_s + 15.0,
                   memory_mb=memory_mb)


def run_command(sandbox: Sandbox, workspace: Workspace, command: str, timeout_s: float = 60.0) -> CommandResult:
    """Run `command` over a copy of `workspace` in `sandbox` (which must allow subprocesses)."""
    if not sandbox.allow_subprocess:
        raise ValueError("run_command needs Sandbox(allow_subprocess=True): the command is a subprocess")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return CommandResult(command, "not_run", "", error=f"cannot parse command: {exc}")
    if not argv:
        return CommandResult(command, "not_run", "", error="empty command")
    mark = "[coral-exit-" + os.urandom(8).hex() + "] "
    payload = json.dumps([workspace.snapshot(), argv, timeout_s, mark, SYNC_LIMIT_BYTES, SYNC_LIMIT_FILES,
                          4 * OUTPUT_LIMIT_CHARS, SKIPPED_NAMES_SHOWN])
    job = Job(_LAUNCHER % {"payload": payload}, (TestCase(kind="stdio"),), timeout_s=timeout_s + 15.0,
              keep_output=True)
    result = sandbox.run_many([job])[0]
    test = result.tests[0] if result.tests else None
    text = test.output if test else ""
    head, found, trailer = text.rpartition("\n" + mark)
    if result.error or test is None or test.verdict not in ("pass", "fail") or not found:
        why = result.error or (f"{test.verdict}: {test.message}" if test else "no result")
        return CommandResult(command, None, text[-OUTPUT_LIMIT_CHARS:], error=f"launcher failed ({why})")
    report = json.loads(trailer.split("\n", 1)[0])
    written, failed = _sync_back(workspace, report["files"])
    skipped = report["skipped_names"] + failed
    count = report["skipped"] + len(failed)
    output = head[-OUTPUT_LIMIT_CHARS:]
    if count:
        output += f"\n[coral: {count} files not synced: {', '.join(skipped[:SKIPPED_NAMES_SHOWN])}]\n"
    return CommandResult(command, report["exit"], output, written, files_not_synced=count)


def _sync_back(workspace: Workspace, files: dict[str, str]) -> tuple[list[str], list[str]]:
    """Write the command's files into the workspace; (written paths, "name (why)" of those refused). A
    file the workspace cannot take (its path is a directory there, or under a file) costs that file, not
    the command's report; names are checked again here, the launcher runs beside the command."""
    written, failed = [], []
    for rel, content in files.items():
        try:
            if not isinstance(content, str) or not _syncable(rel):
                raise WorkspaceError("hidden or unprintable name")
            workspace.write(rel, content)
            written.append(rel)
        except (WorkspaceError, OSError) as exc:
            failed.append(f"{rel!a} ({exc})")
    return sorted(written), failed


def _syncable(rel: str) -> bool:
    """A name the host can encode and show on one line, outside hidden directories and __pycache__."""
    return isinstance(rel, str) and all(part.isprintable() and not part.startswith(".") and part != "__pycache__"
                                        for part in rel.split("/"))
