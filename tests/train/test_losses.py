"""Golden tests for coral.train.losses: losses, gradients and metrics computed by hand.

Inputs are built so the ratios are literal numbers: old_logprobs = 0 and logprobs = log(ratio).
Batch: B = 2, T = 3, the second sequence has 2 real tokens and one padded position.
"""

import math

import pytest
import torch

from coral.train.losses import LossConfig, aggregate, kl_k3, policy_loss, tis_weights

MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
OLD = torch.zeros(2, 3)
E01 = math.exp(0.1)  # 1.1051709


def logprobs_for(ratios: list[list[float]]) -> torch.Tensor:
    return torch.log(torch.tensor(ratios)).requires_grad_(True)


def close(actual: torch.Tensor | float, expected, atol: float = 1e-5) -> None:
    actual = torch.as_tensor(actual, dtype=torch.float32)
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=torch.float32), rtol=1e-5, atol=atol)


# ------------------------------------------------------------------ PPO clip, no clipping active
# ratios row 0 (A = +1): 1.1, 0.9, 1.0 -> loss_t = -r: -1.1, -0.9, -1.0
# ratios row 1 (A = -1): 1.0, 1.1, pad -> loss_t = +r:  1.0,  1.1
UNCLIPPED = [[1.1, 0.9, 1.0], [1.0, 1.1, 0.5]]
ADV = torch.tensor([1.0, -1.0])


@pytest.mark.parametrize(
    ("norm", "expected"),
    [("token", -0.9 / 5), ("sequence", (-1.0 + 1.05) / 2), ("constant", -0.9 / (2 * 4))],
)
def test_ppo_clip_loss_without_clipping_in_each_normalisation(norm, expected):
    cfg = LossConfig(norm=norm, max_tokens=4)
    loss, metrics = policy_loss(cfg, logprobs_for(UNCLIPPED), OLD, ADV, MASK)
    close(loss, expected)
    assert metrics["clip_fraction"] == 0.0


def test_ppo_clip_metrics_report_the_mean_ratio_over_masked_tokens():
    _, metrics = policy_loss(LossConfig(), logprobs_for(UNCLIPPED), OLD, ADV, MASK)
    close(metrics["ratio_mean"], (1.1 + 0.9 + 1.0 + 1.0 + 1.1) / 5)
    assert metrics["tokens"] == 5.0


def test_ppo_clip_gradient_with_sequence_normalisation():
    lp = logprobs_for(UNCLIPPED)
    policy_loss(LossConfig(norm="sequence"), lp, OLD, ADV, MASK)[0].backward()
    # d/dlp_t = -A r_t / n_i / B
    close(lp.grad, [[-1.1 / 6, -0.9 / 6, -1.0 / 6], [1.0 / 4, 1.1 / 4, 0.0]])


def test_ppo_clip_gradient_with_constant_normalisation():
    lp = logprobs_for(UNCLIPPED)
    policy_loss(LossConfig(norm="constant", max_tokens=4), lp, OLD, ADV, MASK)[0].backward()
    close(lp.grad, [[-1.1 / 8, -0.9 / 8, -1.0 / 8], [1.0 / 8, 1.1 / 8, 0.0]])


# ------------------------------------------------------------------ PPO clip, clipping active
# row 0 (A = +1): r = 1.5 -> -min(1.5, 1.2) = -1.2 (clipped high), r = 0.5 -> -0.5, r = 1.0 -> -1.0
# row 1 (A = -1): r = 0.5 -> -min(-0.5, -0.8) = 0.8 (clipped low), r = 1.5 -> -min(-1.5, -1.2) = 1.5
CLIPPED = [[1.5, 0.5, 1.0], [0.5, 1.5, 1.0]]


def test_ppo_clip_loss_with_clipping_active():
    loss, _ = policy_loss(LossConfig(), logprobs_for(CLIPPED), OLD, ADV, MASK)
    close(loss, (-1.2 - 0.5 - 1.0 + 0.8 + 1.5) / 5)


def test_ppo_clip_gradient_is_zero_on_clipped_tokens():
    lp = logprobs_for(CLIPPED)
    policy_loss(LossConfig(), lp, OLD, ADV, MASK)[0].backward()
    close(lp.grad, [[0.0, -0.5 / 5, -1.0 / 5], [0.0, 1.5 / 5, 0.0]])


def test_ppo_clip_counts_low_and_high_clipped_tokens():
    _, metrics = policy_loss(LossConfig(), logprobs_for(CLIPPED), OLD, ADV, MASK)
    assert (metrics["clip_high_fraction"], metrics["clip_low_fraction"]) == pytest.approx((0.2, 0.2))
    assert metrics["clip_fraction"] == pytest.approx(0.4)


