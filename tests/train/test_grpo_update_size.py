"""Golden tests of the size of one GRPO update, on a policy whose gradient is known by hand.

`UnigramPolicy` ignores the prompt: logp(token) = log_softmax(logits)[token], so with logits 0 over
two tokens every token has p = 1/2, ratio_t = 1 on-policy, and d ratio_t / d logits = e_token - p.
With plain SGD (lr 1, no clipping) the parameter change is minus the gradient, computed by hand below.
"""

import math

import pytest
import torch

from coral.train.grpo import AgentLearner, GRPOConfig
from coral.train.losses import LossConfig
from coral.trajectory import Turn

HALF = math.log(0.5)


class UnigramPolicy:
    def __init__(self, vocab: int = 2) -> None:
        self.logits = torch.nn.Parameter(torch.zeros(vocab))
        self.forward_calls = 0

    def parameters(self):
        return iter([self.logits])

    def forward(self, prompt_ids, completion_ids, temperature: float = 1.0):
        self.forward_calls += 1
        width = max(len(c) for c in completion_ids)
        tokens = torch.tensor([list(c) + [0] * (width - len(c)) for c in completion_ids])
        mask = torch.tensor([[j < len(c) for j in range(width)] for c in completion_ids])
        logprobs = torch.log_softmax(self.logits / temperature, dim=-1)[tokens]
        return logprobs.masked_fill(~mask, 0.0), mask

    def train(self):
        return self

    def eval(self):
        return self


def turn(tokens: list[int], advantage: float, logprobs: list[float] | None = None) -> Turn:
    return Turn("coder", "coder", 0, "", "", prompt_ids=[0], completion_ids=tokens,
                logprobs=logprobs if logprobs is not None else [HALF] * len(tokens), reward=0.0,
                advantage=advantage)


def sgd(**kwargs) -> GRPOConfig:
    return GRPOConfig(lr=1.0, optimizer="sgd", max_grad_norm=1e9, **kwargs)


# Two turns with advantages +1 and -1 and two tied turns (advantage 0): loss = -(1/N) sum_i A_i ratio_i,
# gradient -(1/N) [(e0 - p) - (e1 - p)] = -(1/N) [1, -1], N = 4 tokens (or sequences): the tied turns
# add no loss but count in the normaliser, as in verl and TRL. Skipping them from N doubled the step.
TIED = [turn([0], 1.0), turn([1], -1.0), turn([0], 0.0), turn([1], 0.0)]


@pytest.mark.parametrize("norm", ["token", "sequence"])
@pytest.mark.parametrize("micro_batch_size", [1, 4])
def test_zero_advantage_turns_stay_in_the_normaliser(norm, micro_batch_size):
    policy = UnigramPolicy()
    learner = AgentLearner("coder", policy, sgd(micro_batch_size=micro_batch_size, loss=LossConfig(norm=norm)))
    metrics = learner.update(TIED)
    torch.testing.assert_close(policy.logits.detach(), torch.tensor([0.25, -0.25]))
    assert metrics["trained_turns"] == 2.0 and metrics["turns"] == 4.0
    assert metrics["loss"] == pytest.approx(0.0, abs=1e-7)  # -(1 - 1) / 4
    assert metrics["ratio_mean"] == pytest.approx(1.0)  # diagnostics average the trained turns only


def test_zero_advantage_turns_stay_in_the_constant_normaliser():
    policy = UnigramPolicy()
    learner = AgentLearner("coder", policy, sgd(loss=LossConfig(norm="constant", max_tokens=2)))
    learner.update(TIED)
    torch.testing.assert_close(policy.logits.detach(), torch.tensor([0.125, -0.125]))  # N = 4 x 2


def test_skipping_zero_advantage_turns_changes_nothing_but_the_work():
    skipped, kept = UnigramPolicy(), UnigramPolicy()
    AgentLearner("coder", skipped, sgd()).update(TIED)
    AgentLearner("coder", kept, sgd(skip_zero_advantage=False)).update(TIED)
    torch.testing.assert_close(skipped.logits.detach(), kept.logits.detach())


