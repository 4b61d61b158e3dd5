"""Running a command of a generated repository inside coral's sandbox, never on the host.

The sandbox job is a small launcher: it writes a copy of the workspace's files into the sandbox's
private run directory, runs the command there as a subprocess (argv split with shlex, no shell;
`python`/`python3` mean the sandbox's interpreter) with a wall-clock limit, and prints the command's
output (stdout and stderr interleaved), then a trailer with a random marker, the exit code and the
text files the command created or changed (up to `SYNC_LIMIT_BYTES` in all). The host writes those
files back through `Workspace.write`, so nothing lands outside the workspace. The trailer is
trusted only when the launcher itself exited normally: a command that kills its launcher to forge
the trailer leaves an error verdict instead.

The sandbox gives: no network, no host files beyond the interpreter's directories (read-only), a
size-capped private run dir, subprocesses allowed (`allow_subprocess=True`), rlimits per process.

This module does NOT decide what to run (the execution agent does) and does NOT keep anything the
command writes outside its run directory (there is nowhere else it can write).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field

from coral.research.workspace import Workspace
from coral.sandbox import Job, Sandbox
from coral.trajectory import TestCase

OUTPUT_LIMIT_CHARS = 20_000  # of the command's output kept for the agent (the tail)
SYNC_LIMIT_BYTES = 1_000_000

_LAUNCHER = r'''
import json, os, subprocess, sys
FILES, ARGV, TIMEOUT_S, MARK, LIMIT = json.loads(%(payload)r)
for rel, text in FILES.items():
    os.makedirs(os.path.dirname(rel) or ".", exist_ok=True)
    with open(rel, "w") as fh:
        fh.write(text)
if ARGV[0] in ("python", "python3"):
    ARGV[0] = sys.executable
try:
    proc = subprocess.run(ARGV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=TIMEOUT_S)
    out, code = proc.stdout, proc.returncode
except subprocess.TimeoutExpired as exc:
    out, code = (exc.stdout or b"") + b"\n[timed out after %%s s]" %% str(TIMEOUT_S).encode(), "timeout"
except OSError as exc:
    out, code = str(exc).encode(), "not_run"
changed, size = {}, 0
for root, dirs, names in os.walk("."):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
    for name in sorted(names):
        rel = os.path.normpath(os.path.join(root, name))
        try:
            with open(rel) as fh:
                text = fh.read(LIMIT + 1)
        except (OSError, UnicodeDecodeError):
            continue
        if FILES.get(rel) != text and size + len(text) <= LIMIT:
            changed[rel], size = text, size + len(text)
sys.stdout.write(out.decode(errors="replace"))
sys.stdout.write("\n" + MARK + json.dumps({"exit": code, "files": changed}) + "\n")
'''


@dataclass
class CommandResult:
    command: str
    exit_code: int | str | None  # int, "timeout", "not_run", or None when the launcher itself failed
    output: str  # tail of the command's stdout+stderr
    files_written: list[str] = field(default_factory=list)
    error: str = ""  # why the launcher could not report (sandbox failure, killed launcher)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


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
    payload = json.dumps([workspace.snapshot(), argv, timeout_s, mark, SYNC_LIMIT_BYTES])
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
    written = []
    for rel, content in report["files"].items():
        workspace.write(rel, content)
        written.append(rel)
    return CommandResult(command, report["exit"], head[-OUTPUT_LIMIT_CHARS:], sorted(written))
