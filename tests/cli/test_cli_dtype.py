"""--dtype: the precision of in-process models for eval, search, reproduce and judge, default auto,
documented in --help; a bad value is one line naming the field."""

from __future__ import annotations

import pytest
import torch

import coral.hiras.cli
import coral.mars2.search
import coral.policy
from coral.cli import build_parser, main
from coral.evaluation import EvalConfig, build_agents
from coral.hiras.cli import policy_for
from coral.hiras.paper import FIXTURE_PAPER, FIXTURE_REFERENCE
from coral.mars2.search import SearchConfig, run_search


class Stop(Exception):
    pass


@pytest.mark.parametrize("command", ["eval", "search", "reproduce", "judge"])
def test_help_documents_the_dtype_and_its_default(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--dtype" in text and "AVX512-BF16 or AMX" in text and "(default: auto)" in text


def test_eval_builds_its_agents_in_the_given_dtype():
    agents = build_agents(EvalConfig(model="tiny", workflow="chain", dtype="bfloat16"))
    assert {a.policy.dtype for a in agents.values()} == {torch.bfloat16}
    assert build_agents(EvalConfig(model="tiny"))["coder"].policy.dtype is torch.float32  # auto, in this suite


def test_eval_names_a_bad_dtype_in_one_line(capsys, tmp_path):
    assert main(["eval", "--dtype", "half", "--out-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "field 'dtype'" in err and "'half'" in err and len(err.splitlines()) == 1


def test_search_loads_every_model_in_the_given_dtype(monkeypatch, tmp_path):
    seen = []

    def load(spec, dtype=None, **kwargs):
        seen.append((spec, dtype))
        if len(seen) == 2:
            raise Stop
        return coral.policy.ScriptedPolicy(["x"])

    monkeypatch.setattr(coral.mars2.search, "load_policy", load)
    with pytest.raises(Stop):
        run_search(SearchConfig(models=("tiny", "smollm2"), dtype="bfloat16", limit=1, out_dir=str(tmp_path)),
                   progress=False)
    assert seen == [("tiny", "bfloat16"), ("smollm2", "bfloat16")]


def test_hiras_commands_pass_their_dtype_to_the_policies(monkeypatch, tmp_path):
    assert policy_for("tiny", "hiras", "bfloat16").dtype is torch.bfloat16
    seen = []

    def capture(spec, pipeline="hiras", dtype="auto"):
        seen.append(dtype)
        raise Stop

    monkeypatch.setattr(coral.hiras.cli, "policy_for", capture)
    for argv in (["reproduce", "p.md", "--model", "tiny", "--out-dir", str(tmp_path), "--dtype", "bfloat16"],
                 ["judge", str(FIXTURE_REFERENCE), "--paper", str(FIXTURE_PAPER), "--protocol", "ref-free",
                  "--model", "tiny"]):
        with pytest.raises(Stop):
            main(argv)
    assert seen == ["bfloat16", "auto"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["judge", "r", "--paper", "p", "--protocol", "ref-free", "--model", "m",
                                   "--dtype", "half"])
