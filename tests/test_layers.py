"""The house's shape, read from the code: every import of coral's own modules points down a layer (or stays
in its package), a system never imports another system, and an import inside a function says why it is
there (`# lazy: ...`: it keeps a heavy package out of import time)."""

import ast
from pathlib import Path

CORAL = Path(__file__).resolve().parents[1] / "coral"

# a package may import packages of lower layers only (and itself); the systems share layer 5
LAYERS = {
    "trajectory": 0, "seeding": 0, "config": 0, "terminal": 0, "jsonl": 0,
    "flags": 1,
    "policy": 1, "sandbox": 1, "benchmarks": 1,
    "agents": 2, "procmem": 2, "scale": 2,
    "workflows": 3, "samples": 3,
    "evaluation": 4, "train": 4, "report": 4,
    "corecode": 5, "mars2": 5, "recursivemas": 5, "hiras": 5,
    "cli": 6,
}
SYSTEMS = {"corecode", "mars2", "recursivemas", "hiras"}


def _modules() -> list[Path]:
    return [p for p in sorted(CORAL.rglob("*.py")) if "fixtures" not in p.parts]


def _package(path: Path) -> str:
    rel = path.relative_to(CORAL).with_suffix("").parts
    return rel[0]


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def coral_imports() -> list[tuple[str, str, str]]:
    """(importing file, its package, imported package) for every import of a coral module."""
    out = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            for name in _imported(node):
                parts = name.split(".")
                if parts[0] == "coral" and len(parts) > 1:
                    out.append((str(path.relative_to(CORAL.parent)), _package(path), parts[1]))
    return out


def test_every_package_of_coral_has_a_layer():
    assert {_package(p) for p in _modules()} - {"__init__"} <= set(LAYERS)


def test_imports_of_coral_modules_point_down_or_stay_in_their_package():
    upward = [f"{f}: {pkg} (layer {LAYERS[pkg]}) imports {dep} (layer {LAYERS[dep]})"
              for f, pkg, dep in coral_imports() if dep != pkg and LAYERS[dep] >= LAYERS[pkg]]
    assert upward == []


def test_no_system_imports_another_system():
    crossing = [f"{f}: {pkg} imports {dep}" for f, pkg, dep in coral_imports()
                if pkg in SYSTEMS and dep in SYSTEMS and dep != pkg]
    assert crossing == []


def _says_why(lines: list[str], body: list[ast.stmt], index: int) -> bool:
    """A '# lazy' comment on the import's own lines, or among the comment lines of the run of imports it
    belongs to (imports with only blank or comment lines between them) and just above that run."""
    imports = (ast.Import, ast.ImportFrom)
    first = index
    while first > 0 and isinstance(body[first - 1], imports) and all(
            not g.strip() or g.strip().startswith("#") for g in lines[body[first - 1].end_lineno:body[first].lineno - 1]):
        first -= 1
    start = body[first].lineno - 1
    while start > 0 and lines[start - 1].strip().startswith("#"):
        start -= 1
    return any("# lazy" in line for line in lines[start:body[index].end_lineno])


def function_level_imports_without_a_reason() -> list[str]:
    out = []
    for path in _modules():
        text = path.read_text()
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for block in ast.walk(fn):
                body = getattr(block, "body", None)
                if not isinstance(body, list):
                    continue
                for k, stmt in enumerate(body):
                    if isinstance(stmt, (ast.Import, ast.ImportFrom)) and not _says_why(lines, body, k):
                        out.append(f"{path.relative_to(CORAL.parent)}:{stmt.lineno}")
    return sorted(set(out))


def test_an_import_inside_a_function_says_which_cost_it_saves():
    assert function_level_imports_without_a_reason() == []
