"""Workspace: the one directory an agent run may read and write, and the views judges take of a repo.

Every path an agent names is resolved against the root and refused when it leaves it (absolute
paths, `..`, symlinks pointing out). File tree format (used by P2C-Ex and the manager's view): one
line per entry, sorted by path, two spaces of indent per depth, directories end with `/`:

    data/
      loader.py
    main.py

Files that reach a judge (`repo_files`), by named file set, sorted by path, hidden entries,
`__pycache__` and files over 200 kB skipped:
  code  .py .sh .bash .yaml .yml: code and configuration, so planning notes (.md, .json, .txt) of
        either pipeline never reach a judge and both are judged on the same kind of files (default)
  all   Paper2Code's `read_all_files` set: .py .yaml .yml .md .sh .bash and README.* (names without
        an extension skipped); Paper2Code's eval.py reads a gold repository this way

This module does NOT run anything: execution goes through coral.hiras.execution and the sandbox.
"""

from __future__ import annotations

from pathlib import Path

from coral.config import UserInputError

FILE_SETS = {"code": (".py", ".sh", ".bash", ".yaml", ".yml"),
             "all": (".py", ".yaml", ".yml", ".md", ".sh", ".bash")}
MAX_FILE_BYTES = 200_000


class WorkspaceError(ValueError):
    """A path outside the workspace, or a file that is not there."""


class Workspace:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def resolve(self, rel: str) -> Path:
        """The absolute path of `rel`, refused when it is absolute or leaves the workspace."""
        if not isinstance(rel, str) or not rel.strip():
            raise WorkspaceError(f"path must be a non-empty string, got {rel!r}")
        if Path(rel).is_absolute():
            raise WorkspaceError(f"path {rel!r} is absolute; use a path relative to the workspace")
        path = (self.root / rel).resolve()
        if path != self.root and not path.is_relative_to(self.root):
            raise WorkspaceError(f"path {rel!r} leaves the workspace")
        return path

    def write(self, rel: str, content: str) -> Path:
        path = self.resolve(rel)
        if path == self.root or path.is_dir():
            raise WorkspaceError(f"path {rel!r} is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        return path

    def read(self, rel: str) -> str:
        path = self.resolve(rel)
        if not path.is_file():
            raise WorkspaceError(f"no file {rel!r} in the workspace")
        return path.read_text(encoding="utf-8", errors="replace")

    def exists(self, rel: str) -> bool:
        try:
            return self.resolve(rel).is_file()
        except WorkspaceError:
            return False

    def files(self, under: str = "") -> list[str]:
        """Relative paths of regular files, sorted, hidden entries and __pycache__ skipped."""
        base = self.resolve(under) if under else self.root
        if not base.is_dir():
            return []
        out = []
        for path in base.rglob("*"):
            rel = path.relative_to(self.root)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            if path.is_file() and not path.is_symlink():
                out.append(rel.as_posix())
        return sorted(out)

    def snapshot(self, under: str = "") -> dict[str, str]:
        """{relative path: text} of the files under `under` (each at most MAX_FILE_BYTES)."""
        return {rel: self.read(rel) for rel in self.files(under)
                if self.resolve(rel).stat().st_size <= MAX_FILE_BYTES}


def file_tree(paths: list[str]) -> str:
    """The tree of the module docstring for a list of relative file paths."""
    lines, seen = [], set()
    for path in sorted(paths):
        parts = path.split("/")
        for depth in range(len(parts) - 1):
            directory = "/".join(parts[:depth + 1])
            if directory not in seen:
                seen.add(directory)
                lines.append("  " * depth + parts[depth] + "/")
        lines.append("  " * (len(parts) - 1) + parts[-1])
    return "\n".join(lines)


def in_file_set(rel: str, file_set: str = "code") -> bool:
    """Whether the file `rel` belongs to the named file set of the module docstring."""
    if file_set not in FILE_SETS:
        raise UserInputError(f"file set {file_set!r} is not one of {sorted(FILE_SETS)}")
    name = rel.rsplit("/", 1)[-1]
    stem, dot, _ = name.rpartition(".")
    if file_set == "all" and dot and stem.lower() == "readme":
        return True
    return name.endswith(FILE_SETS[file_set])


def repo_files(repo_dir: str | Path, file_set: str = "code") -> dict[str, str]:
    """The files of a repository that reach a judge (see the module docstring), by relative path."""
    repo = Path(repo_dir)
    if not repo.is_dir():
        raise FileNotFoundError(f"repository {repo}: no such directory")
    snapshot = Workspace(repo).snapshot()
    return {rel: text for rel, text in snapshot.items() if in_file_set(rel, file_set)}
