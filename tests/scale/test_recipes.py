"""`ray_address` in the recipes: a CoRe-Code and a MARS2 run give the same rollouts, rewards, metrics and
updated weights with `ray_address: local` as without it.

An untrained tiny model writes no code that parses, so every sandbox reward would be 0 and no update
would run. The runs therefore score each code by its sampled tokens (`TokenReward`: the token-id sum
mod 3, halved): rewards vary, depend on the rollouts, and equal rewards need equal rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from coral.policy.tiny import tiny_policy
from coral.train.grpo import GRPOConfig
from coral.train.losses import LossConfig
from coral.train.sft import SFTConfig

TIMING = ("_s", "wall")  # metric keys that measure time, which differs between any two runs


class TokenReward:
    """A RewardFn that scores the codes of the rollout `capture` saw last, in order, by their tokens;
    `rollouts` keeps the token ids of every captured rollout."""

    def __init__(self) -> None:
        self.queue: list = []
        self.rollouts: list[list[list[int]]] = []

    def capture(self, turns: list) -> None:
        self.queue = list(turns)
        self.rollouts.append([list(t.completion_ids) for t in turns])

    def __call__(self, task, code, result, reference) -> float:
        turn = self.queue.pop(0)
        return (sum(turn.completion_ids) % 3) / 2


@pytest.fixture
def token_reward(monkeypatch):
    import coral.corecode.recipe
    import coral.evaluation
    import coral.mars2.recipe
    import coral.mars2.tree as tree
    import coral.workflows.chain as chain

    reward = TokenReward()
    run_chain, search = chain.run_chain, tree.search

    def chain_and_capture(*args, **kwargs):
        trajs = run_chain(*args, **kwargs)
        reward.capture([tr.turns_of("coder")[-1] for tr in trajs])
        return trajs

    def search_and_capture(*args, **kwargs):
        trees = search(*args, **kwargs)
        reward.capture([node.turn for t in trees for node in t.nodes[1:]])
        return trees

    monkeypatch.setattr(chain, "run_chain", chain_and_capture)
    # the evaluation and the recipes bind run_chain / search at import: patched where they call them
    monkeypatch.setattr(coral.evaluation, "run_chain", chain_and_capture)
    monkeypatch.setattr(coral.corecode.recipe, "run_chain", chain_and_capture)
    monkeypatch.setattr(tree, "search", search_and_capture)
    monkeypatch.setattr(coral.mars2.recipe, "search", search_and_capture)
    return reward


@pytest.fixture
def pool_calls(monkeypatch):
    """Counts of the rollout pools' generate calls and pushed tensors: a run that ignored ray_address
    would give the same results, so the Ray run must show that it sampled on the actors."""
    from coral.scale.rollout import RolloutPool

    calls = {"generate": 0, "pushed": 0}
    generate, sync = RolloutPool.generate, RolloutPool.sync_weights

    def counted_generate(self, name, requests):
        calls["generate"] += 1
        return generate(self, name, requests)

    def counted_sync(self, name, full=False):
        pushed = sync(self, name, full)
        calls["pushed"] += pushed
        return pushed

    monkeypatch.setattr(RolloutPool, "generate", counted_generate)
    monkeypatch.setattr(RolloutPool, "sync_weights", counted_sync)
    return calls


def metric_lines(out: Path) -> list[dict[str, float]]:
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in m.items() if not k.endswith(TIMING)} for m in lines]


def assert_same_metrics(expected: list[dict[str, float]], got: list[dict[str, float]]) -> None:
    """Counts and rewards exactly; losses, ratios and norms up to float rounding (the replicas' logprobs
    come from other batch shapes and threads: 1e-4 apart at most, tests/scale/test_equivalence.py)."""
    assert len(got) == len(expected)
    for a, b in zip(expected, got, strict=True):
        assert b.keys() == a.keys()
        exact = {k: v for k, v in a.items() if "reward" in k or "turns" in k or "pass" in k or "tokens" in k}
        assert {k: b[k] for k in exact} == exact
        assert b == pytest.approx(a, rel=1e-3, abs=1e-5)


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-5, rtol=1e-4)


def final_weights(out: Path, names: list[str]) -> dict[str, torch.Tensor]:
    from coral.policy.hf import HFPolicy

    return {f"{n}.{k}": v for n in names for k, v in HFPolicy.load(out / "final" / n).model.state_dict().items()}


def run_twice(train, make_cfg, reward: TokenReward, calls: dict[str, int], tmp_path: Path) -> dict[str, dict]:
    """The run without Ray, then with ray_address local: their rollouts, output directories and the
    rollout pools' calls (none without Ray; with it, pushes of the updated weights before sampling)."""
    out = {}
    for name, address in (("plain", None), ("ray", "local")):
        reward.rollouts = []
        before = dict(calls)
        train(make_cfg(tmp_path / name, address), reward)
        out[name] = {"rollouts": reward.rollouts, "dir": tmp_path / name,
                     "calls": {k: calls[k] - before[k] for k in calls}}
    assert out["plain"]["calls"] == {"generate": 0, "pushed": 0}
    assert out["ray"]["calls"]["generate"] > 0 and out["ray"]["calls"]["pushed"] > 0
    return out


