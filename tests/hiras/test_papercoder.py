import json

from coral.hiras.demo import FILES, papercoder_replies
from coral.hiras.paper import FIXTURE_PAPER, FIXTURE_REFERENCE, load_paper
from coral.hiras.papercoder import PaperCoder
from coral.policy.scripted import ScriptedPolicy


def run(tmp_path, replies):
    policy = ScriptedPolicy(replies, cycle=False)
    return PaperCoder(policy, tmp_path).run(load_paper(FIXTURE_PAPER)), policy


def test_papercoder_writes_its_artifacts_in_stage_order(tmp_path):
    result, _ = run(tmp_path, papercoder_replies())
    assert result.status == "done" and result.errors == []
    expected = (["artifacts/planning_trajectories.json", "artifacts/architecture.json", "artifacts/task_list.json",
                 "artifacts/planning_config.yaml", "repo/config.yaml"]
                + [f"artifacts/analysis/{f}.md" for f in FILES]
                + [p for f in FILES for p in (f"artifacts/coding/{f}.md", f"repo/{f}")])
    assert result.artifacts == expected
    assert result.files == list(FILES)
    for rel in (*FILES, "config.yaml"):
        assert (tmp_path / "repo" / rel).read_text() == (FIXTURE_REFERENCE / rel).read_text()
    planning = json.loads((tmp_path / "artifacts/planning_trajectories.json").read_text())
    assert [m["role"] for m in planning] == ["system"] + ["user", "assistant"] * 4


def test_planning_is_one_conversation_analysis_stateless_and_coding_sees_earlier_files(tmp_path):
    _, policy = run(tmp_path, papercoder_replies())
    planning, analyses, codings = policy.calls[:4], policy.calls[4:7], policy.calls[7:]
    assert [len(c) for c in planning] == [2, 4, 6, 8]  # each turn carries the whole conversation
    assert all(len(c) == 2 for c in analyses + codings)  # system + one user message: no memory
    for i, chat in enumerate(codings):
        prompt = chat[-1]["content"]
        assert f"Write the complete file {FILES[i]}" in prompt
        for j, earlier in enumerate(FILES):
            assert (f"## File name: {earlier}\n" in prompt) == (j < i)
    assert (FIXTURE_REFERENCE / "snc.py").read_text() in codings[2][-1]["content"]


def test_a_rerun_resumes_without_calling_the_model_again(tmp_path):
    run(tmp_path, papercoder_replies())
    result, policy = run(tmp_path, ["unused"])
    assert policy.calls == [] and result.status == "done" and result.files == list(FILES)


def test_unparsable_architecture_is_reported_as_data(tmp_path):
    replies = papercoder_replies()
    replies[1] = "I would use three files."
    result, _ = run(tmp_path, replies)
    assert result.status == "failed"
    assert result.errors == ["planning turn 2: no [CONTENT] JSON with a list of strings under 'File list'"]
    assert json.loads((tmp_path / "status.json").read_text())["status"] == "failed"


def test_a_coding_reply_without_a_fenced_block_is_written_whole_as_paper2code_does(tmp_path):
    replies = papercoder_replies()
    replies[8] = "<think>no fence today</think>def make_split():\n    return []\n"
    result, _ = run(tmp_path, replies)
    assert result.errors == ["coding data.py: no fenced code block; the whole reply is the file"]
    assert result.files == list(FILES)
    assert (tmp_path / "repo/data.py").read_text() == "def make_split():\n    return []"


def test_coding_and_analysis_prompts_hold_the_logic_design_and_no_stdlib_rule(tmp_path):
    _, policy = run(tmp_path, papercoder_replies())
    logic_reply = papercoder_replies()[2]
    analyses, codings = policy.calls[4:7], policy.calls[7:]
    for chat in analyses + codings:
        assert logic_reply in chat[-1]["content"]  # the logic design as the model wrote it
        assert "standard library" not in " ".join(m["content"] for m in chat)
    assert "Write a detailed logic analysis of the file snc.py (intended for: implements snc.py)" in analyses[0][-1]["content"]
    assert "Analysis of snc.py: follow the paper." in codings[0][-1]["content"]


def test_only_the_task_list_entry_config_yaml_is_left_uncoded(tmp_path):
    replies = papercoder_replies()
    logic = {"Logic Analysis": [], "Task list": ["snc.py", "configs/extra.yaml", "config.yaml"]}
    replies[2] = f"[CONTENT]{json.dumps(logic)}[/CONTENT]"
    replies[4:] = ["analysis of snc.py", "analysis of extra.yaml", "```python\nx = 1\n```", "```yaml\nk: 2\n```"]
    result, _ = run(tmp_path, replies)
    assert result.files == ["snc.py", "configs/extra.yaml"]
    assert (tmp_path / "repo/configs/extra.yaml").read_text() == "k: 2\n"


def test_a_task_list_path_leaving_the_repository_fails_before_any_file_call(tmp_path):
    replies = papercoder_replies()
    replies[2] = '[CONTENT]{"Task list": ["../../evil.py"]}[/CONTENT]'
    result, policy = run(tmp_path, replies)
    assert result.status == "failed" and "leaves the workspace" in result.errors[0]
    assert len(policy.calls) == 4 and not (tmp_path.parent / "evil.py").exists()
