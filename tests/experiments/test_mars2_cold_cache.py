"""experiments/mars2_compare.py's cold-start cache, which every efficacy study and the testbed share: resumable SFT
checkpoints, two cache levels, keys and names, the batch size of agents read back. No SFT runs: the training
stages are replaced by untrained tiny policies."""

from __future__ import annotations

import pytest


@pytest.fixture
def compare(load_experiment):
    return load_experiment("mars2_compare")


def test_a_cached_cold_start_keeps_its_sft_checkpoints_in_its_cache_folder_until_done(compare, tmp_path, monkeypatch):
    # a cold start stopped mid-SFT (a session's end) resumes from there instead of starting over
    from coral.mars2.recipe import MARS2Config
    from coral.policy import tiny_policy

    seen = []

    def fake_first_stage(cfg, train, sandbox, progress=True, checkpoint_dir=None):
        checkpoint_dir.mkdir(parents=True)
        (checkpoint_dir / "agent0.pt").write_text("state")
        seen.append(checkpoint_dir)
        return [tiny_policy(seed=i, d_model=32, n_layers=1) for i in range(cfg.agents)]

    monkeypatch.setattr(compare, "first_stage", fake_first_stage)
    cfg = MARS2Config(seed=3)
    compare.cached_cold_start(cfg, [], None, tmp_path)
    (where,) = [p.parent for p in seen]
    assert where.parent == tmp_path and seen[0].name == "sft_ckpt"
    assert (where / "done").exists() and not seen[0].exists()  # done: the checkpoints go
    assert len(compare.cached_cold_start(cfg, [], None, tmp_path)) == cfg.agents and len(seen) == 1  # read back


def test_an_own_refine_cold_start_shares_its_first_level_with_settings_that_differ_only_in_the_second(compare, tmp_path,
                                                                                                   monkeypatch):
    from dataclasses import replace

    from coral.mars2.recipe import MARS2Config
    from coral.policy import tiny_policy
    from coral.train.sft import SFTConfig

    firsts, seconds = [], []
    monkeypatch.setattr(compare, "first_stage", lambda cfg, train, sandbox, progress=True, checkpoint_dir=None: (
        firsts.append(checkpoint_dir), [tiny_policy(seed=0, d_model=32, n_layers=1)])[1])
    monkeypatch.setattr(compare, "second_stage", lambda cfg, policies, train, sandbox, progress=True, checkpoint_dir=None:
                        seconds.append((cfg.refine_keep_fraction, checkpoint_dir)))
    own = MARS2Config(seed=3, agents=1, refine_from="own")
    compare.cached_cold_start(own, [], None, tmp_path)
    compare.cached_cold_start(replace(own, refine_keep_fraction=0.1), [], None, tmp_path)
    assert len(firsts) == 1 and [k for k, _ in seconds] == [own.refine_keep_fraction, 0.1]  # one first SFT for both
    assert seconds[0][1].parent != seconds[1][1].parent  # each second level in its own folder
    assert compare.cold_start_key(own) != compare.cold_start_key(own, "first")
    assert compare.cold_start_key(MARS2Config(seed=3)) == compare.cold_start_key(MARS2Config(seed=3), "first")
    # refine_keep_examples enters the key only when set: the cold starts cached before it keep theirs
    assert "refine_keep_examples" not in compare._cold_start_fields(MARS2Config(seed=3))
    assert compare.cold_start_key(replace(MARS2Config(seed=3), refine_keep_examples=5)) != compare.cold_start_key(MARS2Config(seed=3))
    # keep drills: a second level over the first SFT's key (S3's cached cold start is S5's first level); golden keys
    s3 = MARS2Config(solutions_per_task=2, sft=SFTConfig(epochs=3.0, lr=3e-3, batch_size=32), refine_examples=2000,
                     refine_keep_examples=2000, agent_shapes=((128, 4), (128, 4)))
    s5 = replace(s3, keep_drills=5900)
    assert (compare.cold_start_key(s3), compare.cold_start_key(s5, "first"), compare.cold_start_key(s5)) == (
        "2ea3733c4612", "2ea3733c4612", "827f0fefc985")
    assert "keep_drills" not in compare._cold_start_fields(s5, "first")
    # golden: the keys of the testbed's S1 cold start (docs/results/efficacy.md), the folders it is cached in
    s1 = MARS2Config(solutions_per_task=2, sft=SFTConfig(epochs=3.0, lr=3e-3, batch_size=32), refine_from="own",
                     refine_tasks=2000, refine_examples=2000, refine_keep_fraction=0.3, agent_shapes=((128, 4), (128, 4)),
                     refine_sft=SFTConfig(epochs=1.0, lr=1e-3, batch_size=32))
    assert (compare.cold_start_key(s1, "first"), compare.cold_start_key(s1)) == ("1cc906248a39", "b68ee6cf85d5")


