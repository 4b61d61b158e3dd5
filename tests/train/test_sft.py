import json

import pytest
import torch

from coral.benchmarks.procedural import make_tasks
from coral.policy import tiny_policy
from coral.train.sft import SFTConfig, corecode_sft_examples, load_sft_jsonl, train_sft


def test_sft_lowers_the_loss_and_changes_every_parameter():
    tasks = make_tasks(24, "train", max_depth=2, seed=0)
    examples = corecode_sft_examples(tasks)["coder"]
    policy = tiny_policy(seed=0, d_model=32, n_layers=1)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    losses = train_sft(policy, examples, SFTConfig(epochs=10, batch_size=8, lr=3e-3, warmup_steps=2), progress=False)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3
    assert [n for n, p in policy.model.named_parameters() if torch.equal(before[n], p.detach())] == []


def test_gold_data_pairs_problem_with_plan_and_code():
    task = make_tasks(1, "train", seed=1)[0]
    data = corecode_sft_examples([task])
    assert data["planner"][0].completion == task.metadata["gold_plan"]
    assert task.metadata["gold_plan"] in data["coder"][0].messages[-1]["content"]
    assert data["coder"][0].completion.startswith("```python\n" + task.reference.strip()[:10])


def test_jsonl_loader_accepts_prompt_or_messages_and_names_bad_lines(tmp_path):
    good = tmp_path / "d.jsonl"
    good.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n"
                    + json.dumps({"messages": [{"role": "user", "content": "q"}], "completion": "a"}) + "\n")
    assert [e.completion for e in load_sft_jsonl(good)] == ["c", "a"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: line 2 is not valid JSON"):
        load_sft_jsonl(bad)
    bad.write_text(json.dumps({"prompt": "p"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: record 1 needs a string field 'completion'"):
        load_sft_jsonl(bad)
