"""experiments/smollm2_rl.py: what each stage holds out (no model is loaded: train_corecode is replaced)."""

import pytest

from experiments import smollm2_rl


@pytest.fixture
def seen(monkeypatch):
    got = []
    monkeypatch.setattr("coral.corecode.recipe.train_corecode", lambda cfg: got.append(cfg) or {})
    return got


def test_run_holds_out_the_test_split_and_the_fresh_tasks_of_rl_s_stream(seen):
    smollm2_rl.main(["run", "--seed", "1", "--set", "rl_steps=3"])
    cfg = seen[0]
    assert (cfg.held_out_split, cfg.n_fresh_tasks, cfg.fresh_source) == ("test", 40, "rl")
    assert (cfg.seed, cfg.rl_steps, cfg.out_dir) == (1, 3, "runs/smollm2/run/seed1")


def test_a_sweep_chooses_on_validation_and_never_sees_the_fresh_tasks(seen):
    smollm2_rl.main(["sweep", "--name", "lr", "--set", "rl.lr=1e-4"])
    cfg = seen[0]
    assert (cfg.held_out_split, cfg.n_fresh_tasks, cfg.rl.lr) == ("validation", 0, 1e-4)


def test_run_refuses_the_validation_split():
    with pytest.raises(SystemExit, match="choose settings with stage sweep"):
        smollm2_rl.main(["run", "--set", "held_out_split=validation"])
