"""The type checker's reach, read from the code: the strict core named in pyproject.toml exists (a renamed
module would silently fall out of the strict set: mypy only notes an unused section), and a parameter that
takes a sandbox or a policy names its protocol or class, never Any."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORAL = ROOT / "coral"
SANDBOX_OR_POLICY = re.compile(r"^(sandbox|policy|policies|\w+_policy|\w+_policies|\w+_sandbox)$")


def _strict_modules() -> list[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if o.get("disallow_untyped_defs")]
    assert len(strict) == 1, "one override holds the strict core"
    return strict[0]["module"]


def _exists(module: str) -> bool:
    path = ROOT / Path(*module.removesuffix(".*").split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_module_of_the_strict_core_exists():
    missing = [m for m in _strict_modules() if not _exists(m)]
    assert missing == []


def test_the_strict_core_holds_the_records_the_plug_points_and_the_pure_training_math():
    assert {"coral.trajectory", "coral.policy.base", "coral.sandbox.protocol", "coral.train.advantages",
            "coral.train.losses", "coral.train.rewards", "coral.workflows.*"} <= set(_strict_modules())


def sandbox_or_policy_parameters_typed_any() -> list[str]:
    """`file:line name: annotation` of every function parameter, and every class-level field, named like a
    sandbox or a policy whose annotation mentions Any."""
    out = []
    for path in sorted(CORAL.rglob("*.py")):
        if "fixtures" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        named: list[tuple[str, ast.expr | None]] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                named += [(x.arg, x.annotation) for x in a.posonlyargs + a.args + a.kwonlyargs]
            elif isinstance(node, ast.ClassDef):
                named += [(s.target.id, s.annotation) for s in node.body
                          if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        for name, annotation in named:
            if annotation is not None and SANDBOX_OR_POLICY.match(name) and re.search(r"\bAny\b", ast.unparse(annotation)):
                out.append(f"{path.relative_to(ROOT)}:{annotation.lineno} {name}: {ast.unparse(annotation)}")
    return out


def test_no_sandbox_or_policy_parameter_is_typed_any():
    assert sandbox_or_policy_parameters_typed_any() == []
