"""MBPP (sanitized JSON, or the original JSONL) and MBPP+ (evalplus release JSONL) as Tasks.

MBPP asserts call the function by its own name (`assert similar_elements(...) == ...`); they are
rewritten to call `candidate`. The prompt is the problem text, one example assert (as MBPP prompts
usually show) and the signature of the reference solution.

Public tests: the first assert of `test_list` (the one shown in the prompt). Private tests: MBPP, all
asserts of `test_list`; MBPP+, every base and plus input of the evalplus `test` field (split as in
humaneval.py).

What the program under test sees. MBPP: the answer and the release's `test_imports` / `test_setup_code`
in one namespace, as the release's tests are one program (answer, setup, asserts: sanitized MBPP's
`assert math.isclose(...)` needs its `import math` there); coral runs the setup before the answer
(test_setup repeats it for the judge). bigcode-evaluation-harness runs answer + asserts without the
setup, so there an answer that does not import what an assert uses fails. MBPP+: the answer alone, as
EvalPlus runs it (exec of the answer, then calls of the entry point).
Base models (prompt style "completion") continue `completion_prompt`, the problem text and its first
assert in a docstring (bigcode-evaluation-harness's MBPP prompt; EvalPlus's MBPP+ `prompt` field is the
same form), sent stripped of surrounding whitespace like HumanEval's, and stop at COMPLETION_STOP (that
harness's MBPP stop sequences); the program is then the docstring + completion.

This module does NOT execute anything.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Mapping
from typing import Any

from coral.benchmarks.humaneval import rename, split_check
from coral.benchmarks.records import RecordError, require, where
from coral.trajectory import Task, TestCase

# bigcode-evaluation-harness's MBPP stop sequences (less InCoder's "\n<|/")
COMPLETION_STOP = ("\nclass", "\nassert", '\n"""', "\nprint", "\nif", "\n```")


def _defined_functions(code: str, at: str) -> list[ast.FunctionDef]:
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise RecordError(f"{at}: field 'code' is not valid Python: {e.msg} (line {e.lineno})") from None
    return [s for s in tree.body if isinstance(s, ast.FunctionDef)]


def _called_names(test: str, at: str) -> list[str]:
    try:
        tree = ast.parse(test)
    except SyntaxError as e:
        raise RecordError(f"{at}: test {test[:60]!r} is not valid Python: {e.msg}") from None
    return [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def entry_point_of(code: str, tests: list[str], at: str) -> str:
    """The function of `code` that the tests call."""
    defined = {f.name for f in _defined_functions(code, at)}
    for test in tests:
        for name in _called_names(test, at):
            if name in defined:
                return name
    raise RecordError(f"{at}: no function defined in 'code' ({sorted(defined)}) is called by the tests")


def signature_of(code: str, entry_point: str, at: str) -> str:
    for f in _defined_functions(code, at):
        if f.name == entry_point:
            stub = copy.copy(f)
            stub.body, stub.decorator_list = [ast.Pass()], []
            return ast.unparse(stub).rsplit("\n", 1)[0]
    raise RecordError(f"{at}: 'code' does not define {entry_point!r}")


def to_candidate(test: str, entry_point: str) -> str:
    return ast.unparse(rename(ast.parse(test), entry_point))


def _text_and_tests(rec: Mapping[str, Any], at: str) -> tuple[str, list[str], str]:
    """(problem text, asserts, setup) of a sanitized ("prompt", "test_imports") or original ("text",
    "test_setup_code") record."""
    text_key = "prompt" if "prompt" in rec else "text"
    require(rec, ("task_id", text_key, "code", "test_list"), at)
    tests = rec["test_list"]
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise RecordError(f"{at}: field 'test_list' must be a non-empty list of assert strings")
    setup = "\n".join(rec.get("test_imports") or []) + "\n" + (rec.get("test_setup_code") or "")
    return str(rec[text_key]).strip(), tests, setup.strip()


def task_from_mbpp(rec: Mapping[str, Any], at: str) -> Task:
    text, tests, setup = _text_and_tests(rec, at)
    entry = entry_point_of(rec["code"], tests, at)
    cases = tuple(TestCase(kind="assert", code=to_candidate(t, entry)) for t in tests)
    return Task(
        id=f"Mbpp/{rec['task_id']}",
        prompt=f"{text}\nYour code should pass this test:\n{tests[0]}\n{signature_of(rec['code'], entry, at)}\n",
        entry_point=entry,
        public_tests=cases[:1],
        private_tests=cases,
        reference=rec["code"],
        test_setup=setup,
        metadata={"source": "mbpp", "difficulty": "unrated"},
        program_prefix=setup + "\n" if setup else "",
        completion_prompt=f'"""\n{text}\n{tests[0]}\n"""\n',
        completion_stop=COMPLETION_STOP,
    )


def task_from_mbpp_plus(rec: Mapping[str, Any], at: str) -> Task:
    require(rec, ("task_id", "prompt", "code", "test_list", "test"), at)
    _, tests, imports = _text_and_tests(rec, at)
    entry = rec.get("entry_point") or entry_point_of(rec["code"], tests, at)
    setup, private = split_check(rec["test"], at)
    text = str(rec["prompt"]).strip().strip('"').strip()
    return Task(
        id=str(rec["task_id"]),
        prompt=f"{text}\n{signature_of(rec['code'], entry, at)}\n",
        entry_point=entry,
        public_tests=(TestCase(kind="assert", code=to_candidate(tests[0], entry)),),
        private_tests=tuple(TestCase(kind="assert", code=c) for c in private),
        reference=rec["code"],
        test_setup="\n".join(s for s in (imports, setup) if s),
        metadata={"source": "mbpp+", "difficulty": "unrated", "atol": rec.get("atol", 0)},
        completion_prompt=str(rec["prompt"]) if str(rec["prompt"]).lstrip().startswith('"""')
        else f'"""\n{text}\n{tests[0]}\n"""\n',
        completion_stop=COMPLETION_STOP,
    )


def parse_mbpp(records: list[dict[str, Any]], source: str) -> list[Task]:
    return [task_from_mbpp(r, where(source, i, r)) for i, r in enumerate(records)]


def parse_mbpp_plus(records: list[dict[str, Any]], source: str) -> list[Task]:
    return [task_from_mbpp_plus(r, where(source, i, r)) for i, r in enumerate(records)]
