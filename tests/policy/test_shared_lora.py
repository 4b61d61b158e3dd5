"""Agents as LoRA adapters on one shared base: each update moves its own adapter only."""

import pytest
import torch

from coral.policy import GenerationRequest, HFPolicy, SamplingParams, user
from coral.policy.shared_lora import shared_lora
from coral.train.grpo import AgentLearner, GRPOConfig
from coral.trajectory import Turn


def _turns(policy, agent, advantages):
    """Sampled turns of `agent` (prompt/completion ids and logprobs from `policy`) with given advantages."""
    reqs = [GenerationRequest(user(f"task {i}"), SamplingParams(max_new_tokens=6, seed=i)) for i in range(len(advantages))]
    out = []
    for i, (completion, adv) in enumerate(zip(policy.generate(reqs), advantages, strict=True)):
        out.append(Turn(agent=agent, role=agent, call_index=i, prompt="", text=completion.text,
                        prompt_ids=list(completion.prompt_ids), completion_ids=list(completion.completion_ids),
                        logprobs=list(completion.logprobs), reward=adv, advantage=adv))
    return out


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_each_agent_updates_only_its_own_adapter_on_the_shared_base(tiny):
    views = shared_lora(tiny, ["planner", "coder"], r=4, alpha=8)
    planner, coder = views["planner"], views["coder"]
    assert planner.model is coder.model  # one base in memory
    base_ids = {id(p) for n, p in planner.model.named_parameters() if ".lora_" not in n}
    assert base_ids and all(not p.requires_grad for n, p in planner.model.named_parameters() if ".lora_" not in n)
    own = {r: {n for n, _ in v.own_parameters()} for r, v in views.items()}
    assert own["planner"] and own["coder"] and not own["planner"] & own["coder"]
    learners = {r: AgentLearner(r, v, GRPOConfig(lr=1e-2)) for r, v in views.items()}
    for role, other in (("planner", "coder"), ("coder", "planner")):
        before = _snapshot(planner.model)
        for _ in range(2):  # B starts at 0, so A's first gradient is 0: two steps move both
            metrics = learners[role].update(_turns(views[role], role, [1.0, -1.0, 0.5, -0.5]))
            assert metrics["trained_turns"] == 4 and torch.isfinite(torch.tensor(metrics["loss"]))
        after = _snapshot(planner.model)
        changed = {n for n in after if not torch.equal(before[n], after[n])}
        assert changed == own[role], f"{role}'s update changed {sorted(changed - own[role])[:3]}"
        assert not changed & own[other]


def test_views_generate_with_their_own_adapter_and_checkpoint_it(tiny):
    views = shared_lora(tiny, ["one", "two"], r=4, alpha=8)
    for n, p in views["one"].own_parameters():  # B starts at 0: give adapter a an effect
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.5)
    prompts, completions = [[5, 6, 7]], [[8, 9, 10]]
    with torch.no_grad():
        a, _ = views["one"].forward(prompts, completions)
        b, _ = views["two"].forward(prompts, completions)
        base = views["two"].model.get_base_model()
        ids = torch.tensor([prompts[0] + completions[0]])
        with views["two"].model.disable_adapter():
            plain = torch.log_softmax(base(input_ids=ids).logits[0, 2:5].float(), -1)
    assert not torch.allclose(a, b)
    torch.testing.assert_close(b[0], plain.gather(-1, torch.tensor([[8], [9], [10]])).squeeze(-1))  # b is still the base
    state = views["one"].state_dict()
    assert state and all(".one." not in k and "lora_" in k for k in state)
    for _, p in views["one"].own_parameters():
        torch.nn.init.zeros_(p)
    views["one"].load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(views["one"].forward(prompts, completions)[0], a)
    with pytest.raises(ValueError, match="state does not match"):
        views["one"].load_state_dict({})


def test_a_saved_view_loads_as_an_ordinary_lora_policy(tiny, tmp_path):
    views = shared_lora(tiny, ["planner", "coder"], r=4, alpha=8)
    for n, p in views["coder"].own_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.5)
    views["coder"].save(tmp_path / "coder")
    loaded = HFPolicy.load(tmp_path / "coder")
    prompts, completions = [[5, 6, 7], [11, 12]], [[8, 9], [13, 14, 15]]
    with torch.no_grad():
        torch.testing.assert_close(loaded.forward(prompts, completions)[0], views["coder"].forward(prompts, completions)[0])
    trained = {n for n, p in loaded.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    views["planner"].adopt(loaded)  # e.g. SFT trained a copy in another process: its adapter comes back
    with torch.no_grad():
        torch.testing.assert_close(views["planner"].forward(prompts, completions)[0], loaded.forward(prompts, completions)[0])


def test_shared_lora_refuses_repeated_names_and_an_adapted_policy(tiny):
    with pytest.raises(ValueError, match="distinct agent names"):
        shared_lora(tiny, ["x", "x"])
    with pytest.raises(ValueError, match="adapter name 'a' is part of 'lora_'"):
        shared_lora(tiny, ["a", "coder"])
    tiny.add_lora(r=2, alpha=4)
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        shared_lora(tiny, ["planner", "coder"])
