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
    "steps"      the function and its signature, then the composition as numbered steps in plainer words
                 (PLAIN: "cap each at 5" becomes "replace each number greater than 5 with 5"), then every
                 public test as an example (`f([8, 7]) == [5, 5]`)
    "steps-shot" "steps" after one solved problem of the train split (SHOT), the same for every task
    "plain"      "instruction" with the description in PLAIN's words
    "plain-shot" "plain" after one solved problem of the train split stated the same way (PLAIN_SHOT)
    "sibling-shot" "plain" after one solved sibling of the task: the same skeleton with other parameters
                 ("cap each at 3" for "cap each at 5"), stated the same way, with its gold code; a task
                 whose primitives have no parameter has no sibling and gets PLAIN_SHOT (recorded in
                 metadata "shot": "sibling" or "fixed"). The sibling shows how the skeleton is written, so
                 the task asks the model to carry a worked analogue over to new parameters

Which style (and which depths) a study uses is chosen on the validation split (experiments/smollm2_tasks.py).
The example is a public test, which an agent may see anyway; private tests stay hidden. This module does
NOT generate compositions or tests (procedural.py) and does NOT change the family's generator.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Sequence
from dataclasses import replace

from coral.benchmarks.primitives import PRIMITIVES, STEPS, TERMINALS, kinds
from coral.benchmarks.procedural import gold_code, parse_composition
from coral.trajectory import Task, TestCase

NL_STYLES = ("docstring", "doc-noex", "instruction", "steps", "steps-shot", "plain", "plain-shot", "sibling-shot")

# plainer words for the primitives whose phrase a small model misreads (keyed by kind; {k} is the parameter).
# Measured: SmolLM2 reads "cap each at 5" as "add 5" and "keep the multiples of 3" as "cube"
PLAIN = {
    "cap": "replace each number greater than {k} with {k}",
    "keep_mult": "keep only the numbers divisible by {k}",
    "keep_gt": "keep only the numbers greater than {k}",
    "keep_lt": "keep only the numbers less than {k}",
    "drop_eq": "remove every number equal to {k}",
    "mod": "replace each number by its remainder after division by {k}",
    "floordiv": "replace each number by its integer division by {k} (rounding down)",
    "take": "keep only the first {k} numbers",
    "prefix_sums": "replace each number by the running total up to and including it",
    "take_s": "keep only the first {k} characters",
    "last_s": "keep only the last {k} characters",
}
# one solved problem of the train split (list, keep_odd, count): its gold code, shown with the problem before the
# task in styles steps-shot (SHOT) and plain-shot (PLAIN_SHOT, also sibling-shot's shot for a task without a sibling)
SHOT_CODE = "def f(xs: list[int]) -> int:\n    xs = [x for x in xs if x % 2 == 1]\n    return len(xs)"
SHOT = ("Solved example:\n"
        "Write a Python function `f(xs: list[int]) -> int` that does the following to xs, in order:\n"
        "1. Keep only the odd numbers.\n2. Return how many numbers there are.\n"
        "Examples: f([1, 2, 3]) == 2, f([]) == 0\n"
        f"Solution:\n{SHOT_CODE}\n\n"
        "Now the problem to solve:\n")
PLAIN_SHOT = ("Solved example:\n"
              "Write a Python function `f(xs: list[int]) -> int`. Given a list of integers xs, keep the odd numbers, "
              "then return how many numbers there are.\nFor example, f([1, 2, 3]) returns 2.\n"
              f"Solution:\n{SHOT_CODE}\n\n"
              "Now the problem to solve:\n")


def first_example(task: Task) -> tuple[str, str] | None:
    """(call argument, expected value) of a public test `assert candidate(ARG) == VALUE`, as Python source:
    the first whose value is not empty or zero (an example returning '' shows little), else the first; None
    when the task has no such test."""
    found = [ex for ex in map(_example, task.public_tests) if ex]
    telling = [ex for ex in found if ex[1] not in ("''", "[]", "0", "False")]
    examples = telling or found
    return examples[0] if examples else None


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
    if style in ("steps", "steps-shot"):
        return (SHOT if style == "steps-shot" else "") + steps_prompt(task)
    if style in ("plain", "plain-shot", "sibling-shot"):
        desc = plain_description(task)
    example = first_example(task) if style != "doc-noex" else None
    if style in ("instruction", "plain", "plain-shot", "sibling-shot"):
        shot = {"plain-shot": PLAIN_SHOT, "sibling-shot": sibling_shot(task) or PLAIN_SHOT}.get(style, "")
        text = shot + f"Write a Python function `{sig.removeprefix('def ').removesuffix(':')}`. {desc}"
        if example:
            text += f"\nFor example, {name}({example[0]}) returns {example[1]}."
        return text + "\n"
    doc = [desc]
    if example:
        doc += ["", f">>> {name}({example[0]})", example[1]]
    body = "\n".join(f"    {line}" if line else "" for line in doc)
    return f'{sig}\n    """{body.lstrip()}\n    """\n'


