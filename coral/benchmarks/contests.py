"""Competitive-programming sets from local files: APPS and CodeContests, as Tasks.

APPS records: problem_id, question, solutions (JSON string), input_output (JSON string {inputs,
outputs, fn_name?}), difficulty, url, starter_code. Without fn_name the tests are stdio; with it they
call the function (or `Solution().<fn_name>` when the starter code has a class) and compare as APPS
does: tuples count as lists, an expected `[x]` also accepts `x`, a list of tuples counts as a list of
lists, and a first argument (or expected value) that is a JSON object gets its keys back as ints. APPS
has no public/private split: public = the first test, private = all tests. A record without tests is
rejected. As APPS's testing_util: its import header goes before every program (program_prefix), and
stdio outputs compare by its cascade of rules (output_match "apps"). Differences, named: APPS wraps a
stdio program into a function, so an `if __name__ == "__main__":` block never runs there and does here;
APPS chooses `Solution()` from the answer's text, coral from the starter code.

CodeContests records: name, description, public_tests / private_tests / generated_tests ({input: [...],
output: [...]}), solutions ({language: [...], solution: [...]}), difficulty, time_limit, memory_limit_bytes,
... Public = public_tests; private = public + private + generated tests. The reference is the first
Python 3 solution, if any. As its tester: the program runs as it is, outputs compare by whitespace
tokens with number tolerance (output_match "codecontests").

This module does NOT execute anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coral.benchmarks.outputs import APPS_HEADER
from coral.benchmarks.records import RecordError, json_field, require, where
from coral.trajectory import Task, TestCase

STDIO_INSTRUCTION = "Read the input from stdin and write the answer to stdout."
APPS_MATCH = '''def _apps_match(got, expected):
    if isinstance(got, tuple):
        got = list(got)
    if got == expected:
        return True
    if isinstance(expected, list) and len(expected) > 0 and got == expected[0]:
        return True
    return (isinstance(got, list) and len(got) > 0 and isinstance(got[0], tuple) and isinstance(expected, list)
            and len(expected) > 0 and [list(x) for x in got] == expected[0])'''
PYTHON3 = (3, "PYTHON3", "python3")


def _text(value: Any) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def _apps_tests(io: Mapping[str, Any], starter: str, at: str) -> tuple[list[TestCase], str]:
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise RecordError(f"{at}: input_output needs lists 'inputs' and 'outputs' of equal length")
    if not inputs:
        raise RecordError(f"{at}: input_output has no tests")
    fn = io.get("fn_name")
    if not fn:
        return [TestCase(kind="stdio", stdin=_text(i), expected_stdout=_text(o)) for i, o in zip(inputs, outputs, strict=True)], ""
    call = f"candidate().{fn}" if "class Solution" in starter else "candidate"
    cases = []
    for args, expected in zip(inputs, outputs, strict=True):
        if not isinstance(args, list):
            raise RecordError(f"{at}: call-based input must be a list of arguments, got {args!r:.60}")
        args, expected = _int_keys_first(args), _int_keys_first(_int_keys(expected))
        cases.append(TestCase(kind="assert", code=f"assert _apps_match({call}(*{args!r}), {expected!r})"))
    return cases, "Solution" if "class Solution" in starter else str(fn)


def _int_keys(value: Any) -> Any:
    """A JSON object's keys as ints, as APPS turns them back (JSON keeps only string keys); unchanged when
    a key is not an int."""
    if not isinstance(value, dict):
        return value
    try:
        return [{int(k): v for k, v in value.items()}]  # APPS wraps the converted object in a list
    except ValueError:
        return value


def _int_keys_first(values: Any) -> Any:
    """`values` with its first item's keys as ints when it is a JSON object (APPS does it to arguments)."""
    if isinstance(values, list) and values and isinstance(values[0], dict):
        converted = _int_keys(values[0])
        return converted if converted is not values[0] else values
    return values


def task_from_apps(rec: Mapping[str, Any], at: str) -> Task:
    require(rec, ("problem_id", "question", "input_output"), at)
    io = json_field(rec, "input_output", at)
    if not isinstance(io, Mapping):
        raise RecordError(f"{at}: input_output must be a JSON object, got {type(io).__name__}")
    starter = str(rec.get("starter_code") or "")
    tests, entry = _apps_tests(io, starter, at)
    solutions = json_field(rec, "solutions", at) if rec.get("solutions") else None
    prompt = str(rec["question"]).strip() + "\n\n" + (starter.rstrip() + "\n" if entry else STDIO_INSTRUCTION + "\n")
    return Task(
        id=f"apps/{rec['problem_id']}",
        prompt=prompt,
        entry_point=entry,
        public_tests=tuple(tests[:1]),
        private_tests=tuple(tests),
        reference=solutions[0] if isinstance(solutions, list) and solutions else None,
        test_setup=APPS_MATCH if entry else "",
        metadata={"source": "apps", "difficulty": str(rec.get("difficulty", "unrated")), "url": rec.get("url")},
        program_prefix=APPS_HEADER,
        output_match="apps",
    )


def _io_tests(rec: Mapping[str, Any], key: str, at: str) -> list[TestCase]:
    block = rec.get(key) or {"input": [], "output": []}
    if not isinstance(block, Mapping) or len(block.get("input", [])) != len(block.get("output", [])):
        raise RecordError(f"{at}: field {key!r} must be {{input: [...], output: [...]}} of equal length")
    return [TestCase(kind="stdio", stdin=i, expected_stdout=o) for i, o in zip(block["input"], block["output"], strict=True)]


def _python3_solution(rec: Mapping[str, Any]) -> str | None:
    sols = rec.get("solutions") or {}
    for lang, code in zip(sols.get("language", []), sols.get("solution", []), strict=False):
        if lang in PYTHON3:
            return code
    return None


def task_from_codecontests(rec: Mapping[str, Any], at: str) -> Task:
    require(rec, ("name", "description", "public_tests"), at)
    public = _io_tests(rec, "public_tests", at)
    private = public + _io_tests(rec, "private_tests", at) + _io_tests(rec, "generated_tests", at)
    if not private:
        raise RecordError(f"{at}: has no tests")
    limit = rec.get("time_limit") or {}
    memory = rec.get("memory_limit_bytes")
    return Task(
        id=f"codecontests/{rec['name']}",
        prompt=str(rec["description"]).strip() + "\n\n" + STDIO_INSTRUCTION + "\n",
        entry_point="",
        public_tests=tuple(public),
        private_tests=tuple(private),
        reference=_python3_solution(rec),
        metadata={
            "source": "codecontests",
            "difficulty": str(rec.get("difficulty", "unrated")),
            "cf_rating": rec.get("cf_rating"),
            "time_limit_s": (limit.get("seconds") or 0) + (limit.get("nanos") or 0) / 1e9 if limit else None,
            "memory_limit_mb": memory / 2**20 if memory else None,
        },
        output_match="codecontests",
    )


def parse_apps(records: list[dict[str, Any]], source: str) -> list[Task]:
    return [task_from_apps(r, where(source, i, r)) for i, r in enumerate(records)]


def parse_codecontests(records: list[dict[str, Any]], source: str) -> list[Task]:
    return [task_from_codecontests(r, where(source, i, r)) for i, r in enumerate(records)]
