import json
from dataclasses import replace

import pytest
import torch
from run_helpers import clean_and_resumed_runs, corecode_cmd

from coral.benchmarks.splits import build_tasks as build_split_tasks
from coral.benchmarks.splits import rl_tasks
from coral.corecode.recipe import CoReCodeConfig, group_key
from coral.corecode.rewards import score_chain
from coral.corecode.setup import build_policies, make_learners, sft_corecode
from coral.train.grpo import GRPOConfig
from coral.train.loop import next_batch
from coral.train.losses import LossConfig
from coral.train.rewards import CodeReward, coder_reward, efficiency_bonus
from coral.train.sft import SFTConfig
from coral.trajectory import Credit, ExecutionResult, TestCost, TestResult, Trajectory, Turn


def build_tasks(cfg):
    return build_split_tasks(cfg.splits)


def score_corecode(trajs, results, refs, cfg):
    tasks = {tr.task_id: None for tr in trajs}
    score_chain(trajs, results, {}, tasks, CodeReward(cfg.correctness, cfg.efficiency_weight), cfg.planner_reward)


def _res(verdicts, wall_s=0.01, mem=2.0):
    return ExecutionResult(tuple(TestResult(v, cost=TestCost(wall_s=wall_s, peak_memory_mb=mem)) for v in verdicts))


def test_coder_reward_is_pass_fraction_without_bonus_when_any_test_fails():
    ref = _res(["pass"] * 4, wall_s=0.01)
    assert coder_reward(_res(["pass", "pass", "fail", "pass"]), ref, "fraction", 0.5) == 0.75


def test_all_pass_mode_gives_zero_for_partial_solutions():
    assert coder_reward(_res(["pass", "fail"]), None, "all", 0.0) == 0.0
    assert coder_reward(_res(["pass", "pass"]), None, "all", 0.0) == 1.0


def test_efficiency_bonus_rewards_being_as_fast_and_lean_as_the_reference():
    ref = _res(["pass"] * 2, wall_s=0.01, mem=2.0)
    # twice as slow (time ratio 0.5), same memory (1.0): bonus = 0.75
    assert efficiency_bonus(_res(["pass"] * 2, wall_s=0.02, mem=2.0), ref, "time") == pytest.approx(0.75)
    # faster than the reference is capped at 1
    assert efficiency_bonus(_res(["pass"] * 2, wall_s=0.001, mem=1.0), ref, "time") == 1.0
    assert coder_reward(_res(["pass"] * 2, wall_s=0.02, mem=2.0), ref, "fraction", 0.2, "time") == pytest.approx(1.15)


def test_efficiency_bonus_ignores_differences_within_measurement_noise():
    ref = _res(["pass"] * 3, wall_s=0.0007, mem=1.2)
    noisy = [_res(["pass"] * 3, wall_s=w, mem=m) for w, m in ((0.0011, 0.4), (0.0031, 0.9), (0.0005, 0.0))]
    assert [efficiency_bonus(r, ref, "time") for r in noisy] == [1.0, 1.0, 1.0]  # all under the floors
    ref = _res(["pass"] * 2, wall_s=0.1, mem=20.0)
    assert efficiency_bonus(_res(["pass"] * 2, wall_s=0.12, mem=24.0), ref, "time") == 1.0  # within 25%
    # 3x slower (0.6 s vs 0.2 s) and 2x the memory: (1/3 + 1/2) / 2
    assert efficiency_bonus(_res(["pass"] * 2, wall_s=0.3, mem=40.0), ref, "time") == pytest.approx(5 / 12)
    # a slow solution against a reference under the floor is compared with the floor
    assert efficiency_bonus(_res(["pass"], wall_s=0.04, mem=0.5), _res(["pass"], wall_s=0.001, mem=0.5), "time") \
        == pytest.approx((0.25 + 1.0) / 2)


