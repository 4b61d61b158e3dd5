import hashlib
import json
import re
from pathlib import Path

import pytest

from coral.cli import main
from coral.hiras.paper import FIXTURE_PAPER, FIXTURE_REFERENCE

CHECKOUTS = Path(__file__).parent / "fixtures" / "checkouts"


def test_reproduce_papercoder_demo_writes_the_repository_and_reports_a_failing_paper(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["reproduce", str(FIXTURE_PAPER), str(tmp_path / "missing.md"), "--model", "scripted-demo",
               "--pipeline", "papercoder", "--out-dir", str(out)])
    printed = capsys.readouterr().out
    assert rc == 1  # one paper of the batch failed
    assert "coral reproduce: papercoder / scripted-demo" in printed
    assert re.search(r"│ ncs_paper.md +│ +done │", printed) and f"runs: {out / 'ncs_paper'}" in printed
    assert re.search(r"│ missing.md +│ +failed │", printed) and "no such file" in printed
    assert (out / "ncs_paper/repo/main.py").read_text() == (FIXTURE_REFERENCE / "main.py").read_text()
    assert json.loads((out / "ncs_paper/usage.json").read_text())["total"]["calls"] == 10


def test_judge_prints_the_score_and_writes_the_result(tmp_path, capsys):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([json.dumps({"critique_list": [], "score": 5}), "not json",
                                   '{"critique_list": "ok", "score": 2}']))
    rc = main(["judge", str(FIXTURE_REFERENCE), "--paper", str(FIXTURE_PAPER), "--gold", str(FIXTURE_REFERENCE),
               "--protocol", "ref-based", "--model", f"scripted:{replies}", "--n", "3", "--out",
               str(tmp_path / "r.json")])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "coral judge: ref-based" in printed and re.search(r"│ +3.50 │ +2/3 │ +4 │", printed)
    assert "prompt: coral variant" in printed in printed
    assert json.loads((tmp_path / "r.json").read_text())["scores"] == [5, 2]


