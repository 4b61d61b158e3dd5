"""Hostile commands against run_command's sync-back: what a command leaves in its run dir must never crash
the host, reach outside the workspace, plant names the host cannot encode, or cost the command its report.
Both isolation modes (bubblewrap and the fallback)."""

from __future__ import annotations

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sandbox"))
from sandbox_helpers import make_sandbox  # noqa: E402

from coral.hiras.execution import SYNC_LIMIT_BYTES, SYNC_LIMIT_FILES, run_command  # noqa: E402
from coral.hiras.workspace import Workspace, file_tree  # noqa: E402


@pytest.fixture(scope="module", params=["bwrap", "none"])
def sandbox(request):
    sb = make_sandbox(request.param, allow_subprocess=True, timeout_s=4.0, memory_mb=512)
    yield sb
    sb.close()


def _run(sandbox, tmp_path, files: dict[str, str], script: str, timeout_s: float = 4.0):
    ws = Workspace(tmp_path / "ws")
    for rel, text in files.items():
        ws.write(rel, text)
    ws.write("attack.py", script)
    return ws, run_command(sandbox, ws, "python attack.py", timeout_s=timeout_s)


def test_a_file_replacing_a_directory_or_the_reverse_costs_those_files_not_the_host(sandbox, tmp_path):
    script = ("import os, shutil\nos.remove('data')\nos.makedirs('data')\nopen('data/x.txt', 'w').write('x')\n"
              "shutil.rmtree('pkg')\nopen('pkg', 'w').write('flat')\nopen('ok.txt', 'w').write('ok')\n")
    ws, result = _run(sandbox, tmp_path, {"data": "a file", "pkg/a.py": "a dir"}, script)
    assert result.exit_code == 0 and result.files_written == ["ok.txt"]
    assert ws.read("ok.txt") == "ok" and ws.read("data") == "a file" and ws.read("pkg/a.py") == "a dir"
    assert "not synced" in result.output and "data/x.txt" in result.output and "'pkg'" in result.output


def test_names_the_host_cannot_encode_or_show_never_reach_the_workspace(sandbox, tmp_path):
    script = ("open(b'bad\\xff.txt', 'w').write('x')\nopen('two\\nlines.txt', 'w').write('x')\n"
              "open('.bashrc', 'w').write('x')\nopen('good.txt', 'w').write('x')\n")
    ws, result = _run(sandbox, tmp_path, {}, script)
    assert result.exit_code == 0 and result.files_written == ["good.txt"]
    assert sorted(os.listdir(os.fsencode(ws.root))) == [b"attack.py", b"good.txt"]
    (result.output + "\n".join(result.files_written) + file_tree(ws.files())).encode("utf-8")  # no surrogates


def test_fifos_and_symlinks_are_neither_read_nor_followed_by_the_sync(sandbox, tmp_path):
    script = ("import os, sys\nos.mkfifo('pipe.txt')\nos.symlink(os.__file__, 'stolen.py')\n"
              "os.symlink('/dev/zero', 'zeros.txt')\nopen('good.txt', 'w').write('x')\n")
    start = time.monotonic()
    ws, result = _run(sandbox, tmp_path, {}, script)
    assert time.monotonic() - start < 10.0  # a FIFO used to block the sync until the sandbox deadline
    assert result.exit_code == 0 and result.files_written == ["good.txt"], result.error
    assert not ws.exists("stolen.py") and not ws.exists("pipe.txt")


def test_the_number_of_files_synced_back_is_capped(sandbox, tmp_path):
    script = f"for i in range({SYNC_LIMIT_FILES + 500}):\n    open(f'f{{i:05d}}.txt', 'w').close()\n"
    ws, result = _run(sandbox, tmp_path, {}, script)
    assert result.exit_code == 0 and len(result.files_written) == SYNC_LIMIT_FILES
    assert len(ws.files()) == SYNC_LIMIT_FILES + 1 and "500 files not synced" in result.output


def test_the_sync_limit_counts_the_bytes_that_cross_not_characters(sandbox, tmp_path):
    # astral characters: 4 bytes of UTF-8 and 12 of escaped JSON each, where the limit used to count 1
    script = f"open('wide.txt', 'w').write(chr(0x1F600) * {SYNC_LIMIT_BYTES // 2})\nopen('small.txt', 'w').write('s')\n"
    ws, result = _run(sandbox, tmp_path, {}, script)
    assert result.exit_code == 0 and result.files_written == ["small.txt"]
    assert "wide.txt" in result.output


def test_a_flood_of_output_keeps_the_exit_code_the_files_and_the_outputs_tail(sandbox, tmp_path):
    script = ("import sys\nfor _ in range(20):\n    sys.stdout.write('y' * (1 << 20))\n"
              "print('the end')\nopen('made.txt', 'w').write('m')\nsys.exit(4)\n")
    ws, result = _run(sandbox, tmp_path, {}, script, timeout_s=8.0)
    assert result.exit_code == 4 and result.files_written == ["made.txt"], result.error
    assert result.output.endswith("the end\n")


def test_a_command_cannot_read_its_launcher_to_learn_the_report_marker(sandbox, tmp_path):
    script = ("import os\nfor name in ('mem', 'environ', 'cmdline', 'fd/1', 'maps'):\n"
              "    try:\n        open(f'/proc/{os.getppid()}/{name}', 'rb').read(1)\n        print(name, 'READ')\n"
              "    except OSError:\n        pass\n")
    _, result = _run(sandbox, tmp_path, {}, script)
    assert result.exit_code == 0 and "READ" not in result.output


def test_a_background_process_cannot_write_into_the_workspace_after_the_report(sandbox, tmp_path):
    # its own stdout and stderr closed, so the launcher does not wait for it before reporting
    script = ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time\\ntime.sleep(0.5)\\n"
              "open(\"late.txt\", \"w\").write(\"late\")'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n")
    ws, result = _run(sandbox, tmp_path, {}, script)
    time.sleep(1.0)
    assert result.exit_code == 0 and not ws.exists("late.txt")
    _, after = _run(sandbox, tmp_path, {}, "import os\nprint(sorted(os.listdir('.')))\n")
    assert after.output == "['attack.py']\n"
