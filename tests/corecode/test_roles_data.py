"""Cold-start data of the retriever (skeleton siblings) and the debugger (failing mutants), and the fix
rate an evaluation with a debugger reports."""

import pytest
import torch

from coral.benchmarks.procedural import make_tasks, parse_composition, skeleton
from coral.corecode.data import cold_start_examples, gold_retrievals, retriever_template
from coral.evaluation import summarize_samples
from coral.workflows.chain import EXAMPLES_HEADER


def _skeleton(task):
    return skeleton(parse_composition(task.metadata["family"], task.metadata["composition"]))


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(60, "train", max_depth=2, seed=0)


def test_a_gold_retrieval_holds_other_tasks_of_the_same_skeleton_with_their_code(tasks):
    gold = gold_retrievals(tasks, k=2, seed=0)
    by_id = {t.id: t for t in tasks}
    assert gold and len(gold) < len(tasks)  # some skeletons have one task only: no retrieval for them
    for tid, text in gold.items():
        shown = [t for t in tasks if t.id != tid and t.metadata["description"] in text]
        assert 1 <= len(shown) <= 2 and {_skeleton(t) for t in shown} == {_skeleton(by_id[tid])}
        assert all(t.reference.strip() in text for t in shown) and by_id[tid].metadata["description"] not in text
    assert gold_retrievals(tasks, k=2, seed=0) == gold


def test_planner_and_coder_see_the_gold_retrieval_and_the_debugger_a_failing_mutant(tasks):
    data = cold_start_examples(tasks, ("planner", "coder", "retriever", "debugger"), k=1, seed=0)
    assert list(data) == ["planner", "coder", "retriever", "debugger"]
    assert len(data["planner"]) == len(data["coder"]) == 60 and 0 < len(data["retriever"]) < 60
    assert all(EXAMPLES_HEADER in ex.messages[-1]["content"] for ex in data["planner"] + data["coder"])
    assert data["retriever"][0].messages[0]["content"] == retriever_template(1).system
    assert 0 < len(data["debugger"]) <= 60
    for ex in data["debugger"]:
        prompt = ex.messages[-1]["content"]
        # the sandbox's feedback of a failing public test
        assert "tests passed." in prompt and ("- fail:" in prompt or "- error:" in prompt)
        code = prompt.split("```python\n")[1].split("\n```")[0]
        assert code.strip() not in ex.completion  # the mutant is not the gold code it must become
    assert cold_start_examples(tasks[:3], ("planner", "coder"))["coder"][0].completion.startswith("```python")


def test_an_evaluation_with_a_debugger_reports_the_share_of_failing_codes_it_fixed():
    def rec(task, passed, coder_passed, debug_turns):
        return {"task_id": task, "passed": passed, "code": "x", "turns": [{"completion_tokens": 1}],
                "metrics": {"coder_passed": coder_passed, "debug_turns": debug_turns}}

    records = [rec("a", True, 0.0, 1.0), rec("b", False, 0.0, 2.0), rec("c", True, 1.0, 0.0), rec("d", True, 0.0, 1.0)]
    summary = summarize_samples(records, [1])
    assert (summary["debugged"], summary["fix_rate"]) == (3.0, pytest.approx(2 / 3))
    assert "fix_rate" not in summarize_samples([{**r, "metrics": {}} for r in records], [1])


def test_a_task_of_another_seed_with_the_same_id_gets_its_own_feedback_not_the_cached_one():
    # the procedural family gives one composition the same id and gold code under every task seed, with
    # other test inputs: mutants cached by id would show the debugger another seed's test feedback
    from coral.corecode.data import failing_mutants
    from coral.sandbox import Sandbox

    first = {t.id: t for t in make_tasks(300, "train", max_depth=2, seed=0)}
    other = [t for t in make_tasks(300, "train", max_depth=2, seed=1)
             if t.id in first and t.public_tests != first[t.id].public_tests][:8]
    assert other, "no composition with the same id and other tests under task seeds 0 and 1"
    with Sandbox(workers=1) as sandbox:
        cached = failing_mutants([first[t.id] for t in other], 1, 0, sandbox)
        fresh = failing_mutants(other, 1, 0, sandbox)
    checked = [t for t in other if fresh[t.id] and cached[t.id]]
    assert checked, "no task had a failing mutant under both seeds"
    for task in checked:
        old_inputs = {c.code.split("==")[0] for c in first[task.id].public_tests} - {
            c.code.split("==")[0] for c in task.public_tests}
        (_, feedback), = fresh[task.id]
        # the feedback is on this task's own tests: none of the other seed's test inputs appear in it
        assert fresh[task.id] != cached[task.id] and not any(x.strip() in feedback for x in old_inputs)


def test_arms_with_one_tokenizer_roles_share_the_planner_and_coder_and_the_default_arms_do_not():
    """A roles ablation gives both arms tokenizer_roles = all its roles: the planner+coder arm's tiny planner
    and coder are then the debugger arm's (same tokenizer, same initial weights). Without it the tokenizers
    differ (each is trained on its own chain's text), which was the roles benchmark's confound."""
    from coral.benchmarks.splits import build_tasks
    from coral.corecode.recipe import CoReCodeConfig
    from coral.corecode.setup import build_policies

    small = dict(n_train_tasks=40, n_test_tasks=2, n_fresh_tasks=0, d_model=32, n_layers=1, sandbox_workers=1)
    three = ("planner", "coder", "debugger")
    debug = CoReCodeConfig(**small, debug_rounds=1)
    train, _ = build_tasks(debug.splits)
    ref = build_policies(debug, train)

    def same(cfg):
        pols = build_policies(cfg, train)
        return [pols[r].tokenizer.get_vocab() == ref[r].tokenizer.get_vocab() and
                all(torch.equal(a, b) for a, b in zip(pols[r].model.state_dict().values(),
                                                       ref[r].model.state_dict().values(), strict=True))
                for r in ("planner", "coder")]

    assert same(CoReCodeConfig(**small, tokenizer_roles=three)) == [True, True]
    assert same(CoReCodeConfig(**small)) == [False, False]


def test_tokenizer_roles_must_cover_the_chain_and_apply_to_tiny_models_only():
    from coral.corecode.recipe import CoReCodeConfig

    with pytest.raises(ValueError, match="'tokenizer_roles' must hold every role of the chain; 'debugger' is missing"):
        CoReCodeConfig(debug_rounds=1, tokenizer_roles=("planner", "coder"))
    with pytest.raises(ValueError, match="unknown role 'critic'"):
        CoReCodeConfig(tokenizer_roles=("planner", "coder", "critic"))
    with pytest.raises(ValueError, match="applies to model 'tiny' only"):
        CoReCodeConfig(model="smollm2", tokenizer_roles=("planner", "coder"))
