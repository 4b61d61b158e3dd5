import json

from coral.hiras.demo import FILES, papercoder_replies
from coral.hiras.paper import FIXTURE_PAPER, FIXTURE_REFERENCE, load_paper
from coral.hiras.workspace import Workspace
from coral.policy.scripted import ScriptedPolicy

BROKEN = "from snc import fit, predicts"
FIX = f"Filename: main.py\n<<<<<<< SEARCH\n{BROKEN}\n=======\nfrom snc import fit, predict\n>>>>>>> REPLACE\n"


def broken_replies():
    replies = papercoder_replies()
    replies[-1] = replies[-1].replace("from snc import fit, predict", BROKEN)
    return replies


def run(tmp_path, replies, rounds):
    from coral.hiras.papercoder import PaperCoder, PaperCoderConfig

    policy = ScriptedPolicy(replies, cycle=False)
    config = PaperCoderConfig(repair_rounds=rounds, command_timeout_s=30.0)
    return PaperCoder(policy, tmp_path, config).run(load_paper(FIXTURE_PAPER)), policy


def test_the_repair_stage_runs_the_repository_and_applies_the_fix_for_its_error(tmp_path):
    result, policy = run(tmp_path, broken_replies() + [FIX], rounds=2)
    assert result.repairs == [{"round": 1, "exit_code": 1, "applied": ["main.py edit 1"], "failed": []}]
    assert result.final_exit_code == 0 and result.status == "done"
    assert (tmp_path / "repo/main.py").read_text() == (FIXTURE_REFERENCE / "main.py").read_text()
    prompt = policy.calls[-1][-1]["content"]
    assert "ImportError: cannot import name 'predicts'" in prompt and "## File name: main.py\n" in prompt
    assert "`python main.py` failed" in prompt and "## File name: config.yaml" in prompt
    saved = json.loads((tmp_path / "status.json").read_text())
    assert saved["final_exit_code"] == 0 and saved["repairs"][0]["applied"] == ["main.py edit 1"]
    assert "reply:\n" + FIX in (tmp_path / "artifacts/debugging/round_1.md").read_text()


def test_repair_stops_after_its_rounds_and_records_each_and_the_last_exit_code(tmp_path):
    useless = "Filename: main.py\n<<<<<<< SEARCH\nnot in the file\n=======\nx\n>>>>>>> REPLACE"
    result, policy = run(tmp_path, broken_replies() + [useless, "I do not know."], rounds=2)
    assert [r["failed"] for r in result.repairs] == [["main.py edit 1: search text not found"],
                                                     ["no 'Filename:' line in the reply"]]
    assert [r["exit_code"] for r in result.repairs] == [1, 1] and result.final_exit_code == 1
    assert len(policy.calls) == 4 + 2 * len(FILES) + 2


def test_without_repair_rounds_the_code_is_never_run(tmp_path):
    result, _ = run(tmp_path, broken_replies(), rounds=0)
    assert result.repairs == [] and result.final_exit_code is None


def test_edits_apply_like_paper2codes_debugging_step(tmp_path):
    from coral.hiras.papercoder import apply_edits

    repo = Workspace(tmp_path)
    repo.write("a.py", "x = 1\ny = x\nx = 1\n")
    reply = ("Filename: a.py\n<<<<<<< SEARCH\n  x = 1  \n=======\nx = 2\n>>>>>>> REPLACE\n"  # stripped, every occurrence
             "<<<<<<< SEARCH\n\n=======\nz\n>>>>>>> REPLACE\n"
             "Filename: ../out.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
             "Filename: missing.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
             "Filename: a.py\nno edit here")
    applied, failed = apply_edits(reply, repo)
    assert applied == ["a.py edit 1"]
    assert failed == ["a.py edit 2: empty search text", "../out.py: path '../out.py' leaves the workspace",
                      "missing.py: no file 'missing.py' in the workspace", "a.py: no SEARCH/REPLACE edit"]
    assert repo.read("a.py") == "x = 2\ny = x\nx = 2\n"
    assert not (tmp_path.parent / "out.py").exists()
