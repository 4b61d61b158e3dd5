"""With seeded requests, a CoRe-Code-style RL step (planner -> coder rollout, sandbox rewards, GRPO
update of both agents) gives the same rollouts, rewards and updated weights with and without Ray.

Two steps run, so the second step's rollouts also check that the first update reached the replicas (the
planner's, sent as an object, and the coder's, built from a model directory): by their logprobs, since one
update may leave every sampled token and reward unchanged."""

from __future__ import annotations

import torch


def test_rl_steps_on_ray_equal_the_steps_without_ray(ray_run, step_bench, tasks, plain):
    pushed_before = ray_run.pool.pushed_tensors
    on_ray = [step_bench.rl_step(ray_run.policies, ray_run.learners, ray_run.sandbox, tasks, s, max_new_tokens=8)
              for s in range(2)]

    assert len(set(plain.steps[0]["rewards"])) > 1, "rewards must vary, else the update is a no-op"
    assert step_bench.same_steps(plain.steps, on_ray) is None
    for role, policy in plain.trained.items():
        changed = [n for n, t in policy.model.state_dict().items() if not torch.equal(t, ray_run.initial[role][n])]
        assert changed, f"{role}: the update changed no weight"
        trained = ray_run.trainers[role].model.state_dict()
        for name, tensor in policy.model.state_dict().items():
            torch.testing.assert_close(trained[name], tensor, atol=1e-5, rtol=1e-4)
    assert ray_run.pool.pushed_tensors > pushed_before  # step 2 ran on pushed weights


def test_replicas_that_missed_the_first_update_would_fail_the_comparison_of_two_steps(step_bench, plain):
    # the comparison's power: with these models and this learning rate one update leaves every sampled
    # token and reward as it was (seen: the logprobs moved by 4e-3), so the logprobs tell stale replicas apart
    stale = [plain.steps[0], plain.stale_second_step]
    assert step_bench.same_steps(plain.steps, stale) is not None
    assert step_bench.logprob_gap(plain.steps[1], plain.stale_second_step) > 10 * step_bench.LOGPROB_ATOL


def test_a_lora_update_reaches_the_replicas_and_only_the_changed_adapter_is_pushed_once(ray_cluster):
    from coral.policy.base import GenerationRequest, SamplingParams, user
    from coral.policy.shared_lora import shared_lora
    from coral.policy.tiny import tiny_policy
    from coral.scale import ScaleOut

    views = shared_lora(tiny_policy(seed=0, d_model=32, n_layers=1, n_heads=2, max_len=256), ["planner", "coder"],
                        r=2, alpha=4)
    requests = [GenerationRequest(user(f"task {i}"), SamplingParams(max_new_tokens=8, temperature=1.0, seed=i))
                for i in range(4)]
    with ScaleOut("local", rollout_workers=2, cpus_per_worker=0.25) as scale:
        remote, _ = scale.distribute(views, None)
        coder = views["coder"]
        params = list(coder.parameters())
        with torch.no_grad():  # an update of the coder's adapter, in place as an optimiser step is
            for p in params:
                p.add_(torch.randn_like(p) * 0.5)
        for role in ("coder", "planner"):
            got, expected = remote[role].generate(requests), views[role].generate(requests)
            assert [c.completion_ids for c in got] == [c.completion_ids for c in expected]
        assert remote["coder"].pushed_tensors == len(params)  # the coder's adapter, once, for both views
        assert [c.completion_ids for c in views["coder"].generate(requests)] != \
            [c.completion_ids for c in views["planner"].generate(requests)]  # the update changed the coder
