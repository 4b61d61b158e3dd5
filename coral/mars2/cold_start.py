"""MARS2's cold start: every agent's SFT data and the SFT that trains fresh tiny agents on it.

Solve examples: problem -> a gold code. With `solutions_per_task` k > 1 each task gives k distinct gold
codes (the idioms of benchmarks/procedural.gold_codes), drawn per agent, so an agent learns that a task has
several correct programs and samples among them; k = 1 is the task's canonical reference.

Refine examples (problem + a code + its public-test feedback -> a code), `refine_from`:
- "mutants": a first-order mutant of the gold code that fails a public test -> the gold code; with
  `refine_keep_examples`, also a passing gold code (one of the task's `solutions_per_task`) -> itself;
- "own": after a first SFT on the solve examples, each agent writes `refine_samples_per_task` codes per
  task at the RL temperature (the training tasks, or `refine_tasks` train-split tasks it has not seen); a code failing a public test -> the gold code nearest to it
  (`procedural.nearest_gold`), a code passing every test -> itself (keep: at most `refine_keep_fraction` of
  the examples). A second SFT (`refine_sft`) then trains the agent on its refine and solve examples.
  So refinement is learnt on the mistakes the agent actually makes, and a passing code is kept.

Keep drills (`keep_drills`, refine_from "mutants"; `drill_stage`): after the first SFT, a continued SFT
(`drill_sft`) of each agent on drills (the refiner prompt holding a passing gold code of a train task after the
first n_train_tasks, any of the task's idioms, with its all-pass feedback -> that code) and the mutant fixes once
more (without them the continued SFT makes an agent forget fixing). The drills' setting is the testbed's S5
(docs/results/efficacy.md), found with experiments/keep_drill.py.

The agents' shapes are `agent_shapes` (d_model, n_layers); agent i draws its solve codes and its data order
with seed + i. One tokenizer for all agents, trained on the solve examples of every agent and the mutant
refine examples (deterministic, so a resumed run rebuilds it without the trained agents).

This module does NOT run RL or the search (recipe.py, tree.py) and does NOT choose any setting: the
defaults of MARS2Config are chosen in experiments/testbed.py.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from coral.agents import TEMPLATES, make_agent
from coral.benchmarks.gold_codes import gold_solutions, nearest_gold, task_gold_codes
from coral.benchmarks.mutants import mutants
from coral.benchmarks.procedural import make_tasks
from coral.mars2.tree import TreeConfig, search
from coral.policy.base import SamplingParams
from coral.policy.hf import HFPolicy
from coral.policy.tiny import build_model, build_tokenizer
from coral.sandbox.protocol import SandboxProtocol
from coral.train.sft import SFTConfig, SFTExample, code_block
from coral.train.sft_parallel import train_sft_many
from coral.trajectory import Task
from coral.workflows.common import judge


def solve_sft_examples(tasks: Sequence[Task], per_task: int = 1, seed: int = 0) -> list[Any]:
    """problem -> gold code, `per_task` distinct gold codes per task (`gold_solutions`)."""

    return [SFTExample(TEMPLATES["solver"].render({"problem": t.prompt.strip()}), code_block(code))
            for t in tasks for code in gold_solutions(t, per_task, seed)]


def refine_example(task: Task, code: str, feedback: str, target: str) -> Any:
    """One refine example: (problem, code, its feedback) -> target code."""

    ctx = {"problem": task.prompt.strip(), "code": code, "feedback": feedback}
    return SFTExample(TEMPLATES["refiner"].render(ctx), code_block(target))


def refine_sft_examples(tasks: Sequence[Task], sandbox: SandboxProtocol, limit: int, seed: int) -> list[Any]:
    """(problem + mutant + its public feedback -> gold code) for up to `limit` tasks whose mutant
    fails a public test (a mutant that passes them teaches nothing about feedback)."""

    rng = random.Random(seed)
    picked = []
    for task in rng.sample(list(tasks), min(len(tasks), 2 * limit)):
        try:
            options = mutants(task)
        except ValueError:
            continue
        if options:
            picked.append((task, rng.choice(options)))
    results = judge(sandbox, [t for t, _ in picked], [m for _, m in picked])
    out = []
    for (task, mutant), verdicts in zip(picked, results, strict=True):
        public = verdicts.public
        if public.passed:
            continue
        out.append(refine_example(task, mutant, public.feedback(task.public_tests), _gold(task)))
        if len(out) == limit:
            break
    return out



def keep_sft_examples(tasks: Sequence[Task], sandbox: SandboxProtocol, limit: int, per_task: int, seed: int) -> list[Any]:
    """(problem + a passing gold code + its public feedback -> that same code) for `limit` tasks (a seeded
    draw; the code one of the task's `per_task` gold codes): a refiner that only ever saw failing codes rewrites
    a passing one; these teach it to keep it."""
    rng = random.Random(f"keep:{seed}")
    # stripped, as a searched node's parsed code is shown to the refiner
    picked = [(t, rng.choice(gold_solutions(t, per_task, seed)).strip())
              for t in rng.sample(list(tasks), min(len(tasks), limit))]
    results = judge(sandbox, [t for t, _ in picked], [code for _, code in picked])
    out = []
    for (task, code), verdicts in zip(picked, results, strict=True):
        if not (verdicts.public.passed and verdicts.private.passed):
            raise ValueError(f"task {task.id!r}: a gold code fails its tests: {verdicts.public.feedback(task.public_tests)}")
        out.append(refine_example(task, code, verdicts.public.feedback(task.public_tests), code))
    return out


def mutant_refine_examples(cfg: Any, train: Sequence[Task], sandbox: SandboxProtocol) -> list[Any]:
    """The cold start's refine examples made without an agent: `cfg.refine_examples` mutant fixes
    (`refine_sft_examples`), then `cfg.refine_keep_examples` kept gold codes (`keep_sft_examples`)."""
    return (refine_sft_examples(train, sandbox, cfg.refine_examples, cfg.seed)
            + keep_sft_examples(train, sandbox, cfg.refine_keep_examples, cfg.solutions_per_task, cfg.seed))


def all_pass_refine(task: Task, code: str, target: str) -> Any:
    """A refine example for `code` with an all-pass feedback (the message a run of every public test that
    passes gives: ExecutionResult.feedback)."""
    n = len(task.public_tests)
    return refine_example(task, code, f"{n}/{n} tests passed.", target)


def drill_examples(tasks: Sequence[Task], idioms: str, per_task: int, seed: int) -> list[Any]:
    """One keep drill per task: a gold code drawn (seeded) from all of the task's idioms (`idioms` "all": the
    answer cannot be guessed from the problem, only copied) or from the `per_task` solve idioms an agent of
    seed `seed` learnt ("agent"), in the refiner prompt with its all-pass feedback -> that same code."""
    if idioms not in ("all", "agent"):
        raise ValueError(f"idioms must be 'all' or 'agent', got {idioms!r}")
    rng = random.Random(f"keep-drill:{seed}")
    out = []
    for task in tasks:
        codes = task_gold_codes(task) if idioms == "all" else gold_solutions(task, per_task, seed)
        code = rng.choice(codes).strip()
        out.append(all_pass_refine(task, code, code))
    return out


def drill_order(examples: list[Any], seed: int) -> list[Any]:
    """`examples` (drills and what trains beside them) shuffled in place in the seeded order of an agent of data
    seed `seed`; returned."""
    random.Random(f"keep-drill-order:{seed}").shuffle(examples)
    return examples


def _gold(task: Task) -> str:
    if task.reference is None:
        raise ValueError(f"task {task.id!r} has no reference solution for SFT")
    return task.reference

def own_refine_examples(cfg: Any, policy: HFPolicy, tasks: Sequence[Task], sandbox: SandboxProtocol, seed: int) -> list[Any]:
    """Refine examples from the codes `policy` itself writes: `cfg.refine_samples_per_task` per task (solver
    prompt, rl.temperature); a code failing a public test -> its nearest gold code, a code passing every
    test -> itself. At most `cfg.refine_examples`, of which at most `cfg.refine_keep_fraction` keep a code;
    fixes come first in a seeded order."""

    # the solver prompt at the RL temperature, as recipe.make_tree_agents samples
    agent = make_agent("solver", policy, agent_id="agent", sampling=SamplingParams(
        max_new_tokens=cfg.max_new_tokens, temperature=cfg.rl.temperature, seed=seed))
    trees = search(tasks, [agent], sandbox, TreeConfig("best_of_n", cfg.refine_samples_per_task, seed=seed), step=0)
    by_id = {t.id: t for t in tasks}
    fixes, keeps = [], []
    for tree in trees:
        task = by_id[tree.task_id]
        for node in tree.nodes[1:]:
            if node.code is None or node.public is None or node.private is None:
                continue  # nothing parsed: no code to refine
            feedback = node.public.feedback(task.public_tests)
            if not node.public.passed:
                fixes.append(refine_example(task, node.code, feedback, nearest_gold(task, node.code)))
            elif node.private.passed:
                keeps.append(refine_example(task, node.code, feedback, node.code))
    rng = random.Random(f"own-refine:{seed}")
    rng.shuffle(fixes)
    rng.shuffle(keeps)
    n_keep = min(len(keeps), int(cfg.refine_keep_fraction * cfg.refine_examples))
    out = fixes[: cfg.refine_examples - n_keep]
    out += keeps[: cfg.refine_examples - len(out)]
    rng.shuffle(out)
    return out


def tokenizer_examples(cfg: Any, train: Sequence[Task], mutant_refine: Sequence[Any]) -> list[Any]:
    """What the agents' one tokenizer is trained on: every agent's solve examples and the mutant refine
    examples (`mutant_refine_examples`, given)."""
    solve = [ex for i in range(cfg.agents) for ex in solve_sft_examples(train, cfg.solutions_per_task, cfg.seed + i)]
    return solve + list(mutant_refine)


# a tree step's requests in fewer, bigger batches (as CoRe-Code's tiny policies); seeded tokens do not change with
# the batch, so a saved agent may be loaded with it (experiments/mars2_compare._load)
AGENT_BATCH_SIZE = 128


def build_agents(cfg: Any, examples: Sequence[Any]) -> list[Any]:
    """Fresh tiny agents of `cfg.shapes`, with one tokenizer trained on the examples."""

    corpus = [m["content"] for ex in examples for m in ex.messages] + [ex.completion for ex in examples]
    tokenizer = build_tokenizer(corpus)
    policies = []
    for i in range(cfg.agents):
        d_model, n_layers = cfg.shapes[i]
        model = build_model(tokenizer, seed=cfg.seed * 10 + i, d_model=d_model, n_layers=n_layers)
        policies.append(HFPolicy(model, tokenizer, name=f"tiny{i}", batch_size=AGENT_BATCH_SIZE))
    return policies


def first_stage_examples(cfg: Any, train: Sequence[Task], mutant_refine: Sequence[Any]) -> list[list[Any]]:
    """Each agent's examples of the first SFT: its solve examples, plus the mutant refine examples
    (refine_from "mutants"; "own" refine examples come after this SFT)."""
    shared = list(mutant_refine) if cfg.refine_from == "mutants" else []
    return [solve_sft_examples(train, cfg.solutions_per_task, cfg.seed + i) + shared for i in range(cfg.agents)]


def sft_agents(cfg: Any, policies: Sequence[HFPolicy],
               examples: Sequence[SFTExample] | Sequence[Sequence[SFTExample]], progress: bool = True,
               checkpoint_dir: Path | None = None, sft: SFTConfig | None = None) -> dict[str, list[float]]:
    """SFT every agent in place (agent i with data seed cfg.seed + i) on `examples` (one list for all, or
    one per agent), with `sft` (default cfg.sft); with `checkpoint_dir`, each agent's SFT state is kept
    there and resumed after a crash. Returns each agent's loss curve."""

    per_agent = cast("Sequence[Sequence[SFTExample]]",
                     examples if examples and isinstance(examples[0], list) else [examples] * len(policies))
    config: SFTConfig = sft or cfg.sft
    jobs = {f"agent{i}": (p, per_agent[i], replace(config, seed=cfg.seed + i)) for i, p in enumerate(policies)}
    checkpoints = {name: checkpoint_dir / f"{name}.pt" for name in jobs} if checkpoint_dir is not None else None
    with tempfile.TemporaryDirectory(prefix="coral-sft-") as work:
        return train_sft_many(jobs, work, progress=progress, processes=cfg.sft_processes, checkpoints=checkpoints)


