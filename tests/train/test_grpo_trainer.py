import math

import pytest
import torch

from coral.policy import tiny_policy
from coral.policy.base import GenerationRequest, SamplingParams, user
from coral.train.grpo import AgentLearner, GRPOConfig, assign_advantages, unique_turns
from coral.trajectory import Credit, Turn


@pytest.fixture()
def policy():
    return tiny_policy(seed=0, d_model=64, n_layers=2)


def _rollout(policy, n: int, seed: int, max_new_tokens: int = 8, agent: str = "coder") -> list[Turn]:
    reqs = [GenerationRequest(user("say a"), SamplingParams(max_new_tokens=max_new_tokens, seed=seed * 1000 + i))
            for i in range(n)]
    return [Turn(agent=agent, role=agent, call_index=0, prompt="say a", text=c.text, prompt_ids=c.prompt_ids,
                 completion_ids=c.completion_ids, logprobs=c.logprobs, credit=Credit("t"))
            for c in policy.generate(reqs)]


def test_assign_advantages_normalises_within_declared_groups():
    turns = [Turn("a", "coder", 0, "", "", reward=r, credit=Credit(str(g))) for r, g in
             [(1.0, 0), (0.0, 0), (5.0, 1), (5.0, 1)]]
    assign_advantages(turns, key=lambda t: t.credit.task_id, estimator="dr_grpo")
    assert [t.advantage for t in turns] == [0.5, -0.5, 0.0, 0.0]


def test_a_turn_without_reward_is_an_error_not_a_zero():
    turns = [Turn("a", "coder", 0, "", "", reward=1.0), Turn("a", "coder", 0, "", "", reward=None)]
    with pytest.raises(ValueError, match="1 turns have no reward"):
        assign_advantages(turns, key=lambda t: 0)


def test_one_update_changes_every_trained_parameter_and_the_loss_is_finite(policy):
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    learner = AgentLearner("coder", policy, GRPOConfig(lr=1e-3, micro_batch_size=3))
    turns = _rollout(policy, 8, seed=0)
    for i, t in enumerate(turns):
        t.reward = float(i % 2)
    assign_advantages(turns, key=lambda t: 0)
    metrics = learner.update(turns)
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    assert learner.step == 1 and metrics["trained_turns"] == 8
    unchanged = [n for n, p in policy.model.named_parameters() if torch.equal(before[n], p.detach())]
    assert unchanged == []
    # on-policy: the sampler's logprobs match the trainer's, so the PPO ratio starts at 1
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("tis_cap", [None, 2.0])
def test_bfloat16_rollouts_train_float32_weights_and_log_their_mismatch(tis_cap):
    from coral.train.losses import LossConfig

    policies = {dtype: tiny_policy(seed=0, d_model=64, n_layers=2, dtype=dtype) for dtype in ("float32", "bfloat16")}
    mismatch = {}
    for dtype, policy in policies.items():
        turns = _rollout(policy, 8, seed=0)
        for i, t in enumerate(turns):
            t.reward = float(i % 2)
        assign_advantages(turns, key=lambda t: 0)
        before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
        learner = AgentLearner("coder", policy, GRPOConfig(lr=1e-3, micro_batch_size=3, loss=LossConfig(tis_cap=tis_cap)))
        metrics = learner.update(turns)
        assert all(p.dtype == torch.float32 and not torch.equal(before[n], p.detach())
                   for n, p in policy.model.named_parameters())
        assert all(type(learner.optimizer.state[p]["exp_avg"]) is torch.Tensor
                   and learner.optimizer.state[p]["exp_avg"].dtype == torch.float32 for p in policy.parameters())
        mismatch[dtype] = metrics["logp_mismatch"]
        assert ("tis_capped_fraction" in metrics) == (tis_cap is not None)
    # float32 sampler and trainer agree up to float noise; bfloat16 rollouts against autocast do not
    assert mismatch["float32"] < 1e-5 and 10 * mismatch["float32"] < mismatch["bfloat16"] < 0.1


