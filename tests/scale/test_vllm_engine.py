"""vLLM as a rollout engine behind the rollout worker's interface (tests marked gpu skip without CUDA
and vllm): it returns the logprobs of the distribution it sampled from and loads pushed weights."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from coral.policy.base import GenerationRequest, SamplingParams, user


def test_a_vllm_engine_without_vllm_installed_names_the_install_command():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    from coral.scale.vllm_engine import VLLMEngine

    with pytest.raises(ImportError, match=r"pip install 'coral-rl\[vllm\]'"):
        VLLMEngine("some/model")


@pytest.fixture
def gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    pytest.importorskip("vllm")


@pytest.mark.gpu
def test_vllm_rollouts_carry_sampler_logprobs_and_follow_pushed_weights(gpu, ray_cluster, tmp_path):
    from coral.policy.tiny import tiny_policy
    from coral.scale import RolloutPool

    trainer = tiny_policy(seed=0, d_model=128, n_layers=2, n_heads=4, max_len=512)
    trainer.save(tmp_path / "model")
    pool = RolloutPool({"coder": f"vllm:{tmp_path / 'model'}"}, 1, trainers={"coder": trainer},
                       policy_kwargs={"dtype": "float32", "gpu_memory_utilization": 0.2, "enforce_eager": True,
                                      "max_model_len": 512}, gpus_per_worker=1)
    try:
        sampled = [GenerationRequest(user(f"task {i}"), SamplingParams(max_new_tokens=16, temperature=0.7, seed=i))
                   for i in range(4)]
        outs = pool.generate("coder", sampled)
        logprobs, mask = trainer.forward([c.prompt_ids for c in outs], [c.completion_ids for c in outs],
                                         temperature=0.7)
        for i, c in enumerate(outs):
            assert len(c.logprobs) == len(c.completion_ids) > 0
            torch.testing.assert_close(torch.tensor(c.logprobs), logprobs[i, mask[i]].float().cpu(),
                                       atol=2e-3, rtol=0)

        params = list(trainer.parameters())
        with torch.no_grad():
            for p in params:
                p.add_(torch.randn_like(p) * 0.05)  # an in-place update, as an optimiser step is
        greedy = [GenerationRequest(user(f"task {i}"), SamplingParams(max_new_tokens=16, temperature=0.0))
                  for i in range(4)]
        assert pool.sync_weights("coder") > 0
        assert [c.completion_ids for c in pool.generate("coder", greedy)] == \
            [c.completion_ids for c in trainer.generate(greedy)]
    finally:
        pool.close()
