"""What a testbed must give the algorithms, measured on cold-started agents (experiments/testbed.py):

- diversity: sampled-token entropy, the share of flat GRPO groups (every reward equal: nothing to compare),
  pass@1 and pass@k (unbiased) of fresh samples at the RL temperature;
- repair: a refinement of a failing code against a fresh sample of the same task, and how often a
  refinement of a passing code keeps it passing;
- agents: each agent's per-sample pass rate and the correlation of their failures over tasks.

The pure functions take plain numbers (hand-checked in tests/experiments/test_testbed.py); the measuring
functions sample from agents with the recipes' own search and chain. This module does NOT train or cache
anything and chooses no setting.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from coral.benchmarks.metrics import paired_change, pass_at_k


def flat_share(groups: Sequence[Sequence[float]]) -> float:
    """Share of groups whose rewards are all equal (a group of one counts as flat: it has no spread)."""
    if not groups:
        raise ValueError("flat_share: no groups")
    return sum(max(g) == min(g) for g in groups) / len(groups)


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """Mean over tasks of the unbiased pass@k from each task's (samples n, correct c)."""
    if not counts:
        raise ValueError("mean_pass_at_k: no tasks")
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)


def token_entropy(logprob_rows: Sequence[Sequence[float]]) -> float:
    """Token mean of -log p of the sampled tokens (the estimate RL logs as `entropy`)."""
    tokens = sum(len(r) for r in logprob_rows)
    return -sum(sum(r) for r in logprob_rows) / tokens if tokens else float("nan")


def failure_correlation(pass_a: Mapping[str, float], pass_b: Mapping[str, float]) -> float:
    """Pearson correlation over tasks of two agents' per-task failure rates (nan when either is constant):
    1 means they fail on the same tasks, so a second agent adds no new answers."""
    tasks = sorted(pass_a)
    if sorted(pass_b) != tasks:
        raise ValueError("failure_correlation: the two agents were measured on different tasks")
    a = [1 - pass_a[t] for t in tasks]
    b = [1 - pass_b[t] for t in tasks]
    if len(tasks) < 2 or statistics.pstdev(a) == 0 or statistics.pstdev(b) == 0:
        return float("nan")
    return statistics.correlation(a, b)


def refine_figures(parents: Sequence[tuple[str, bool]], refined: Sequence[bool],
                   task_samples: Mapping[str, Sequence[bool]]) -> dict[str, float]:
    """Repair figures from one refinement per parent: `parents` (task id, parent passes), `refined` (the
    refinement passes), `task_samples` (every fresh sample's verdict per task, parents included).
    refine_fail: pass rate of refinements of failing parents; fresh_same_tasks: for the same failing parents,
    the pass rate of the other fresh samples of their task (leave the parent out); keep: share of
    refinements of passing parents that pass."""
    if len(parents) != len(refined):
        raise ValueError(f"refine_figures: {len(parents)} parents but {len(refined)} refinements")
    fail = [(t, r) for (t, ok), r in zip(parents, refined, strict=True) if not ok]
    keep = [r for (_, ok), r in zip(parents, refined, strict=True) if ok]
    fresh = []
    for task, _ in fail:
        others = list(task_samples[task])
        others.remove(False)  # the failing parent itself
        if others:
            fresh.append(sum(others) / len(others))
    return {"refine_fail": sum(r for _, r in fail) / len(fail) if fail else float("nan"),
            "fresh_same_tasks": sum(fresh) / len(fresh) if fresh else float("nan"),
            "keep": sum(keep) / len(keep) if keep else float("nan"),
            "failing_parents": float(len(fail)), "passing_parents": float(len(keep))}


def _passed(node: Any) -> bool:
    return node.private is not None and node.private.passed


def _all_tests_fraction(node: Any) -> float:
    tests = (node.public.tests if node.public else ()) + (node.private.tests if node.private else ())
    return sum(t.passed for t in tests) / len(tests) if tests else 0.0