def test_eps_high_alone_widens_the_upper_clip():
    lp = logprobs_for([[1.25, 1.0, 1.0], [1.0, 1.0, 1.0]])
    tight, _ = policy_loss(LossConfig(eps_high=0.2), lp, OLD, ADV, MASK)
    loose, _ = policy_loss(LossConfig(eps_high=0.28), lp, OLD, ADV, MASK)
    close(tight, (-1.2 - 1.0 - 1.0 + 1.0 + 1.0) / 5)
    close(loose, (-1.25 - 1.0 - 1.0 + 1.0 + 1.0) / 5)


def test_eps_low_alone_sets_the_lower_clip():
    lp = logprobs_for([[1.0, 1.0, 1.0], [0.75, 1.0, 1.0]])  # A = -1 on row 1
    loss, _ = policy_loss(LossConfig(eps_low=0.1, eps_high=0.0), lp, OLD, ADV, MASK)
    close(loss, (-1.0 - 1.0 - 1.0 + 0.9 + 1.0) / 5)


# ------------------------------------------------------------------ GSPO
# log-ratios row 0: 0.3, -0.1, 0.1 (mean 0.1); row 1: 0.0, 0.2, pad (mean 0.1) -> s_0 = s_1 = e^0.1
GSPO_LP = [[0.3, -0.1, 0.1], [0.0, 0.2, 9.0]]
GSPO_ADV = torch.tensor([1.0, -2.0])  # loss_0 = -e^0.1, loss_1 = 2 e^0.1 (unclipped)


def gspo_logprobs() -> torch.Tensor:
    return torch.tensor(GSPO_LP).requires_grad_(True)


@pytest.mark.parametrize(
    ("norm", "expected"),
    [("sequence", E01 / 2), ("token", (-3 * E01 + 2 * 2 * E01) / 5), ("constant", E01 / 8)],
)
def test_gspo_loss_without_clipping_in_each_normalisation(norm, expected):
    cfg = LossConfig(kind="gspo", norm=norm, max_tokens=4)
    loss, metrics = policy_loss(cfg, gspo_logprobs(), OLD, GSPO_ADV, MASK)
    close(loss, expected)
    assert metrics["clip_fraction"] == 0.0


def test_gspo_gradient_flows_to_every_token_through_the_sequence_mean():
    lp = gspo_logprobs()
    policy_loss(LossConfig(kind="gspo", norm="sequence"), lp, OLD, GSPO_ADV, MASK)[0].backward()
    # d/dlp_t = -A_i s_i / n_i / B
    row0, row1 = -E01 / 3 / 2, 2 * E01 / 2 / 2
    close(lp.grad, [[row0, row0, row0], [row1, row1, 0.0]])


def test_gspo_gradient_with_token_normalisation():
    lp = gspo_logprobs()
    policy_loss(LossConfig(kind="gspo", norm="token"), lp, OLD, GSPO_ADV, MASK)[0].backward()
    row0, row1 = -E01 / 5, 2 * E01 / 5  # n_i/N * (-A_i s_i / n_i)
    close(lp.grad, [[row0, row0, row0], [row1, row1, 0.0]])


def test_gspo_with_small_eps_clips_the_whole_sequence():
    cfg = LossConfig(kind="gspo", eps_low=3e-4, eps_high=4e-4, norm="sequence")
    lp = gspo_logprobs()
    loss, metrics = policy_loss(cfg, lp, OLD, GSPO_ADV, MASK)
    loss.backward()
    close(loss, (-1.0004 + 2 * E01) / 2)  # row 0 clipped at 1 + 4e-4; row 1 has A < 0, not clipped
    close(lp.grad, [[0.0, 0.0, 0.0], [E01 / 2, E01 / 2, 0.0]])
    assert metrics["clip_fraction"] == pytest.approx(3 / 5)  # row 0's 3 tokens of 5


def test_gspo_clips_on_the_sequence_ratio_not_the_token_ratios():
    lp = torch.tensor([[0.5, -0.5, 0.0], [0.0, 0.0, 0.0]])  # token ratios e^0.5, e^-0.5; mean 0
    _, gspo_metrics = policy_loss(LossConfig(kind="gspo"), lp, OLD, ADV, MASK)
    _, ppo_metrics = policy_loss(LossConfig(kind="ppo_clip"), lp, OLD, ADV, MASK)
    assert gspo_metrics["clip_fraction"] == 0.0 and ppo_metrics["clip_fraction"] == pytest.approx(1 / 5)


# ------------------------------------------------------------------ KL k3
def test_kl_k3_values():
    lp = torch.zeros(3)
    ref = torch.log(torch.tensor([2.0, 0.5, 1.0]))
    # exp(d) - d - 1 with d = ref - lp: 2 - ln2 - 1, 0.5 + ln2 - 1, 0
    close(kl_k3(lp, ref), [0.3068528, 0.1931472, 0.0])


def test_kl_term_adds_beta_times_k3_and_its_gradient():
    lp = torch.zeros(1, 2, requires_grad=True)
    ref = torch.full((1, 2), math.log(2.0))
    mask = torch.ones(1, 2)
    cfg = LossConfig(beta_kl=0.1)
    loss, metrics = policy_loss(cfg, lp, torch.zeros(1, 2), torch.zeros(1), mask, ref_logprobs=ref)
    loss.backward()
    close(loss, 0.1 * 0.3068528)
    close(metrics["kl"], 0.3068528)
    close(lp.grad, [[-0.05, -0.05]])  # beta * (1 - exp(ref - lp)) / N = 0.1 * (1 - 2) / 2


