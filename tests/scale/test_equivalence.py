"""With seeded requests, a CoRe-Code-style RL step (planner -> coder rollout, sandbox rewards, GRPO
update of both agents) gives the same rollouts, rewards and updated weights with and without Ray.

Two steps run, so the second step's rollouts also check that the first update reached the replicas."""

from __future__ import annotations

import pytest
import torch

from coral.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def tasks():
    return load_benchmark("procedural-train", limit=2, seed=0)


def assert_same_steps(expected, got):
    for a, b in zip(expected, got, strict=True):
        assert b["completion_ids"] == a["completion_ids"]
        assert b["rewards"] == a["rewards"]
        for x, y in zip(a["logprobs"], b["logprobs"], strict=True):
            # padding and thread counts differ between one batch and its shards: float rounding only
            torch.testing.assert_close(torch.tensor(y), torch.tensor(x), atol=1e-4, rtol=0)


def test_rl_steps_on_ray_equal_the_steps_without_ray(ray_run, step_bench, make_policies, tasks, local_sandbox):
    local = make_policies()
    learners = step_bench.make_learners(local)
    plain = [step_bench.rl_step(local, learners, local_sandbox, tasks, s, max_new_tokens=8) for s in range(2)]
    pushed_before = ray_run.pool.pushed_tensors
    on_ray = [step_bench.rl_step(ray_run.policies, ray_run.learners, ray_run.sandbox, tasks, s, max_new_tokens=8)
              for s in range(2)]

    assert len(set(plain[0]["rewards"])) > 1, "rewards must vary, else the update is a no-op"
    assert_same_steps(plain, on_ray)
    for role, policy in local.items():
        changed = [n for n, t in policy.model.state_dict().items() if not torch.equal(t, ray_run.initial[role][n])]
        assert changed, f"{role}: the update changed no weight"
        trained = ray_run.trainers[role].model.state_dict()
        for name, tensor in policy.model.state_dict().items():
            torch.testing.assert_close(trained[name], tensor, atol=1e-5, rtol=1e-4)
    assert ray_run.pool.pushed_tensors > pushed_before  # step 2 ran on pushed weights


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
