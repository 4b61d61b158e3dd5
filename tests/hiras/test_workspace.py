import os

import pytest

from coral.hiras.workspace import Workspace, WorkspaceError, file_tree, repo_files


def test_paths_that_leave_the_workspace_are_refused(tmp_path):
    ws = Workspace(tmp_path / "ws")
    for bad in ("/etc/passwd", "../outside.txt", "a/../../outside.txt", ""):
        with pytest.raises(WorkspaceError):
            ws.write(bad, "x")
    os.symlink(tmp_path, ws.root / "link")
    with pytest.raises(WorkspaceError, match="leaves the workspace"):
        ws.write("link/escaped.txt", "x")
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "escaped.txt").exists()


def test_files_skip_hidden_and_pycache_and_tree_indents_directories(tmp_path):
    ws = Workspace(tmp_path)
    for rel in ("main.py", "src/model.py", "src/util/io.py", ".git/config", "src/__pycache__/m.pyc"):
        ws.write(rel, "x")
    assert ws.files() == ["main.py", "src/model.py", "src/util/io.py"]
    assert file_tree(ws.files()) == "main.py\nsrc/\n  model.py\n  util/\n    io.py"


def test_repo_files_keep_only_judged_extensions(tmp_path):
    ws = Workspace(tmp_path)
    for rel in ("a.py", "b.yaml", "c.txt", "d.sh", "e.png"):
        ws.write(rel, "x")
    assert list(repo_files(tmp_path)) == ["a.py", "b.yaml", "d.sh"]
