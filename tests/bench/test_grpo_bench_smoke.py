"""bench/grpo_step_vs_trl.py: its reward, its prompt-token check, and one real step per side."""

from __future__ import annotations

import copy

import pytest


@pytest.fixture
def bench(load_bench):
    return load_bench("grpo_step_vs_trl")


def test_reward_is_the_fraction_of_ascii_lowercase_characters(bench):
    assert bench.lowercase_fraction("abC1") == 0.5
    assert bench.lowercase_fraction("") == 0.0


def test_trl_reward_scores_the_content_of_conversational_completions(bench):
    completions = [[{"role": "assistant", "content": "ab"}], [{"role": "assistant", "content": "AB"}]]
    assert bench.trl_reward(completions) == [1.0, 0.0]


def test_prompt_check_rejects_a_tokenizer_whose_chat_template_differs(bench):
    policy = bench.tiny_policy(seed=0)
    other = copy.deepcopy(policy.tokenizer)
    other.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(SystemExit, match="tokenise it differently"):
        bench.check_same_prompt_ids(policy, other, ["hello"])


def test_run_bench_rejects_groups_of_one_completion(bench):
    with pytest.raises(ValueError, match="generations >= 2"):
        bench.run_bench(prompt_count=2, generations=1)


def test_an_unknown_coral_side_is_refused_by_name(bench):
    with pytest.raises(ValueError, match="'float16'"):
        bench.run_bench(prompt_count=2, generations=2, coral=("float16",))


@pytest.mark.slow
def test_one_timed_step_per_side_changes_both_models_parameters(bench):
    result = bench.run_bench(prompt_count=2, generations=4, new_tokens=8, steps=1)
    for side in (result.coral, result.trl):
        assert len(side.step_s) == 1
        assert side.param_change_norm > 0
        assert 0 < side.rollout_s[0] < side.step_s[0]
    assert result.ratio() > 0


@pytest.mark.slow  # two coral sides and TRL with LoRA, one warm-up and one timed step each: about 15 s
def test_lora_sides_in_both_precisions_against_trl_defaults_train_their_adapters(bench):
    result = bench.run_bench(prompt_count=2, generations=4, new_tokens=8, steps=1, coral=("float32", "bfloat16+tis"),
                             trl="defaults", lora=4)
    assert set(result.sides) == {"float32", "bfloat16+tis"}
    for side in (*result.sides.values(), result.trl):
        assert side.param_change_norm > 0
    assert result.sides["float32"].metrics["logp_mismatch"] < 1e-4 < result.sides["bfloat16+tis"].metrics["logp_mismatch"]
    assert "tis_capped_fraction" in result.sides["bfloat16+tis"].metrics
