"""VLLMPolicy against a fake `vllm` module (the real engine needs a GPU).

`FakeLLM` samples from a tiny HF model the way vLLM does and reports each sampled token's logprob as
vLLM's `logprobs_mode` says: "raw_logprobs" (vLLM's default) is log_softmax(logits), before the
temperature; "processed_logprobs" is log_softmax(logits / T), the distribution the token was drawn from.
"""

from types import SimpleNamespace

import pytest
import torch

from coral.agents.agent import make_agent
from coral.policy import vllm as vllm_module
from coral.policy.base import SamplingParams
from coral.policy.vllm import VLLMPolicy
from coral.train.grpo import AgentLearner, GRPOConfig
from coral.train.losses import LossConfig


class FakeLLM:
    hf = None  # the tiny HFPolicy whose model the fake engine runs (set by the fixture)

    def __init__(self, model: str, logprobs_mode: str = "raw_logprobs", **kwargs) -> None:
        self.model, self.logprobs_mode, self.kwargs = model, logprobs_mode, kwargs

    def get_tokenizer(self):
        return self.hf.tokenizer

    def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=False):
        return [self._one(p["prompt_token_ids"], sp) for p, sp in zip(prompts, sampling_params, strict=True)]

    def _one(self, prompt_ids, sp):
        generator = torch.Generator().manual_seed(sp.seed)
        ids, out, logprobs = list(prompt_ids), [], []
        with torch.no_grad():
            for _ in range(sp.max_tokens):
                logits = self.hf.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
                processed = torch.log_softmax(logits / sp.temperature, dim=-1)
                token = int(torch.multinomial(processed.exp(), 1, generator=generator))
                reported = processed if self.logprobs_mode == "processed_logprobs" else torch.log_softmax(logits, -1)
                ids.append(token)
                out.append(token)
                logprobs.append({token: SimpleNamespace(logprob=float(reported[token]))})
        sample = SimpleNamespace(token_ids=out, text=self.hf.decode(out), logprobs=logprobs, finish_reason="length")
        return SimpleNamespace(prompt_token_ids=list(prompt_ids), outputs=[sample])


@pytest.fixture
def fake_vllm(tiny, monkeypatch):
    FakeLLM.hf = tiny
    module = SimpleNamespace(LLM=FakeLLM, SamplingParams=lambda **kw: SimpleNamespace(**kw))
    monkeypatch.setattr(vllm_module, "import_vllm", lambda: module)
    return tiny


def test_the_engine_reports_logprobs_of_the_temperature_scaled_distribution(fake_vllm):
    assert VLLMPolicy("m").llm.logprobs_mode == "processed_logprobs"


def test_raw_logprobs_mode_is_refused_by_name(fake_vllm):
    with pytest.raises(ValueError, match="logprobs_mode='raw_logprobs'"):
        VLLMPolicy("m", logprobs_mode="raw_logprobs")


def _vllm_turns(policy, temperature: float):
    agent = make_agent("coder", policy, sampling=SamplingParams(max_new_tokens=6, temperature=temperature, seed=3))
    turns = agent.act([{"problem": f"task {i}", "plan": "1. return"} for i in range(4)], keys=[f"task{i}" for i in range(4)])
    for i, t in enumerate(turns):
        t.reward, t.advantage = 0.0, 1.0 if i % 2 else -1.0
    return turns


def test_vllm_turns_train_with_truncated_importance_sampling(fake_vllm):
    """Same weights in the engine and the trainer, temperature 0.5: the engine's processed logprobs are
    the trainer's old logprobs, so every TIS weight is 1 and the update is the on-policy one."""
    turns = _vllm_turns(VLLMPolicy("m"), temperature=0.5)
    before = [p.detach().clone() for p in fake_vllm.parameters()]
    cfg = GRPOConfig(lr=1e-2, temperature=0.5, loss=LossConfig(tis_cap=2.0))
    metrics = AgentLearner("coder", fake_vllm, cfg).update(turns)
    assert metrics["tis_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert all(not torch.equal(a, b) for a, b in zip(before, fake_vllm.parameters(), strict=True))


def test_raw_logprobs_are_not_the_samplers_at_another_temperature(fake_vllm):
    """Why the mode matters: vLLM's default (raw) logprobs at temperature 0.5 differ from the trainer's
    logprobs of the same tokens at 0.5, so TIS would reweight turns of an identical sampler."""
    policy = VLLMPolicy("m")
    policy.llm.logprobs_mode = "raw_logprobs"
    turns = _vllm_turns(policy, temperature=0.5)
    trainer, mask = fake_vllm.forward([t.prompt_ids for t in turns], [t.completion_ids for t in turns],
                                      temperature=0.5)
    raw = torch.tensor([t.logprobs for t in turns])
    assert mask.all() and (trainer.detach() - raw).abs().mean() > 0.1