def test_kl_is_reported_but_not_added_when_beta_is_zero():
    ref = torch.full((2, 3), math.log(2.0))
    loss, metrics = policy_loss(LossConfig(), logprobs_for(UNCLIPPED), OLD, ADV, MASK, ref_logprobs=ref)
    close(loss, -0.9 / 5)
    assert metrics["kl"] > 0


# ------------------------------------------------------------------ truncated importance sampling
SAMPLER = torch.log(torch.tensor([[0.25, 2.0, 0.8]]))  # exp(old - sampler) = 4, 0.5, 1.25


def test_tis_weights_are_truncated_at_the_cap():
    w = tis_weights(torch.zeros(1, 3), SAMPLER, torch.ones(1, 3, dtype=torch.bool), cap=1.5)
    close(w, [[1.5, 0.5, 1.25]])


def test_tis_weights_multiply_the_policy_loss_and_its_gradient():
    lp = torch.zeros(1, 3, requires_grad=True)
    cfg = LossConfig(tis_cap=1.5)
    mask = torch.ones(1, 3)
    loss, metrics = policy_loss(cfg, lp, torch.zeros(1, 3), torch.ones(1), mask, sampler_logprobs=SAMPLER)
    loss.backward()
    close(loss, -(1.5 + 0.5 + 1.25) / 3)
    close(lp.grad, [[-1.5 / 3, -0.5 / 3, -1.25 / 3]])
    assert metrics["tis_capped_fraction"] == pytest.approx(1 / 3)


def test_tis_weights_are_detached():
    sampler = SAMPLER.clone().requires_grad_(True)
    w = tis_weights(torch.zeros(1, 3), sampler, torch.ones(1, 3, dtype=torch.bool), cap=2.0)
    assert not w.requires_grad


# ------------------------------------------------------------------ robustness and validation
def test_padding_may_hold_minus_infinity():
    lp = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, float("-inf")]], requires_grad=True)
    ref = torch.zeros(2, 3)
    for kind in ("ppo_clip", "gspo"):
        loss, _ = policy_loss(LossConfig(kind=kind, beta_kl=0.1), lp, OLD, ADV, MASK, ref_logprobs=ref)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()


def test_aggregate_sequence_mode_skips_empty_sequences():
    loss = torch.tensor([[1.0, 3.0], [100.0, 100.0]])
    mask = torch.tensor([[True, True], [False, False]])
    close(aggregate(loss, mask, "sequence"), 2.0)


def test_shape_mismatch_names_the_tensors_and_shapes():
    with pytest.raises(ValueError, match=r"old_logprobs has shape \(2, 4\) but logprobs has shape \(2, 3\)"):
        policy_loss(LossConfig(), torch.zeros(2, 3), torch.zeros(2, 4), ADV, MASK)


def test_advantages_of_the_wrong_shape_raise():
    with pytest.raises(ValueError, match=r"advantages has shape \(3,\)"):
        policy_loss(LossConfig(), torch.zeros(2, 3), OLD, torch.zeros(3), MASK)


def test_beta_kl_without_ref_logprobs_raises():
    with pytest.raises(ValueError, match="ref_logprobs is None"):
        policy_loss(LossConfig(beta_kl=0.1), torch.zeros(2, 3), OLD, ADV, MASK)


def test_tis_cap_without_sampler_logprobs_raises():
    with pytest.raises(ValueError, match="sampler_logprobs is missing"):
        policy_loss(LossConfig(tis_cap=2.0), torch.zeros(2, 3), OLD, ADV, MASK)


def test_an_empty_mask_raises():
    with pytest.raises(ValueError, match="no tokens"):
        policy_loss(LossConfig(), torch.zeros(2, 3), OLD, ADV, torch.zeros(2, 3))


def test_a_weighted_mask_raises():
    with pytest.raises(ValueError, match="only 0 and 1"):
        policy_loss(LossConfig(), torch.zeros(2, 3), OLD, ADV, torch.full((2, 3), 0.5))


def test_sequences_longer_than_max_tokens_raise_in_constant_mode():
    with pytest.raises(ValueError, match="3 masked tokens > LossConfig.max_tokens=2"):
        policy_loss(LossConfig(norm="constant", max_tokens=2), torch.zeros(2, 3), OLD, ADV, MASK)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "dpo"}, "kind"),
        ({"norm": "batch"}, "norm"),
        ({"norm": "constant"}, "max_tokens"),
        ({"eps_low": 1.0}, "eps_low"),
        ({"tis_cap": 0.0}, "tis_cap"),
        ({"beta_kl": -1.0}, "beta_kl"),
    ],
)
def test_invalid_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"LossConfig.{field}"):
        LossConfig(**kwargs)
