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


def test_the_code_file_set_leaves_out_planning_notes_and_the_paper_and_all_is_paper2codes_set(tmp_path):
    ws = Workspace(tmp_path)
    for rel in ("main.py", "config.yaml", "run.bash", "plan/plan.md", "plan/task_list.json", "plan/analysis/main.py.md",
                "paper.md", "paper.tex", "README.txt", "notes", "requirements.txt"):
        ws.write(rel, "x")
    assert list(repo_files(tmp_path)) == ["config.yaml", "main.py", "run.bash"]
    assert list(repo_files(tmp_path, "all")) == ["README.txt", "config.yaml", "main.py", "paper.md",
                                                 "plan/analysis/main.py.md", "plan/plan.md", "run.bash"]
    with pytest.raises(ValueError, match="file set 'some' is not one of"):
        repo_files(tmp_path, "some")
