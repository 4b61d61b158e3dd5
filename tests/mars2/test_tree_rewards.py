"""Golden tests for coral.mars2.tree_rewards (MARS2 shaping), gamma = lambda = 0.5 unless stated.

Every expected value was computed by hand from
r~_t = r_t + gamma (r_t - b_t), b_t = (1 - lam) r_p + lam mean(r_S) (leave-one-out sibling mean).
"""

import pytest
import torch

from coral.mars2.tree_rewards import (
    shaped_rewards,
    split_by_agent,
    tree_advantages,
    tree_arrays,
    validate_tree,
)
from coral.trajectory import ExecutionResult, Node, Verdicts
from coral.trajectory import TestResult as Verdict  # aliased: pytest would try to collect Test*


def close(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), rtol=1e-5, atol=1e-5)


def test_children_of_the_root_are_compared_with_their_siblings_leave_one_out():
    # node 1: b = mean(0, .5) = .25 -> 1 + .5 * .75; node 2: b = .75 -> 0 - .375; node 3: b = .5 -> .5
    close(shaped_rewards([None, 0, 0, 0], [None, 1.0, 0.0, 0.5]), [0.0, 1.375, -0.375, 0.5])


def test_a_lone_child_of_the_root_keeps_its_reward():
    close(shaped_rewards([None, 0], [None, 0.7]), [0.0, 0.7])


def test_a_node_without_siblings_is_compared_with_its_parent():
    # node 2: b = r_1 = 0.2 -> 1 + 0.5 * 0.8
    close(shaped_rewards([None, 0, 1], [None, 0.2, 1.0]), [0.0, 0.2, 1.4])


def test_gamma_scales_the_shaping_term():
    close(shaped_rewards([None, 0, 1], [None, 0.2, 1.0], gamma=1.0), [0.0, 0.2, 1.8])


def test_lambda_weights_the_siblings_and_one_minus_lambda_the_parent():
    # lam = .25: node 2: b = .75 * .5 + .25 * 0 = .375 -> 1 + .5 * .625; node 3: b = .375 + .25 = .625
    out = shaped_rewards([None, 0, 1, 1], [None, 0.5, 1.0, 0.0], lam=0.25)
    close(out, [0.0, 0.5, 1.3125, -0.3125])


# depth 3: 0 -> {1, 2}, 1 -> {3, 4}, 3 -> {5, 6}
DEEP_PARENTS = [None, 0, 0, 1, 1, 3, 3]
DEEP_REWARDS = [None, 0.5, 0.0, 1.0, 0.0, 1.0, 0.5]
# node 1: b = 0 -> .75; node 2: b = .5 -> -.25; node 3: b = .25 + 0 -> 1.375; node 4: b = .25 + .5
# -> -.375; node 5: b = .5 + .25 -> 1.125; node 6: b = .5 + .5 -> .25
DEEP_SHAPED = [0.0, 0.75, -0.25, 1.375, -0.375, 1.125, 0.25]


def test_a_depth_three_tree_is_shaped_at_every_level():
    close(shaped_rewards(DEEP_PARENTS, DEEP_REWARDS), DEEP_SHAPED)


def test_tree_advantages_normalise_shaped_rewards_over_the_non_root_nodes():
    # mean 0.4791667, unbiased std 0.7220486 of DEEP_SHAPED[1:]
    expected = [0.0, 0.3750902, -1.0098582, 1.2406829, -1.1829767, 0.8944458, -0.3173840]
    close(tree_advantages(DEEP_PARENTS, DEEP_REWARDS, eps=0.0), expected)


