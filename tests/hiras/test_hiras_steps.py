"""Steps with several actions, and how the paper reaches HiRAS's agents."""

import json

from coral.hiras.demo import ScriptedAgents
from coral.hiras.hiras import HirasConfig, HirasRun
from coral.hiras.paper import FIXTURE_PAPER, load_paper


def act(tool, **args):
    return "```json\n" + json.dumps({"tool": tool, "args": args}) + "\n```"


def done(summary="ok", status="success"):
    return act("final_report", status=status, summary=summary)


def run_coder(tmp_path, coder_replies, config=HirasConfig(), paper=FIXTURE_PAPER):
    policy = ScriptedAgents({"manager": [act("coding_agent", task="code"), done()], "coding_agent": coder_replies})
    root = HirasRun(policy, tmp_path, config=config).run(load_paper(paper), "go")
    return root.children[0], policy


def test_several_actions_of_one_reply_run_in_order_as_one_step(tmp_path):
    reply = "\n".join([act("write_file", path="a.py", content="a = 1\n"), act("write_file", path="b.py"),
                       "```python\nimport a\n```", act("read_file", path="a.py"), done("wrote two files")])
    coder, policy = run_coder(tmp_path, [reply])
    assert coder.report.status == "success" and coder.report.steps == 1 and policy.cursor["coding_agent"] == 1
    assert [(a["step"], a["tool"]) for a in coder.actions] == [(1, "write_file"), (1, "write_file"), (1, "read_file")]
    assert coder.actions[2]["observation"] == "a = 1\n"
    assert (tmp_path / "workspace/b.py").read_text() == "import a\n"


def test_a_failing_action_stops_the_rest_of_its_step_and_the_agent_sees_why(tmp_path):
    first = "\n".join([act("read_file", path="missing.py"), act("write_file", path="a.py", content="x")])
    coder, policy = run_coder(tmp_path, [first, done()])
    assert not (tmp_path / "workspace/a.py").exists() and coder.report.steps == 2
    seen = [chat for agent, chat in policy.calls if agent == "coding_agent"][-1][-1]["content"]
    assert seen == ("Observation:\n[1] read_file:\nerror: no file 'missing.py' in the workspace\n\n"
                    "[1 later actions not run: action 1 failed]")


def test_a_failing_command_stops_the_rest_of_its_step(tmp_path):
    scripts = {"manager": [act("execution_agent", task="run"), done()],
               "execution_agent": ["\n".join([act("run_command", command="python -c 'raise SystemExit(3)'"),
                                              act("run_command", command="python -c 'print(1)'")]), done()]}
    policy = ScriptedAgents(scripts)
    execution = HirasRun(policy, tmp_path).run(load_paper(FIXTURE_PAPER), "go").children[0]
    assert [a["observation"][:12] for a in execution.actions] == ["exit code: 3"]
    seen = [chat for agent, chat in policy.calls if agent == "execution_agent"][-1][-1]["content"]
    assert seen.startswith("Observation:\n[1] run_command:\nexit code: 3")
    assert seen.endswith("[1 later actions not run: action 1 failed]")


def test_an_invalid_final_report_among_actions_is_an_error_that_stops_the_step(tmp_path):
    reply = "\n".join([act("final_report", status="great", summary="x"), act("write_file", path="a.py", content="x")])
    coder, _ = run_coder(tmp_path, [reply, done()])
    assert coder.actions[0]["observation"].startswith("error: final_report needs status in")
    assert not (tmp_path / "workspace/a.py").exists()


def test_read_file_pages_a_long_file_so_an_agent_can_read_it_completely(tmp_path):
    from coral.hiras.agents import READ_LIMIT_CHARS

    text = "0123456789" * 2500  # 25,000 characters
    replies = [act("write_file", path="long.txt", content=text),
               act("read_file", path="long.txt") + act("read_file", path="long.txt", start=READ_LIMIT_CHARS)
               + act("read_file", path="long.txt", start=2 * READ_LIMIT_CHARS), done()]
    _, policy = run_coder(tmp_path, replies)
    seen = [chat for agent, chat in policy.calls if agent == "coding_agent"][2][-1]["content"]
    pages = seen.removeprefix("Observation:\n").split("\n\n")
    assert [p[:17] for p in pages] == ["[1] read_file:\n01", "[2] read_file:\n01", "[3] read_file:\n01"]
    assert "".join(p.split(":\n", 1)[1].split("\n[")[0] for p in pages) == text  # the whole file, in order


def test_read_file_names_where_the_next_part_starts(tmp_path):
    from coral.hiras.agents import READ_LIMIT_CHARS

    text = "x" * (READ_LIMIT_CHARS + 5)
    coder, policy = run_coder(tmp_path, [act("write_file", path="l.txt", content=text), act("read_file", path="l.txt"),
                                         act("read_file", path="l.txt", start=-1), done()])
    seen = [chat[-1]["content"] for agent, chat in policy.calls if agent == "coding_agent"]
    assert seen[2] == "Observation:\n" + "x" * READ_LIMIT_CHARS + f"\n[5 more characters: read_file('l.txt', start={READ_LIMIT_CHARS})]"
    assert seen[3].startswith(f"Observation:\nerror: read_file start must be an integer in 0-{READ_LIMIT_CHARS + 5}")


def test_paper_in_prompt_pastes_the_paper_into_every_system_prompt(tmp_path):
    coder, policy = run_coder(tmp_path, [done()], HirasConfig(paper_in_prompt=True))
    paper = load_paper(FIXTURE_PAPER).text
    assert all(chat[0]["content"].endswith(f"Paper (paper.md in the workspace):\n{paper}") for _, chat in policy.calls)


def test_a_latex_paper_becomes_paper_tex_in_the_workspace(tmp_path):
    from pathlib import Path

    tex = Path(__file__).parent / "fixtures" / "snc_paper.tex"
    _, policy = run_coder(tmp_path, [done()], paper=tex)
    assert (tmp_path / "workspace/paper.tex").read_text() == load_paper(tex).text
    assert "workspace file paper.tex" in policy.calls[0][1][0]["content"]