def _counted(verdicts, steps, alloc_kb):
    n = len(verdicts)
    return ExecutionResult(tuple(TestResult(v, cost=TestCost(wall_s=9.9, steps=steps // n, alloc_peak_kb=alloc_kb))
                                 for v in verdicts))


def test_the_counted_bonus_compares_steps_and_allocations_with_the_reference():
    ref = _counted(["pass"] * 2, steps=400, alloc_kb=128.0)
    # twice the steps (ratio 0.5), the same allocations (1.0): (0.5 + 1) / 2; wall time plays no part
    assert efficiency_bonus(_counted(["pass"] * 2, steps=800, alloc_kb=128.0), ref) == 0.75
    # within 25% of the reference, or both under the floors (100 steps, 64 kB): as good as the reference
    assert efficiency_bonus(_counted(["pass"] * 2, steps=480, alloc_kb=150.0), ref) == 1.0
    assert efficiency_bonus(_counted(["pass"] * 2, steps=90, alloc_kb=10.0), _counted(["pass"] * 2, 20, 1.0)) == 1.0
    # 4x the steps and 4x the memory: (1/4 + 1/4) / 2
    assert efficiency_bonus(_counted(["pass"] * 2, steps=1600, alloc_kb=512.0), ref) == 0.25
    assert coder_reward(_counted(["pass"] * 2, 800, 128.0), ref, "all", 0.1) == pytest.approx(1.075)


def test_the_counted_bonus_refuses_results_that_were_not_counted():
    with pytest.raises(ValueError, match="count_steps=True"):
        efficiency_bonus(_res(["pass"] * 2), _counted(["pass"] * 2, steps=400, alloc_kb=128.0))


def test_efficiency_bonus_needs_a_passing_reference():
    assert efficiency_bonus(_res(["pass"]), _res(["fail"])) == 0.0
    assert efficiency_bonus(_res(["pass"]), None) == 0.0


def _chain(plan_rewards: list[list[list[str]]]):
    """trajectories of one task: plan p, code c, with the given verdict lists."""
    trajs, results = [], []
    for p, codes in enumerate(plan_rewards):
        plan = Turn("planner", "planner", 0, "", "", credit=Credit("t", plan_id=p))
        for c, verdicts in enumerate(codes):
            coder = Turn("coder", "coder", 0, "", "", credit=Credit("t", plan_id=p, sample_id=c))
            trajs.append(Trajectory("t", [plan, coder]))
            results.append(_res(verdicts))
    return trajs, results


def test_planner_reward_is_mean_or_max_of_its_coders():
    trajs, results = _chain([[["pass", "pass"], ["pass", "fail"]], [["fail", "fail"], ["fail", "fail"]]])
    score_corecode(trajs, results, [None] * 4, CoReCodeConfig(efficiency_weight=0.0, correctness="fraction"))
    assert [t.turns[1].reward for t in trajs] == [1.0, 0.5, 0.0, 0.0]
    assert trajs[0].turns[0].reward == 0.75 and trajs[2].turns[0].reward == 0.0
    score_corecode(trajs, results, [None] * 4,
                   CoReCodeConfig(efficiency_weight=0.0, correctness="fraction", planner_reward="max"))
    assert trajs[0].turns[0].reward == 1.0


def test_planner_turns_are_credited_by_plan_id_not_by_object_identity():
    """Trajectories that crossed a process (or were rebuilt from records) hold copies of their plan's turn:
    the plan's reward is still the mean over all its codes, and a copy of another plan never shares it."""
    import copy

    trajs, results = _chain([[["pass"], ["fail"], ["pass"], ["pass"]], [["fail"], ["fail"]]])
    for traj in trajs:  # every trajectory gets its own copy of its planner turn
        traj.turns[0] = copy.deepcopy(traj.turns[0])
    score_corecode(trajs, results, [None] * 6, CoReCodeConfig(efficiency_weight=0.0, correctness="fraction"))
    assert [t.turns[0].reward for t in trajs] == [0.75, 0.75, 0.75, 0.75, 0.0, 0.0]


def test_a_planner_turn_without_plan_id_is_refused():
    trajs, results = _chain([[["pass"]]])
    trajs[0].turns[0].credit = Credit("t")  # no plan_id
    with pytest.raises(ValueError, match="no task_id/plan_id"):
        score_corecode(trajs, results, [None], CoReCodeConfig())


def test_coder_groups_are_per_plan_or_per_task():
    trajs, _ = _chain([[["pass"], ["pass"]], [["pass"], ["pass"]]])
    coders = [t.turns[1] for t in trajs]
    by_plan = {group_key(CoReCodeConfig(coder_group="plan"))(t) for t in coders}
    by_task = {group_key(CoReCodeConfig(coder_group="task"))(t) for t in coders}
    assert len(by_plan) == 2 and len(by_task) == 1
    assert group_key(CoReCodeConfig())(trajs[0].turns[0]) == ("planner", "t")


def test_data_stream_is_a_seeded_endless_shuffle():
    tasks = list(range(5))
    first = next_batch(tasks, 0, 5, seed=1)
    assert sorted(first) == tasks and next_batch(tasks, 0, 5, seed=1) == first
    assert sorted(next_batch(tasks, 5, 5, seed=1)) == tasks  # second epoch covers everything again
    assert next_batch(tasks, 3, 4, seed=1) == (first + next_batch(tasks, 5, 5, seed=1))[3:7]


def test_bad_config_values_name_the_field():
    with pytest.raises(ValueError, match="'plans_per_task' must be >= 1"):
        CoReCodeConfig(plans_per_task=0)
    with pytest.raises(ValueError, match="unknown role 'critic'"):
        CoReCodeConfig(train_roles=("planner", "critic"))
    with pytest.raises(ValueError, match="'sft_coder_epochs' must be > 0 or None, got 0"):
        CoReCodeConfig(sft_coder_epochs=0)
    from coral.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="field 'sft.length_window': .*must be >= 1, got 0"):
        load_config(CoReCodeConfig, None, {"sft.length_window": 0})
    with pytest.raises(ValueError, match="'sft.seed' is set from the recipe's 'seed'"):
        CoReCodeConfig(sft=SFTConfig(seed=3))
    with pytest.raises(ConfigError, match="field 'rl.advantage': .*must be one of .*got 'nope'"):
        load_config(CoReCodeConfig, None, {"rl.advantage": "nope"})


def test_the_coder_can_have_its_own_sft_epochs_and_rl_updates_reach_the_learners(monkeypatch):
    import coral.corecode.setup as sft  # the name setup.py calls

    seen = {}
    monkeypatch.setattr(sft, "train_sft_many", lambda jobs, work, **kw: seen.update(
        {role: cfg for role, (_, _, cfg) in jobs.items()}) or {})
    cfg = CoReCodeConfig(**{**SMALL, "sft": SFTConfig(epochs=6.0, batch_size=8, length_window=8),
                            "sft_coder_epochs": 4.0, "rl": GRPOConfig(lr=1e-4, advantage="dr_grpo", updates_per_batch=2)})
    train, _ = build_tasks(cfg)
    policies = build_policies(cfg, train)
    sft_corecode(cfg, policies, train, progress=False)
    assert (seen["planner"].epochs, seen["coder"].epochs) == (6.0, 4.0)
    assert seen["planner"].length_window == seen["coder"].length_window == 8
    assert {r: lrn.cfg.updates_per_batch for r, lrn in make_learners(cfg, policies, {}).items()} == \
        {"planner": 2, "coder": 2}


SMALL = dict(n_train_tasks=60, n_test_tasks=6, d_model=32, n_layers=1, sft=SFTConfig(epochs=0.3, batch_size=8),
             rl_steps=4, tasks_per_step=2, plans_per_task=2, codes_per_plan=2, max_new_tokens=24,
             checkpoint_every_steps=1, efficiency_weight=0.0, eval_batch_samples=6, sandbox_workers=1, n_fresh_tasks=3)
SMALL_FLAT = {**{k: v for k, v in SMALL.items() if k != "sft"}, "sft": {"epochs": 0.3, "batch_size": 8}}


def _train_cmd(out_dir):
    return corecode_cmd({**SMALL_FLAT, "out_dir": str(out_dir)})


def _final_weights(out_dir):
    from coral.policy.hf import HFPolicy

    return {role: HFPolicy.load(out_dir / "final" / role).model.state_dict() for role in ("planner", "coder")}


def test_a_killed_run_resumes_to_the_same_state(tmp_path):
    clean, crashed = clean_and_resumed_runs(_train_cmd, tmp_path)
    a, b = _final_weights(clean), _final_weights(crashed)
    for role in a:
        for name in a[role]:
            assert torch.equal(a[role][name], b[role][name]), f"{role}.{name} differs after resume"
    clean_metrics = [json.loads(x) for x in (clean / "metrics.jsonl").read_text().splitlines()]
    resumed_metrics = [json.loads(x) for x in (crashed / "metrics.jsonl").read_text().splitlines()]
    keys = ["step", "coder/reward", "planner/reward"]
    assert [[m[k] for k in keys] for m in resumed_metrics] == [[m[k] for k in keys] for m in clean_metrics]


@pytest.mark.parametrize("key", ["kl", "kl_ref"])  # the loss's KL term; the logged-only KL (rl.log_kl)
def test_kl_anchor_uses_the_saved_sft_policy_and_resume_needs_it(tmp_path, key):
    from coral.corecode.recipe import train_corecode

    anchored = GRPOConfig(lr=1e-4, advantage="dr_grpo", loss=LossConfig(beta_kl=0.1)) if key == "kl" else \
        GRPOConfig(lr=1e-4, advantage="dr_grpo", log_kl=True)
    cfg = CoReCodeConfig(**{**SMALL, "rl_steps": 2, "rl": anchored, "out_dir": str(tmp_path / "run")})
    train_corecode(cfg, progress=False)
    run = tmp_path / "run"
    assert not (run / "sft" / "planner").exists()  # the reference is the cold start the run keeps anyway
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    kl = {(int(m["step"]), role): m[f"{role}/{key}"] for m in metrics for role in ("planner", "coder")
          if f"{role}/{key}" in m}
    assert kl, "no KL metric was logged"
    first = [v for (step, _), v in kl.items() if step == 1]
    assert first and all(v == pytest.approx(0.0, abs=1e-6) for v in first)  # step 1 starts at the reference
    # (that the KL grows once the policy moves is test_grpo_trainer's kl test: here rewards may all be 0)
    # a resumed run rebuilds the reference from out_dir/sft/cold_start; without it, it refuses to go on
    import shutil

    shutil.rmtree(run / "sft")
    with pytest.raises(FileNotFoundError, match="cold start of 'planner' at .*cold_start/planner.pt"):
        train_corecode(CoReCodeConfig(**{**SMALL, "rl_steps": 3, "rl": anchored, "out_dir": str(run)}), progress=False)


def test_a_resumed_runs_kl_reference_is_its_cold_start_not_its_current_weights(tmp_path):
    from coral.corecode.fork import save_cold_start
    from coral.corecode.setup import sft_references

    cfg = CoReCodeConfig(**{**SMALL, "rl": GRPOConfig(log_kl=True), "train_roles": ("coder",), "out_dir": str(tmp_path)})
    policies = build_policies(cfg, build_tasks(cfg)[0])
    cold = {n: t.clone() for n, t in policies["coder"].model.state_dict().items()}
    save_cold_start(tmp_path, policies, {"step": 0})
    with torch.no_grad():
        for p in policies["coder"].model.parameters():
            p.add_(1.0)  # RL moved the coder since
    fresh, resumed = sft_references(cfg, policies, saved=False), sft_references(cfg, policies, saved=True)
    assert set(fresh) == set(resumed) == {"coder"}  # the frozen planner needs none
    for name, t in resumed["coder"].model.state_dict().items():
        assert torch.equal(t, cold[name]) and not torch.equal(fresh["coder"].model.state_dict()[name], cold[name])
    assert not any(p.requires_grad for p in resumed["coder"].model.parameters())


def test_negative_beta_kl_is_rejected_with_its_dotted_name():
    from coral.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="field 'rl.loss.beta_kl'"):
        load_config(CoReCodeConfig, None, {"rl.loss.beta_kl": "-0.1"})