# every primitive (steps and terminals) of each family by kind: a sibling swaps a primitive for another of its kind
_BY_KIND = {family: kinds(STEPS[family] + TERMINALS[family]) for family in STEPS}


def sibling(task: Task) -> list[str] | None:
    """The composition (primitive names) of the task's sibling: each primitive that has a parameter replaced by
    another of its kind (same family), chosen by a hash of the task id; None when no primitive has one."""
    family, names = task.metadata["family"], task.metadata["composition"]
    digest = hashlib.sha256(f"coral-sibling/{task.id}".encode()).digest()
    out, changed = [], False
    for i, name in enumerate(names):
        prim = PRIMITIVES[(family, name)]
        others = sorted(p.name for p in _BY_KIND[family][prim.kind] if p.name != name)
        if others:
            name, changed = others[digest[i % len(digest)] % len(others)], True
        out.append(name)
    return out if changed else None


def sibling_shot(task: Task) -> str | None:
    """Style sibling-shot's solved example (the sibling stated in PLAIN's words, then its gold code), or None."""
    names = sibling(task)
    if names is None:
        return None
    family = task.metadata["family"]
    sig = task.metadata["signature"].removeprefix("def ").removesuffix(":")
    code = gold_code(parse_composition(family, names))
    return (f"Solved example:\nWrite a Python function `{sig}`. {_plain_text(family, names)}\nSolution:\n{code}\n"
            "Now the problem to solve:\n")


def plain_phrase(family: str, name: str) -> str:
    """The phrase of primitive `name` in plainer words (PLAIN), or its own phrase."""
    prim = PRIMITIVES[(family, name)]
    if prim.kind not in PLAIN:
        return prim.phrase
    return PLAIN[prim.kind].format(k=name.removeprefix(prim.kind + "_"))


def plain_description(task: Task) -> str:
    """The task's description (procedural.describe) with every phrase in PLAIN's words where it has them."""
    return _plain_text(task.metadata["family"], task.metadata["composition"])


def _plain_text(family: str, names: Sequence[str]) -> str:
    head = "Given a list of integers xs" if family == "list" else "Given a string s"
    return head + ", " + ", then ".join(plain_phrase(family, n) for n in names) + "."


def steps_prompt(task: Task) -> str:
    """Style "steps": the signature, the composition as numbered steps, every public test as an example."""
    family, names = task.metadata["family"], task.metadata["composition"]
    sig = task.metadata["signature"].removeprefix("def ").removesuffix(":")
    var = sig[sig.index("(") + 1:sig.index(":")]
    steps = [plain_phrase(family, n) for n in names if not _bare_return(family, n)]
    if len(steps) < len(names):  # the bare return is spelt out as its own last step
        steps.append("return the result")
    lines = [f"Write a Python function `{sig}` that does the following to {var}, in order:"]
    lines += [f"{i}. {step[0].upper()}{step[1:]}." for i, step in enumerate(steps, start=1)]
    examples = [f"{task.entry_point}({arg}) == {value}" for arg, value in filter(None, map(_example, task.public_tests))]
    if examples:
        lines.append("Examples: " + ", ".join(examples))
    return "\n".join(lines) + "\n"


def _bare_return(family: str, name: str) -> bool:
    return PRIMITIVES[(family, name)].trivial


def nl_tasks(tasks: Sequence[Task], style: str = "docstring") -> list[Task]:
    """`tasks` with their prompts in `style`; ids, tests, reference and metadata unchanged (the style is
    recorded in metadata "prompt_style", and for sibling-shot whether the shot is the "sibling" or "fixed")."""
    out = []
    for t in tasks:
        meta = {**t.metadata, "prompt_style": style}
        if style == "sibling-shot":
            meta["shot"] = "sibling" if sibling(t) is not None else "fixed"
        out.append(replace(t, prompt=nl_prompt(t, style), metadata=meta))
    return out