def test_frozen_agent_never_changes(policy):
    before = [p.detach().clone() for p in policy.parameters()]
    learner = AgentLearner("coder", policy, GRPOConfig(), frozen=True)
    turns = _rollout(policy, 4, seed=1)
    for i, t in enumerate(turns):
        t.reward = float(i)
    assign_advantages(turns, key=lambda t: 0)
    assert learner.update(turns) == {}
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))


def test_an_agent_refuses_turns_of_another_agent(policy):
    learner = AgentLearner("coder", policy, GRPOConfig())
    turns = _rollout(policy, 2, seed=2, agent="planner")
    for t in turns:
        t.reward, t.advantage = 1.0, 1.0
    with pytest.raises(ValueError, match="was given turns of \\['planner'\\]"):
        learner.update(turns)


def test_unique_turns_counts_shared_turns_once():
    shared = Turn("p", "planner", 0, "", "")
    a, b = Turn("c", "coder", 0, "", ""), Turn("c", "coder", 0, "", "")
    assert unique_turns([[shared, a], [shared, b]]) == [shared, a, b]


@pytest.mark.parametrize("optimizer, lr, estimator", [("adamw", 3e-3, "grpo"), ("sgd", 3.0, "dr_grpo")])
def test_grpo_learns_to_emit_a_rewarded_token(policy, optimizer, lr, estimator):
    """Reward = fraction of sampled tokens equal to one target token; it must go up."""
    target = policy.encode("a")[0]
    learner = AgentLearner("coder", policy, GRPOConfig(lr=lr, micro_batch_size=32, optimizer=optimizer))

    def reward(t: Turn) -> float:
        return sum(i == target for i in t.completion_ids) / max(1, len(t.completion_ids))

    history = []
    for step in range(25):
        turns = _rollout(policy, 32, seed=step, max_new_tokens=6)
        for t in turns:
            t.reward = reward(t)
        history.append(sum(t.reward for t in turns) / len(turns))
        assign_advantages(turns, key=lambda t: 0, estimator=estimator)
        learner.update(turns)
    # from about 1/259 (uniform); the adamw rise measured 0.22-0.45 over 16 sampling streams
    assert sum(history[-5:]) / 5 > sum(history[:5]) / 5 + 0.15, history


def test_logged_loss_is_the_token_weighted_loss_of_the_step(policy):
    # on-policy, ratio 1, no KL: the PPO loss is -(token-weighted mean advantage), over micro-batches
    learner = AgentLearner("coder", policy, GRPOConfig(lr=1e-3, micro_batch_size=3))
    turns = _rollout(policy, 8, seed=1)
    for i, t in enumerate(turns):  # advantages set by hand: not centred, so the loss is far from 0
        t.reward, t.advantage = 0.0, 1.0 if i % 2 else 0.5
    tokens = sum(len(t.completion_ids) for t in turns)
    expected = -sum(t.advantage * len(t.completion_ids) for t in turns) / tokens
    metrics = learner.update(turns)
    assert expected < -0.4
    assert metrics["loss"] == pytest.approx(expected, abs=1e-4)
    assert metrics["loss"] == pytest.approx(metrics["policy_loss"], abs=1e-6)


def test_kl_to_the_reference_is_zero_before_and_positive_after_an_update(policy):
    from coral.train.grpo import frozen_copy
    from coral.train.losses import LossConfig

    learner = AgentLearner("coder", policy, GRPOConfig(lr=1e-2, loss=LossConfig(beta_kl=0.1)),
                           reference=frozen_copy(policy))
    turns = _rollout(policy, 6, seed=2)
    for i, t in enumerate(turns):
        t.reward = float(i % 2)
    assign_advantages(turns, key=lambda t: 0)
    assert learner.update(turns)["kl"] == pytest.approx(0.0, abs=1e-6)
    assert learner.update(turns)["kl"] > 1e-4
    assert all(not p.requires_grad for p in learner.reference.parameters())