def _skeletons(tasks):
    from coral.benchmarks.procedural import parse_composition, skeleton

    return {skeleton(parse_composition(t.metadata["family"], t.metadata["composition"])) for t in tasks}


def test_rl_tasks_can_go_deeper_than_sft_but_stay_in_the_train_split():

    cfg = CoReCodeConfig(n_train_tasks=300, n_test_tasks=100, max_depth=2)
    train, test = build_tasks(cfg)
    assert rl_tasks(cfg.splits, train) is train
    deeper = rl_tasks(CoReCodeConfig(n_train_tasks=300, n_test_tasks=100, max_depth=2, rl_max_depth=3).splits, train)
    assert max(t.metadata["difficulty"] for t in deeper) == 3
    assert {t.metadata["split"] for t in deeper} == {"train"}
    assert not _skeletons(deeper) & _skeletons(test)
    with pytest.raises(ValueError, match="rl_max_depth"):
        CoReCodeConfig(min_depth=2, rl_max_depth=1)


def test_evaluate_pass1_is_greedy_by_default_and_sampled_on_request(tmp_path):
    from coral.corecode.evaluate import evaluate_pass1
    from coral.sandbox import Sandbox

    cfg = CoReCodeConfig(**{**SMALL, "out_dir": str(tmp_path)})
    train, test = build_tasks(cfg)
    policies = build_policies(cfg, train)
    with Sandbox(workers=1) as sandbox:
        greedy = evaluate_pass1(cfg, policies, test[:3], sandbox, "greedy")
        sampled = evaluate_pass1(cfg, policies, test[:3], sandbox, "sampled", samples=3)
        with pytest.raises(ValueError, match="samples must be >= 0"):
            evaluate_pass1(cfg, policies, test[:3], sandbox, "bad", samples=-1)
    assert (greedy["tasks"], greedy["samples"]) == (3, 3)
    assert (sampled["tasks"], sampled["samples"]) == (3, 9)
    records = [json.loads(x) for x in (tmp_path / "sampled" / "samples.jsonl").read_text().splitlines()]
    plans = {}
    for r in records:
        plans.setdefault(r["task_id"], set()).add(r["turns"][0]["text"])
    assert any(len(p) > 1 for p in plans.values()), "sampling at temperature 1 gave identical plans"
    config = json.loads((tmp_path / "sampled" / "summary.json").read_text())["config"]
    assert config["temperature"] == cfg.rl.temperature and config["samples_per_task"] == 3


