"""Simple first-order mutants of Python code: one small syntactic change per mutant.

Used to show that a task's tests are discriminating (the reference passes, a mutant fails) and by the
procedural generator to pick test inputs that kill mutants. Mutation operators: negate a comparison,
swap an arithmetic operator, add one to an integer constant, flip a boolean constant, swap max/min,
drop a unary minus.

This module does NOT run code and does NOT detect equivalent mutants (some mutants compute the same
function as the original, e.g. `x > -3` vs `x > -2` after `abs`); callers decide what to do with them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coral.trajectory import Task

_NEGATED_CMP: dict[type, type] = {
    ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Lt: ast.GtE, ast.GtE: ast.Lt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
}
_SWAPPED_BINOP: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv,
}
_SWAPPED_NAME = {"max": "min", "min": "max"}


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every (node, operator) where one mutation applies, in a deterministic walk order."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _NEGATED_CMP:
                    yield node, f"cmp{i}"
        elif isinstance(node, ast.BinOp) and type(node.op) in _SWAPPED_BINOP:
            yield node, "binop"
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            yield node, "int"
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield node, "bool"
        elif isinstance(node, ast.Name) and node.id in _SWAPPED_NAME and isinstance(node.ctx, ast.Load):
            yield node, "name"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not isinstance(
            node.operand, ast.Constant
        ):
            yield node, "neg"


def _apply(node: ast.AST, op: str) -> None:
    if op.startswith("cmp"):
        i = int(op[3:])
        node.ops[i] = _NEGATED_CMP[type(node.ops[i])]()  # type: ignore[attr-defined]
    elif op == "binop":
        node.op = _SWAPPED_BINOP[type(node.op)]()  # type: ignore[attr-defined]
    elif op == "int":
        node.value += 1  # type: ignore[attr-defined]
    elif op == "bool":
        node.value = not node.value  # type: ignore[attr-defined]
    elif op == "name":
        node.id = _SWAPPED_NAME[node.id]  # type: ignore[attr-defined]


class _DropNeg(ast.NodeTransformer):
    def __init__(self, target: ast.AST) -> None:
        self.target = target

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        return node.operand if node is self.target else self.generic_visit(node)


def mutate_source(source: str) -> list[str]:
    """All first-order mutants of `source` (a module or an expression), unparsed, distinct, in a
    deterministic order, never equal to the unparsed original. Raises SyntaxError if it does not parse."""
    mode = "eval" if _is_expression(source) else "exec"
    original = ast.unparse(ast.parse(source, mode=mode))
    count = sum(1 for _ in _sites(ast.parse(source, mode=mode)))
    out: dict[str, None] = {}
    for index in range(count):
        tree = ast.parse(source, mode=mode)  # a fresh tree per mutant: mutation is in place
        node, op = list(_sites(tree))[index]
        if op == "neg":
            tree = _DropNeg(node).visit(tree)
        else:
            _apply(node, op)
        mutated = ast.unparse(ast.fix_missing_locations(tree))
        if mutated != original:
            out[mutated] = None
    return list(out)


def _is_expression(source: str) -> bool:
    try:
        ast.parse(source, mode="eval")
    except SyntaxError:
        return False
    return True


def mutants(task: Task) -> list[str]:
    """First-order mutants of the task's reference solution. Raises ValueError if it has none."""
    if not task.reference:
        raise ValueError(f"task {task.id!r} has no reference solution to mutate")
    return mutate_source(task.reference)
