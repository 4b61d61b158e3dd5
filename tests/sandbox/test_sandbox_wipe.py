"""The fallback's run-dir wipe removes, as the directory's owner, whatever a program left: directories
it made unreadable, the run dir made read-only, trees too deep for recursion, symlinks (never followed)."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "coral" / "sandbox"))
from _rundir import wipe  # noqa: E402  (the server module runs inside the sandbox, not as coral.sandbox)


@pytest.fixture
def fast_tmp():
    """A temp dir on tmpfs when there is one: a deep tree on a loaded disk takes seconds to remove."""
    path = Path(tempfile.mkdtemp(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_wipe_empties_locked_deep_and_linked_trees_without_following_links(fast_tmp):
    run, outside = fast_tmp / "run", fast_tmp / "outside"
    run.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("not the run dir's")
    (run / "locked").mkdir()
    (run / "locked" / "answer").write_text("stash")
    os.chmod(run / "locked", 0)
    fd = os.open(run, os.O_RDONLY)
    for _ in range(1100):  # deeper than the recursion limit; the full path exceeds PATH_MAX
        os.mkdir("dddddddd", dir_fd=fd)
        fd, old = os.open("dddddddd", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    (run / "link").symlink_to(outside)
    (run / "file_link").symlink_to(outside / "keep.txt")
    os.chmod(run, 0o500)
    assert wipe(str(run)) is True
    assert list(run.iterdir()) == []
    assert (outside / "keep.txt").read_text() == "not the run dir's"
