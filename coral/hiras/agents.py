"""The HiRAS agents: who calls whom, which tools each has, its step budget and its system prompt.

    manager ── planning_manager ── general_planner, architecture_planner, dependency_planner, config_planner
            ├─ analysis_agent
            ├─ coding_agent
            └─ execution_agent (the only agent with run_command, which goes through the sandbox)

Default step budgets (manager 32, planning manager 16, each planner 10, analysis 16, coding 32,
execution 32) are all scaled by one `step_multiplier`. Managers and planners read the workspace;
only the planners, the analysis agent and the coding agent write it.

Action format: every reply holds one JSON object {"tool": NAME, "args": {...}}, in a ```json block
or bare; `write_file` takes its content from `args.content` or else from the first other fenced
block of the reply. The run ends an agent's call when it calls `final_report` with a status
("success", "error" or "partial") and a summary.

This module does NOT run agents (coral.hiras.hiras does).
"""

from __future__ import annotations

from dataclasses import dataclass

from coral.config import UserInputError
from coral.hiras.parsing import fenced_blocks, first_json_object, strip_think

REPORT_STATUSES = ("success", "error", "partial")
READ_TOOLS = ("list_files", "read_file", "final_report")
WRITE_TOOLS = ("list_files", "read_file", "write_file", "final_report")

TOOL_DOCS = {
    "list_files": 'list_files(): the workspace file tree',
    "read_file": 'read_file(path): the text of a workspace file',
    "write_file": 'write_file(path, content): write a workspace file (content may instead follow the JSON in '
                  'a fenced block)',
    "run_command": 'run_command(command): run a command such as "python main.py" in the sandbox over a copy '
                   'of the workspace; returns its exit code and output (no network, time-limited)',
    "final_report": 'final_report(status, summary): end your work; status is "success", "error" or "partial"',
}


@dataclass(frozen=True)
class AgentSpec:
    name: str
    duty: str
    tools: tuple[str, ...]
    default_steps: int
    children: tuple[str, ...] = ()
    manager: bool = False  # served by the manager policy when one is given


AGENTS = {spec.name: spec for spec in (
    AgentSpec("manager", "You lead the reproduction of the paper as a runnable repository in the workspace. "
              "Delegate: planning first, then analysis, coding and execution. After each report inspect the "
              "workspace, and call an agent again with precise feedback when its work is missing or wrong "
              "(for example the coding agent after a failed execution). Finish when the repository runs.",
              READ_TOOLS, 32, ("planning_manager", "analysis_agent", "coding_agent", "execution_agent"), True),
    AgentSpec("planning_manager", "You produce the plan of the reproduction by delegating to your planners, "
              "then check that plan/plan.md, plan/architecture.md, plan/task_list.json and config.yaml exist.",
              READ_TOOLS, 16, ("general_planner", "architecture_planner", "dependency_planner", "config_planner"),
              True),
    AgentSpec("general_planner", "Write plan/plan.md: the method's components, data, experimental settings "
              "and evaluation.", WRITE_TOOLS, 10),
    AgentSpec("architecture_planner", "Write plan/architecture.md: the file list, the data structures, the "
              "interfaces and the call flow.", WRITE_TOOLS, 10),
    AgentSpec("dependency_planner", 'Write plan/task_list.json: {"Task list": [files, each after the files it '
              'imports]}.', WRITE_TOOLS, 10),
    AgentSpec("config_planner", "Write config.yaml with every hyperparameter and setting of the experiments.",
              WRITE_TOOLS, 10),
    AgentSpec("analysis_agent", "For each file of plan/task_list.json write plan/analysis/<file>.md: its "
              "functions, inputs, outputs and the algorithm steps from the paper.", WRITE_TOOLS, 16),
    AgentSpec("coding_agent", "Write the files of plan/task_list.json in that order, each complete and "
              "consistent with the files before it and with config.yaml; fix files when given feedback.",
              WRITE_TOOLS, 32),
    AgentSpec("execution_agent", "Run the repository (for example python main.py) with run_command, read "
              "the output and report precisely what ran and any error with its file and line.",
              ("list_files", "read_file", "run_command", "final_report"), 32),
)}


def step_budgets(step_multiplier: float = 1.0) -> dict[str, int]:
    """Each agent's step budget: its default times `step_multiplier`, at least 1."""
    if step_multiplier <= 0:
        raise UserInputError(f"step_multiplier must be > 0, got {step_multiplier}")
    return {name: max(1, round(spec.default_steps * step_multiplier)) for name, spec in AGENTS.items()}


def system_prompt(spec: AgentSpec, paper_text: str) -> str:
    """The agent's first message: identity, duty, tools, action format and the paper."""
    tools = [TOOL_DOCS[t] for t in spec.tools] + [
        f"{child}(task): delegate to {child}; it starts with no memory of this conversation, sees only the "
        f"workspace and your task string, and returns its report" for child in spec.children]
    return (f"AGENT: {spec.name}\n{spec.duty}\n\nTools:\n" + "\n".join(f"- {t}" for t in tools)
            + '\n\nEach reply: exactly one action as JSON {"tool": "<name>", "args": {...}} in a ```json block. '
              "You see the tool's result as the next message. State is shared only through workspace files.\n\n"
              f"Paper:\n{paper_text}")


def parse_action(text: str) -> tuple[str, dict] | str:
    """(tool, args) of a reply, or why it has none. `write_file` content may come from a fenced block."""
    blocks = fenced_blocks(text)
    action, content = None, None
    for lang, body in blocks:
        value = first_json_object(body) if lang in ("json", "") else None
        if action is None and value is not None and "tool" in value:
            action = value
        elif content is None:
            content = body
    if action is None:
        action = first_json_object(strip_think(text))
    if action is None or not isinstance(action.get("tool"), str):
        return 'no action: reply with one JSON object {"tool": ..., "args": {...}}'
    args = action.get("args", {})
    if not isinstance(args, dict):
        return f"the args of {action['tool']!r} must be a JSON object"
    if action["tool"] == "write_file" and "content" not in args and content is not None:
        args = {**args, "content": content}
    return action["tool"], args
