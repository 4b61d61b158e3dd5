"""The shared run loop: a toy recipe that is only a step function joins it, and a run that dies after a
checkpoint resumes to exactly the uninterrupted run's weights, optimiser, RNG and metrics."""

from __future__ import annotations

import json
import random

import pytest
import torch

from coral.train.checkpoints import TrainedAgent
from coral.train.loop import DataCursor, MetricsLog, Run, drive, new_state, next_batch


class Learner:
    """A linear model fit to its batch by SGD with momentum (so optimiser state matters on resume)."""

    def __init__(self):
        torch.manual_seed(0)
        self.policy = torch.nn.Linear(1, 1)
        self.opt = torch.optim.SGD(self.policy.parameters(), lr=0.1, momentum=0.9)

    def state_dict(self):
        return {"optimizer": self.opt.state_dict()}

    def load_state_dict(self, state):
        self.opt.load_state_dict(state["optimizer"])


def _toy_run(out, steps, crash_at=None):
    """A recipe in a dozen lines: setup -> resume or fresh state -> drive(step function)."""
    learner = Learner()
    agents = {"solo": TrainedAgent(learner.policy, learner)}
    run = Run(out, {"steps": steps})
    state = run.restore(agents) or new_state()
    learner.steps_run = []

    def step_fn(step, batch):
        learner.steps_run.append(step)
        if step == crash_at:
            raise RuntimeError("killed")
        noise = random.random() + torch.rand(()).item()  # both RNG streams feed the update
        x = torch.tensor([[float(t)] for t in batch])
        loss = ((learner.policy(x) - 2 * x - noise) ** 2).mean()
        learner.opt.zero_grad()
        loss.backward()
        learner.opt.step()
        return {"step": float(step), "loss": loss.item(), "first_task": float(batch[0])}

    if not state["step"]:
        random.seed(1)
        torch.manual_seed(1)
    drive(run, step_fn, list(range(10)), agents, state, steps=steps, tasks_per_step=3, seed=7,
          checkpoint_every_steps=2)
    return learner


def test_a_run_that_dies_resumes_from_its_checkpoint_to_the_same_state(tmp_path):
    clean = _toy_run(tmp_path / "clean", steps=6)
    with pytest.raises(RuntimeError, match="killed"):
        _toy_run(tmp_path / "crashed", steps=6, crash_at=4)  # step 3 was logged, its checkpoint (every 2) not
    assert len((tmp_path / "crashed" / "metrics.jsonl").read_text().splitlines()) == 3
    resumed = _toy_run(tmp_path / "crashed", steps=6)
    assert resumed.steps_run == [3, 4, 5, 6]  # from the step-2 checkpoint on, not from scratch
    for a, b in zip(clean.policy.parameters(), resumed.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    assert clean.opt.state_dict()["state"][0]["momentum_buffer"].equal(
        resumed.opt.state_dict()["state"][0]["momentum_buffer"])
    read = lambda d: [json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert read("crashed") == read("clean") and [m["step"] for m in read("clean")] == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (tmp_path / "clean" / "ckpt").iterdir()) == ["step_000004", "step_000006"]
    assert json.loads((tmp_path / "clean" / "config.json").read_text()) == {"steps": 6}


def test_the_data_cursor_is_the_seeded_endless_shuffle():
    items = list(range(5))
    cursor = DataCursor(items, seed=3)
    taken = cursor.take(4) + cursor.take(4)
    assert taken == next_batch(items, 0, 8, seed=3) and cursor.position == 8
    assert sorted(taken[:5]) == items  # one epoch: every item once
    with pytest.raises(ValueError, match="no items"):
        next_batch([], 0, 1, seed=0)


def test_a_recipe_may_give_its_own_order_of_each_epoch():
    def reversed_order(n, seed, epoch):
        return list(range(n))[::-1] if epoch % 2 == 0 else list(range(n))

    assert next_batch("abc", 1, 4, seed=0, order=reversed_order) == ["b", "a", "a", "b"]
    cursor = DataCursor("abc", seed=0, position=2, order=reversed_order)
    assert cursor.take(3) == ["a", "a", "b"] and cursor.position == 5


def test_the_metrics_log_drops_steps_logged_after_the_last_checkpoint(tmp_path):
    log = MetricsLog(tmp_path, [])
    for step in (1, 2, 3):
        log({"step": float(step), "x": 0.5})
    MetricsLog(tmp_path, log.history[:2])  # a resumed run starts from its checkpoint's history
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert any((tmp_path / "tb").iterdir())  # TensorBoard events beside the JSONL


def test_a_checkpointed_run_resumes_only_under_its_own_config_up_to_the_fields_that_may_change(tmp_path):
    from coral.config import UserInputError

    config = {"steps": 4, "rl": {"lr": 1e-4, "loss": {"beta_kl": 0.0}}, "workers": 2}
    _toy_run(tmp_path, steps=2)  # a checkpoint at step 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    may = ("steps", "workers")
    Run(tmp_path, {**config, "steps": 8, "workers": 4}, may_change=may)  # more steps, other workers: fine
    with pytest.raises(UserInputError, match=r"config.json: the run was written with another config "
                                             r"\(field 'rl.lr': 0.0001, now 0.0003\)"):
        Run(tmp_path, {**config, "rl": {"lr": 3e-4, "loss": {"beta_kl": 0.0}}}, may_change=may)
    with pytest.raises(UserInputError, match="field 'rl.loss.beta_kl'"):
        Run(tmp_path, {**config, "rl": {"lr": 1e-4, "loss": {"beta_kl": 0.1}}}, may_change=may)
    Run(tmp_path, {**config, "added_later": 1}, may_change=may)  # a field one coral version lacks: not compared
    Run(tmp_path, {"steps": 1}, start_over=True, may_change=may)  # starting over: nothing is resumed
    assert json.loads((tmp_path / "config.json").read_text()) == {"steps": 1}