# ------------------------------------------------------------------ truncated importance sampling
# A stale sampler gave token 0 probability 1/4 and token 1 probability 1: the trainer's old logprobs
# are log 1/2 (recomputed), so w_0 = min(0.5 / 0.25, cap 1.5) = 1.5 and w_1 = 0.5 / 1 = 0.5. The ratio is
# to the trainer's old policy (1 here), not to the sampler (which would read 2 and 0.5, both clipped).
# loss = -(1/2) [1.5 x 1 - 0.5 x 1] = -0.5; gradient -(1/2) [1.5 (e0 - p) - 0.5 (e1 - p)] = [-0.5, 0.5].
STALE = [turn([0], 1.0, [math.log(0.25)]), turn([1], -1.0, [0.0])]


def test_tis_weights_the_loss_by_the_capped_trainer_to_sampler_ratio():
    policy = UnigramPolicy()
    learner = AgentLearner("coder", policy, sgd(loss=LossConfig(tis_cap=1.5)))
    metrics = learner.update(STALE)
    assert metrics["loss"] == pytest.approx(-0.5)
    assert metrics["ratio_mean"] == pytest.approx(1.0)
    assert metrics["tis_weight_mean"] == pytest.approx(1.0)  # (1.5 + 0.5) / 2
    assert metrics["tis_capped_fraction"] == pytest.approx(0.5)
    torch.testing.assert_close(policy.logits.detach(), torch.tensor([0.5, -0.5]))


def test_tis_old_logprobs_are_taken_once_before_the_first_step():
    policy = UnigramPolicy()
    learner = AgentLearner("coder", policy, sgd(loss=LossConfig(tis_cap=1.5), updates_per_batch=2))
    metrics = learner.update(STALE)
    # the weights of both steps are those of the policy that the batch was trained from
    assert metrics["tis_weight_mean"] == pytest.approx(1.0)
    # the second step is off-policy: ratios 1.46 and 0.54 (logits +-0.5), both outside the clip
    assert metrics["clip_fraction"] == pytest.approx(0.5)  # mean of 0 (first step) and 1 (second)
    assert policy.forward_calls == 3  # old logprobs once, then one forward per step


def test_one_step_per_batch_with_tis_takes_the_old_logprobs_from_its_own_forward():
    policy = UnigramPolicy()
    learner = AgentLearner("coder", policy, sgd(loss=LossConfig(tis_cap=1.5)))
    learner.update(STALE)
    assert policy.forward_calls == 1  # the step's forward, detached, is the old policy: no extra pass
    torch.testing.assert_close(policy.logits.detach(), torch.tensor([0.5, -0.5]))


@pytest.mark.parametrize("tis_cap", [None, 1.5])
@pytest.mark.parametrize("updates_per_batch", [1, 2])
def test_the_sampler_trainer_mismatch_of_the_first_step_is_logged(tis_cap, updates_per_batch):
    # |log 1/4 - log 1/2| = |0 - log 1/2| = log 2 for both tokens, whatever the later steps do
    cfg = sgd(loss=LossConfig(tis_cap=tis_cap), updates_per_batch=updates_per_batch)
    metrics = AgentLearner("coder", UnigramPolicy(), cfg).update(STALE)
    assert metrics["logp_mismatch"] == pytest.approx(math.log(2))


def test_without_tis_the_turn_logprobs_are_the_old_policy():
    policy = UnigramPolicy()
    metrics = AgentLearner("coder", policy, sgd()).update([turn([0], 1.0), turn([1], -1.0)])
    assert metrics["ratio_mean"] == pytest.approx(1.0) and "tis_weight_mean" not in metrics
    assert policy.forward_calls == 1


def test_a_non_finite_gradient_stops_the_update_before_it_reaches_the_weights():
    policy = UnigramPolicy()
    with torch.no_grad():
        policy.logits[0] = float("nan")  # a broken forward: NaN logprobs, NaN loss, NaN gradient
    before = policy.logits.detach().clone()
    with pytest.raises(RuntimeError, match="agent 'coder': non-finite gradient norm"):
        AgentLearner("coder", policy, sgd()).update([turn([0], 1.0), turn([1], -1.0)])
    torch.testing.assert_close(policy.logits.detach(), before, equal_nan=True)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"advantage": "ppo"}, "advantage"), ({"micro_batch_size": 0}, "micro_batch_size"), ({"lr": 0.0}, "lr"),
    ({"max_grad_norm": 0.0}, "max_grad_norm"), ({"temperature": 0.0}, "temperature"),
])
def test_bad_grpo_settings_are_refused_by_name(kwargs, field):
    with pytest.raises(ValueError, match=f"GRPOConfig.{field}"):
        GRPOConfig(**kwargs)
