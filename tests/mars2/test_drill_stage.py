"""MARS2's keep-drill stage (MARS2Config.keep_drills): each agent's continued SFT on drills of train tasks the
first SFT never saw (a passing gold code -> itself) and the mutant fixes again, with drill_sft and its own data
seed; none without keep_drills; refused with refine_from "own"."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import coral.mars2.cold_start as cs
from coral.benchmarks.gold_codes import task_gold_codes
from coral.benchmarks.splits import build_tasks
from coral.mars2.recipe import MARS2Config
from coral.policy import tiny_policy
from coral.sandbox import Sandbox
from coral.train.sft import SFTConfig
from experiments.keep_drill import copy_probability

CFG = MARS2Config(n_train_tasks=6, keep_drills=4, refine_examples=2, solutions_per_task=2, sft_processes=1,
                  drill_sft=SFTConfig(epochs=8.0, lr=1e-2, batch_size=4, warmup_steps=2))


def _code_in_prompt(example) -> str:
    return re.search(r"Code:\n```python\n(.*?)\n```", example.messages[-1]["content"], re.S).group(1)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as box:
        yield box


def test_each_agent_continues_its_sft_on_drills_of_later_tasks_and_the_mutant_fixes(sandbox, monkeypatch, tmp_path):
    train = build_tasks(CFG.splits)[0]
    later = cs.later_train_tasks(CFG, train, CFG.keep_drills, "keep_drills")
    calls = []
    real = cs.sft_agents
    monkeypatch.setattr(cs, "sft_agents", lambda cfg, policies, data, progress, checkpoint_dir, sft: (
        calls.append((data, checkpoint_dir, sft)), real(cfg, policies, data, progress, checkpoint_dir, sft))[1])
    policies = [tiny_policy(seed=i, d_model=32, n_layers=1) for i in range(2)]
    drills = cs.drill_examples(later, "all", 2, 0)
    before = [copy_probability(p, later) for p in policies]
    cs.second_stage(CFG, policies, train, sandbox, progress=False, checkpoint_dir=tmp_path)
    ((data, where, sft),) = calls
    assert sft == CFG.drill_sft and where == tmp_path / "drill_sft"
    fixes = cs.refine_sft_examples(train, sandbox, CFG.refine_examples, CFG.seed)
    assert fixes and all(ex.completion != f"```python\n{_code_in_prompt(ex)}\n```" for ex in fixes)  # fixes: code changed
    for i, own in enumerate(data):
        assert len(own) == CFG.keep_drills + len(fixes) and all(ex in own for ex in fixes)
        kept = [ex for ex in own if ex not in fixes]
        assert [_code_in_prompt(ex) for ex in kept] != [] and all(ex.completion == f"```python\n{_code_in_prompt(ex)}\n```"
                                                                  for ex in kept)
        # drills of the later tasks only, any of their idioms (drawn with agent i's seed)
        assert {_code_in_prompt(ex) for ex in kept} <= {c.strip() for t in later for c in task_gold_codes(t)}
        assert not {_code_in_prompt(ex) for ex in kept} & {c.strip() for t in train for c in task_gold_codes(t)}
        assert sorted(map(str, kept)) == sorted(map(str, cs.drill_examples(later, "all", 2, CFG.seed + i)))
    assert data[0] != data[1]  # each agent its own draw and order
    assert sorted(map(str, drills)) == sorted(map(str, [ex for ex in data[0] if ex not in fixes]))
    after = [copy_probability(p.eval(), later) for p in policies]
    assert all(a > 10 * b for a, b in zip(after, before, strict=True))  # both agents trained: they copy likelier


def test_without_keep_drills_no_drill_stage_runs(sandbox, monkeypatch):
    monkeypatch.setattr(cs, "sft_agents", lambda *a, **k: pytest.fail("no SFT without keep_drills"))
    cs.drill_stage(replace(CFG, keep_drills=0), [], [], sandbox)


def test_keep_drills_are_refused_with_own_refine_and_below_zero():
    with pytest.raises(ValueError, match="'keep_drills' is for refine_from 'mutants'"):
        MARS2Config(keep_drills=10, refine_from="own")
    with pytest.raises(ValueError, match="'keep_drills' must be >= 0"):
        MARS2Config(keep_drills=-1)
    with pytest.raises(ValueError, match="keep_drills: `train` is not the train split"):
        cs.later_train_tasks(CFG, build_tasks(replace(CFG, seed=1).splits)[0], 2, "keep_drills")