def test_rl_can_train_on_skeletons_kept_out_of_sft():
    from coral.benchmarks.splits import sft_tasks

    cfg = CoReCodeConfig(n_train_tasks=400, n_test_tasks=100, rl_skeleton_fraction=0.25)
    train, test = build_tasks(cfg)
    sft, rl = sft_tasks(cfg.splits, train), rl_tasks(cfg.splits, train)
    assert len(sft) + len(rl) == len(train) and 0.1 < len(rl) / len(train) < 0.4
    assert not _skeletons(sft) & _skeletons(rl)  # RL practises compositions SFT never showed
    assert not _skeletons(rl) & _skeletons(test) and not _skeletons(sft) & _skeletons(test)
    plain = CoReCodeConfig(n_train_tasks=400, n_test_tasks=100)
    assert sft_tasks(plain.splits, train) is train and rl_tasks(plain.splits, train) is train
    with pytest.raises(ValueError, match="rl_skeleton_fraction"):
        CoReCodeConfig(rl_skeleton_fraction=1.0)
    with pytest.raises(ValueError, match="set one"):
        CoReCodeConfig(rl_skeleton_fraction=0.2, rl_max_depth=3)


def test_fresh_tasks_are_new_train_split_tasks_that_neither_sft_nor_rl_sees():
    from coral.benchmarks.procedural import make_tasks
    from coral.benchmarks.splits import fresh_tasks

    cfg = CoReCodeConfig(n_train_tasks=300, n_test_tasks=10, n_fresh_tasks=50, max_depth=2)
    train, _ = build_tasks(cfg)
    fresh = fresh_tasks(cfg.splits, train, rl_tasks(cfg.splits, train))
    assert len(fresh) == 50 == len({t.id for t in fresh})
    assert not {t.id for t in fresh} & {t.id for t in train}
    assert {t.metadata["split"] for t in fresh} == {"train"}
    assert [t.id for t in fresh] == [t.id for t in make_tasks(350, "train", max_depth=2, seed=0)[300:]]
    # rl_max_depth draws other train-split tasks for RL: a fresh task is never one of them
    deeper = CoReCodeConfig(n_train_tasks=300, n_test_tasks=10, n_fresh_tasks=50, max_depth=2, rl_max_depth=3)
    pool = rl_tasks(deeper.splits, train)
    overlap = {t.id for t in make_tasks(350, "train", max_depth=2, seed=0)[300:]} & {t.id for t in pool}
    assert overlap  # the case is exercised: the plain tail holds some of RL's tasks
    fresh_deeper = fresh_tasks(deeper.splits, train, pool)
    assert len(fresh_deeper) == 50 and not {t.id for t in fresh_deeper} & ({t.id for t in pool} | {t.id for t in train})
    assert fresh_tasks(CoReCodeConfig(n_train_tasks=300, n_fresh_tasks=0).splits, train, train) == []
    # depth 1 holds only a few test compositions per seed slot: 2 test tasks, so only the fresh tasks run out
    shallow = CoReCodeConfig(n_train_tasks=50, n_test_tasks=2, n_fresh_tasks=1000, max_depth=1)
    with pytest.raises(ValueError, match="'n_fresh_tasks'=1000 asks for more train-split tasks than there are"):
        fresh_tasks(shallow.splits, build_tasks(shallow)[0], [])
    with pytest.raises(ValueError, match="'n_fresh_tasks' must be >= 0"):
        CoReCodeConfig(n_fresh_tasks=-1)


