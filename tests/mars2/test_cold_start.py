"""MARS2's cold start data: several gold codes per task, refine examples from the agent's own codes (a
failing code -> its nearest gold code, a passing code -> itself), agents of the configured shapes."""

from __future__ import annotations

import pytest

from coral.benchmarks.gold_codes import task_gold_codes
from coral.benchmarks.procedural import build_task, parse_composition
from coral.mars2.cold_start import (
    build_agents,
    keep_sft_examples,
    mutant_refine_examples,
    own_refine_examples,
    solve_sft_examples,
)
from coral.mars2.recipe import MARS2Config
from coral.policy.scripted import ScriptedPolicy
from coral.sandbox import Sandbox

EVEN_TIMES_3 = build_task(parse_composition("list", ["keep_even", "mul_3", "sum"]), seed=0)
ODD_TIMES_3 = build_task(parse_composition("list", ["keep_odd", "mul_3", "sum"]), seed=0)
# a filter/map idiom of the right steps, but multiplying by 4
WRONG_BODY = "    xs = list(filter(lambda x: x % 2 == 0, xs))\n    xs = list(map(lambda x: x * 4, xs))\n    return sum(xs)\n"


def _writes(messages) -> str:
    """The even task gets a wrong code, the odd task its reference."""
    body = WRONG_BODY if "even" in messages[-1]["content"] else ODD_TIMES_3.reference.split("\n", 1)[1]
    return f"```python\ndef f(xs: list[int]) -> int:\n{body}```"


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as box:
        yield box


def test_solve_examples_hold_k_distinct_gold_codes_per_task_drawn_per_seed():
    one = solve_sft_examples([EVEN_TIMES_3], per_task=1)
    assert [ex.completion for ex in one] == [f"```python\n{EVEN_TIMES_3.reference.strip()}\n```"]
    three = {ex.completion for ex in solve_sft_examples([EVEN_TIMES_3], per_task=3, seed=0)}
    golds = {f"```python\n{g.strip()}\n```" for g in task_gold_codes(EVEN_TIMES_3)}
    assert len(three) == 3 and three <= golds
    other = [{ex.completion for ex in solve_sft_examples([EVEN_TIMES_3], per_task=3, seed=s)} for s in range(1, 6)]
    assert any(o != three for o in other)  # another agent's seed draws other idioms


def test_own_refine_examples_map_a_failing_code_to_its_nearest_gold_and_keep_a_passing_code(sandbox):
    cfg = MARS2Config(refine_examples=10, refine_samples_per_task=2, refine_keep_fraction=0.5)
    examples = own_refine_examples(cfg, ScriptedPolicy(_writes, name="a"), [EVEN_TIMES_3, ODD_TIMES_3], sandbox, seed=0)
    fixes = [ex for ex in examples if "keep the even" in ex.messages[-1]["content"]]
    keeps = [ex for ex in examples if "keep the odd" in ex.messages[-1]["content"]]
    assert len(fixes) == 2 and len(keeps) == 2  # two samples per task
    for ex in fixes:
        assert "x * 4" in ex.messages[-1]["content"] and "AssertionError" in ex.messages[-1]["content"]
        assert ex.completion == f"```python\ndef f(xs: list[int]) -> int:\n{WRONG_BODY.replace('x * 4', 'x * 3').rstrip()}\n```"
    for ex in keeps:
        assert "3/3 tests passed." in ex.messages[-1]["content"]
        assert ex.completion.strip("`\npython") in ex.messages[-1]["content"]  # the same code back


def test_own_refine_examples_cap_the_kept_codes_at_their_share(sandbox):
    cfg = MARS2Config(refine_examples=3, refine_samples_per_task=2, refine_keep_fraction=0.34)
    examples = own_refine_examples(cfg, ScriptedPolicy(_writes, name="a"), [EVEN_TIMES_3, ODD_TIMES_3], sandbox, seed=0)
    kept = [ex for ex in examples if "keep the odd" in ex.messages[-1]["content"]]
    assert len(examples) == 3 and len(kept) == 1  # int(0.34 * 3) = 1 kept, the rest fixes


