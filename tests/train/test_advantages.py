"""Golden tests for coral.train.advantages: every expected tensor below was computed by hand."""

import math

import pytest
import torch

from coral.train.advantages import ADVANTAGES, dr_grpo, group_ids, grpo, reinforce_pp_baseline, rloo

ONE_GROUP = torch.tensor([1.0, 0.0, 1.0, 1.0])  # mean 0.75, unbiased std 0.5, population std 0.433
ZEROS4 = torch.zeros(4, dtype=torch.long)
SQRT_HALF = 1 / math.sqrt(2)


def close(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), rtol=1e-5, atol=1e-5)


def test_grpo_divides_by_the_unbiased_group_std():
    # (r - 0.75) / 0.5; population std would give [0.577, -1.732, 0.577, 0.577]
    close(grpo(ONE_GROUP, ZEROS4, eps=0.0), [0.5, -1.5, 0.5, 0.5])


def test_grpo_adds_eps_to_the_std():
    close(grpo(ONE_GROUP, ZEROS4, eps=0.5), [0.25, -0.75, 0.25, 0.25])  # std + eps = 1.0


def test_grpo_normalises_each_group_separately_by_key():
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.5, 4.0])
    keys = ["a", "b", "a", "b", "c"]  # a: [1, 2], b: [0, 0.5], c: [4] alone
    close(grpo(rewards, keys), [-SQRT_HALF, -SQRT_HALF, SQRT_HALF, SQRT_HALF, 0.0])


def test_grpo_of_identical_rewards_is_zero():
    close(grpo(torch.tensor([0.3, 0.3, 0.3]), [0, 0, 0]), [0.0, 0.0, 0.0])


def test_dr_grpo_subtracts_the_group_mean_only():
    close(dr_grpo(ONE_GROUP, ZEROS4), [0.25, -0.75, 0.25, 0.25])


def test_rloo_subtracts_the_mean_of_the_other_members():
    # A_0 = 1 - (0 + 1 + 1) / 3, A_1 = 0 - (1 + 1 + 1) / 3
    close(rloo(ONE_GROUP, ZEROS4), [1 / 3, -1.0, 1 / 3, 1 / 3])


def test_rloo_handles_several_groups():
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.5, 4.0])
    close(rloo(rewards, ["a", "b", "a", "b", "c"]), [-1.0, -0.5, 1.0, 0.5, 0.0])


def test_reinforce_pp_baseline_centres_per_group_and_scales_by_the_batch_std():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    # centred: [.25, -.75, .25, .25, -.25, -.25, .75, -.25]; batch std = sqrt(1.5 / 7) = 0.46291
    expected = [0.540062, -1.620185, 0.540062, 0.540062, -0.540062, -0.540062, 1.620185, -0.540062]
    close(reinforce_pp_baseline(rewards, groups, eps=0.0), expected)


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_a_group_of_size_one_gets_advantage_zero_not_nan(name):
    out = ADVANTAGES[name](torch.tensor([3.0, 1.0, 2.0]), ["solo", "pair", "pair"])
    assert out[0].item() == 0.0 and not torch.isnan(out).any()


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_a_batch_of_one_sample_gets_advantage_zero(name):
    assert ADVANTAGES[name](torch.tensor([5.0]), [0]).tolist() == [0.0]


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_tensor_ids_and_keys_give_the_same_advantages(name):
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.5])
    by_ids = ADVANTAGES[name](rewards, torch.tensor([7, 3, 7, 3]))
    torch.testing.assert_close(by_ids, ADVANTAGES[name](rewards, ["x", "y", "x", "y"]))


def test_group_ids_number_keys_in_order_of_first_appearance():
    keys = [("t1", "coder"), ("t2", "coder"), ("t1", "coder"), ("t1", "planner")]
    assert group_ids(keys).tolist() == [0, 1, 0, 2]
    assert group_ids(keys).dtype == torch.long


def test_advantages_keep_the_rewards_dtype():
    assert grpo(ONE_GROUP.double(), ZEROS4).dtype == torch.float64


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="4 entries but group ids have 3"):
        grpo(ONE_GROUP, [0, 0, 0])


def test_non_finite_rewards_raise():
    with pytest.raises(ValueError, match="indices \\[1\\]"):
        rloo(torch.tensor([1.0, float("nan")]), [0, 0])


def test_two_dimensional_rewards_raise():
    with pytest.raises(ValueError, match="1-D"):
        dr_grpo(torch.ones(2, 2), [0, 0])


def test_reinforce_pp_baseline_whitens_each_scope_by_its_own_std():
    # scope "p": groups [0, 10] and [10, 0] -> centred [-5, 5, 5, -5], std sqrt(100 / 3)
    # scope "c": groups [0, 1] and [1, 1] -> centred [-0.5, 0.5, 0, 0], std sqrt(0.5 / 3)
    rewards = torch.tensor([0.0, 10.0, 10.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = ["p1", "p1", "p2", "p2", "c1", "c1", "c2", "c2"]
    scopes = ["p"] * 4 + ["c"] * 4
    sp, sc = 5 / math.sqrt(100 / 3), 0.5 / math.sqrt(0.5 / 3)
    close(reinforce_pp_baseline(rewards, groups, eps=0.0, scopes=scopes), [-sp, sp, sp, -sp, -sc, sc, 0.0, 0.0])


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_local_estimators_do_not_depend_on_scopes(name):
    rewards = torch.tensor([0.0, 10.0, 0.0, 1.0])
    groups = [0, 0, 1, 1]
    torch.testing.assert_close(ADVANTAGES[name](rewards, groups, scopes=["a", "a", "b", "b"]),
                               ADVANTAGES[name](rewards, groups))


def test_a_group_that_spans_two_scopes_is_refused():
    with pytest.raises(ValueError, match="group of sample 1 spans scopes"):
        reinforce_pp_baseline(torch.tensor([0.0, 1.0]), [0, 0], scopes=["a", "b"])
