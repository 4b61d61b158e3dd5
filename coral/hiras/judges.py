"""Judges of a generated repository: PaperCoder reference-free and reference-based, and P2C-Ex.

A judge samples `n` critiques from any coral policy, each a JSON object with a `critique_list` and an
integer `score` in 1-5. A sample that does not parse, lacks `score`, or scores outside 1-5 (or a
non-integer) is dropped; the result is the mean of the valid scores with their count (None when
none is valid), as in PaperCoder's `eval.py`. Files that reach the judge: see
`coral.hiras.workspace` (.py .yaml .yml .md .sh .bash, sorted by path). Reference-based adds the
gold repository's files the same way.

P2C-Ex adds the file count, the file tree (format in `coral.hiras.workspace`) and a
code-verification step. The step is also run here before any model call: a repository with no
Python or shell file that holds code beyond imports and docstrings (empty, config-only, README-only)
scores 1 with no sample drawn, so such a repository cannot score well whatever the judge says; each
Python file's syntax check goes into the prompt.

This module does NOT run the repository (that is the execution agent's job) and does NOT cache
judgements.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coral.config import UserInputError
from coral.hiras.paper import Paper
from coral.hiras.parsing import first_json_object, loads_lenient, strip_think
from coral.hiras.workspace import file_tree, repo_files
from coral.policy.base import GenerationRequest, Policy, SamplingParams, user
from coral.seeding import sampling_seed

PROTOCOLS = ("ref-free", "ref-based", "p2c-ex")

_CRITERIA = """Rate the code repository on one metric and list critiques.

Correctness (1-5): how accurately the repository implements the paper's method, algorithms and
experiments, without logical errors.
1 = the core method is missing or fundamentally wrong; 2 = attempted with major mistakes or missing
components; 3 = core parts right with notable errors; 4 = correct with minor inaccuracies;
5 = complete and accurate.

Steps:
1. Identify the key aspects of the paper (method, data, protocol, reported numbers).
2. Examine how the repository implements each of them.
3. Note logical errors, missing steps and deviations from the paper.
{extra_steps}
Answer with one JSON object and nothing else:
{{"critique_list": [{{"file_name": "...", "func_name": "...", "severity_level": "high|medium|low",
"critique": "..."}}], "score": <integer 1-5>}}
"""

_REF_BASED = """4. Compare with the gold repository below, written by the authors: it is correct by definition;
judge whether the target repository implements the same components, not the same file layout.
"""

_P2C_EX = """4. Code verification: check that every key component of the paper is implemented as executable
code. A component described only in a README, a config file or a comment counts as missing and is
a high-severity critique. Use the file count, the file tree and the automatic checks below.
5. Weigh completeness: an empty repository or one with only configuration scores 1.
"""


@dataclass
class JudgeResult:
    protocol: str
    score: float | None  # mean of valid scores; None when no sample was valid
    valid_n: int
    n: int
    scores: list[int] = field(default_factory=list)
    critiques: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # why each invalid sample was dropped
    files: list[str] = field(default_factory=list)  # target files the judge saw
    verification: str = ""  # P2C-Ex: the automatic check's finding
    usage: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def parse_judgement(text: str) -> tuple[int, str] | str:
    """(score, critique JSON text) of one sample, or the reason it is invalid."""
    body = strip_think(text)
    value = loads_lenient(body)
    if not isinstance(value, dict):
        value = first_json_object(body)
    if value is None:
        return "no JSON object"
    if "score" not in value:
        return "no 'score' field"
    score = value["score"]
    if isinstance(score, str) and score.strip().isdigit():
        score = int(score.strip())
    if isinstance(score, float) and score.is_integer():
        score = int(score)
    if isinstance(score, bool) or not isinstance(score, int):
        return f"score {score!r} is not an integer"
    if not 1 <= score <= 5:
        return f"score {score} is outside 1-5"
    critiques = value.get("critique_list", "")
    return score, critiques if isinstance(critiques, str) else json.dumps(critiques)


def aggregate(samples: list[str], protocol: str, files: list[str]) -> JudgeResult:
    """Parse every sample; mean and count of the valid scores."""
    result = JudgeResult(protocol=protocol, score=None, valid_n=0, n=len(samples), files=files)
    for text in samples:
        parsed = parse_judgement(text)
        if isinstance(parsed, str):
            result.dropped.append(parsed)
            continue
        result.scores.append(parsed[0])
        result.critiques.append(parsed[1])
    result.valid_n = len(result.scores)
    if result.scores:
        result.score = sum(result.scores) / len(result.scores)
    return result


def code_verification(files: dict[str, str]) -> tuple[bool, str]:
    """(has code, one line per code file): whether any .py/.sh file holds more than imports and
    docstrings, and each Python file's syntax check."""
    lines, has_code = [], False
    for rel, text in files.items():
        if rel.endswith((".sh", ".bash")):
            body = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
            has_code |= bool(body)
            lines.append(f"{rel}: shell script, {len(body)} command lines")
        elif rel.endswith(".py"):
            try:
                tree = ast.parse(text)
            except SyntaxError as exc:
                lines.append(f"{rel}: SYNTAX ERROR line {exc.lineno}: {exc.msg}")
                continue
            statements = [node for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass))
                          and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
            has_code |= bool(statements)
            lines.append(f"{rel}: parses, {len(statements)} top-level statements beyond imports and docstrings")
    return has_code, "\n".join(lines) or "no Python or shell files"


