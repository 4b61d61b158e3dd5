"""Judges of a generated repository: PaperCoder reference-free and reference-based, and P2C-Ex.

The prompt is a template (coral.hiras.judge_prompts: the released file from a checkout, or coral's
variant) with its placeholders filled: the paper, the target repository's files, and the gold
repository's files (ref-based) or the file count and tree (P2C-Ex). It goes to the judge as one system
message, as in Paper2Code's eval.py; `n` samples at temperature 1, each from its own seed.

Answers are parsed as eval.py parses them, step for step: `json.loads` of the stripped answer, else of
the first "```json\\n...\\n```" block; then `int(answer["score"])` (so 3.7 counts as 3, "4" as 4 and
true as 1) and `answer["critique_list"]` (a non-string kept as its json.dumps text). Any exception drops
the sample, and so does a score outside 1-5. No think-tag removal, no lenient JSON repair. Result: the
mean of the valid scores and their count; where eval.py divides by zero when no sample is valid, the
score here is None.

Target files: `file_set` of coral.hiras.workspace, "code" by default (code and config, no planning
notes), the same for every pipeline. The gold repository is read with the "all" set, as eval.py reads it.

This module does NOT run the repository, does NOT cache judgements and adds no rule of its own: the
judge's answer is the score (an empty or config-only repository is judged like any other).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coral.config import UserInputError
from coral.hiras.judge_prompts import (
    PROTOCOLS,
    Checkouts,
    Template,
    code_value,
    fill,
    load_template,
)
from coral.hiras.paper import Paper, prompt_text
from coral.hiras.workspace import file_tree, repo_files
from coral.policy.base import GenerationRequest, Policy, SamplingParams
from coral.seeding import sampling_seed

__all__ = ["PROTOCOLS", "Checkouts", "JudgeResult", "aggregate", "build_prompt", "judge_repo", "parse_judgement"]
_JSON_FENCE = re.compile(r"```json\n(.*?)\n```", re.S)  # eval.py's extract_json_from_string


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
    prompt_source: str = ""  # "coral variant" or the released file's path
    prompt_sha256: str = ""
    usage: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _score_and_critiques(text: str) -> tuple[int, str]:
    answer = json.loads(text)
    score = int(answer["score"])
    critiques = answer["critique_list"]
    return score, critiques if isinstance(critiques, str) else json.dumps(critiques)


def parse_judgement(text: str) -> tuple[int, str] | str:
    """(score, critique text) of one sample, or the reason it is dropped (see the module docstring)."""
    output = text.strip()
    try:
        score, critiques = _score_and_critiques(output)
    except Exception:  # noqa: BLE001 - eval.py drops on any exception, and so must we
        fenced = _JSON_FENCE.search(output)
        try:
            score, critiques = _score_and_critiques(fenced.group(1) if fenced else "")
        except Exception as exc:  # noqa: BLE001
            return f"parsing error: {type(exc).__name__}: {exc}"
    if score < 1 or score > 5:
        return f"score {score} is outside 1-5"
    return score, critiques


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


def build_prompt(template: Template, paper: Paper, files: dict[str, str], gold: dict[str, str] | None = None) -> str:
    """The judge prompt: `template` with its placeholders filled (see coral.hiras.judge_prompts)."""
    values = {"{{Paper}}": prompt_text(paper), "{{Code}}": code_value(files)}
    if template.protocol == "ref-based":
        if not gold:
            raise UserInputError("judge protocol 'ref-based' needs a gold repository with files (--gold DIR)")
        values["{{GoldCode}}"] = code_value(gold)
    if template.protocol == "p2c-ex":
        values["{{File_Count}}"] = str(len(files))
        values["{{File_Structure}}"] = "\n" + file_tree(list(files))
    return fill(template, values)


def judge_repo(repo_dir: str | Path, paper: Paper, policy: Policy, protocol: str, gold_dir: str | Path | None = None,
               n: int = 8, max_new_tokens: int = 1024, temperature: float = 1.0, seed: int = 0,
               checkouts: Checkouts = Checkouts(), file_set: str = "code") -> JudgeResult:
    """Judge `repo_dir` against `paper` with `n` samples from `policy` (see the module docstring)."""
    if n < 1:
        raise UserInputError(f"judge n must be >= 1, got {n}")
    template = load_template(protocol, checkouts)
    files = repo_files(repo_dir, file_set)
    gold = repo_files(gold_dir, "all") if gold_dir is not None else None
    prompt = build_prompt(template, paper, files, gold)
    # sample i's stream: the base seed, the protocol, the prompt's content and i (a repo judged again gets the
    # same samples; two repos or protocols never share a stream)
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    requests = [GenerationRequest(({"role": "system", "content": prompt},), SamplingParams(
        max_new_tokens=max_new_tokens, temperature=temperature,
        seed=sampling_seed(seed, 0, f"judge/{protocol}", f"{digest}/{i}"))) for i in range(n)]
    completions = policy.generate(requests)
    result = aggregate([c.text for c in completions], protocol, list(files))
    result.prompt_source, result.prompt_sha256 = template.source, template.sha256
    result.usage = {key: sum(c.usage.get(key, 0) for c in completions) for key in ("prompt_tokens", "completion_tokens")}
    return result