def test_judge_uses_the_prompt_file_of_the_given_checkout_and_names_it(tmp_path, capsys):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([json.dumps({"critique_list": [], "score": 4})]))
    rc = main(["judge", str(FIXTURE_REFERENCE), "--paper", str(FIXTURE_PAPER), "--protocol", "ref-free",
               "--model", f"scripted:{replies}", "--n", "1", "--paper2code-checkout", str(CHECKOUTS / "Paper2Code"),
               "--out", str(tmp_path / "r.json")])
    assert rc == 0
    path = CHECKOUTS / "Paper2Code/data/prompts/ref_free.txt"
    printed = capsys.readouterr().out
    assert re.search(r"│ +4.00 │ +1/1 │ +4 │", printed) and f"prompt: {path}" in printed.replace("\n", "")
    assert json.loads((tmp_path / "r.json").read_text())["prompt_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_judge_with_a_checkout_that_is_not_one_is_a_one_line_error(tmp_path, capsys):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["unused"]))
    rc = main(["judge", str(FIXTURE_REFERENCE), "--paper", str(FIXTURE_PAPER), "--protocol", "p2c-ex",
               "--model", f"scripted:{replies}", "--hiras-checkout", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("coral judge: error: ") and "p2c-ex.yaml: no such file" in err and err.count("\n") == 1


def test_judge_help_says_coral_variants_are_used_only_without_a_checkout(capsys):
    with pytest.raises(SystemExit):
        main(["judge", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "verbatim; without it, coral's own variants of those prompts" in text
    assert "verbatim; without it, coral's own variant of that prompt" in text


def test_judge_with_the_demo_model_is_a_one_line_error(capsys):
    rc = main(["judge", str(FIXTURE_REFERENCE), "--paper", str(FIXTURE_PAPER), "--protocol", "ref-free",
               "--model", "scripted-demo"])
    assert rc == 2
    assert capsys.readouterr().err.startswith("coral judge: error: --model scripted-demo only replays")


def test_reproduce_prices_tokens_in_usage_and_status(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["reproduce", str(FIXTURE_PAPER), "--model", "scripted-demo", "--pipeline", "papercoder",
               "--out-dir", str(out), "--usd-per-mtok-prompt", "2", "--usd-per-mtok-completion", "10"])
    assert rc == 0
    usage = json.loads((out / "ncs_paper/usage.json").read_text())
    total = usage["total"]
    assert total["usd"] == round((total["prompt_tokens"] * 2 + total["completion_tokens"] * 10) / 1e6, 6) > 0
    assert sum(row["usd"] for agent, row in usage.items() if agent != "total") == pytest.approx(total["usd"])
    status = json.loads((out / "ncs_paper/status.json").read_text())
    assert status["cost"] == {"model_wall_s": total["wall_s"], "usd": total["usd"]}
    assert f"${total['usd']:.4f}" in capsys.readouterr().out


def test_reproduce_without_prices_records_wall_time_and_no_dollars(tmp_path):
    out = tmp_path / "out"
    assert main(["reproduce", str(FIXTURE_PAPER), "--model", "scripted-demo", "--out-dir", str(out)]) == 0
    status = json.loads((out / "ncs_paper/status.json").read_text())
    assert status["cost"]["usd"] is None and status["cost"]["model_wall_s"] >= 0
    assert all(row["usd"] is None for row in json.loads((out / "ncs_paper/usage.json").read_text()).values())


def test_reproduce_with_one_price_is_a_one_line_error(tmp_path, capsys):
    rc = main(["reproduce", str(FIXTURE_PAPER), "--model", "scripted-demo", "--out-dir", str(tmp_path),
               "--usd-per-mtok-prompt", "2"])
    assert rc != 0
    assert "--usd-per-mtok-completion" in capsys.readouterr().err


def test_reproduce_papercoder_with_repair_rounds_runs_the_repository(tmp_path):
    out = tmp_path / "out"
    assert main(["reproduce", str(FIXTURE_PAPER), "--model", "scripted-demo", "--pipeline", "papercoder",
                 "--out-dir", str(out), "--repair-rounds", "1"]) == 0
    status = json.loads((out / "ncs_paper/status.json").read_text())
    assert status["final_exit_code"] == 0 and status["repairs"] == []  # it ran at once: nothing to repair


@pytest.mark.parametrize("pipeline, flag, words", [("hiras", ["--repair-rounds", "1"], "PaperCoder baseline's repair"),
                                                   ("papercoder", ["--paper-in-prompt"], "is a HiRAS option")])
def test_a_flag_of_the_other_pipeline_is_a_one_line_error(tmp_path, capsys, pipeline, flag, words):
    rc = main(["reproduce", str(FIXTURE_PAPER), "--model", "scripted-demo", "--pipeline", pipeline,
               "--out-dir", str(tmp_path), *flag])
    assert rc == 2 and words in capsys.readouterr().err


def test_model_calls_show_on_a_progress_row_with_their_total_and_tokens():
    from coral.hiras.cli import ShownPolicy
    from coral.policy.base import GenerationRequest, SamplingParams, user
    from coral.policy.scripted import ScriptedPolicy
    from coral.terminal import Bar

    bar = Bar(True, {"tokens": "{} completion tokens"})
    shown = ShownPolicy(ScriptedPolicy(["a b c"]), bar, "judge: judgements", total=3)
    request = GenerationRequest(user("x"), SamplingParams(max_new_tokens=8))
    assert [c.text for c in shown.generate([request] * 3)] == ["a b c"] * 3
    task = bar.progress.tasks[shown.row]
    assert task.total == 3 and task.completed == 3 and "completion tokens" in task.fields["figures"]
    assert shown.name == shown.policy.name  # the rest is the policy's own
    bar.close()