def refine_source_tasks(cfg: Any, train: Sequence[Task]) -> list[Task]:
    """The tasks whose codes "own" refine examples come from: the cold start's training tasks (refine_tasks 0),
    or `refine_tasks` other train-split tasks that the first SFT never saw (new parameters of known
    skeletons: their mistakes are those of a task the agent has not learnt by heart, as in a search)."""
    if cfg.refine_tasks == 0:
        return list(train)
    return later_train_tasks(cfg, train, cfg.refine_tasks, "refine_tasks")


def later_train_tasks(cfg: Any, train: Sequence[Task], n: int, field: str) -> list[Task]:
    """The `n` train-split tasks of cfg.seed after `train` (the split's first n_train_tasks), which the first
    SFT never saw; `field` names the config field that asked for them in the error."""
    more = make_tasks(len(train) + n, "train", min_depth=cfg.min_depth, max_depth=cfg.max_depth, seed=cfg.seed)
    if [t.id for t in more[:len(train)]] != [t.id for t in train]:
        raise ValueError(f"{field}: `train` is not the train split's first n_train_tasks tasks of this seed")
    return more[len(train):]


def refine_stage(cfg: Any, policies: Sequence[HFPolicy], train: Sequence[Task], sandbox: SandboxProtocol,
                 progress: bool = True, checkpoint_dir: Path | None = None) -> None:
    """refine_from "own": each agent's own refine examples (kept in `checkpoint_dir` once mined), then the
    second SFT on them and the agent's solve examples. Nothing for "mutants"."""
    if cfg.refine_from != "own":
        return
    mine = refine_source_tasks(cfg, train)
    data = []
    for i, policy in enumerate(policies):
        saved = checkpoint_dir / f"own_refine_agent{i}.json" if checkpoint_dir is not None else None
        if saved is not None and saved.is_file():
            own = [SFTExample(tuple(e["messages"]), e["completion"]) for e in json.loads(saved.read_text())]
        else:
            own = own_refine_examples(cfg, policy, mine, sandbox, cfg.seed + i)
            if saved is not None:
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_text(json.dumps([{"messages": list(e.messages), "completion": e.completion} for e in own]))
        if progress:
            print(f"agent{i}: {len(own)} refine examples from its own codes", flush=True)
        data.append(own + solve_sft_examples(train, cfg.solutions_per_task, cfg.seed + i))
    stage2 = checkpoint_dir / "refine_sft" if checkpoint_dir is not None else None
    sft_agents(cfg, policies, data, progress, checkpoint_dir=stage2, sft=cfg.refine_sft)


