"""`coral eval --ray-address local` writes the samples `coral eval` writes without Ray."""

from __future__ import annotations

import json

import pytest

from coral.cli import main


def samples(path):
    return [(r["task_id"], [t["text"] for t in r["turns"]], r["passed"])
            for r in map(json.loads, path.read_text().splitlines())]


@pytest.mark.slow  # starts its own rollout actors (a torch import each) and runs coral eval twice: ~2 min loaded
def test_coral_eval_on_ray_writes_the_samples_of_coral_eval_without_ray(ray_cluster, tmp_path):
    args = ["eval", "--workflow", "chain", "--model", "tiny", "--limit", "3", "--max-new-tokens", "8",
            "--sandbox-workers", "1", "--no-progress"]
    assert main([*args, "--out-dir", str(tmp_path / "plain")]) == 0
    assert main([*args, "--out-dir", str(tmp_path / "ray"), "--ray-address", "local"]) == 0
    plain = samples(tmp_path / "plain" / "samples.jsonl")
    assert len(plain) == 3 and all(texts[0] for _, texts, _ in plain)
    assert samples(tmp_path / "ray" / "samples.jsonl") == plain


@pytest.fixture
def opened(monkeypatch):
    """Actor groups and local sandboxes opened and not closed yet, by kind, while the test runs."""
    from coral.sandbox import Sandbox
    from coral.scale.actors import ActorGroup

    live: dict[str, set[int]] = {"actor groups": set(), "sandboxes": set()}
    for cls, kind in ((ActorGroup, "actor groups"), (Sandbox, "sandboxes")):
        init, close = cls.__init__, cls.close

        def opening(self, *args, _init=init, _kind=kind, **kwargs):
            live[_kind].add(id(self))
            _init(self, *args, **kwargs)

        def closing(self, _close=close, _kind=kind):
            live[_kind].discard(id(self))
            _close(self)

        monkeypatch.setattr(cls, "__init__", opening)
        monkeypatch.setattr(cls, "close", closing)
    return live


def test_coral_eval_and_coral_search_on_ray_close_every_actor_and_sandbox_they_start(ray_cluster, opened, tmp_path):
    from coral.benchmarks import load_benchmark

    task = load_benchmark("procedural-test", limit=1)[0]
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([f"```python\n{task.reference}\n```"]))
    common = ["--limit", "1", "--sandbox-workers", "1", "--no-progress", "--ray-address", "local"]
    assert main(["eval", "--workflow", "single", "--model", f"scripted:{replies}", "--out-dir", str(tmp_path / "e"),
                 *common]) == 0
    assert opened == {"actor groups": set(), "sandboxes": set()}
    assert main(["search", "--models", f"scripted:{replies}", "--max-nodes", "1", "--out-dir", str(tmp_path / "s"),
                 *common]) == 0
    assert opened == {"actor groups": set(), "sandboxes": set()}


def test_copying_a_ray_policy_names_the_fix_instead_of_copying_the_actor_pool(ray_cluster):
    import copy
    import pickle

    from coral.policy import ScriptedPolicy
    from coral.scale import RayPolicy

    policy = RayPolicy(ScriptedPolicy(["x"]), 1, cpus_per_worker=0.25)
    try:
        for copier in (copy.deepcopy, copy.copy, pickle.dumps):
            with pytest.raises(TypeError, match=r"RayPolicy 'ray:scripted' .* before ScaleOut.distribute"):
                copier(policy)
    finally:
        policy.close()


def test_an_actor_group_started_right_after_one_that_held_every_free_cpu_was_closed_starts(ray_cluster):
    from coral.policy import ScriptedPolicy
    from coral.policy.base import GenerationRequest, user
    from coral.scale import RayPolicy, ScaleOut

    with ScaleOut("local", rollout_workers=1) as scale:  # its one actor takes all the free CPUs
        assert scale.distribute(ScriptedPolicy(["x"]), None)[0].generate([GenerationRequest(user("a"))])[0].text == "x"
    policy = RayPolicy(ScriptedPolicy(["y"]), 1, cpus_per_worker=0.25)  # Ray frees the CPUs a moment after the kill
    try:
        assert policy.generate([GenerationRequest(user("b"))])[0].text == "y"
    finally:
        policy.close()
