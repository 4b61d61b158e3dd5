"""experiments/keep_drill.py: the drills hold a passing gold code and ask for it back, the two copy figures score a
copier 1, and a tiny model drilled on keep examples copies more likely than before."""

from __future__ import annotations

import json
import re

import pytest

from coral.benchmarks.gold_codes import gold_solutions, task_gold_codes
from coral.benchmarks.procedural import make_tasks
from coral.mars2.cold_start import all_pass_refine, drill_examples
from coral.policy import ScriptedPolicy, tiny_policy
from coral.train.sft import SFTConfig, train_sft
from experiments.keep_drill import copy_probability, main
from experiments.refine_copy_probe import copied_share

TASKS = make_tasks(30, "train", min_depth=2, max_depth=2, seed=0)


def _code_in_prompt(messages) -> str:
    return re.search(r"Code:\n```python\n(.*?)\n```", messages[-1]["content"], re.S).group(1)


def test_a_drill_asks_for_the_passing_gold_code_it_holds():
    for idioms in ("all", "agent"):
        for task, ex in zip(TASKS, drill_examples(TASKS, idioms, per_task=2, seed=0), strict=True):
            code = _code_in_prompt(ex.messages)
            n = len(task.public_tests)
            assert ex.messages[-1]["content"].endswith(f"Feedback:\n{n}/{n} tests passed.\nImproved code:")
            assert ex.completion == f"```python\n{code}\n```"
            pool = task_gold_codes(task) if idioms == "all" else gold_solutions(task, 2, 0)
            assert code in [c.strip() for c in pool]
    agent = [c.strip() for t in TASKS for c in gold_solutions(t, 2, 0)]
    outside = [ex for ex in drill_examples(TASKS, "all", 2, 0) if _code_in_prompt(ex.messages) not in agent]
    assert outside  # "all" shows idioms the agent never learnt to write: only copying answers them
    with pytest.raises(ValueError, match="idioms must be"):
        drill_examples(TASKS, "some", 2, 0)


def test_a_copier_is_copied_every_time_and_a_writer_of_another_code_never():
    echo = ScriptedPolicy(lambda m: f"```python\n{_code_in_prompt(m)}\n```", name="copier")
    assert copied_share(echo, TASKS[:3], temperature=1.0, samples=2) == 1.0
    other = TASKS[5].reference.strip()
    assert copied_share(ScriptedPolicy(lambda m: f"```python\n{other}\n```", name="other"), TASKS[:3],
                        temperature=1.0, samples=4) == 0.0


def test_a_tiny_model_drilled_on_keep_examples_copies_more_likely():
    policy = tiny_policy(seed=0, d_model=32, n_layers=1)
    tasks = TASKS[:2]
    before = copy_probability(policy, tasks)
    assert 0 < before < 1e-6
    train_sft(policy, [all_pass_refine(t, t.reference.strip(), t.reference.strip()) for t in tasks] * 8,
              SFTConfig(epochs=6, lr=1e-2, batch_size=4, warmup_steps=2), progress=False)
    assert copy_probability(policy.eval(), tasks) > 1e3 * before


def test_main_measures_a_saved_agent_and_drills_a_copy_of_it(tmp_path, capsys):
    tiny_policy(seed=0, d_model=32, n_layers=1).save(tmp_path / "agent")
    main([str(tmp_path / "agent"), "--train-keep", "4", "--n-train", "4", "--val-tasks", "2",
          "--save", str(tmp_path / "drilled")])
    out = json.loads(capsys.readouterr().out)
    assert out["examples"] == 8 and out["train_keep"] == 4 and 0 <= out["copied"] <= 1 and 0 <= out["p_copy"] < 1
    assert (tmp_path / "drilled").is_dir()