class _FixedReference:
    """A reference whose logprobs are given by hand per completion (its token ids), right padded."""

    def __init__(self, rows):
        self.rows = rows

    def forward(self, prompts, completions, temperature=1.0):
        width = max(len(c) for c in completions)
        out = torch.zeros(len(completions), width)
        mask = torch.zeros(len(completions), width, dtype=torch.bool)
        for i, row in enumerate(self.rows[tuple(c)] for c in completions):
            out[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), True
        return out, mask


def test_logged_kl_to_the_cold_start_is_the_token_mean_k3_of_the_sampled_logprobs(policy):
    # turn 0: sampled (-1, -2), reference (-1.5, -2): k3 = e^-0.5 + 0.5 - 1 and 0
    # turn 1: sampled (-0.5,), reference (-0.25,): k3 = e^0.25 - 0.25 - 1; token mean over 3 tokens
    turns = [Turn("coder", "coder", 0, "p", "a", prompt_ids=[1], completion_ids=[5, 6], logprobs=[-1.0, -2.0],
                  reward=1.0, advantage=0.0),
             Turn("coder", "coder", 0, "p", "b", prompt_ids=[1], completion_ids=[7], logprobs=[-0.5],
                  reward=1.0, advantage=0.0)]
    learner = AgentLearner("coder", policy, GRPOConfig(log_kl=True, micro_batch_size=1),
                           reference=_FixedReference({(5, 6): [-1.5, -2.0], (7,): [-0.25]}))
    expected = ((math.exp(-0.5) + 0.5 - 1) + 0.0 + (math.exp(0.25) - 0.25 - 1)) / 3
    assert learner._sampler_kl(turns) == pytest.approx(expected, abs=1e-6)
    # every turn counts, trained or not (both advantages are 0 here: nothing is trained)
    metrics = learner.update(turns)
    assert metrics["kl_ref"] == pytest.approx(expected, abs=1e-6) and metrics["trained_turns"] == 0


def test_logged_kl_is_zero_at_the_cold_start_and_grows_with_training(policy):
    from coral.train.grpo import frozen_copy

    learner = AgentLearner("coder", policy, GRPOConfig(lr=1e-2, log_kl=True), reference=frozen_copy(policy))
    first = _rollout(policy, 6, seed=2)
    for i, t in enumerate(first):
        t.reward = float(i % 2)
    assign_advantages(first, key=lambda t: 0)
    assert learner.update(first)["kl_ref"] == pytest.approx(0.0, abs=1e-5)
    assert "kl" not in learner.update(first)  # no KL term in the loss: beta_kl is 0
    later = _rollout(policy, 6, seed=3)
    for t in later:
        t.reward, t.advantage = 0.0, 0.0
    assert learner.update(later)["kl_ref"] > 1e-4


def test_log_kl_without_a_reference_is_refused(policy):
    with pytest.raises(ValueError, match="need a reference policy"):
        AgentLearner("coder", policy, GRPOConfig(log_kl=True))


def test_beta_kl_without_a_reference_is_refused(policy):
    from coral.train.losses import LossConfig

    with pytest.raises(ValueError, match="need a reference policy"):
        AgentLearner("coder", policy, GRPOConfig(loss=LossConfig(beta_kl=0.1)))


def test_sgd_step_is_minus_lr_times_the_gradient(policy):
    """optimizer="sgd": each parameter moves by exactly -lr * its gradient (clipping off here)."""
    cfg = GRPOConfig(lr=0.5, micro_batch_size=32, optimizer="sgd", max_grad_norm=1e9)
    learner = AgentLearner("coder", policy, cfg)
    assert isinstance(learner.optimizer, torch.optim.SGD)
    turns = _rollout(policy, 6, seed=3)
    for i, t in enumerate(turns):
        t.reward = float(i % 2)
    assign_advantages(turns, key=lambda t: 0, estimator="dr_grpo")
    # the gradient of the same loss at the same weights, taken by hand before the update
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    loss, _ = learner._micro_loss(turns)
    policy.model.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in policy.model.named_parameters()}
    policy.model.zero_grad()
    learner.update(turns)
    for n, p in policy.model.named_parameters():
        torch.testing.assert_close(p.detach(), before[n] - 0.5 * grads[n], rtol=1e-4, atol=1e-6)