def test_fresh_tasks_from_the_rl_stream_continue_the_rl_pool_at_its_depth():
    from coral.benchmarks.procedural import make_tasks
    from coral.benchmarks.splits import fresh_tasks

    # the SmolLM2 study's shape: RL on depth-1 tasks, held out at depth 1-2 (test) and on RL's own depth (fresh)
    cfg = CoReCodeConfig(n_train_tasks=100, n_test_tasks=10, n_fresh_tasks=40, max_depth=2, rl_max_depth=1,
                         fresh_source="rl", cold_start="none")
    train, _ = build_tasks(cfg)
    pool = rl_tasks(cfg.splits, train)
    fresh = fresh_tasks(cfg.splits, train, pool, sft_trains=False)
    stream = make_tasks(140, "train", min_depth=1, max_depth=1, seed=17)
    assert [t.id for t in fresh] == [t.id for t in stream[100:]]  # the next 40 of RL's stream
    assert not {t.id for t in fresh} & {t.id for t in pool}
    assert {t.metadata["difficulty"] for t in fresh} == {t.metadata["difficulty"] for t in pool} == {1}  # depth 1
    # with a cold start, SFT's tasks are trained on: none of them is fresh
    small = replace(cfg, n_train_tasks=60, n_fresh_tasks=20, cold_start="sft")
    sft, _ = build_tasks(small)
    small_pool = rl_tasks(small.splits, sft)
    tail = make_tasks(80, "train", min_depth=1, max_depth=1, seed=17)[60:]
    assert {t.id for t in tail} & {t.id for t in sft}  # the case is exercised: SFT's list holds some of them
    trained = fresh_tasks(small.splits, sft, small_pool, sft_trains=True)
    assert len(trained) == 20 and not {t.id for t in trained} & ({t.id for t in sft} | {t.id for t in small_pool})
    with pytest.raises(ValueError, match="depth 1-1 than the train split has after the RL pool of 100"):
        fresh_tasks(replace(cfg, n_fresh_tasks=60).splits, train, pool, sft_trains=False)
    with pytest.raises(ValueError, match="'fresh_source' 'rl' continues the RL stream"):
        CoReCodeConfig(fresh_source="rl")