def fresh_samples(agent: Any, tasks: Sequence[Any], sandbox: Any, samples: int, seed: int) -> list[Any]:
    """`samples` fresh answers per task from one agent: a best-of-N tree per task (its nodes are the group
    single-agent GRPO compares)."""
    from coral.mars2.tree import TreeConfig, search
    from coral.seeding import EVAL_STEP

    return search(tasks, [agent], sandbox, TreeConfig("best_of_n", samples, seed=seed), step=EVAL_STEP)


def diversity(trees: Sequence[Any]) -> dict[str, Any]:
    """Per-sample pass rate, pass@1 / pass@k (k = nodes per tree), entropy and flat groups of best-of-N trees."""
    counts = [(t.size, sum(_passed(n) for n in t.nodes[1:])) for t in trees]
    k = min(n for n, _ in counts)
    return {"pass@1": mean_pass_at_k(counts, 1), f"pass@{k}": mean_pass_at_k(counts, k), "k": k,
            "entropy": token_entropy([n.turn.logprobs for t in trees for n in t.nodes[1:]]),
            "flat_groups": flat_share([[_all_tests_fraction(n) for n in t.nodes[1:]] for t in trees]),
            "flat_groups_binary": flat_share([[float(_passed(n)) for n in t.nodes[1:]] for t in trees]),
            "per_task": {t.task_id: c / n for t, (n, c) in zip(trees, counts, strict=True)}}


def repair(agent: Any, tasks: Sequence[Any], trees: Sequence[Any], sandbox: Any) -> dict[str, float]:
    """Each fresh node of `trees` refined once by `agent` (the refiner prompt: problem, code, public-test
    feedback, as AB-MCTS-A asks); `refine_figures` of the outcomes."""
    from coral.mars2.tree import REFINE, _role_agent
    from coral.seeding import EVAL_STEP
    from coral.workflows.common import judge, problem_text

    by_id = {t.id: t for t in tasks}
    nodes = [(tree, n) for tree in trees for n in tree.nodes[1:]]
    contexts = [{"problem": problem_text(by_id[tree.task_id]), "code": n.code or "",
                 "feedback": n.public.feedback(by_id[tree.task_id].public_tests) if n.public else "not run"}
                for tree, n in nodes]
    turns = _role_agent(agent, REFINE).act(contexts, call_index=1, entry_points=["f"] * len(nodes), step=EVAL_STEP,
                                           keys=[f"{tree.task_id}/refine{n.index}" for tree, n in nodes])
    verdicts = judge(sandbox, [by_id[tree.task_id] for tree, _ in nodes], [t.parsed for t in turns])
    refined = [v.private.passed for v in verdicts]
    samples = {tree.task_id: [_passed(n) for n in tree.nodes[1:]] for tree in trees}
    out = refine_figures([(tree.task_id, _passed(n)) for tree, n in nodes], refined, samples)
    out["refine_entropy"] = token_entropy([t.logprobs for t in turns])
    return out