def test_an_unknown_optimizer_is_refused_by_name():
    with pytest.raises(ValueError, match="'adam'"):
        GRPOConfig(optimizer="adam")


def test_two_updates_per_batch_equal_two_calls_on_the_same_turns(policy):
    import copy

    twin = copy.deepcopy(policy)
    turns = _rollout(policy, 8, seed=3)
    for i, t in enumerate(turns):
        t.reward, t.advantage = 0.0, 1.0 if i % 2 else -1.0
    once = AgentLearner("coder", policy, GRPOConfig(lr=3e-2, micro_batch_size=3, updates_per_batch=2))
    twice = AgentLearner("coder", twin, GRPOConfig(lr=3e-2, micro_batch_size=3))
    metrics = once.update(turns)
    first, second = twice.update(turns), twice.update(turns)
    for a, b in zip(policy.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert once.step == 1 and twice.step == 2
    assert metrics["loss_first"] == pytest.approx(first["loss"], abs=1e-6)
    assert metrics["loss"] == pytest.approx((first["loss"] + second["loss"]) / 2, abs=1e-6)
    # the second step is off-policy: ratios moved away from 1 and some tokens hit the clip
    assert first["clip_fraction"] == 0.0 and second["clip_fraction"] > 0.0
    assert metrics["clip_fraction"] == pytest.approx(second["clip_fraction"] / 2, abs=1e-6)


def test_updates_per_batch_below_one_is_rejected():
    with pytest.raises(ValueError, match="updates_per_batch must be >= 1, got 0"):
        GRPOConfig(updates_per_batch=0)


def test_reinforce_pp_baseline_whitens_each_agent_on_its_own_turns():
    """Planner rewards spread 0..10, coder rewards 0..1: pooled whitening would shrink the coder's
    advantages to +-0.12; per agent both get +-1/sqrt(2) (the std of [-a, a] is a sqrt(2))."""
    turns = [Turn(agent, agent, 0, "", "", reward=r, credit=Credit("t"))
             for agent, r in [("planner", 0.0), ("planner", 10.0), ("coder", 0.0), ("coder", 1.0)]]
    assign_advantages(turns, key=lambda t: (t.role, t.credit.task_id), estimator="reinforce_pp_baseline")
    half = 1 / 2 ** 0.5
    assert [t.advantage for t in turns] == pytest.approx([-half, half, -half, half], abs=1e-5)


def test_reward_spread_and_the_sampled_entropy_on_hand_computed_values():
    from coral.train.grpo import _sampled_entropy, grouped_rewards, reward_spread

    turns = [Turn("a", "coder", 0, "", "", reward=r, credit=Credit(str(g)))
             for r, g in [(1.0, "x"), (1.0, "y"), (0.0, "x"), (1.0, "y"), (0.5, "z")]]
    groups = grouped_rewards(turns, lambda t: t.credit.task_id)
    assert groups == [[1.0, 0.0], [1.0, 1.0], [0.5]]
    # stds 0.5, 0, 0 (a group of one has no spread); 2 of 3 groups are flat: no learning signal in them
    assert reward_spread(groups) == pytest.approx({"group_reward_std": 0.5 / 3, "zero_variance_groups": 2 / 3})
    assert reward_spread([]) == {}
    sampled = [Turn("a", "coder", 0, "", "", logprobs=[-1.0, -2.0]), Turn("a", "coder", 0, "", "", logprobs=[-3.0])]
    assert _sampled_entropy(sampled) == pytest.approx(2.0)  # (1 + 2 + 3) / 3 tokens