def test_a_run_refuses_to_resume_with_evaluations_it_has_no_sft_figure_for(tmp_path):
    from coral.corecode.recipe import train_corecode

    cfg = {**SMALL, "rl_steps": 1, "eval_samples_per_task": 0, "n_fresh_tasks": 0, "out_dir": str(tmp_path / "run")}
    train_corecode(CoReCodeConfig(**cfg), progress=False)
    with pytest.raises(ValueError, match="no eval_sft_fresh after SFT"):
        train_corecode(CoReCodeConfig(**{**cfg, "rl_steps": 2, "n_fresh_tasks": 3}), progress=False)
    with pytest.raises(ValueError, match="no eval_sft_sampled after SFT"):
        train_corecode(CoReCodeConfig(**{**cfg, "rl_steps": 2, "eval_samples_per_task": 2}), progress=False)


def test_dr_grpo_keeps_the_efficiency_bonus_small_where_grpo_inflates_it():
    """Why CoRe-Code uses dr_grpo: in a group whose plans all pass, rewards differ only by the 0.1-weighted
    efficiency bonus; GRPO's division by the group std turns that into advantages larger than those of
    a group that differs in correctness. Hand-computed: rewards [1.1, 1.1, 1.1, 1.06] (mean 1.09,
    unbiased std 0.02) and [1.1, 0, 1.1, 0] (mean 0.55, unbiased std sqrt(0.4033) = 0.6351)."""
    from coral.train.advantages import dr_grpo, grpo

    rewards = torch.tensor([1.1, 1.1, 1.1, 1.06, 1.1, 0.0, 1.1, 0.0], dtype=torch.float64)
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    g = grpo(rewards, groups)
    torch.testing.assert_close(g[:4], torch.tensor([0.5, 0.5, 0.5, -1.5], dtype=torch.float64), atol=1e-4, rtol=0)
    torch.testing.assert_close(g[4:], torch.tensor([0.8660, -0.8660, 0.8660, -0.8660], dtype=torch.float64),
                               atol=1e-4, rtol=0)
    d = dr_grpo(rewards, groups)
    torch.testing.assert_close(d, torch.tensor([0.01, 0.01, 0.01, -0.03, 0.55, -0.55, 0.55, -0.55],
                                               dtype=torch.float64), atol=1e-9, rtol=0)
    assert g[:4].abs().max() > g[4:].abs().max()  # grpo: efficiency noise outweighs correctness
    assert d[:4].abs().max() < 0.1 * d[4:].abs().max()  # dr_grpo: the bonus keeps its weight
    assert CoReCodeConfig().rl.advantage == "dr_grpo"