def _code_section(files: dict[str, str]) -> str:
    return "".join(f"```\n## File name: {rel}\n{text}\n```\n\n" for rel, text in files.items())


def build_prompt(protocol: str, paper: Paper, files: dict[str, str], gold: dict[str, str] | None = None,
                 verification: str = "") -> str:
    """The judge prompt: criteria, the paper, the target repository (and gold or P2C-Ex extras)."""
    if protocol not in PROTOCOLS:
        raise UserInputError(f"judge protocol {protocol!r} is not one of {PROTOCOLS}")
    extra = {"ref-free": "", "ref-based": _REF_BASED, "p2c-ex": _P2C_EX}[protocol]
    parts = [_CRITERIA.format(extra_steps=extra), f"\nResearch paper:\n{paper.text}\n"]
    if protocol == "ref-based":
        if not gold:
            raise UserInputError("judge protocol 'ref-based' needs a gold repository with files (--gold DIR)")
        parts.append(f"\nGold repository:\n{_code_section(gold)}")
    parts.append("\nTarget repository:\n")
    if protocol == "p2c-ex":
        parts.append(f"File count: {len(files)}\nFile structure:\n{file_tree(list(files))}\n"
                     f"Automatic code verification:\n{verification}\n\n")
    parts.append(_code_section(files))
    return "".join(parts)


def judge_repo(repo_dir: str | Path, paper: Paper, policy: Policy, protocol: str, gold_dir: str | Path | None = None,
               n: int = 8, max_new_tokens: int = 1024, temperature: float = 1.0, seed: int = 0) -> JudgeResult:
    """Judge `repo_dir` against `paper` with `n` samples from `policy` (see the module docstring)."""
    if n < 1:
        raise UserInputError(f"judge n must be >= 1, got {n}")
    files = repo_files(repo_dir)
    gold = repo_files(gold_dir) if gold_dir is not None else None
    verification = ""
    if protocol == "p2c-ex":
        has_code, verification = code_verification(files)
        if not has_code:
            return JudgeResult(protocol, 1.0, 0, 0, files=list(files),
                               verification="no executable code: scored 1 without sampling\n" + verification)
    prompt = build_prompt(protocol, paper, files, gold, verification)
    # sample i's stream: the base seed, the protocol, the prompt's content and i (a repo judged again gets the
    # same samples; two repos or protocols never share a stream)
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    requests = [GenerationRequest(user(prompt), SamplingParams(
        max_new_tokens=max_new_tokens, temperature=temperature,
        seed=sampling_seed(seed, 0, f"judge/{protocol}", f"{digest}/{i}"))) for i in range(n)]
    completions = policy.generate(requests)
    result = aggregate([c.text for c in completions], protocol, list(files))
    result.verification = verification
    result.usage = {key: sum(c.usage.get(key, 0) for c in completions) for key in ("prompt_tokens", "completion_tokens")}
    return result