def test_agents_take_the_configured_shapes_and_the_default_ones_differ():
    examples = solve_sft_examples([EVEN_TIMES_3, ODD_TIMES_3])
    same = build_agents(MARS2Config(agent_shapes=((32, 2), (32, 2))), examples)
    assert [(p.model.config.hidden_size, p.model.config.num_hidden_layers) for p in same] == [(32, 2), (32, 2)]
    assert MARS2Config().shapes[0] != MARS2Config().shapes[1]


def test_bad_cold_start_fields_are_refused_by_name():
    with pytest.raises(ValueError, match="refine_from"):
        MARS2Config(refine_from="gold")
    with pytest.raises(ValueError, match="agent_shapes"):
        MARS2Config(agent_shapes=((32,),))
    with pytest.raises(ValueError, match="solutions_per_task"):
        MARS2Config(solutions_per_task=0)
    with pytest.raises(ValueError, match="agents"):
        MARS2Config(agents=3, agent_shapes=((32, 1), (32, 1)))


def test_own_refine_codes_come_from_unseen_train_split_tasks_when_refine_tasks_is_set():
    from coral.benchmarks.splits import build_tasks
    from coral.mars2.cold_start import refine_source_tasks

    cfg = MARS2Config(n_train_tasks=20, refine_tasks=7)
    train = build_tasks(cfg.splits)[0]
    assert refine_source_tasks(MARS2Config(n_train_tasks=20), train) == train
    other = refine_source_tasks(cfg, train)
    assert len(other) == 7 and not {t.id for t in other} & {t.id for t in train}
    assert all(t.metadata["split"] == "train" for t in other)
    with pytest.raises(ValueError, match="refine_tasks"):
        refine_source_tasks(cfg, train[1:])


def test_keep_examples_give_back_one_of_the_tasks_gold_codes_after_its_all_pass_feedback(sandbox):
    examples = keep_sft_examples([EVEN_TIMES_3, ODD_TIMES_3], sandbox, limit=2, per_task=3, seed=0)
    golds = {g.strip() for t in (EVEN_TIMES_3, ODD_TIMES_3) for g in task_gold_codes(t)}
    assert len(examples) == 2
    for ex in examples:
        code = ex.completion.removeprefix("```python\n").removesuffix("\n```")
        assert code in golds and f"```python\n{code}\n```" in ex.messages[-1]["content"]
        assert "Feedback:\n3/3 tests passed.\nImproved code:" in ex.messages[-1]["content"]
    assert len(keep_sft_examples([EVEN_TIMES_3, ODD_TIMES_3], sandbox, limit=1, per_task=1, seed=0)) == 1
    assert keep_sft_examples([EVEN_TIMES_3], sandbox, limit=0, per_task=1, seed=0) == []


def test_the_cold_starts_mutant_refine_examples_are_the_fixes_then_the_kept_codes(sandbox):
    cfg = MARS2Config(refine_examples=1, refine_keep_examples=2, solutions_per_task=2)
    examples = mutant_refine_examples(cfg, [EVEN_TIMES_3, ODD_TIMES_3], sandbox)
    assert len(examples) == 3
    assert "3/3 tests passed." not in examples[0].messages[-1]["content"]  # a failing mutant -> its gold code
    assert all("3/3 tests passed." in ex.messages[-1]["content"] for ex in examples[1:])
    assert len(mutant_refine_examples(MARS2Config(refine_examples=1), [EVEN_TIMES_3, ODD_TIMES_3], sandbox)) == 1


def test_keep_examples_are_refused_with_own_refine_and_below_zero():
    with pytest.raises(ValueError, match="refine_keep_examples.*'own'"):
        MARS2Config(refine_from="own", refine_keep_examples=5)
    with pytest.raises(ValueError, match="refine_keep_examples.*>= 0"):
        MARS2Config(refine_keep_examples=-1)
