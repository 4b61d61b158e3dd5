"""Scripted replies that reproduce the fixture paper, for tests, the bench and `--model scripted-demo`.

`papercoder_replies()` answers the PaperCoder stages in order; `hiras_replies()` gives each HiRAS
agent its replies in the order it is called (agents read the paper from the workspace file paper.md,
and several replies hold more than one action), with one deliberate bug: the first coding call writes
`main.py` with a wrong import, the execution agent reports the error, the manager calls the coding
agent again with that feedback, and the second execution succeeds. `ScriptedAgents` serves such
per-agent scripts as one policy, recognising the agent by the name in its system prompt.

This module does NOT model anything: its replies are fixed text; they score what a judge says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from coral.hiras.paper import FIXTURE_REFERENCE
from coral.policy.base import Completion, GenerationRequest

FILES = ("snc.py", "data.py", "main.py")  # the fixture repository in dependency order


def _fixture(rel: str) -> str:
    return (FIXTURE_REFERENCE / rel).read_text()


def _fenced(code: str, lang: str = "python") -> str:
    return f"```{lang}\n{code}```"


def papercoder_replies() -> list[str]:
    """Plan, architecture, logic, config, one analysis per file, one coding reply per file."""
    architecture = {"Implementation approach": "stdlib only", "File list": ["main.py", *FILES[:2], "config.yaml"],
                    "Data structures and interfaces": "centroids: list of lists", "Program call flow": "main -> fit"}
    logic = {"Required packages": ["pyyaml"], "Logic Analysis": [[f, f"implements {f}"] for f in FILES],
             "Task list": [*FILES, "config.yaml"], "Shared Knowledge": "config.yaml holds every setting"}
    return (["<think>the method is one line</think>Plan: fit shrunken centroids, evaluate over 20 seeds.",
             f"[CONTENT]\n{json.dumps(architecture)}\n[/CONTENT]",
             f"[CONTENT]\n{json.dumps(logic)}\n[/CONTENT]",
             _fenced(_fixture("config.yaml"), "yaml")]
            + [f"Analysis of {f}: follow the paper." for f in FILES]
            + [f"Here is {f}:\n" + _fenced(_fixture(f)) for f in FILES])


def _act(tool: str, **args: object) -> str:
    return "```json\n" + json.dumps({"tool": tool, "args": args}) + "\n```"


def _write(rel: str, text: str) -> str:
    lang = "yaml" if rel.endswith(".yaml") else "python"
    return _act("write_file", path=rel) + "\n" + _fenced(text, lang)


def _done(summary: str, status: str = "success") -> str:
    return _act("final_report", status=status, summary=summary)


def hiras_replies() -> dict[str, list[str]]:
    """Per-agent scripts of a full HiRAS run on the fixture with one fix-and-rerun round; several steps
    hold more than one action (the analyses in one step, the three files in one step)."""
    broken_main = _fixture("main.py").replace("from snc import fit, predict", "from snc import fit, predicts")
    return {
        "manager": [_act("read_file", path="paper.md"),
                    _act("planning_manager", task="Plan the reproduction of the SNC paper in paper.md."),
                    _act("analysis_agent", task="Analyse each file of the task list."),
                    _act("coding_agent", task="Write every file of the task list."),
                    _act("execution_agent", task="Run python main.py and report."),
                    _act("coding_agent", task="Execution failed: ImportError in main.py. Fix it."),
                    _act("execution_agent", task="Run python main.py again and report."),
                    _done("The repository runs and prints both accuracies.")],
        "planning_manager": [_act(a, task=f"Read paper.md and write the {a.split('_')[0]} part of the plan.") for a in
                             ("general_planner", "architecture_planner", "dependency_planner", "config_planner")]
                            + [_done("plan/ holds the plan, architecture, task list and config.yaml")],
        "general_planner": [_act("read_file", path="paper.md"),
                            _write("plan/plan.md", "Fit shrunken centroids; 20 seeds; print accuracy per lambda.\n"),
                            _done("wrote plan/plan.md")],
        "architecture_planner": [_act("read_file", path="plan/plan.md"),
                                 _write("plan/architecture.md", "snc.py: fit, predict\ndata.py: make_split\n"
                                                                "main.py: experiment\n") + "\n"
                                 + _done("wrote plan/architecture.md")],
        "dependency_planner": [_write("plan/task_list.json", json.dumps({"Task list": list(FILES)}) + "\n"),
                               _done("wrote plan/task_list.json")],
        "config_planner": [_act("read_file", path="paper.md"), _write("config.yaml", _fixture("config.yaml")),
                           _done("wrote config.yaml")],
        "analysis_agent": ["\n".join(_write(f"plan/analysis/{f}.md", f"{f}: follow section 1 and 2.\n") for f in FILES),
                           _done("wrote one analysis per file")],
        "coding_agent": [_act("read_file", path="plan/task_list.json") + "\n" + _act("read_file", path="paper.md"),
                         "\n".join([_write("snc.py", _fixture("snc.py")), _write("data.py", _fixture("data.py")),
                                    _write("main.py", broken_main)]),
                         _done("wrote snc.py, data.py, main.py"),
                         _act("read_file", path="main.py"), _write("main.py", _fixture("main.py")),
                         _done("fixed the import in main.py")],
        "execution_agent": [_act("run_command", command="python main.py"),
                            _done("ImportError: cannot import name 'predicts' from 'snc' (main.py line 4)", "error"),
                            _act("run_command", command="python main.py"),
                            _done("main.py ran: lambda=0.0 accuracy=0.8341, lambda=0.5 accuracy=0.8341")],
    }


class ScriptedAgents:
    """A policy serving per-agent scripts: the agent is the name after `AGENT:` in the system prompt;
    each agent's replies are consumed in order across all its calls. Running out raises. A chat without
    `AGENT:` is served from the script named `default` (e.g. the PaperCoder stages). Token counts are
    characters / 4 of all messages and of the reply, like a real model's prompt, not the last message only."""

    def __init__(self, scripts: Mapping[str, Sequence[str]], name: str = "scripted-agents", default: str = "") -> None:
        self.scripts = {agent: list(replies) for agent, replies in scripts.items()}
        self.default = default
        self.cursor = dict.fromkeys(self.scripts, 0)
        self.name = name
        self.calls: list[tuple[str, tuple]] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = []
        for request in requests:
            system = request.messages[0]["content"] if request.messages else ""
            agent = system.split("AGENT: ", 1)[1].split()[0] if "AGENT: " in system else self.default
            if agent not in self.scripts:
                raise KeyError(f"ScriptedAgents: no script for agent {agent!r}")
            if self.cursor[agent] >= len(self.scripts[agent]):
                raise IndexError(f"ScriptedAgents: agent {agent!r} ran out of replies")
            text = self.scripts[agent][self.cursor[agent]]
            self.cursor[agent] += 1
            self.calls.append((agent, request.messages))
            prompt = sum(len(m["content"]) for m in request.messages) // 4  # a rough token count: 4 chars each
            out.append(Completion(text=text, usage={"prompt_tokens": prompt, "completion_tokens": len(text) // 4}))
        return out
