"""The run dir is wiped between jobs without walking into read-only binds that sit inside it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "coral" / "sandbox"))
from _server import _wipe  # noqa: E402  (the server module runs inside the sandbox, not as coral.sandbox)


def test_wipe_removes_everything_but_the_kept_binds_and_their_contents(tmp_path):
    run = tmp_path / "run"
    venv = run / "checkout" / ".venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "site.py").write_text("kept")
    (run / "checkout" / "planted.txt").write_text("left by a program")
    (run / "scratch").mkdir()
    (run / "scratch" / "f").write_text("x")
    (run / "top.txt").write_text("x")
    _wipe(str(run), {str(venv)})
    assert (venv / "lib" / "site.py").read_text() == "kept"
    assert sorted(p.name for p in run.iterdir()) == ["checkout"]
    assert sorted(p.name for p in (run / "checkout").iterdir()) == [".venv"]