@pytest.mark.parametrize("resume", [True, False])
def test_a_run_resumes_sft_from_its_state_and_drops_it_after_the_step_zero_checkpoint(tmp_path, resume):
    from coral.corecode.recipe import train_corecode
    from coral.corecode.setup import sft_checkpoint_dir

    cfg = CoReCodeConfig(**{**SMALL, "rl_steps": 1, "eval_samples_per_task": 0, "out_dir": str(tmp_path / "run"),
                            "resume": resume})
    train, _ = build_tasks(cfg)
    sft_corecode(cfg, build_policies(cfg, train), train, progress=False)  # as if the run died right after SFT
    for role in ("planner", "coder"):  # mark the saved losses, to see whether the run reads them
        path = sft_checkpoint_dir(cfg) / f"{role}.pt"
        state = torch.load(path, weights_only=False)
        torch.save({**state, "losses": [9.0] * len(state["losses"])}, path)
    summary = train_corecode(cfg, progress=False)
    marked = {role: summary["sft_loss"][role] == [9.0, 9.0] for role in ("planner", "coder")}
    assert marked == {"planner": resume, "coder": resume}  # resume=False trains SFT over, from scratch
    assert not sft_checkpoint_dir(cfg).exists()


def test_the_step_line_says_when_the_coder_was_not_updated():
    from coral.corecode.recipe import step_line

    m = {"step": 3.0, "pass_rate": 0.0, "planner/reward": 0.0, "coder/reward": 0.0, "parse_failures": 1.0,
         "step_s": 0.2}
    assert "loss(coder) no update" in step_line(m, 10)
    assert "loss(coder) -0.0125" in step_line({**m, "coder/loss": -0.0125}, 10)


def test_planner_and_coder_as_lora_adapters_on_one_frozen_base(tmp_path):
    from coral.corecode.recipe import train_corecode
    from coral.policy.hf import HFPolicy

    cfg = CoReCodeConfig(**{**SMALL, "lora_rank": 4, "rl_steps": 2, "out_dir": str(tmp_path / "run")})
    train, _ = build_tasks(cfg)
    fresh = build_policies(cfg, train)
    assert fresh["planner"].model is fresh["coder"].model
    initial = {n: p.detach().clone() for n, p in fresh["planner"].model.named_parameters()}
    train_corecode(cfg, progress=False)
    run = tmp_path / "run"
    for step in ("step_000001", "step_000002"):  # checkpoints hold each role's adapter, not the base
        for role in ("planner", "coder"):
            keys = torch.load(run / "ckpt" / step / role / "model.pt", weights_only=True).keys()
            assert keys and all(".lora_" in k for k in keys)
    final = {role: HFPolicy.load(run / "final" / role) for role in ("planner", "coder")}
    for role, policy in final.items():
        names = dict(policy.model.named_parameters())
        adapter = {n: p for n, p in names.items() if ".lora_" in n}
        assert adapter and all(p.requires_grad for p in adapter.values())
        for n, p in names.items():
            start = initial[n.replace(".default.", f".{role}.")]
            if ".lora_" in n:  # SFT trained every weight of the role's adapter
                assert not torch.equal(p, start), f"{role}.{n} did not train"
            else:  # and none of the shared base
                assert torch.equal(p, start), f"{role}.{n} moved"
    # a resumed run reads the adapters back from its last checkpoint and goes on
    summary = train_corecode(CoReCodeConfig(**{**SMALL, "lora_rank": 4, "rl_steps": 3, "out_dir": str(run)}),
                             progress=False)
    assert summary["rl_steps"] == 3 and len((run / "metrics.jsonl").read_text().splitlines()) == 3
    with pytest.raises(ValueError, match="lora_rank"):
        CoReCodeConfig(lora_rank=-1)