def test_a_cold_starts_name_changes_with_its_weights_not_only_its_config(compare, tmp_path, monkeypatch):
    import shutil

    from coral.mars2.recipe import MARS2Config
    from coral.policy import tiny_policy

    trained = iter([0, 1])
    monkeypatch.setattr(compare, "first_stage", lambda cfg, train, sandbox, progress=True, checkpoint_dir=None: [
        tiny_policy(seed=next(trained), d_model=32, n_layers=1)])
    cfg = MARS2Config(seed=3, agents=1)
    with pytest.raises(FileNotFoundError, match="no finished cold start"):
        compare.cold_start_name(cfg, tmp_path)
    compare.cached_cold_start(cfg, [], None, tmp_path)
    first = compare.cold_start_name(cfg, tmp_path)
    assert first.startswith(compare.cold_start_key(cfg) + ":") and compare.cold_start_name(cfg, tmp_path) == first
    shutil.rmtree(tmp_path / compare.cold_start_key(cfg))  # the cache deleted, the same config trained again
    compare.cached_cold_start(cfg, [], None, tmp_path)
    assert compare.cold_start_name(cfg, tmp_path) != first


def test_a_finished_cold_start_without_weights_is_named_as_such(compare, tmp_path):
    from coral.mars2.recipe import MARS2Config

    cfg = MARS2Config(seed=3, agents=1)
    (tmp_path / compare.cold_start_key(cfg)).mkdir()
    (tmp_path / compare.cold_start_key(cfg) / "done").touch()
    with pytest.raises(FileNotFoundError, match="no agent\\*/\\*.safetensors to digest"):
        compare.cold_start_name(cfg, tmp_path)


def test_agents_read_back_from_the_cache_sample_in_batches_of_agent_batch_size(compare, tmp_path, monkeypatch):
    # a cold start saved with the default batch of 16 mined 2000 own-refine tasks 16 prompts at a time
    from coral.mars2.cold_start import AGENT_BATCH_SIZE
    from coral.mars2.recipe import MARS2Config
    from coral.policy import tiny_policy

    monkeypatch.setattr(compare, "first_stage", lambda cfg, train, sandbox, progress=True, checkpoint_dir=None: [
        tiny_policy(seed=i, d_model=32, n_layers=1) for i in range(cfg.agents)])
    cfg = MARS2Config(seed=3)
    made = compare.cached_cold_start(cfg, [], None, tmp_path)
    assert made[0].batch_size != AGENT_BATCH_SIZE  # saved with another batch size
    assert [p.batch_size for p in compare.cached_cold_start(cfg, [], None, tmp_path)] == [AGENT_BATCH_SIZE] * cfg.agents


def test_weights_digest_reads_the_files_of_its_pattern_and_changes_with_their_bytes(compare, tmp_path):
    """The testbed names a given cold start (cold_dir, a CoRe-Code run's sft/cold_start) by folder and this digest."""
    (tmp_path / "agent0").mkdir()
    (tmp_path / "agent0" / "model.safetensors").write_bytes(b"a")
    (tmp_path / "coder.pt").write_bytes(b"c")
    agents, kept = compare.weights_digest(tmp_path), compare.weights_digest(tmp_path, "*.pt")
    assert agents != kept
    (tmp_path / "coder.pt").write_bytes(b"d")
    assert compare.weights_digest(tmp_path, "*.pt") != kept and compare.weights_digest(tmp_path) == agents
    with pytest.raises(FileNotFoundError, match="no planner.pt to digest"):
        compare.weights_digest(tmp_path, "planner.pt")
    assert compare.weights_name(tmp_path) == f"{tmp_path}:{agents}"
    assert compare.weights_name(tmp_path, "*.pt", label="run") == f"run:{compare.weights_digest(tmp_path, '*.pt')}"
