"""MARS2 tree search: determinism, resume, budget, prompts, agent choice and the three algorithms."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

import pytest
from scripted_tasks import InProcessSandbox, add_task, correct, refines, wrong

import coral.sandbox
from coral.agents import make_agent
from coral.mars2.tree import Tree, TreeConfig, search, tree_metrics
from coral.mars2.tree_select import PublicView, select_abmcts, select_uct
from coral.policy.base import SamplingParams
from coral.policy.scripted import ScriptedPolicy
from coral.trajectory import Task


def agent(name: str, reply) -> object:
    return make_agent("solver", ScriptedPolicy(reply, name=name), agent_id=name,
                      sampling=SamplingParams(seed=0))


def shape(trees: Sequence[Tree]) -> list[list[tuple]]:
    return [[(n.parent, n.agent, n.code) for n in t.nodes] for t in trees]


TASKS = [add_task(k) for k in range(1, 7)]


def test_search_is_deterministic_under_a_seed_and_changes_with_the_seed():
    agents = [agent("a", refines), agent("b", wrong)]
    cfg = TreeConfig(max_nodes=6, seed=3)
    first = search(TASKS, agents, InProcessSandbox(), cfg)
    again = search(TASKS, [agent("a", refines), agent("b", wrong)], InProcessSandbox(), cfg)
    other = search(TASKS, agents, InProcessSandbox(), TreeConfig(max_nodes=6, seed=4))
    assert [t.to_dict() for t in first] == [t.to_dict() for t in again]
    assert shape(first) != shape(other)


@pytest.mark.parametrize("algorithm", ["abmcts", "uct", "best_of_n"])
def test_resuming_saved_trees_gives_the_uninterrupted_result(algorithm):
    agents = [agent("a", refines), agent("b", wrong)]
    cfg = TreeConfig(algorithm=algorithm, max_nodes=5, seed=1)
    full = search(TASKS, agents, InProcessSandbox(), cfg)

    class Crash(Exception):
        pass

    saved: list[str] = []

    def save_then_crash(trees):
        saved.append(json.dumps([t.to_dict() for t in trees]))
        if len(saved) == 2 or algorithm == "best_of_n":
            raise Crash

    with pytest.raises(Crash):
        search(TASKS, agents, InProcessSandbox(), cfg, on_step=save_then_crash)
    partial = [Tree.from_dict(d) for d in json.loads(saved[-1])]
    resumed = search(TASKS, agents, InProcessSandbox(), cfg, trees=partial)
    assert [t.to_dict() for t in resumed] == [t.to_dict() for t in full]


@pytest.mark.parametrize("algorithm", ["abmcts", "uct", "best_of_n"])
def test_every_tree_holds_exactly_the_node_budget(algorithm):
    trees = search(TASKS, [agent("a", refines), agent("b", wrong)], InProcessSandbox(),
                   TreeConfig(algorithm=algorithm, max_nodes=7))
    assert [t.size for t in trees] == [7] * len(TASKS)
    assert tree_metrics(trees)["nodes_per_tree"] == 7


def test_one_step_makes_one_sandbox_batch_and_one_generation_batch_per_agent_and_role():
    policy = ScriptedPolicy(refines, name="a")
    calls: list[int] = []
    generate = policy.generate
    policy.generate = lambda reqs: calls.append(len(reqs)) or generate(reqs)
    sandbox = InProcessSandbox()
    search(TASKS, [make_agent("solver", policy, agent_id="a")], sandbox, TreeConfig(max_nodes=4))
    assert sandbox.batches == [len(TASKS)] * 4  # one run_many per step, every tree in it
    assert calls[0] == len(TASKS)  # the first step: every tree's root answer in one batch
    assert sum(calls) == 4 * len(TASKS) and len(calls) <= 2 * 4


def test_refinement_prompts_show_the_parent_code_and_its_public_feedback():
    trees = search(TASKS[:2], [agent("a", refines)], InProcessSandbox(), TreeConfig(max_nodes=6))
    refined = [n for t in trees for n in t.nodes if n.depth >= 2]
    assert refined, "expected at least one refinement"
    for tree in trees:
        for node in tree.nodes[1:]:
            parent = tree.nodes[node.parent]
            if node.depth == 1:
                assert node.turn.role == "solver" and "Feedback" not in node.turn.prompt
                continue
            assert node.turn.role == "refiner"
            assert parent.code in node.turn.prompt
            task = next(t for t in TASKS if t.id == tree.task_id)
            assert parent.public.feedback(task.public_tests) in node.turn.prompt
            if parent.score == 0.5:
                assert "1/2 tests passed." in node.turn.prompt and "assert candidate(2)" in node.turn.prompt
            assert "candidate(10)" not in node.turn.prompt  # private tests never reach a prompt


def test_nodes_record_their_turn_and_both_verdicts():
    trees = search(TASKS[:1], [agent("a", refines)], InProcessSandbox(), TreeConfig(max_nodes=3))
    for node in trees[0].nodes[1:]:
        assert node.turn.agent == "a" and node.turn.completion_ids and node.turn.logprobs
        assert node.turn.credit.node == node.index and node.turn.credit.parent == node.parent
        assert len(node.public.tests) == 2 and len(node.private.tests) == 1


def test_selection_never_depends_on_private_verdicts():
    agents = [agent("a", refines), agent("b", correct), agent("c", wrong)]
    for algorithm in ("abmcts", "uct"):
        cfg = TreeConfig(algorithm=algorithm, max_nodes=8, seed=5)
        honest = search(TASKS, agents, InProcessSandbox(), cfg)
        flipped = search(TASKS, agents, InProcessSandbox(flip_private=True), cfg)
        assert shape(honest) == shape(flipped)
        verdicts = [[n.private.passed for n in t.nodes[1:]] for t in honest]
        assert verdicts == [[not n.private.passed for n in t.nodes[1:]] for t in flipped]  # private did change


def test_thompson_sampling_gives_most_nodes_to_the_agent_that_scores_higher():
    tasks = [add_task(k) for k in range(1, 21)]
    trees = search(tasks, [agent("bad", wrong), agent("good", correct)], InProcessSandbox(),
                   TreeConfig(max_nodes=10, seed=0))
    counts = Counter(n.agent for t in trees for n in t.nodes[1:])
    # 200 nodes; a uniform choice would give good ~100 (sd 7). Thompson sampling concentrates on it.
    assert counts["good"] > 150, counts


def test_best_of_n_only_answers_the_root_and_rotates_agents():
    trees = search(TASKS, [agent("a", refines), agent("b", wrong)], InProcessSandbox(),
                   TreeConfig(algorithm="best_of_n", max_nodes=6))
    for tree in trees:
        assert all(n.depth == 1 for n in tree.nodes[1:])
        assert [n.agent for n in tree.nodes[1:]] == ["a", "b"] * 3


@pytest.mark.parametrize("algorithm", ["abmcts", "uct"])
def test_tree_search_goes_deeper_and_solves_more_when_refinement_helps(algorithm):
    agents = [agent("a", refines)]
    searched = search(TASKS, agents, InProcessSandbox(), TreeConfig(algorithm=algorithm, max_nodes=6))
    flat = search(TASKS, agents, InProcessSandbox(), TreeConfig(algorithm="best_of_n", max_nodes=6))
    assert all(max(n.depth for n in t.nodes) >= 2 for t in searched)
    assert tree_metrics(searched)["pass@1"] == 1.0
    assert tree_metrics(flat)["pass@1"] == 0.0


def test_best_prefers_the_highest_public_score_and_the_earliest_on_ties():
    trees = search(TASKS[:1], [agent("a", refines)], InProcessSandbox(), TreeConfig(max_nodes=6))
    tree = trees[0]
    best = tree.best()
    assert best.score == max(n.score for n in tree.nodes[1:])
    assert best.index == min(n.index for n in tree.nodes[1:] if n.score == best.score)
    assert tree.pass_at_1() and tree.pass_at_n()


def test_metrics_report_system_and_per_agent_pass_rates():
    trees = search(TASKS, [agent("good", correct), agent("bad", wrong)], InProcessSandbox(),
                   TreeConfig(algorithm="best_of_n", max_nodes=4))
    m = tree_metrics(trees)
    assert m["pass@1"] == m["pass@n"] == 1.0
    assert m["agent/good/pass@n"] == 1.0 and m["agent/bad/pass@n"] == 0.0
    assert m["agent/good/nodes"] == m["agent/bad/nodes"] == 2 * len(TASKS)
    assert m["max_depth"] == 1.0


def test_abmcts_expands_a_leaf_root_and_picks_the_better_child_when_continuing():
    import random

    assert select_abmcts(PublicView((None,), (0.0,), (None,)), ["a"], random.Random(0), 1)[0][0] == 0
    # root -> 1 (score 1, with two perfect children) and 2 (score 0): descending favours node 1's subtree
    view = PublicView((None, 0, 0, 1, 1), (0.0, 1.0, 0.0, 1.0, 1.0), (None, "a", "a", "a", "a"))
    picks = Counter(select_abmcts(view, ["a"], random.Random(s), 1)[0][0] for s in range(300))
    assert picks[1] + picks[3] + picks[4] > 4 * picks[2]


def test_uct_expands_unvisited_generation_arms_first():
    import random

    view = PublicView((None, 0), (0.0, 0.5), (None, "a"))
    # root: GEN arm (1 child) vs child 1 (1 node): tie goes to GEN; at a leaf, GEN is forced
    assert select_uct(view, ["a"], random.Random(0), 1)[0][0] == 0
    view = PublicView((None, 0, 0), (0.0, 1.0, 0.0), (None, "a", "a"))
    assert select_uct(view, ["a"], random.Random(0), 1, uct_c=0.0)[0][0] == 1


def test_bad_inputs_are_rejected_with_the_field_named():
    with pytest.raises(ValueError, match="algorithm"):
        TreeConfig(algorithm="dfs")
    with pytest.raises(ValueError, match="max_nodes"):
        TreeConfig(max_nodes=0)
    with pytest.raises(ValueError, match="does not match task"):
        search(TASKS[:1], [agent("a", refines)], InProcessSandbox(), TreeConfig(), trees=[Tree.new("other")])
    no_public = Task("t", "p", "f", public_tests=(), private_tests=TASKS[0].private_tests)
    with pytest.raises(ValueError, match="no public tests"):
        search([no_public], [agent("a", refines)], InProcessSandbox(), TreeConfig())


@pytest.mark.parametrize("binary", [False, True])
def test_node_values_average_the_search_score_of_their_subtree(binary):
    trees = search(TASKS[:2], [agent("a", refines)], InProcessSandbox(),
                   TreeConfig(max_nodes=6, binary_score=binary))
    for tree in trees:
        scores = [float(n.public.passed) if binary else n.public.pass_fraction for n in tree.nodes[1:]]
        root = tree.nodes[0]
        assert root.visits == 6 and root.value == pytest.approx(sum(scores) / 6)
        assert all(n.visits == 1 + sum(tree.nodes[c].visits for c in n.children) for n in tree.nodes[1:])


@pytest.mark.skipif(not hasattr(coral.sandbox, "Sandbox"), reason="coral.sandbox.Sandbox has not landed yet")
def test_search_judges_its_nodes_in_the_real_sandbox_as_the_trusted_runner_does():
    cfg = TreeConfig(max_nodes=4, seed=0)
    with coral.sandbox.Sandbox(workers=1) as sandbox:
        real = search(TASKS[:2], [agent("a", refines)], sandbox, cfg)
    trusted = search(TASKS[:2], [agent("a", refines)], InProcessSandbox(), cfg)
    assert shape(real) == shape(trusted)

    def verdicts(trees):
        return [[(n.public.passed, n.private.passed) for n in t.nodes[1:]] for t in trees]

    assert verdicts(real) == verdicts(trusted)
    assert all(n.public.tests[0].passed for t in real for n in t.nodes[1:])  # candidate(1) always right
    assert any(n.private.passed for t in real for n in t.nodes[1:])  # some refinement fixed the code
