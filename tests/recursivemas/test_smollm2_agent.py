"""RecursiveMAS with a real pretrained agent: SmolLM2-135M (d 576, vocabulary 49152, its own chat template)
as the expert and a tiny agent (d 32, its own BPE) as the learner, through `agent_models`."""

from __future__ import annotations

import json

import pytest
import torch

from coral.recursivemas.agents import build_agents, build_records
from coral.recursivemas.config import InnerLoopConfig, OuterLoopConfig, RecursiveMASConfig
from coral.recursivemas.evaluate import run_text_mas
from coral.recursivemas.recipe import build_system
from coral.recursivemas.system import edge_key
from coral.recursivemas.train import inner_step, new_state, outer_step
from tests.policy.smollm2_support import smollm2_file_or_skip

RECORDS = [{"question": f"Write f(x) returning x + {i}.", "plan": f"add {i} to x",
            "refined_plan": f"add {i} to x -> return x + {i}", "answer": f"def f(x):\n    return x + {i}"}
           for i in range(4)]


@pytest.mark.slow(reason="loads SmolLM2-135M (~10 s cached, ~1 min the first time) and runs it forward and "
                         "backward through two rounds: ~30-60 s on the loaded 2-core machine")
def test_smollm2_and_a_tiny_agent_train_links_only_and_decode(tmp_path):
    smollm2_file_or_skip()
    data = tmp_path / "records.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    cfg = RecursiveMASConfig(pattern="distillation", rounds=2, latent_steps=2, data=str(data), n_train_tasks=2,
                             n_test_tasks=1, agent_models=("smollm2", "tiny"), agent_widths=(32,), n_layers=1,
                             vocab_size=300, inner=InnerLoopConfig(steps=1, lr=1e-2, warmup_steps=0),
                             outer=OuterLoopConfig(steps=1, lr=1e-2, warmup_steps=0), batch_size=2,
                             out_dir=str(tmp_path / "run"))
    train, _ = build_records(cfg)
    agents = build_agents(cfg, train)
    expert, learner = agents["expert"], agents["learner"]
    assert expert.model.config.hidden_size == 576 and len(expert.tokenizer) == 49152
    assert learner.model.config.hidden_size == 32 and len(learner.tokenizer) == 300
    system = build_system(cfg, agents)  # link_init aligned on the token strings both vocabularies hold
    assert system.outer[edge_key("expert", "learner")].w3.weight.shape == (32, 576)
    lm_before = {r: [p.detach().clone() for p in a.model.parameters()] for r, a in agents.items()}
    links_before = {k: v.clone() for k, v in system.state_dict().items()}
    state = new_state(cfg, system)

    inner = inner_step(state, train)
    outer = outer_step(state, train)
    assert all(torch.isfinite(torch.tensor(v)) for v in (*inner.values(), *outer.values()))
    after = system.state_dict()
    for name in ("inner.expert.w1.weight", "inner.learner.w1.weight", "outer.expert__to__learner.w1.weight",
                 "outer.learner__to__expert.w1.weight"):
        assert not torch.equal(links_before[name], after[name]), f"{name} did not change"
    for role, agent in agents.items():
        assert all(torch.equal(a, b) for a, b in zip(lm_before[role], agent.model.parameters(), strict=True)), role

    replies = system.answer([r.question for r in train], rounds=2, max_new_tokens=4)
    assert [1 <= r.decoded_tokens <= 4 for r in replies] == [True, True]
    texts, tokens = run_text_mas(system.pattern, agents, train, rounds=1, max_new_tokens=4)
    assert len(texts) == 2 and all(1 <= n <= 8 for n in tokens)  # two agents decode up to 4 tokens each
