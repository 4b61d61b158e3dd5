import json
import subprocess
import sys

import pytest
from run_helpers import kill_once_logged

from coral.mars2.recipe import MARS2Config, node_advantages
from coral.trajectory import Node


class _Tree:
    def __init__(self, parents):
        self.nodes = [Node(index=i, parent=p, depth=0, agent=None if p is None else "a") for i, p in enumerate(parents)]


# root -> 1, 2 ; 1 -> 3
PARENTS = [None, 0, 0, 1]
REWARDS = [1.0, 0.0, 1.0]  # nodes 1, 2, 3


def test_unshaped_advantages_are_grpo_over_the_tree():
    adv = node_advantages(_Tree(PARENTS), REWARDS, MARS2Config(shaping=False))
    # rewards [1, 0, 1]: mean 2/3, sample std sqrt(1/3)
    s = (1 / 3) ** 0.5
    assert adv == pytest.approx([0.0, (1 / 3) / s, (-2 / 3) / s, (1 / 3) / s], abs=1e-4)


def test_shaping_changes_the_advantages_through_parent_and_sibling_baselines():
    # shaped: node1 (root child, sibling 2 has r=0): 1 + .5(1 - 0) = 1.5
    #         node2 (sibling 1 has r=1): 0 + .5(0 - 1) = -0.5
    #         node3 (parent 1 r=1, no siblings): 1 + .5(1 - 1) = 1.0
    adv = node_advantages(_Tree(PARENTS), REWARDS, MARS2Config(shaping=True))
    shaped = [1.5, -0.5, 1.0]
    mean = sum(shaped) / 3
    std = (sum((x - mean) ** 2 for x in shaped) / 2) ** 0.5
    assert adv == pytest.approx([0.0] + [(x - mean) / std for x in shaped], abs=1e-4)


def test_a_tree_without_parent_links_is_refused():
    with pytest.raises(ValueError, match="parent"):
        node_advantages(_Tree([None, None, None]), [1.0, 0.0], MARS2Config())


def test_config_names_bad_fields():
    with pytest.raises(ValueError, match="'agents' must be in 1..4"):
        MARS2Config(agents=9)
    with pytest.raises(ValueError, match="'sft_processes' must be >= 1"):
        MARS2Config(sft_processes=0)
    with pytest.raises(ValueError, match="'advantage_group' must be"):
        MARS2Config(advantage_group="agent")
    from coral.train.grpo import GRPOConfig

    with pytest.raises(ValueError, match="'rl.advantage' is not used by this recipe"):
        MARS2Config(rl=GRPOConfig(advantage="rloo"))


_CALLS = [0]


def _alternating_judge(sandbox, tasks, codes):
    """Judges every other answer as passing (whatever it is), so rewards vary inside each tree."""
    from coral.trajectory import ExecutionResult, TestResult, Verdicts

    out = []
    for task in tasks:
        _CALLS[0] += 1
        verdict = "pass" if _CALLS[0] % 3 else "fail"
        out.append(Verdicts(ExecutionResult(tuple(TestResult(verdict) for _ in task.public_tests)),
                            ExecutionResult(tuple(TestResult(verdict) for _ in task.private_tests))))
    return out


def test_one_mars2_step_updates_each_agent_on_its_own_nodes_only(monkeypatch):
    import torch

    import coral.mars2.tree
    from coral.benchmarks.procedural import make_tasks
    from coral.mars2.recipe import mars2_step
    from coral.policy import tiny_policy
    from coral.train.grpo import AgentLearner, GRPOConfig

    cfg = MARS2Config(max_nodes_per_tree=4, max_new_tokens=16, tasks_per_step=2, algorithm="best_of_n")  # agents alternate
    policies = [tiny_policy(seed=i, d_model=32, n_layers=1) for i in range(2)]
    learners = [AgentLearner(f"agent{i}", p, GRPOConfig(lr=1e-2, skip_zero_advantage=False))
                for i, p in enumerate(policies)]
    before = [[q.detach().clone() for q in p.parameters()] for p in policies]
    tasks = make_tasks(2, "train", seed=0)
    monkeypatch.setattr(coral.mars2.tree, "judge", _alternating_judge)
    m = mars2_step(cfg, 1, tasks, policies, learners, sandbox=None)
    assert m["agent0/nodes"] + m["agent1/nodes"] == 2 * cfg.max_nodes_per_tree
    for i, p in enumerate(policies):
        trained = m.get(f"agent{i}/trained_turns", 0.0)
        assert trained == m[f"agent{i}/nodes"]  # each agent trains on exactly its own nodes
        assert 0 < m[f"agent{i}/reward"] < 1
        changed = any(not torch.equal(a, b.detach()) for a, b in zip(before[i], p.parameters(), strict=True))
        assert changed