def test_unparsed_warning_fires_above_half_and_explains_the_tiny_lora_case():
    from coral.corecode.recipe import unparsed_warning

    cfg = CoReCodeConfig()
    assert unparsed_warning(cfg, 0.5, "after SFT") is None
    text = unparsed_warning(cfg, 0.98, "after SFT")
    assert text.startswith("98% of the completions sampled at temperature 1.0 after SFT do not parse")
    assert "lora_rank" not in text
    lora = unparsed_warning(CoReCodeConfig(lora_rank=8), 0.98, "after SFT")
    assert "tied head caps the logit margins" in lora
    assert "lora_rank" not in unparsed_warning(CoReCodeConfig(lora_rank=8, model="some/model"), 0.9, "x")


def test_a_run_whose_samples_do_not_parse_says_so_after_sft_and_after_five_rl_steps(tmp_path, caplog):
    """SMALL's cold start is far too short to write parseable code: both checks must warn, with the
    rates the run itself recorded, and a good run (rate <= 0.5) must not (the unit test above)."""
    from coral.corecode.recipe import train_corecode

    cfg = CoReCodeConfig(**{**SMALL, "rl_steps": 5, "eval_samples_per_task": 1, "n_fresh_tasks": 0,
                            "out_dir": str(tmp_path / "run")})
    with caplog.at_level("WARNING", logger="coral.corecode.recipe"):
        train_corecode(cfg, progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.name == "coral.corecode.recipe"]
    sampled = json.loads((tmp_path / "run" / "eval_sft_sampled" / "summary.json").read_text())["summary"]
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rl_rate = sum(m["parse_failures"] for m in metrics if "parse_failures" in m) / 5
    assert sampled["parse_failures"] / sampled["samples"] > 0.5 and rl_rate > 0.5, "SMALL now writes parseable code"
    assert [w.split("%")[0] for w in warnings] == [f"{100 * sampled['parse_failures'] / sampled['samples']:.0f}",
                                                   f"{100 * rl_rate:.0f}"]
    assert "after SFT (held-out test split)" in warnings[0] and "in RL steps 1-5" in warnings[1]


def test_a_custom_reward_function_changes_the_rewards_a_tiny_run_logs(tmp_path):
    """A user's RewardFn goes to the recipe as an argument: here every code earns 0.25 (the default reward
    of SMALL's untrained models is 0), and the planner's reward is the mean of its codes'."""
    from coral.corecode.recipe import train_corecode

    seen = []

    def quarter(task, code, result, reference):
        seen.append((task.id, reference))
        return 0.25

    cfg = CoReCodeConfig(**{**SMALL, "rl_steps": 2, "eval_samples_per_task": 0, "n_fresh_tasks": 0,
                            "out_dir": str(tmp_path / "run")})
    train_corecode(cfg, progress=False, reward_fn=quarter)
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(m["coder/reward"], m["planner/reward"]) for m in metrics] == [(0.25, 0.25), (0.25, 0.25)]
    per_step = cfg.tasks_per_step * cfg.plans_per_task * cfg.codes_per_plan
    assert len(seen) == 2 * per_step and all(ref is None for _, ref in seen)  # no efficiency term: no reference run


def test_a_checkpointed_run_refuses_to_resume_under_another_training_setting(tmp_path):
    from coral.config import UserInputError
    from coral.corecode.recipe import train_corecode
    from coral.train.loop import Run

    cfg = CoReCodeConfig(**{**SMALL, "out_dir": str(tmp_path / "run")})
    (tmp_path / "run").mkdir()
    Run(cfg.out_dir, cfg).save({}, {"step": 1, "position": 0, "metrics": []})  # as if step 1 were checkpointed
    with pytest.raises(UserInputError, match=r"field 'rl.lr': 0.0001, now 0.0003"):
        train_corecode(replace(cfg, rl=replace(cfg.rl, lr=3e-4)), progress=False)
