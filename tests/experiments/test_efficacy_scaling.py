"""experiments/efficacy_scaling.py: budget figures read from tree prefixes (and why that equals a run at
the smaller budget), the per-sample pass rate, the summary's paired changes, the SVG plot, and one tiny
end-to-end run of the study's wiring."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET

import pytest

from coral.trajectory import ExecutionResult, Verdicts
from coral.trajectory import TestResult as Result


@pytest.fixture
def scaling(load_experiment):
    load_experiment("efficacy_protocol")
    load_experiment("efficacy_plot")
    load_experiment("mars2_compare")
    return load_experiment("efficacy_scaling")


def verdict(ok: bool, n: int = 1) -> ExecutionResult:
    return ExecutionResult(tests=tuple(Result("pass" if ok else "fail") for _ in range(n)))


def tree_of(task_id: str, nodes: list[tuple[float, bool]]):
    """A best-of-N tree: each (public pass fraction of 2 tests, private verdict) is a child of the root."""
    from coral.mars2.tree import Tree

    tree = Tree.new(task_id)
    for public, private in nodes:
        pub = ExecutionResult(tests=(Result("pass" if public >= 0.5 else "fail"), Result("pass" if public == 1 else "fail")))
        tree.add(0, "agent0", "code", None, Verdicts(pub, verdict(private)), public)
    return tree


def test_budget_figures_read_each_budget_from_the_first_nodes(scaling):
    # node 1: public 0.5, private fail; node 2: public 1.0, private pass; node 3: public 0, private pass
    trees = [tree_of("a", [(0.5, False), (1.0, True), (0.0, True)]), tree_of("b", [(0.0, False), (0.0, False), (1.0, False)])]
    figs = scaling.budget_figures(trees, [1, 2, 3])
    assert figs[1]["pass@1"] == {"a": 0.0, "b": 0.0} and figs[1]["pass@n"] == {"a": 0.0, "b": 0.0}
    assert figs[2]["pass@1"] == {"a": 1.0, "b": 0.0} and figs[2]["pass@n"] == {"a": 1.0, "b": 0.0}
    assert figs[3]["pass@1"] == {"a": 1.0, "b": 0.0} and figs[3]["pass@n"] == {"a": 1.0, "b": 0.0}


def test_budget_figures_refuse_a_budget_larger_than_the_tree(scaling):
    with pytest.raises(ValueError, match="holds only 1 nodes"):
        scaling.budget_figures([tree_of("a", [(1.0, True)])], [2])


def test_sample_pass_rate_counts_every_node(scaling):
    trees = [tree_of("a", [(1.0, True), (0.0, False)]), tree_of("b", [(1.0, True), (1.0, True)])]
    assert scaling.sample_pass_rate(trees) == pytest.approx(3 / 4)


def test_node_stats_split_fresh_answers_refinements_and_agents(scaling):
    from coral.mars2.tree import Tree

    pub = verdict(True)
    tree = Tree.new("a")
    tree.add(0, "agent0", "c1", None, Verdicts(pub, verdict(False)), 1.0)  # 1: fresh, fails
    tree.add(0, "agent1", "c2", None, Verdicts(pub, verdict(True)), 1.0)  # 2: fresh, passes
    tree.add(1, "agent0", "c3", None, Verdicts(pub, verdict(True)), 1.0)  # 3: refines failing 1, passes
    tree.add(1, "agent1", "c4", None, Verdicts(pub, verdict(False)), 1.0)  # 4: refines failing 1, fails
    tree.add(2, "agent0", "c5", None, Verdicts(pub, verdict(True)), 1.0)  # 5: refines passing 2, passes
    stats = scaling.node_stats([tree])
    assert stats == {"fresh answer": [1, 2], "refinement of a failing code": [1, 2],
                     "refinement of a passing code": [1, 1], "agent0's nodes": [2, 3], "agent1's nodes": [1, 2]}
    text = scaling.why_table({"m": stats, "n": {"fresh answer": [0, 4]}})
    assert "| m | 0.500 (2) | 0.500 (2) | 1.000 (1) | 0.667 (3) | 0.500 (2) |" in text
    assert "| n | 0.000 (4) | - | - | - | - |" in text


class HashSandbox:
    """Each test passes or fails by a hash of (code, test): varied, deterministic scores without running code."""

    def run_many(self, jobs, progress=False):
        import hashlib

        return [ExecutionResult(tests=tuple(
            Result("pass" if hashlib.sha256((j.code + c.code).encode()).digest()[0] % 2 else "fail") for c in j.tests))
            for j in jobs]


def _shape(tree) -> list[tuple]:
    return [(n.parent, n.agent, n.turn.text if n.turn else None) for n in tree.nodes]


@pytest.mark.parametrize("algorithm", ["abmcts", "best_of_n"])
def test_a_smaller_budget_grows_the_first_nodes_of_the_larger_budgets_tree(algorithm):
    """Why the study reads every budget from one tree: selection and sampling streams are keyed by
    tree size and node index, never by the budget."""
    from coral.benchmarks.procedural import make_tasks
    from coral.mars2.recipe import MARS2Config, make_tree_agents
    from coral.mars2.tree import TreeConfig, search
    from coral.policy import tiny_policy
    from coral.seeding import EVAL_STEP

    tasks = make_tasks(2, "test", min_depth=2, max_depth=2, seed=1)
    policies = [tiny_policy(seed=i, d_model=32, n_layers=1) for i in range(2)]
    agents = make_tree_agents(MARS2Config(seed=3, max_new_tokens=12), policies)
    small, large = (search(tasks, agents, HashSandbox(), TreeConfig(algorithm, k, seed=3), step=EVAL_STEP) for k in (3, 6))
    for s, big in zip(small, large, strict=True):
        assert _shape(s) == _shape(big)[:4]
    assert len({t for tr in large for (_, _, t) in _shape(tr)[1:]}) > 1  # samples differ: streams are not shared


def _summary(scaling, p1_base, p1_other, monkeypatch):
    per_task = {"bon": {0: {4: {"pass@1": p1_base, "pass@n": p1_base}}},
                "mcts": {0: {4: {"pass@1": p1_other, "pass@n": p1_other}}}}
    monkeypatch.setattr(scaling, "BASELINE", "bon")
    return scaling.summarise(per_task, [4])


def test_summary_pairs_each_method_with_the_baseline_task_by_task(scaling, monkeypatch):
    s = _summary(scaling, {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0}, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}, monkeypatch)
    assert s["bon"][4]["pass@1"]["mean"] == pytest.approx(0.25) and "change" not in s["bon"][4]["pass@1"]
    change = s["mcts"][4]["pass@1"]["change"]
    assert change["mean"] == pytest.approx(0.5) and (change["up"], change["down"]) == (2, 0)


def test_the_plot_is_valid_svg_with_one_line_per_method_and_figure(scaling, load_experiment, monkeypatch):
    s = _summary(scaling, {"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 1.0}, monkeypatch)
    svg = load_experiment("efficacy_plot").scaling_svg(s, [4], "title & more")
    root = ET.fromstring(svg)
    lines = [e for e in root.iter() if e.get("class") == "series"]
    assert [e.get("data-method") for e in lines] == ["bon", "mcts", "bon", "mcts"]  # Pass@1 panel, then Pass@N


def test_a_tiny_run_chooses_a_depth_on_validation_and_writes_table_plot_and_json(scaling, load_experiment, tmp_path,
                                                                                 monkeypatch):
    from coral.policy import tiny_policy

    tiny = [tiny_policy(seed=i, d_model=32, n_layers=1) for i in range(2)]
    monkeypatch.setattr(scaling, "_cold_start", lambda cfg, seed, sandbox: (f"cold{seed}", tiny))
    runner = load_experiment("efficacy")
    md = tmp_path / "efficacy.md"
    fields = {"seeds": [0, 1], "budgets": [1, 2], "n_test_tasks": 2, "n_val_tasks": 2, "val_budget": 1,
              "depths": [[2, 2], [3, 3]], "max_new_tokens": 8, "min_val_rate": 0.0, "out": str(tmp_path / "out"), "results_md": str(md)}
    monkeypatch.setattr(sys, "argv", ["efficacy.py", "scaling", "--set", json.dumps(fields)])
    runner.main()
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["numbers"]["validation"]["chosen"] in ("2-2", "3-3") and saved["config"]["seeds"] == [0, 1]
    assert set(saved["per_task"]) == set(scaling.METHODS)
    text = md.read_text()
    assert "<!-- scaling:begin -->" in text and "AB-MCTS-A, 2 agents | 2 |" in text
    ET.fromstring((tmp_path / "efficacy_scaling.svg").read_text())


def test_saved_trees_are_read_back_only_for_the_cold_start_that_grew_them(scaling, tmp_path, monkeypatch):
    from coral.benchmarks.procedural import make_tasks
    from coral.mars2 import tree

    grown = []
    monkeypatch.setattr(tree, "search", lambda tasks, agents, sandbox, cfg, step: grown.append(cfg) or [])
    tasks = make_tasks(2, "test", min_depth=2, max_depth=2, seed=1)
    for name in ("seed0's", "seed0's", "seed1's"):  # a shared cold start, then each seed's own
        scaling._grow((name, [object()]), 1, tasks, "best_of_n", 4, 1, None, tmp_path / "t.json", 8)
    assert len(grown) == 2  # the second call read the first's trees back; the third grew its own


def test_a_cold_start_that_solves_nothing_on_validation_stops_before_the_test_phase(scaling):
    val = {"mean": {"1-2": 0.01, "2-2": 0.0}, "chosen": "1-2"}
    assert "0.010 at its best depth (depth 1-2: 0.010, depth 2-2: 0.000)" in scaling.too_weak(val, 0.05)
    assert scaling.too_weak({"mean": {"1-2": 0.3}, "chosen": "1-2"}, 0.05) is None


def test_a_folder_of_agents_is_named_by_its_weights_and_is_not_set_with_a_cold_start_seed(scaling, tmp_path):
    from coral.policy import tiny_policy

    for i in (0, 1):
        tiny_policy(seed=i, d_model=32, n_layers=1).save(tmp_path / "pair" / f"agent{i}")
    name, policies = scaling._folder_cold_start(tmp_path / "pair")
    assert len(policies) == 2 and name.startswith(f"{tmp_path / 'pair'}:")
    tiny_policy(seed=5, d_model=32, n_layers=1).save(tmp_path / "pair" / "agent1")  # other weights, same folder
    assert scaling._folder_cold_start(tmp_path / "pair")[0] != name  # so trees grown with the old agents are not reused
    assert "saved in runs/x" in scaling.cold_start_summary({}, None, "runs/x")
    with pytest.raises(ValueError, match="'cold_dir' and 'cold_start_seed'"):
        scaling.ScalingConfig(cold_dir="runs/x", cold_start_seed=0)
