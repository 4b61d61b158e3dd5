"""Evaluation of RecursiveMAS and its text baselines on the same frozen agents and records.

Workflows (all greedy, all batched the same way, all report accuracy, decoded tokens and wall time):
  - "recursive": the latent system; the final agent decodes its answer in the last round (with tool
    calls in deliberation); deliberation_public_tests' tool caller also decodes an attempt every
    earlier round.
  - "text-mas": the same agents, pattern and rounds, exchanging text: every agent decodes its text
    every round and the text goes where the latents would (the feedback edge carries the final
    agent's text of the previous round). Decoding is HFPolicy.generate, except deliberation's last
    decode, which calls tools as the latent system's does (toolcalls.py).
  - "single": the final agent alone, its prompt with the question and no slots.
  - "latentmas": training-free LatentMAS, one model for every role (latentmas.py).
Decoded tokens count every token any agent of the workflow generated for a sample, the end-of-sequence
token included (tool output is read, not generated: not counted).
This module does NOT train.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coral.policy.base import GenerationRequest, SamplingParams
from coral.recursivemas.data import Record
from coral.recursivemas.patterns import Pattern
from coral.recursivemas.rollout import split_prompt
from coral.recursivemas.system import RecursiveMAS
from coral.recursivemas.toolcalls import decode_with_tools
from coral.recursivemas.tools import judge
from coral.sandbox.protocol import SandboxProtocol

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy

WORKFLOWS = ("recursive", "text-mas", "single", "latentmas")


@dataclass
class EvalResult:
    workflow: str
    rounds: int
    answers: list[str]
    correct: list[bool]
    tokens: list[int]  # decoded per sample, by every agent of the workflow
    wall_s: float

    @property
    def decoded_tokens(self) -> int:
        return sum(self.tokens)

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / max(1, len(self.correct))

    def summary(self) -> dict[str, float]:
        n = max(1, len(self.correct))
        return {"accuracy": self.accuracy, "decoded_tokens_per_sample": self.decoded_tokens / n,
                "wall_s_per_sample": self.wall_s / n}


def _batches(records: Sequence[Record], batch_size: int) -> list[Sequence[Record]]:
    return [records[i : i + batch_size] for i in range(0, len(records), batch_size)]


def run_recursive(system: RecursiveMAS, records: Sequence[Record], rounds: int, max_new_tokens: int,
                  batch_size: int) -> tuple[list[str], list[int]]:
    answers, tokens = [], []
    for batch in _batches(records, batch_size):
        replies = system.answer([r.question for r in batch], rounds, max_new_tokens)
        tokens += [r.decoded_tokens for r in replies]
        answers += [r.text for r in replies]
    return answers, tokens


def _generate(policy: HFPolicy, chats: list[list[dict[str, str]]], max_new_tokens: int) -> tuple[list[str], list[int]]:
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    outs = policy.generate([GenerationRequest(tuple(c), params) for c in chats])
    return [o.text for o in outs], [len(o.completion_ids) for o in outs]


def run_text_mas(pattern: Pattern, agents: dict[str, Any], records: Sequence[Record], rounds: int,
                 max_new_tokens: int, tool: Any = None, max_tool_calls: int = 5) -> tuple[list[str], list[int]]:
    """The pattern's agents talking in text for `rounds` rounds; returns the final texts and tokens."""
    questions = [r.question for r in records]
    previous: dict[str, list[str]] = {}
    notes: list[str] | None = None
    tokens = [0] * len(records)
    for r in range(rounds):
        current: dict[str, list[str]] = {}
        for role in pattern.roles:
            chats = []
            for i, q in enumerate(questions):
                sources: dict[str, str | None] = {s: (previous if prev else current)[s][i]
                                                  for s, prev in pattern.sources(role, r)}
                if notes is not None and role in pattern.feedback:
                    sources["tool"] = notes[i]
                chats.append(pattern.prompt(role, q, sources))
            if pattern.tool == "python" and role == pattern.final and r == rounds - 1:
                current[role], n = _generate_with_tools(agents[role], chats, max_new_tokens, tool, max_tool_calls)
            else:
                current[role], n = _generate(agents[role], chats, max_new_tokens)
            tokens = [a + b for a, b in zip(tokens, n, strict=True)]
        if pattern.tool == "public_tests" and r < rounds - 1:
            if tool is None:
                raise ValueError(f"pattern {pattern.name!r} runs each attempt on the public tests: give a tool")
            notes = tool(current[pattern.final], questions)
        previous = current
    return previous[pattern.final], tokens


def _generate_with_tools(policy: HFPolicy, chats: list[list[dict[str, str]]], max_new_tokens: int, tool: Any,
                         max_calls: int) -> tuple[list[str], list[int]]:
    if tool is None:
        raise ValueError("the deliberation pattern's final generation calls tools: give a tool (tools.PythonTool)")
    prompts = [split_prompt(policy.render(c), policy.encode) for c in chats]
    replies = decode_with_tools(policy, prompts, [{}] * len(chats), max_new_tokens, tool, max_calls)
    return [r.text for r in replies], [r.decoded_tokens for r in replies]


def run_single(pattern: Pattern, agents: dict[str, Any], records: Sequence[Record],
               max_new_tokens: int) -> tuple[list[str], list[int]]:
    chats = [pattern.prompt(pattern.final, r.question, {}) for r in records]
    return _generate(agents[pattern.final], chats, max_new_tokens)


def evaluate(workflow: str, system: RecursiveMAS, records: Sequence[Record], rounds: int, sandbox: SandboxProtocol,
             max_new_tokens: int = 160, batch_size: int = 16, latentmas: Any = None) -> EvalResult:
    """Run one workflow on `records` with `system`'s agents; answers judged in `sandbox`."""
    if workflow not in WORKFLOWS:
        raise ValueError(f"unknown workflow {workflow!r}; choose one of {WORKFLOWS}")
    t0 = time.perf_counter()
    if workflow == "recursive":
        answers, tokens = run_recursive(system, records, rounds, max_new_tokens, batch_size)
    elif workflow == "text-mas":
        answers, tokens = run_text_mas(system.pattern, system.agents, records, rounds, max_new_tokens,
                                       system.tool, system.max_tool_calls)
    elif workflow == "single":
        answers, tokens = run_single(system.pattern, system.agents, records, max_new_tokens)
    else:
        if latentmas is None:
            raise ValueError("workflow 'latentmas' needs a LatentMAS (agents of one model)")
        answers, tokens = latentmas.run([r.question for r in records], rounds, max_new_tokens, batch_size)
    wall = time.perf_counter() - t0  # judging is not part of the workflow's cost
    return EvalResult(workflow, rounds, answers, judge(sandbox, records, answers), tokens, wall)
