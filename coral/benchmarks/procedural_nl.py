"""The procedural family written for an instruct model: the same tasks (composition, tests, reference,
splits) with a prompt in the form real models were taught on.

A procedural task's own prompt is the tiny models' ("Given a list of integers xs, keep the even numbers,
then return the sum.\\ndef f(xs: list[int]) -> int:"); a pretrained model reads it, but often renames the
function (the tests call `f`). The styles here rewrite only `Task.prompt`:

    "docstring"  the signature, then a docstring holding the description and one worked example from the
                 public tests, as HumanEval states its problems:
                     def f(xs: list[int]) -> int:
                         \"\"\"Given a list of integers xs, keep the even numbers, then return the sum.

                         >>> f([1, 2, 4])
                         6
                         \"\"\"
    "doc-noex"   the same docstring without the example
    "instruction" one sentence that names the function and its signature, the description, the example

Which style (and which depths) a study uses is chosen on the validation split (experiments/smollm2_tasks.py).
The example is a public test, which an agent may see anyway; private tests stay hidden. This module does
NOT generate compositions or tests (procedural.py) and does NOT change the family's generator.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import replace

from coral.trajectory import Task, TestCase

NL_STYLES = ("docstring", "doc-noex", "instruction")


def first_example(task: Task) -> tuple[str, str] | None:
    """(call argument, expected value) of a public test `assert candidate(ARG) == VALUE`, as Python source:
    the first whose value is not empty or zero (an example returning '' shows little), else the first; None
    when the task has no such test."""
    found = [ex for ex in map(_example, task.public_tests) if ex]
    telling = [ex for ex in found if ex[1] not in ("''", "[]", "0", "False")]
    return (telling or found or [None])[0]


def _example(case: TestCase) -> tuple[str, str] | None:
    """(argument, value) of `assert candidate(ARG) == VALUE`, or None for any other test."""
    try:
        node = ast.parse(case.code).body[0]
    except (SyntaxError, IndexError):
        return None
    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Call) and len(node.test.left.args) == 1
            and len(node.test.comparators) == 1 and isinstance(node.test.ops[0], ast.Eq)):
        return None
    return ast.unparse(node.test.left.args[0]), ast.unparse(node.test.comparators[0])


def nl_prompt(task: Task, style: str = "docstring") -> str:
    """The prompt of a procedural `task` in `style` (see the module docstring)."""
    if style not in NL_STYLES:
        raise ValueError(f"procedural-nl style must be one of {NL_STYLES}, got {style!r}")
    if "description" not in task.metadata or "signature" not in task.metadata:
        raise ValueError(f"task {task.id!r} is not procedural (no metadata 'description' and 'signature')")
    desc, sig, name = task.metadata["description"], task.metadata["signature"], task.entry_point
    example = first_example(task) if style != "doc-noex" else None
    if style == "instruction":
        text = f"Write a Python function `{sig.removeprefix('def ').removesuffix(':')}`. {desc}"
        if example:
            text += f"\nFor example, {name}({example[0]}) returns {example[1]}."
        return text + "\n"
    doc = [desc]
    if example:
        doc += ["", f">>> {name}({example[0]})", example[1]]
    body = "\n".join(f"    {line}" if line else "" for line in doc)
    return f'{sig}\n    """{body.lstrip()}\n    """\n'


def nl_tasks(tasks: Sequence[Task], style: str = "docstring") -> list[Task]:
    """`tasks` with their prompts in `style`; ids, tests, reference and metadata unchanged (the style is
    recorded in metadata "prompt_style")."""
    return [replace(t, prompt=nl_prompt(t, style), metadata={**t.metadata, "prompt_style": style}) for t in tasks]