def test_tree_advantages_within_groups_centre_each_agent_on_its_own_nodes():
    # agent a: nodes 1, 3, 5, shaped .75, 1.375, 1.125: mean 1.0833333, unbiased std 0.3145764
    # agent b: nodes 2, 4, 6, shaped -.25, -.375, .25: mean -0.125, unbiased std 0.3307189
    agents = [None, "a", "b", "a", "b", "a", "b"]
    expected = [0.0, -1.0596259, -0.3779645, 0.9271726, -0.7559289, 0.1324532, 1.1338934]
    close(tree_advantages(DEEP_PARENTS, DEEP_REWARDS, eps=0.0, groups=agents), expected)
    # one label for all nodes is the plain path-level advantage
    same = tree_advantages(DEEP_PARENTS, DEEP_REWARDS, eps=0.0, groups=[None] + ["x"] * 6)
    close(same, tree_advantages(DEEP_PARENTS, DEEP_REWARDS, eps=0.0).tolist())
    with pytest.raises(ValueError, match="groups has 3 entries"):
        tree_advantages(DEEP_PARENTS, DEEP_REWARDS, groups=agents[:3])


def test_tree_advantages_of_a_lone_node_are_zero():
    close(tree_advantages([None, 0], [None, 1.0]), [0.0, 0.0])


def test_the_root_reward_is_ignored():
    assert (
        shaped_rewards([None, 0, 0], [99.0, 1.0, 0.0]).tolist()
        == shaped_rewards([None, 0, 0], [None, 1.0, 0.0]).tolist()
    )


def test_missing_parent_links_raise_instead_of_returning_unshaped_rewards():
    with pytest.raises(ValueError, match="parent links are missing"):
        shaped_rewards([None, None, None], [None, 1.0, 0.0])


def test_missing_parent_links_raise_in_tree_advantages_too():
    with pytest.raises(ValueError, match="parent links are missing"):
        tree_advantages([None, None], [None, 1.0])


def test_a_single_orphan_node_raises():
    with pytest.raises(ValueError, match=r"non-root nodes \[2\] have parent None"):
        validate_tree([None, 0, None])


def test_an_out_of_range_parent_raises():
    with pytest.raises(ValueError, match=r"node 2 has parent 5, not a node index in \[0, 3\)"):
        validate_tree([None, 0, 5])


def test_a_self_parented_node_raises():
    with pytest.raises(ValueError, match="node 1 is its own parent"):
        validate_tree([None, 1])


def test_a_cycle_raises():
    with pytest.raises(ValueError, match="cycle"):
        validate_tree([None, 0, 3, 2])


def test_a_root_with_a_parent_raises():
    with pytest.raises(ValueError, match="node 0 is the root"):
        validate_tree([1, 0])


def test_a_missing_non_root_reward_raises():
    with pytest.raises(ValueError, match="node 2 has reward None"):
        shaped_rewards([None, 0, 0], [None, 1.0, None])


def test_lambda_outside_the_unit_interval_raises():
    with pytest.raises(ValueError, match="lam must be in"):
        shaped_rewards([None, 0], [None, 1.0], lam=1.5)


def test_split_by_agent_groups_node_indices_and_skips_the_root():
    assert split_by_agent([None, "coder", "debugger", "coder"]) == {"coder": [1, 3], "debugger": [2]}


def test_split_by_agent_rejects_a_non_root_node_without_agent():
    with pytest.raises(ValueError, match="node 2 has agent None"):
        split_by_agent([None, "coder", None])


def _node(index: int, parent: int | None, agent: str | None, passed: int, total: int) -> Node:
    results = tuple(Verdict("pass" if i < passed else "fail") for i in range(total))
    return Node(index, parent, 0 if parent is None else 1, agent, verdicts=Verdicts(ExecutionResult(results), ExecutionResult(())))


def test_tree_arrays_read_parents_public_scores_and_agents_from_nodes():
    nodes = [_node(0, None, None, 0, 0), _node(1, 0, "coder", 1, 2), _node(2, 1, "debugger", 2, 2)]
    assert tree_arrays(nodes) == ([None, 0, 1], [None, 0.5, 1.0], [None, "coder", "debugger"])


def test_tree_arrays_reject_nodes_out_of_index_order():
    with pytest.raises(ValueError, match=r"nodes\[0\].index is 1"):
        tree_arrays([_node(1, 0, "coder", 1, 1), _node(0, None, None, 0, 0)])