TINY = {"n_train_tasks": 30, "n_test_tasks": 2, "agents": 2, "sft": {"epochs": 0.2, "batch_size": 8},
        "sft_processes": 1, "refine_examples": 6, "rl_steps": 3, "tasks_per_step": 2, "max_nodes_per_tree": 3,
        "max_new_tokens": 12, "sandbox_workers": 1, "rl": {"lr": 1e-2}}


def _mars2_cmd(out_dir, progress=False):
    code = ("import json,sys; from coral.config import from_mapping; from coral.mars2.recipe import MARS2Config, "
            f"train_mars2; train_mars2(from_mapping(MARS2Config, json.loads(sys.argv[1])), progress={progress})")
    return [sys.executable, "-c", code, json.dumps({**TINY, "out_dir": str(out_dir)})]


@pytest.mark.slow  # two tiny MARS2 runs in subprocesses, cold start included: about a CPU-minute
def test_a_killed_mars2_run_resumes_to_the_same_state(tmp_path):
    """kill -9 once step 2 is logged (its checkpoint may or may not be written), run again: the final
    weights and the logged metrics equal an uninterrupted run's."""
    import torch

    from coral.policy.hf import HFPolicy

    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    subprocess.run(_mars2_cmd(clean), check=True, timeout=900)
    kill_once_logged(_mars2_cmd(crashed), crashed / "metrics.jsonl", steps=2)
    assert not (crashed / "summary.json").exists()
    resumed = subprocess.run(_mars2_cmd(crashed, progress=True), check=True, timeout=900, capture_output=True, text=True)
    assert "resumed from" in resumed.stdout and "cold start:" not in resumed.stdout  # not a rerun from scratch
    assert "step 1/3" not in resumed.stdout
    for i in range(TINY["agents"]):
        a = HFPolicy.load(clean / "final" / f"agent{i}").model.state_dict()
        b = HFPolicy.load(crashed / "final" / f"agent{i}").model.state_dict()
        for name in a:
            assert torch.equal(a[name], b[name]), f"agent{i}.{name} differs after resume"
    read = lambda run: [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    keys = ["step", "reward", "agent0/nodes", "agent1/nodes"]
    assert [[m[k] for k in keys] for m in read(crashed)] == [[m[k] for k in keys] for m in read(clean)]
    figures = lambda run: {k: v for k, v in json.loads((run / "summary.json").read_text()).items() if k != "wall_s"}  # noqa: E731
    assert figures(crashed) == figures(clean)


def test_log_kl_measures_the_distance_to_the_cold_start_also_after_a_resume(tmp_path, monkeypatch):
    """Step 1 samples from the cold start itself (KL about 0); a resumed run reads its reference back from
    out_dir/cold_start, not from its trained weights, so the KL keeps growing after the resume."""
    import coral.mars2.tree
    from coral.config import from_mapping
    from coral.mars2.recipe import train_mars2

    fields = {**TINY, "out_dir": str(tmp_path), "rl_steps": 2, "rl": {"lr": 3e-2, "log_kl": True}}
    monkeypatch.setattr(coral.mars2.tree, "judge", _alternating_judge)  # rewards vary: the agents train
    train_mars2(from_mapping(MARS2Config, fields), progress=False, eval_before=False)
    assert (tmp_path / "cold_start" / "agent1").is_dir()
    train_mars2(from_mapping(MARS2Config, {**fields, "rl_steps": 4, "resume": True}), progress=False)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    kl = [max(r.get(f"agent{i}/kl_ref", 0.0) for i in range(2)) for r in rows]
    assert all(f"agent{i}/kl_ref" in r for r in rows for i in range(2) if f"agent{i}/turns" in r)
    assert kl[0] < 1e-3 and kl[3] > 10 * max(kl[0], 1e-5)


def test_cold_references_are_read_back_on_resume_not_copied_from_the_current_weights(tmp_path):
    import torch

    from coral.mars2.recipe import cold_references
    from coral.policy import tiny_policy
    from coral.train.grpo import GRPOConfig

    cfg = MARS2Config(rl=GRPOConfig(log_kl=True))
    policies = [tiny_policy(seed=i, d_model=32, n_layers=1) for i in range(2)]
    cold = [{k: v.clone() for k, v in p.model.state_dict().items()} for p in policies]
    cold_references(cfg, tmp_path, policies, saved=False)
    with torch.no_grad():  # "training" after the cold start
        for p in policies:
            for q in p.parameters():
                q.add_(1.0)
    refs = cold_references(cfg, tmp_path, policies, saved=True)
    for ref, state in zip(refs, cold, strict=True):
        assert all(torch.equal(ref.model.state_dict()[k], v) for k, v in state.items())
        assert not any(q.requires_grad for q in ref.parameters())
    assert cold_references(MARS2Config(), tmp_path, policies, saved=True) == [None, None]
    with pytest.raises(FileNotFoundError, match="agent0"):
        cold_references(cfg, tmp_path / "nowhere", policies, saved=True)