def test_the_drill_mixes_drills_of_unseen_tasks_with_the_agents_own_solve_examples(monkeypatch):
    import experiments.keep_drill as kd

    seen = {}
    monkeypatch.setattr(kd, "train_sft", lambda policy, data, sft, progress: seen.update(data=data, sft=sft))
    tasks = make_tasks(6, "train", min_depth=1, max_depth=2, seed=0)
    assert kd.drill(None, 3, "all", SFTConfig(), n_train=3, per_task=2, seed=0, depths=(1, 2), agent_index=1) == 6
    drills = [ex for ex in seen["data"] if "Feedback:" in ex.messages[-1]["content"]]
    solves = [ex for ex in seen["data"] if ex not in drills]
    assert {_code_in_prompt(ex.messages) for ex in drills} <= {c.strip() for t in tasks[3:] for c in task_gold_codes(t)}
    assert not {_code_in_prompt(ex.messages) for ex in drills} & {c.strip() for t in tasks[:3] for c in task_gold_codes(t)}
    agent1 = {f"```python\n{c}```" for t in tasks[:3] for c in gold_solutions(t, 2, 1)}  # agent 1 learnt seed 1's idioms
    assert len(solves) == 3 and all(ex.completion in agent1 for ex in solves)
    assert kd.drill(None, 3, "none", SFTConfig(), 3, 2, 0, (1, 2)) == 3  # the control: solve examples alone
    assert all("Feedback:" not in ex.messages[-1]["content"] for ex in seen["data"])
    assert kd.drill(None, 3, "all", SFTConfig(), 3, 2, 0, (1, 2), replay=0) == 3  # the drills alone
    assert all("Feedback:" in ex.messages[-1]["content"] for ex in seen["data"])
    with pytest.raises(ValueError, match="replay must be >= 0"):
        kd.drill(None, 3, "all", SFTConfig(), 3, 2, 0, (1, 2), replay=-1)


def test_the_drill_can_replay_the_cold_starts_mutant_fixes(monkeypatch):
    import experiments.keep_drill as kd

    seen = {}
    monkeypatch.setattr(kd, "train_sft", lambda policy, data, sft, progress: seen.update(data=data))
    assert kd.drill(None, 2, "all", SFTConfig(), n_train=6, per_task=2, seed=0, depths=(1, 2), replay=0, fixes=2) == 4
    all_pass = re.compile(r"Feedback:\n(\d+)/\1 tests passed\.\nImproved code:$")
    fixes = [ex for ex in seen["data"] if not all_pass.search(ex.messages[-1]["content"])]
    assert len(fixes) == 2 and all(_code_in_prompt(ex.messages) not in ex.completion for ex in fixes)


def test_the_probes_s5_setting_trains_on_the_same_data_in_the_same_order_as_the_cold_starts_drill_stage(monkeypatch):
    # S5 (all idioms, no replay, the cold start's mutant fixes) became MARS2Config.keep_drills: the same examples
    import coral.mars2.cold_start as cs
    import experiments.keep_drill as kd
    from coral.benchmarks.splits import build_tasks
    from coral.mars2.recipe import MARS2Config

    probe, stage = {}, {}
    monkeypatch.setattr(kd, "train_sft", lambda policy, data, sft, progress: probe.update(data=data, sft=sft))
    monkeypatch.setattr(cs, "sft_agents", lambda cfg, policies, data, progress, checkpoint_dir, sft: stage.update(data=data))
    cfg = MARS2Config(seed=2, n_train_tasks=8, keep_drills=5, refine_examples=3, solutions_per_task=2)
    from coral.sandbox import Sandbox

    with Sandbox(workers=1) as sandbox:
        cs.drill_stage(cfg, [None, None], build_tasks(cfg.splits)[0], sandbox, progress=False)
    kd.drill(None, 5, "all", cfg.drill_sft, n_train=8, per_task=2, seed=2, depths=(1, 2), agent_index=1, replay=0,
             fixes=3)
    assert len(probe["data"]) == 5 + 3 and probe["data"] == stage["data"][1]


def test_each_sampled_copy_draws_its_own_hashed_stream():
    from coral.seeding import sampling_seed

    class Spy(ScriptedPolicy):
        def generate(self, requests):
            seeds.extend(r.sampling.seed for r in requests)
            return super().generate(requests)

    seeds = []
    copied_share(Spy(lambda m: "no code", name="spy"), TASKS[:3], temperature=1.0, samples=2, seed=5)
    assert seeds == [sampling_seed(5, 0, "keep-copy", f"{t.id}/sample{s}") for t in TASKS[:3] for s in range(2)]
    assert len(set(seeds)) == 6
