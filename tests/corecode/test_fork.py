"""Runs that share one CoRe-Code cold start (`cold_start_from`): the same run as training it again, and
refusals of a source that is not the same cold start."""

import json
import shutil

import pytest
import torch
from test_corecode import SMALL, _final_weights

from coral.benchmarks.splits import build_tasks
from coral.config import UserInputError
from coral.corecode.fork import COLD_START_DIR, load_kept_cold_start
from coral.corecode.recipe import CoReCodeConfig, train_corecode
from coral.corecode.setup import build_policies
from coral.train.checkpoints import policy_weights


def _cfg(out, **fields):
    return CoReCodeConfig(**{**SMALL, "rl_steps": 2, "out_dir": str(out), **fields})


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    out = tmp_path_factory.mktemp("source")
    summary = train_corecode(_cfg(out, train_roles=("coder",)), progress=False)
    return out, summary


def test_a_run_from_a_shared_cold_start_equals_the_run_that_trained_it(source, tmp_path, capsys):
    src, summary = source
    forked = train_corecode(_cfg(tmp_path, train_roles=("coder",), cold_start_from=str(src)), progress=True)
    said = capsys.readouterr().out
    assert "cold start from" in said and "SFT took" not in said  # no SFT, no evaluation after SFT
    a, b = _final_weights(src), _final_weights(tmp_path)
    assert all(torch.equal(a[r][k], b[r][k]) for r in a for k in a[r])
    read = lambda run: [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    keys = ["step", "coder/reward", "planner/reward"]
    assert [[m[k] for k in keys] for m in read(tmp_path)] == [[m[k] for k in keys] for m in read(src)]
    for key in ("pass@1_sft", "pass@1_rl", "pass@1_sampled_sft", "pass@1_sampled_rl", "change"):
        assert forked[key] == summary[key], key
    assert (tmp_path / COLD_START_DIR / "state.json").is_file()  # a fork can be shared in turn


def test_another_ablation_from_the_cold_start_keeps_its_frozen_role_at_the_cold_start(source, tmp_path):
    src, _ = source
    train_corecode(_cfg(tmp_path, train_roles=("planner",), rl_steps=1, cold_start_from=str(src)), progress=False)
    cold = torch.load(src / COLD_START_DIR / "coder.pt", weights_only=True)
    coder = _final_weights(tmp_path)["coder"]
    assert all(torch.equal(cold[k], coder[k]) for k in cold)


@pytest.mark.parametrize("fields, match", [
    ({"seed": 1}, "field 'seed': 0, now 1"),
    ({"sft": SMALL["sft"].__class__(epochs=0.5, batch_size=8)}, "field 'sft.epochs'"),
    ({"rl": SMALL.get("rl", CoReCodeConfig().rl).__class__(lr=1e-4, advantage="dr_grpo", temperature=0.7)},
     "field 'rl.temperature'"),
])
def test_a_source_with_another_cold_start_config_is_refused(source, tmp_path, fields, match):
    with pytest.raises(UserInputError, match=match):
        train_corecode(_cfg(tmp_path, cold_start_from=str(source[0]), **fields), progress=False)


def test_a_source_without_a_finished_cold_start_is_refused(tmp_path):
    with pytest.raises(UserInputError, match="sft/cold_start/state.json does not exist"):
        train_corecode(_cfg(tmp_path / "run", cold_start_from=str(tmp_path / "nothing")), progress=False)



def test_a_source_without_a_roles_weights_is_refused_before_anything_loads(source, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(source[0], src)
    (src / COLD_START_DIR / "coder.pt").unlink()
    with pytest.raises(UserInputError, match="cold_start_from: .*sft/cold_start has no 'coder' weights"):
        train_corecode(_cfg(tmp_path / "run", cold_start_from=str(src)), progress=False)
    assert not (tmp_path / "run" / "sft").exists()  # no evaluation folder copied
    cfg = _cfg(tmp_path / "other")
    policies = build_policies(cfg, build_tasks(cfg.splits)[0])
    with pytest.raises(UserInputError, match="has no 'coder' weights"):
        load_kept_cold_start(src, policies)
    del policies["coder"]
    state = load_kept_cold_start(src, policies)  # the planner alone loads: the source's cold start
    kept = torch.load(src / COLD_START_DIR / "planner.pt", weights_only=True)
    assert all(torch.equal(kept[k], v) for k, v in policy_weights(policies["planner"]).items())
    assert "metrics" not in state and "sft_loss" in state and "sft_s" in state