def first_stage(cfg: Any, train: Sequence[Task], sandbox: SandboxProtocol, progress: bool = True,
                checkpoint_dir: Path | None = None) -> list[Any]:
    """Fresh tiny agents of `cfg.shapes`, SFT'd on their first-stage examples (resumed from `checkpoint_dir`)."""
    mutant_refine = mutant_refine_examples(cfg, train, sandbox)
    policies = build_agents(cfg, tokenizer_examples(cfg, train, mutant_refine))
    sft_agents(cfg, policies, first_stage_examples(cfg, train, mutant_refine), progress, checkpoint_dir=checkpoint_dir)
    return policies


def drill_stage(cfg: Any, policies: Sequence[HFPolicy], train: Sequence[Task], sandbox: SandboxProtocol,
                progress: bool = True, checkpoint_dir: Path | None = None) -> None:
    """keep_drills > 0: each agent i's continued SFT (`cfg.drill_sft`, data seed cfg.seed + i) on `keep_drills`
    drills of later train tasks (any idiom, drawn with seed + i) and the first SFT's `refine_examples` mutant
    fixes, in a seeded order (kept in `checkpoint_dir`/drill_sft). Nothing for keep_drills 0."""
    if not cfg.keep_drills:
        return
    later = later_train_tasks(cfg, train, cfg.keep_drills, "keep_drills")
    fixes = refine_sft_examples(train, sandbox, cfg.refine_examples, cfg.seed)
    data = [drill_order(drill_examples(later, "all", cfg.solutions_per_task, cfg.seed + i) + fixes, cfg.seed + i)
            for i in range(len(policies))]
    if progress:
        print(f"keep drills: {cfg.keep_drills} drills and {len(fixes)} mutant fixes per agent, "
              f"{cfg.drill_sft.epochs} epochs", flush=True)
    stage = checkpoint_dir / "drill_sft" if checkpoint_dir is not None else None
    sft_agents(cfg, policies, data, progress, checkpoint_dir=stage, sft=cfg.drill_sft)


def second_stage(cfg: Any, policies: Sequence[HFPolicy], train: Sequence[Task], sandbox: SandboxProtocol,
                 progress: bool = True, checkpoint_dir: Path | None = None) -> None:
    """What follows the first SFT: the own-refine SFT (refine_from "own") or the keep drills (keep_drills)."""
    refine_stage(cfg, policies, train, sandbox, progress, checkpoint_dir)
    drill_stage(cfg, policies, train, sandbox, progress, checkpoint_dir)


def cold_start(cfg: Any, train: Sequence[Task], sandbox: SandboxProtocol, progress: bool = True,
               checkpoint_dir: Path | None = None) -> list[Any]:
    """Fresh tiny agents of `cfg.shapes`, SFT'd on solve (+ mutant refine) examples, then, with
    refine_from "own", on their own refine examples, or with keep_drills on keep drills (resumed from
    `checkpoint_dir` after a kill)."""
    policies = first_stage(cfg, train, sandbox, progress, checkpoint_dir)
    second_stage(cfg, policies, train, sandbox, progress, checkpoint_dir)
    return policies
