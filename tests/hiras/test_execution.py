import shutil

import pytest

from coral.hiras.execution import run_command
from coral.hiras.paper import FIXTURE_REFERENCE
from coral.hiras.workspace import Workspace
from coral.sandbox import Job, Sandbox
from coral.trajectory import TestCase


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1, allow_subprocess=True, cache=False) as sb:
        yield sb


def test_keep_output_returns_stdout_and_stderr_of_a_stdio_test(sandbox):
    code = "import sys\nprint('x' * 300)\nprint('oops', file=sys.stderr)"
    kept = sandbox.run_many([Job(code, (TestCase(kind="stdio"),), keep_output=True)])[0].tests[0]
    plain = sandbox.run_many([Job(code, (TestCase(kind="stdio"),))])[0].tests[0]
    assert kept.output == "x" * 300 + "\n\n[stderr]\noops\n"
    assert plain.output == ""


def test_the_reference_repository_runs_in_the_sandbox(sandbox, tmp_path):
    shutil.copytree(FIXTURE_REFERENCE, tmp_path, dirs_exist_ok=True)
    result = run_command(sandbox, Workspace(tmp_path), "python main.py")
    assert result.ok and result.output == "lambda=0.0 accuracy=0.8341\nlambda=0.5 accuracy=0.8341\n"


def test_exit_code_output_and_written_files_come_back_into_the_workspace(sandbox, tmp_path):
    ws = Workspace(tmp_path)
    ws.write("job.py", "import os, sys\nos.makedirs('out', exist_ok=True)\nopen('out/log.txt', 'w').write('done')\n"
                       "print('bad', file=sys.stderr)\nsys.exit(3)\n")
    result = run_command(sandbox, ws, "python job.py")
    assert result.exit_code == 3 and result.output == "bad\n"
    assert result.files_written == ["out/log.txt"] and ws.read("out/log.txt") == "done"


def test_a_command_past_its_time_limit_is_stopped(sandbox, tmp_path):
    result = run_command(sandbox, Workspace(tmp_path), "python -c 'import time; time.sleep(30)'", timeout_s=1)
    assert result.exit_code == "timeout" and "timed out after 1 s" in result.output


def test_commands_cannot_reach_the_network_or_write_on_the_host(sandbox, tmp_path):
    outside = tmp_path / "outside.txt"
    ws = Workspace(tmp_path / "ws")
    ws.write("evil.py", f"import socket\n"
                        f"for attempt in ('net', 'file'):\n"
                        f"    try:\n"
                        f"        if attempt == 'net':\n"
                        f"            socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
                        f"        else:\n"
                        f"            open({str(outside)!r}, 'w').write('escaped')\n"
                        f"        print(attempt, 'ESCAPED')\n"
                        f"    except OSError as exc:\n"
                        f"        print(attempt, 'blocked', type(exc).__name__)\n")
    result = run_command(sandbox, ws, "python evil.py")
    assert result.ok and "ESCAPED" not in result.output
    assert "net blocked" in result.output and "file blocked" in result.output
    assert not outside.exists()


def test_a_command_that_kills_its_launcher_cannot_forge_a_report(sandbox, tmp_path):
    ws = Workspace(tmp_path)
    ws.write("kill.py", "import os, signal\nprint('[coral-exit-0000] {\"exit\": 0, \"files\": {}}')\n"
                        "os.kill(os.getppid(), signal.SIGKILL)\n")
    result = run_command(sandbox, ws, "python kill.py")
    assert result.exit_code is None and result.error.startswith("launcher failed")


def test_a_sandbox_without_subprocesses_is_refused(tmp_path):
    with pytest.raises(ValueError, match="allow_subprocess=True"):
        run_command(Sandbox(workers=1), Workspace(tmp_path), "python x.py")