def agent_figures(per_task: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-sample pass rate of each agent, their relative gap (|a - b| / max) with its standard error (the
    paired per-task difference's, over the same max) and failure correlation (agents 0 and 1)."""
    rates = [sum(p.values()) / len(p) for p in per_task]
    out = {f"agent{i}_pass": r for i, r in enumerate(rates)}
    if len(rates) >= 2:
        top = max(rates[0], rates[1])
        out["agent_gap"] = abs(rates[0] - rates[1]) / top if top > 0 else float("nan")
        out["agent_gap_se"] = paired_change(per_task[0], per_task[1]).se / top if top > 0 else float("nan")
        out["failure_correlation"] = failure_correlation(per_task[0], per_task[1])
    return out


def mars2_trees(agents: Sequence[Any], tasks: Sequence[Any], sandbox: Any, nodes: int, seed: int) -> dict[str, float]:
    """AB-MCTS-A trees of every agent (MARS2's rollouts and evaluation): flat trees (MARS2's groups, pass
    fraction on all tests), Pass@1 / Pass@N, and each kind of node's private pass rate."""
    from coral.mars2.tree import TreeConfig, search, tree_metrics
    from coral.seeding import EVAL_STEP

    trees = search(tasks, list(agents), sandbox, TreeConfig("abmcts", nodes, seed=seed), step=EVAL_STEP)
    metrics = tree_metrics(trees)
    kinds: dict[str, list[int]] = {}
    for tree in trees:
        for n in tree.nodes[1:]:
            parent = tree.nodes[n.parent]
            kind = "fresh" if n.depth == 1 else "refine_passing" if _passed(parent) else "refine_failing"
            kinds.setdefault(kind, [0, 0])
            kinds[kind][0] += _passed(n)
            kinds[kind][1] += 1
    out = {"tree_pass@1": metrics["pass@1"], "tree_pass@n": metrics["pass@n"],
           "tree_flat": flat_share([[_all_tests_fraction(n) for n in t.nodes[1:]] for t in trees])}
    for kind, (ok, n) in kinds.items():
        out[f"tree_{kind}_pass"], out[f"tree_{kind}_nodes"] = ok / n, float(n)
    return out


def corecode_chain(planner: Any, coder: Any, tasks: Sequence[Any], sandbox: Any, plans: int, codes: int,
                   step: int) -> dict[str, float]:
    """CoRe-Code's rollout (plans x codes per task) on `tasks`: flat coder groups (the codes of one plan,
    reward 1 when every test passes: the correctness part of the coder's reward; and with the pass fraction
    of all tests, `correctness: fraction`) and planner groups (the plans of a task, each scored by its codes' mean), pass@1 / pass@(plans x codes) of the final codes,
    entropy per role."""
    from coral.workflows.chain import ChainConfig, run_chain

    trajs = run_chain(tasks, coder, sandbox, ChainConfig(plans_per_task=plans, codes_per_plan=codes),
                      planner=planner, step=step)
    passed = [bool(tr.public and tr.private and tr.public.passed and tr.private.passed) for tr in trajs]
    coder_groups: dict[tuple[str, int], list[float]] = {}
    fraction_groups: dict[tuple[str, int], list[float]] = {}
    for tr, ok in zip(trajs, passed, strict=True):
        credit = tr.turns_of("coder")[-1].credit
        if credit is None or credit.plan_id is None:
            raise ValueError(f"corecode_chain: a coder turn of task {tr.task_id!r} carries no plan id")
        group = (tr.task_id, credit.plan_id)
        coder_groups.setdefault(group, []).append(float(ok))
        tests = (tr.public.tests if tr.public else ()) + (tr.private.tests if tr.private else ())
        fraction_groups.setdefault(group, []).append(sum(t.passed for t in tests) / len(tests) if tests else 0.0)
    plan_groups: dict[str, list[float]] = {}
    for (task, _), rewards in coder_groups.items():
        plan_groups.setdefault(task, []).append(sum(rewards) / len(rewards))
    per_task: dict[str, list[bool]] = {}
    for tr, ok in zip(trajs, passed, strict=True):
        per_task.setdefault(tr.task_id, []).append(ok)
    counts = [(len(v), sum(v)) for v in per_task.values()]
    n = plans * codes
    roles = {r: token_entropy([t.logprobs for tr in trajs for t in tr.turns_of(r)]) for r in ("planner", "coder")}
    return {"chain_pass@1": mean_pass_at_k(counts, 1), f"chain_pass@{n}": mean_pass_at_k(counts, n),
            "coder_flat": flat_share(list(coder_groups.values())), "planner_flat": flat_share(list(plan_groups.values())),
            "coder_flat_fraction": flat_share(list(fraction_groups.values())),
            "planner_entropy": roles["planner"], "coder_entropy": roles["coder"]}


def rounded(figures: Mapping[str, Any], digits: int = 4) -> dict[str, Any]:
    """Floats rounded for the saved rows (nan stays nan)."""
    return {k: (round(v, digits) if isinstance(v, float) and not math.isnan(v) else v) for k, v in figures.items()}
