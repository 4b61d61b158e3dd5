"""LiveCodeBench code generation (release JSONL: question_title, question_content, platform,
question_id, contest_id, contest_date, starter_code, difficulty, public_test_cases, private_test_cases,
metadata) as Tasks.

Test cases are a JSON string of [{input, output, testtype}]. testtype "stdin" becomes a stdio test;
"functional" (LeetCode) becomes an assert calling `candidate().<func_name>(*args)` where candidate is the
`Solution` class of the starter code, args are the JSON lines of `input`, and `metadata` names func_name.
Public tests: `public_test_cases`. Private tests: public + private test cases.

As LiveCodeBench's runner (lcb_runner/evaluation/testing_util.py): its import header goes before every
program (program_prefix); a functional result that is a tuple counts as the list it holds, then must
equal the expected value; stdio outputs compare as its grade_stdio does (output_match "livecodebench").
Differences, named: the runner wraps a stdio program into a function and calls it with stdin patched,
coral runs it as the main script of a process (the same output, but for programs whose `global`
statements the wrapping breaks); the runner picks `Solution().<func_name>` when the answer's text holds
"class Solution", else a module-level function of that name, coral always the class (the prompt's
starter code).

The release compresses `private_test_cases` as base64(zlib(pickle(json string))). Unpickling is
dangerous (a pickle can run code), so it is done only when the caller says the file is a local file the
user gave (`allow_pickle=True`), and even then with an unpickler that refuses every global, which is
enough for the str payload and rejects anything that could call code. Hub records never take this path.

This module does NOT execute anything.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from collections.abc import Mapping
from typing import Any

from coral.benchmarks.outputs import LIVECODEBENCH_HEADER
from coral.benchmarks.records import RecordError, json_field, require, where
from coral.trajectory import Task, TestCase

FIELDS = ("question_title", "question_content", "question_id", "starter_code", "difficulty",
          "public_test_cases", "private_test_cases")
STDIO_INSTRUCTION = "Read the input from stdin and write the answer to stdout."


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name} from a test-case pickle")


def decode_private(value: Any, at: str, allow_pickle: bool) -> list[dict[str, Any]]:
    """The private test cases, plain JSON or base64+zlib+pickle compressed."""
    if not isinstance(value, str):
        return list(value or [])
    try:
        return json.loads(value) if value.strip() else []
    except json.JSONDecodeError:
        pass
    if not allow_pickle:
        raise RecordError(f"{at}: private_test_cases are pickle-compressed; download the file and pass its "
                          "local path to decode them (unpickling is refused for hub data)")
    try:
        raw = zlib.decompress(base64.b64decode(value))
        payload = _NoGlobalsUnpickler(io.BytesIO(raw)).load()
        return json.loads(payload) if isinstance(payload, (str, bytes)) else list(payload)
    except (ValueError, zlib.error, pickle.UnpicklingError, EOFError, TypeError) as e:
        raise RecordError(f"{at}: private_test_cases is neither JSON nor base64+zlib+pickle: {e}") from None


def _func_name(rec: Mapping[str, Any], at: str) -> str:
    meta = json_field(rec, "metadata", at) if "metadata" in rec else None
    if not isinstance(meta, Mapping) or not meta.get("func_name"):
        raise RecordError(f"{at}: functional tests need metadata.func_name, got metadata={rec.get('metadata')!r}")
    return str(meta["func_name"])


def _functional_case(case: Mapping[str, Any], func: str, at: str) -> TestCase:
    try:
        args = [json.loads(line) for line in str(case["input"]).splitlines() if line.strip()]
        expected = json.loads(case["output"])
    except (json.JSONDecodeError, KeyError) as e:
        raise RecordError(f"{at}: functional test case is not JSON lines + JSON output: {e}") from None
    return TestCase(kind="assert", code=f"assert _lcb_equal(candidate().{func}(*{args!r}), {expected!r})")


LCB_EQUAL = """def _lcb_equal(got, expected):
    return (list(got) if isinstance(got, tuple) else got) == expected"""


def _cases(raw: Any, rec: Mapping[str, Any], at: str) -> tuple[list[TestCase], str]:
    """Test cases and their common testtype."""
    if not isinstance(raw, list) or not all(isinstance(c, Mapping) for c in raw):
        raise RecordError(f"{at}: test cases must be a list of {{input, output, testtype}} objects")
    kinds = {c.get("testtype") for c in raw}
    if len(kinds) > 1 or not kinds <= {"stdin", "functional"}:
        raise RecordError(f"{at}: testtype must be all 'stdin' or all 'functional', got {sorted(map(str, kinds))}")
    kind = kinds.pop() if kinds else "stdin"
    if kind == "functional":
        func = _func_name(rec, at)
        return [_functional_case(c, func, at) for c in raw], kind
    return [TestCase(kind="stdio", stdin=str(c["input"]), expected_stdout=str(c["output"])) for c in raw], kind


def task_from_livecodebench(rec: Mapping[str, Any], at: str, allow_pickle: bool) -> Task:
    require(rec, FIELDS, at)
    public, kind = _cases(json_field(rec, "public_test_cases", at) or [], rec, at)
    private, private_kind = _cases(decode_private(rec["private_test_cases"], at, allow_pickle), rec, at)
    if public and private and kind != private_kind:
        raise RecordError(f"{at}: public tests are {kind!r} but private tests are {private_kind!r}")
    if not public and not private:
        raise RecordError(f"{at}: has no test cases")
    starter = str(rec["starter_code"] or "")
    functional = (public or private)[0].kind == "assert"
    prompt = f"{rec['question_title']}\n\n{str(rec['question_content']).strip()}\n\n"
    prompt += f"{starter.rstrip()}\n" if functional else STDIO_INSTRUCTION + "\n"
    return Task(
        id=str(rec["question_id"]),
        prompt=prompt,
        entry_point="Solution" if functional else "",
        public_tests=tuple(public),
        private_tests=tuple(public + private),
        test_setup=LCB_EQUAL if functional else "",
        program_prefix=LIVECODEBENCH_HEADER,
        output_match="livecodebench",
        metadata={"source": "livecodebench", "difficulty": str(rec["difficulty"]),
                  "platform": rec.get("platform"), "contest_id": rec.get("contest_id"),
                  "contest_date": str(rec.get("contest_date"))},
    )


def parse_livecodebench(records: list[dict[str, Any]], source: str, allow_pickle: bool = False) -> list[Task]:
    return [task_from_livecodebench(r, where(source, i, r), allow_pickle) for i, r in enumerate(records)]
