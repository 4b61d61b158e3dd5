import json

import pytest

from coral.hiras.agents import AGENTS, step_budgets
from coral.hiras.demo import ScriptedAgents, hiras_replies
from coral.hiras.hiras import HirasConfig, HirasRun
from coral.hiras.paper import FIXTURE_PAPER, FIXTURE_REFERENCE, load_paper
from coral.hiras.reproduce import reproduce_batch, run_hiras


def act(tool, **args):
    return json.dumps({"tool": tool, "args": args})


def done(summary="ok", status="success"):
    return act("final_report", status=status, summary=summary)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One scripted run on the fixture, shared by the tests that read its run dir (a sandbox start each)."""
    tmp_path, policy = tmp_path_factory.mktemp("hiras"), ScriptedAgents(hiras_replies())
    return tmp_path, policy, run_hiras(FIXTURE_PAPER, policy, tmp_path)


def test_full_run_fixes_the_repository_after_a_failed_execution(full_run):
    tmp_path, policy, status = full_run
    assert status["status"] == "done"
    assert all(policy.cursor[a] == len(r) for a, r in hiras_replies().items())  # every scripted step was used
    root = json.loads((tmp_path / "calls.json").read_text())[0]
    calls = [(c["agent"], c["report"]["status"]) for c in root["children"]]
    assert calls == [("planning_manager", "success"), ("analysis_agent", "success"), ("coding_agent", "success"),
                     ("execution_agent", "error"), ("coding_agent", "success"), ("execution_agent", "success")]
    first_run, second_run = root["children"][3]["actions"][0], root["children"][5]["actions"][0]
    assert first_run["tool"] == "run_command" and "exit code: 1" in first_run["observation"]
    assert "ImportError" in first_run["observation"]
    assert second_run["observation"] == ("exit code: 0\noutput:\nlambda=0.0 accuracy=0.8341\n"
                                          "lambda=0.5 accuracy=0.8341\n")
    planners = [c["agent"] for c in root["children"][0]["children"]]
    assert planners == ["general_planner", "architecture_planner", "dependency_planner", "config_planner"]
    for rel in ("snc.py", "data.py", "main.py", "config.yaml"):
        assert (tmp_path / "workspace" / rel).read_text() == (FIXTURE_REFERENCE / rel).read_text()


def test_the_manager_sees_each_report_with_the_workspace_tree(full_run):
    _, policy, _ = full_run
    manager_chats = [m for agent, m in policy.calls if agent == "manager"]
    after_coding = manager_chats[4][-1]["content"]  # the observation following the first coding call
    assert after_coding.startswith('Observation:\nReport of coding_agent: {"agent": "coding_agent"')
    assert "Workspace after the call:\n" in after_coding and "\nmain.py\n" in after_coding


def test_sub_agents_start_with_fresh_memory(full_run):
    _, policy, _ = full_run
    coding_first_steps = [m for agent, m in policy.calls if agent == "coding_agent" and len(m) == 2]
    assert len(coding_first_steps) == 2  # each call begins at system + task
    assert coding_first_steps[1][1]["content"] == "Execution failed: ImportError in main.py. Fix it."


def test_run_dir_has_per_agent_logs_usage_and_an_html_call_tree(full_run):
    tmp_path = full_run[0]
    logs = {p.stem for p in (tmp_path / "logs").glob("*.jsonl")}
    assert logs == set(AGENTS)
    usage = json.loads((tmp_path / "usage.json").read_text())
    assert usage["total"]["calls"] == sum(len(r) for r in hiras_replies().values())
    page = (tmp_path / "report.html").read_text()
    assert page.count("<summary><b>") == 1 + 6 + 4  # manager, its six calls, four planners
    assert "Execution failed: ImportError in main.py. Fix it." in page and "tokens" in page


def test_a_runaway_agent_is_stopped_by_its_budget_with_a_clear_report(tmp_path):
    scripts = {"manager": [act("coding_agent", task="write everything"), done("gave up", "error")],
               "coding_agent": [act("list_files")] * 100}
    policy = ScriptedAgents(scripts)
    run = HirasRun(policy, tmp_path, config=HirasConfig(step_multiplier=0.25))
    root = run.run(load_paper(FIXTURE_PAPER), "go")
    coding = root.children[0]
    assert coding.report.status == "budget_exhausted" and coding.report.steps == 8 == step_budgets(0.25)["coding_agent"]
    assert coding.report.summary == ("coding_agent was stopped after its budget of 8 steps without a final_report "
                                     "(last action: list_files)")
    assert policy.cursor["coding_agent"] == 8


def test_the_manager_budget_also_stops_the_root(tmp_path):
    run = HirasRun(ScriptedAgents({"manager": [act("list_files")] * 40}), tmp_path)
    root = run.run(load_paper(FIXTURE_PAPER), "go")
    assert root.report.status == "budget_exhausted" and root.report.steps == 32


def test_no_agent_can_write_or_read_outside_the_workspace(tmp_path):
    outside = tmp_path / "outside.txt"
    scripts = {"manager": [act("coding_agent", task="try"), done()],
               "coding_agent": [act("write_file", path=str(outside), content="x"),
                                act("write_file", path="../outside.txt", content="x"),
                                act("read_file", path="/etc/hostname"), done()]}
    run = HirasRun(ScriptedAgents(scripts), tmp_path / "run")
    observations = [a["observation"] for a in run.run(load_paper(FIXTURE_PAPER), "go").children[0].actions]
    assert observations[0].startswith("error: path") and "is absolute" in observations[0]
    assert observations[1] == "error: path '../outside.txt' leaves the workspace"
    assert "is absolute" in observations[2]
    assert not outside.exists()


def test_only_the_execution_agent_has_a_shell_and_it_cannot_reach_the_network(tmp_path):
    probe = ("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    print('NET OPEN')\n"
             "except OSError as exc:\n    print('net blocked', type(exc).__name__)\n")
    scripts = {"manager": [act("coding_agent", task="c"), act("execution_agent", task="run"), done()],
               "coding_agent": [act("run_command", command="python probe.py"),
                                act("write_file", path="probe.py", content=probe), done()],
               "execution_agent": [act("run_command", command="python probe.py"), done()]}
    run = HirasRun(ScriptedAgents(scripts), tmp_path)
    root = run.run(load_paper(FIXTURE_PAPER), "go")
    assert root.children[0].actions[0]["observation"].startswith("error: coding_agent has no tool 'run_command'")
    net = root.children[1].actions[0]["observation"]
    assert net.startswith("exit code: 0") and "net blocked" in net and "NET OPEN" not in net


def test_a_rerun_after_an_interruption_continues_from_the_workspace(tmp_path):
    scripts = {"manager": [act("coding_agent", task="c"), done("stopped early", "partial")],
               "coding_agent": [act("write_file", path="snc.py", content="x = 1\n"), done()]}
    assert run_hiras(FIXTURE_PAPER, ScriptedAgents(scripts), tmp_path)["status"] == "partial"
    second = ScriptedAgents({"manager": [done("finished")]})
    status = run_hiras(FIXTURE_PAPER, second, tmp_path)
    assert status["status"] == "done" and status["attempts"] == 2
    assert "already holds:\nsnc.py\nContinue" in second.calls[0][1][1]["content"]
    third = ScriptedAgents({"manager": []})
    assert run_hiras(FIXTURE_PAPER, third, tmp_path)["attempts"] == 2 and third.calls == []  # done: skipped


def test_in_a_batch_one_failing_paper_does_not_stop_the_rest(tmp_path):
    papers = [tmp_path / "missing.md", FIXTURE_PAPER]
    results = reproduce_batch(papers, ScriptedAgents(hiras_replies()), tmp_path / "out")
    assert results[str(papers[0])]["status"] == "failed" and "no such file" in results[str(papers[0])]["error"]
    assert results[str(FIXTURE_PAPER)]["status"] == "done"
    assert json.loads((tmp_path / "out/missing/status.json").read_text())["status"] == "failed"


def test_parse_actions_takes_write_content_from_the_fenced_block():
    from coral.hiras.agents import parse_actions

    reply = 'I will write it.\n```json\n{"tool": "write_file", "args": {"path": "a.py"}}\n```\n```python\nx = 1\n```'
    assert parse_actions(reply) == [("write_file", {"path": "a.py", "content": "x = 1\n"})]
    assert parse_actions('<think>{"tool": "x"}</think>{"tool": "list_files"}') == [("list_files", {})]
    assert parse_actions("no action").startswith("no action")
    assert parse_actions('{"tool": "read_file", "args": [1]}') == "the args of 'read_file' must be a JSON object"


def test_parse_actions_reads_several_actions_each_write_taking_the_block_after_it():
    from coral.hiras.agents import parse_actions

    reply = ('```json\n{"tool": "write_file", "args": {"path": "a.py"}}\n```\n```python\na = 1\n```\n'
             '```json\n{"tool": "write_file", "args": {"path": "t.json"}}\n```\n```json\n{"Task list": ["a.py"]}\n```\n'
             '```json\n[{"tool": "read_file", "args": {"path": "a.py"}}, {"tool": "list_files"}]\n```')
    assert parse_actions(reply) == [("write_file", {"path": "a.py", "content": "a = 1\n"}),
                                    ("write_file", {"path": "t.json", "content": '{"Task list": ["a.py"]}\n'}),
                                    ("read_file", {"path": "a.py"}), ("list_files", {})]


def test_step_budgets_scale_with_one_multiplier():
    assert step_budgets() == {"manager": 32, "planning_manager": 16, "general_planner": 10,
                              "architecture_planner": 10, "dependency_planner": 10, "config_planner": 10,
                              "analysis_agent": 16, "coding_agent": 32, "execution_agent": 32}
    assert step_budgets(2)["coding_agent"] == 64
    with pytest.raises(ValueError, match="step_multiplier must be > 0"):
        step_budgets(0)


def test_the_paper_is_a_workspace_file_that_agents_read_not_text_in_their_prompts(full_run):
    tmp_path, policy, _ = full_run
    paper = load_paper(FIXTURE_PAPER).text
    assert (tmp_path / "workspace/paper.md").read_text() == paper
    systems = {agent: chat[0]["content"] for agent, chat in policy.calls}
    assert len(systems) == len(AGENTS)
    for system in systems.values():
        assert "The paper to reproduce is the workspace file paper.md" in system
        assert "Shrunken" not in system and paper[:200] not in system
    general = [chat for agent, chat in policy.calls if agent == "general_planner"]
    assert general[1][-1]["content"] == "Observation:\n" + paper  # its first step read the whole paper


def test_a_hiras_workspace_is_judged_on_its_code_and_config_only(full_run):
    from coral.hiras.workspace import repo_files

    workspace = full_run[0] / "workspace"
    assert {"plan/plan.md", "plan/task_list.json", "paper.md"} <= {p.relative_to(workspace).as_posix()
                                                                    for p in workspace.rglob("*")}
    assert list(repo_files(workspace)) == ["config.yaml", "data.py", "main.py", "snc.py"]