def test_a_corecode_step_with_ray_address_local_equals_the_step_without_ray(ray_cluster, token_reward, pool_calls,
                                                                            tmp_path):
    from coral.corecode.recipe import CoReCodeConfig, train_corecode

    def make_cfg(out: Path, address: str | None) -> CoReCodeConfig:
        return CoReCodeConfig(n_train_tasks=16, n_test_tasks=2, n_fresh_tasks=0, d_model=32, n_layers=1,
                              sft=SFTConfig(epochs=0.25, batch_size=8), sft_processes=1, rl_steps=1,
                              tasks_per_step=2, plans_per_task=2, codes_per_plan=2, max_new_tokens=12,
                              efficiency_weight=0.0, eval_samples_per_task=0, eval_batch_samples=4,
                              sandbox_workers=1, rl=GRPOConfig(lr=1e-2, advantage="dr_grpo", optimizer="sgd",
                                                               loss=LossConfig(beta_kl=0.1)),
                              out_dir=str(out), resume=False, ray_address=address)

    runs = run_twice(lambda cfg, r: train_corecode(cfg, progress=False, reward_fn=r), make_cfg, token_reward,
                     pool_calls, tmp_path)
    plain, ray = runs["plain"], runs["ray"]
    # the evaluation after SFT (local in both runs), the RL step, the evaluation after it (on the pushed weights)
    assert len(plain["rollouts"]) == 3 and ray["rollouts"] == plain["rollouts"]
    step = metric_lines(plain["dir"])
    assert_same_metrics(step, metric_lines(ray["dir"]))
    assert "coder/loss" in step[0] and "planner/loss" in step[0], "rewards must vary, else nothing updates"
    roles = ["planner", "coder"]
    after = final_weights(plain["dir"], roles)
    assert_same_weights(after, final_weights(ray["dir"], roles))
    # an SGD step with a non-zero gradient moved the weights both runs agree on; the KL reference (a copy
    # of the local model, taken before the swap) was read in both
    assert step[0]["coder/grad_norm"] > 0 and step[0]["planner/grad_norm"] > 0 and "coder/kl" in step[0]


@pytest.mark.slow(reason="two MARS2 runs and three Ray actors (a torch import each): 20-31 s on the loaded 2-core "
                         "machine; the CoRe-Code test above covers the same ScaleOut wiring in the default suite")
def test_a_mars2_step_with_ray_address_local_equals_the_step_without_ray(ray_cluster, token_reward, pool_calls,
                                                                         tmp_path):
    from coral.benchmarks.splits import ProceduralSplits, build_tasks
    from coral.mars2.recipe import MARS2Config, train_mars2

    tasks = build_tasks(ProceduralSplits(seed=0, n_train_tasks=8, n_test_tasks=2))
    policies = [tiny_policy(seed=i, d_model=32, n_layers=1, n_heads=2, max_len=1024) for i in range(2)]
    initial = {f"agent{i}.{k}": v.clone() for i, p in enumerate(policies) for k, v in p.model.state_dict().items()}

    def make_cfg(out: Path, address: str | None) -> MARS2Config:
        return MARS2Config(agents=2, rl_steps=1, tasks_per_step=2, max_nodes_per_tree=3, max_new_tokens=12,
                           rl=GRPOConfig(lr=1e-2, optimizer="sgd"), sandbox_workers=1, out_dir=str(out),
                           resume=False, ray_address=address)

    runs = run_twice(lambda cfg, r: train_mars2(cfg, policies, tasks, progress=False, eval_before=False, reward_fn=r),
                     make_cfg, token_reward, pool_calls,
                     tmp_path)
    plain, ray = runs["plain"], runs["ray"]
    assert len(plain["rollouts"]) == 2 and ray["rollouts"] == plain["rollouts"]  # the RL search, the evaluation
    assert_same_metrics(metric_lines(plain["dir"]), metric_lines(ray["dir"]))
    names = ["agent0", "agent1"]
    after = final_weights(plain["dir"], names)
    assert_same_weights(after, final_weights(ray["dir"], names))
    assert any(not torch.equal(after[k], initial[k]) for k in initial), "the step changed no weight"


@pytest.mark.slow(reason="two RecursiveMAS runs (tokenizer, agents, links, four evaluations) and three Ray actors: "
                         "23-32 s on the loaded 2-core machine")
def test_recursivemas_with_ray_address_local_decodes_and_judges_on_ray_with_the_same_results(ray_cluster, pool_calls,
                                                                                             tmp_path):
    from coral.recursivemas import RecursiveMASConfig, train_recursivemas
    from coral.recursivemas.config import InnerLoopConfig, OuterLoopConfig

    summaries = {}
    for name, address in (("plain", None), ("ray", "local")):
        cfg = RecursiveMASConfig(n_train_tasks=4, n_test_tasks=2, agent_widths=(32,), n_layers=1, vocab_size=300,
                                 inner=InnerLoopConfig(steps=1, warmup_steps=0), batch_size=2, rounds=1,
                                 outer=OuterLoopConfig(steps=1, warmup_steps=0), latent_steps=1,
                                 max_new_tokens=8, out_dir=str(tmp_path / name), ray_address=address)
        summaries[name] = {k: v for k, v in train_recursivemas(cfg, progress=False).items() if "wall" not in k}
        if address is None:
            assert pool_calls == {"generate": 0, "pushed": 0}
    assert summaries["ray"] == summaries["plain"] and "after/test/single/accuracy" in summaries["ray"]
    # the single-agent baseline decoded on the actors; the agents are frozen, so no weight was pushed
    assert pool_calls["generate"] > 0 and pool_calls["pushed"] == 0
