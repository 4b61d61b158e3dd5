"""Cold-start (SFT) data of every CoRe-Code role, from the procedural family's gold plans and codes:

- planner: problem -> gold plan; coder: problem + gold plan -> gold code, or several distinct gold codes
  (the task's idioms, `sft_codes_per_task`; `corecode_sft_examples`); with a retriever in the chain, both
  see the problem followed by the gold retrieval, as they will in the chain (workflows/chain.py's `with_examples`).
- retriever (MapCoder's self-retrieval): problem -> k solved training tasks of the same skeleton (same
  kinds of steps, other parameters), each its description and gold code. A task whose skeleton no other
  cold-start task shares has no gold retrieval and no retriever example.
- debugger: problem + a first-order mutant of the gold code (benchmarks/mutants.py) that fails a public
  test + that failure's feedback from the sandbox -> gold code.

This module does NOT train anything and judges only mutants of our own gold code (in the sandbox all the same).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import replace

from coral.agents import TEMPLATES, PromptTemplate
from coral.benchmarks.gold_codes import gold_solutions
from coral.benchmarks.mutants import mutants
from coral.benchmarks.procedural import parse_composition, skeleton
from coral.sandbox import Sandbox
from coral.sandbox.protocol import SandboxProtocol
from coral.train.sft import SFTExample, code_block
from coral.trajectory import Task
from coral.workflows.chain import with_examples
from coral.workflows.common import judge

MUTANT_CANDIDATES = 4  # mutants judged per debugger example wanted (most fail a public test; some are equivalent)
# (task fingerprint, seed, n) -> [(mutant, feedback)]: a run builds its cold-start data twice (the tokenizer's
# corpus, then SFT). Keyed by content, not id: the procedural family reuses an id for one composition with
# other parameters and tests under another task seed. Cleared when it grows past DEBUG_CACHE_MAX entries
_DEBUG_CACHE: dict[tuple[str, int, int], list[tuple[str, str]]] = {}
DEBUG_CACHE_MAX = 50_000


def corecode_sft_examples(tasks: Sequence[Task], codes_per_task: int = 1, seed: int = 0) -> dict[str, list[SFTExample]]:
    """Gold data per role: planner (problem -> gold plan), coder (problem + gold plan -> gold code; with
    `codes_per_task` > 1 that many distinct gold codes of a procedural task, its idioms, a seeded draw)."""
    data: dict[str, list[SFTExample]] = {"planner": [], "coder": []}
    for task in tasks:
        plan = task.metadata.get("gold_plan")
        if task.reference is None or not plan:
            raise ValueError(f"task {task.id!r} has no reference code or gold_plan for SFT")
        data["planner"].append(SFTExample(TEMPLATES["planner"].render({"problem": task.prompt}), plan))
        prompt = TEMPLATES["coder"].render({"problem": task.prompt, "plan": plan})
        data["coder"] += [SFTExample(prompt, code_block(code)) for code in gold_solutions(task, codes_per_task, seed)]
    return data


def retriever_template(k: int) -> PromptTemplate:
    """The retriever's prompt: recall `k` solved problems like this one (MapCoder's self-retrieval)."""
    return PromptTemplate(
        system=f"You are a retriever. Recall {k} solved problems similar to this one: each its description "
               "and its Python function in a ```python block.",
        user="{problem}\nSimilar solved problems:",
    )


def _skeleton(task: Task) -> tuple[str, ...]:
    if "composition" not in task.metadata:
        raise ValueError(f"task {task.id!r} is not procedural (no metadata 'composition'): no skeleton to retrieve by")
    return skeleton(parse_composition(task.metadata["family"], task.metadata["composition"]))


def gold_retrievals(tasks: Sequence[Task], k: int, seed: int) -> dict[str, str]:
    """Task id -> up to `k` other tasks of `tasks` with its skeleton, written as the retriever should
    (description, then gold code), chosen by a seeded draw per task; tasks without such a sibling are absent."""
    by_skeleton: dict[tuple[str, ...], list[Task]] = {}
    for task in tasks:
        by_skeleton.setdefault(_skeleton(task), []).append(task)
    out = {}
    for task in tasks:
        siblings = [t for t in by_skeleton[_skeleton(task)] if t.id != task.id]
        if not siblings:
            continue
        chosen = random.Random(f"{seed}:{task.id}").sample(siblings, min(k, len(siblings)))
        out[task.id] = "\n\n".join(f"{t.metadata['description']}\n{code_block(t.reference or '')}" for t in chosen)
    return out


def failing_mutants(tasks: Sequence[Task], per_task: int, seed: int,
                    sandbox: SandboxProtocol) -> dict[str, list[tuple[str, str]]]:
    """Task id -> up to `per_task` (mutant code, public-test feedback) pairs, mutants that fail at least one
    public test, from a seeded draw of MUTANT_CANDIDATES x per_task mutants per task (judged in one batch)."""

    keys = {t.id: (_fingerprint(t), seed, per_task) for t in tasks}
    if len(_DEBUG_CACHE) + len(tasks) > DEBUG_CACHE_MAX:
        _DEBUG_CACHE.clear()
    todo = [t for t in tasks if keys[t.id] not in _DEBUG_CACHE]
    jobs: list[tuple[Task, str]] = []
    for task in todo:
        candidates = mutants(task)
        random.Random(f"{seed}:{task.id}").shuffle(candidates)
        jobs += [(task, code) for code in candidates[:MUTANT_CANDIDATES * per_task]]
    found: dict[str, list[tuple[str, str]]] = {t.id: [] for t in todo}
    for (task, code), verdicts in zip(jobs, judge(sandbox, [t for t, _ in jobs], [c for _, c in jobs]), strict=True):
        if not verdicts.public.passed and len(found[task.id]) < per_task:
            found[task.id].append((code, verdicts.public.feedback(task.public_tests)))
    for task in todo:
        _DEBUG_CACHE[keys[task.id]] = found[task.id]
    return {t.id: _DEBUG_CACHE[keys[t.id]] for t in tasks}


def _fingerprint(task: Task) -> str:
    """What the mutants and their feedback depend on: the id, the gold code and the public tests."""
    text = "\0".join([task.id, task.reference or "", *(repr(c) for c in task.public_tests)])
    return hashlib.sha256(text.encode()).hexdigest()


def debugger_examples(tasks: Sequence[Task], per_task: int, seed: int, sandbox: SandboxProtocol | None = None,
                      workers: int = 2) -> list[SFTExample]:
    """The debugger's cold start: (problem, failing mutant, its feedback) -> gold code. Opens a sandbox of
    `workers` processes when none is given. Raises when no task yields a failing mutant."""
    if sandbox is None:
        with Sandbox(workers=workers) as own:
            return debugger_examples(tasks, per_task, seed, own)
    pairs = failing_mutants(tasks, per_task, seed, sandbox)
    out = [SFTExample(TEMPLATES["debugger"].render({"problem": t.prompt.strip(), "code": code, "feedback": fb}),
                      code_block(t.reference or "")) for t in tasks for code, fb in pairs[t.id]]
    if not out:
        raise ValueError(f"no mutant of the gold code of {len(tasks)} tasks fails a public test: no debugger cold start")
    return out


def cold_start_examples(tasks: Sequence[Task], roles: Sequence[str], *, k: int = 1, seed: int = 0,
                        mutants_per_task: int = 1, sandbox: SandboxProtocol | None = None,
                        workers: int = 2, codes_per_task: int = 1) -> dict[str, list[SFTExample]]:
    """SFT examples of each of `roles` (retriever, planner, coder, debugger) from `tasks`."""
    data: dict[str, list[SFTExample]] = {}
    if "retriever" in roles:
        gold = gold_retrievals(tasks, k, seed)
        if not gold:
            raise ValueError(f"no two of the {len(tasks)} cold-start tasks share a skeleton: no retriever cold start")
        template = retriever_template(k)
        data["retriever"] = [SFTExample(template.render({"problem": t.prompt.strip()}), gold[t.id])
                             for t in tasks if t.id in gold]
        shown = [_with_gold(t, gold.get(t.id, "")) for t in tasks]
        data.update(corecode_sft_examples(shown, codes_per_task, seed))
    else:
        data.update(corecode_sft_examples(tasks, codes_per_task, seed))
    if "debugger" in roles:
        data["debugger"] = debugger_examples(tasks, mutants_per_task, seed, sandbox, workers)
    return {role: data[role] for role in roles}


def _with_gold(task: Task, retrieval: str) -> Task:
    """`task` whose prompt is what planner and coder see after retrieval (reference and metadata kept)."""
    return replace(task, prompt=with_examples(task.prompt.strip(), retrieval))
