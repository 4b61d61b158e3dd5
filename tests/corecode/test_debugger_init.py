"""debugger_init coder: the debugger's SFT starts from the coder's SFT weights, after the other roles, and
leaves the planner and coder exactly as with debugger_init scratch (so a roles benchmark stays paired)."""

import pytest
import torch

from coral.benchmarks.splits import build_tasks
from coral.corecode.recipe import CoReCodeConfig
from coral.corecode.setup import build_policies, sft_corecode
from coral.train.checkpoints import policy_weights, weights_digest
from coral.train.sft import SFTConfig

SMALL = dict(n_train_tasks=30, n_test_tasks=2, n_fresh_tasks=0, d_model=32, n_layers=1, sandbox_workers=1,
             debug_rounds=1, sft_processes=1, tokenizer_roles=("planner", "coder", "debugger"))


def _digest(policy):
    return weights_digest(policy_weights(policy))


def _cold_start(tmp_path, init):
    cfg = CoReCodeConfig(**SMALL, debugger_init=init, out_dir=str(tmp_path / init),
                         sft=SFTConfig(epochs=0.5, lr=3e-3, batch_size=16))
    train, _ = build_tasks(cfg.splits)
    policies = build_policies(cfg, train)
    return cfg, train, policies


def test_the_debugger_trains_last_from_a_copy_of_the_coders_sft_weights(tmp_path, monkeypatch):
    seen = []

    def fake_sft(jobs, work, progress=True, processes=None, checkpoints=None):
        for name, (policy, _, _) in jobs.items():
            seen.append((name, _digest(policy)))
            with torch.no_grad():  # "training": a role-specific shift of every weight
                for p in policy_weights(policy).values():
                    p.add_(len(name) / 100)
        return {name: [0.0] for name in jobs}

    monkeypatch.setattr("coral.corecode.setup.train_sft_many", fake_sft)
    cfg, train, policies = _cold_start(tmp_path, "coder")
    coder_before = _digest(policies["coder"])
    sft_corecode(cfg, policies, train, progress=False)
    assert [name for name, _ in seen] == ["planner", "coder", "debugger"]
    assert seen[1][1] == coder_before
    assert seen[2][1] == _digest(policies["coder"])  # the coder after its SFT, as the debugger's start
    assert _digest(policies["debugger"]) != _digest(policies["coder"])  # then trained on its own data


def test_planner_and_coder_are_the_same_with_either_debugger_init(tmp_path):
    digests = {}
    for init in ("scratch", "coder"):
        cfg, train, policies = _cold_start(tmp_path, init)
        sft_corecode(cfg, policies, train, progress=False)
        digests[init] = {role: _digest(p) for role, p in policies.items()}
    assert digests["scratch"]["planner"] == digests["coder"]["planner"]
    assert digests["scratch"]["coder"] == digests["coder"]["coder"]
    assert digests["scratch"]["debugger"] != digests["coder"]["debugger"]


@pytest.mark.parametrize("fields", [dict(debug_rounds=0), dict(debug_rounds=1, lora_rank=4),
                                    dict(debug_rounds=1, model="smollm2", prompt_style="short")])
def test_debugger_init_coder_needs_a_separate_tiny_debugger(fields):
    with pytest.raises(ValueError, match="'debugger_init' 'coder'"):
        CoReCodeConfig(debugger_init="coder", **fields)
    with pytest.raises(ValueError, match="'debugger_init' must be"):
        CoReCodeConfig(debugger_init="planner")
