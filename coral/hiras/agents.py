"""The HiRAS agents: who calls whom, which tools each has, its step budget and its system prompt.

    manager ── planning_manager ── general_planner, architecture_planner, dependency_planner, config_planner
            ├─ analysis_agent
            ├─ coding_agent
            └─ execution_agent (the only agent with run_command, which goes through the sandbox)

Default step budgets (manager 32, planning manager 16, each planner 10, analysis 16, coding 32,
execution 32) are all scaled by one `step_multiplier`. Managers and planners read the workspace;
only the planners, the analysis agent and the coding agent write it.

Action format: a reply holds one or more actions, each a JSON object {"tool": NAME, "args": {...}} in
its own ```json block (or a JSON list of them in one block, or one bare object); they run in order as
one step, as HiRAS's agents (smolagents CodeAgents) call several tools in one code block per step. A
`write_file` without `args.content` takes the next fenced block that is not an action. The run ends
an agent's call when it calls `final_report` with a status ("success", "error" or "partial") and a
summary.

The paper reaches agents as a workspace file (paper.md, .tex or .json, as HiRAS copies the paper into
its run directory) that their system prompt tells them to read; `paper_in_prompt` pastes it into every
system prompt instead (coral's earlier variant, kept for comparison).

This module does NOT run agents (coral.hiras.hiras does).
"""

from __future__ import annotations

from dataclasses import dataclass

from coral.config import UserInputError
from coral.hiras.parsing import fenced_blocks, first_json_object, loads_lenient, strip_think

REPORT_STATUSES = ("success", "error", "partial")
READ_LIMIT_CHARS = 10_000  # a page and its "more" line stay under the observation cap
READ_TOOLS = ("list_files", "read_file", "final_report")
WRITE_TOOLS = ("list_files", "read_file", "write_file", "final_report")

TOOL_DOCS = {
    "list_files": 'list_files(): the workspace file tree',
    "read_file": 'read_file(path, start=0): the text of a workspace file from character `start`, at most '
                 f'{READ_LIMIT_CHARS:,} characters per call (a longer file ends with a line naming the next start)',
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


def system_prompt(spec: AgentSpec, paper_file: str, paper_text: str | None = None) -> str:
    """The agent's first message: identity, duty, tools, action format and where the paper is (the
    workspace file `paper_file`; its text too when `paper_text` is given)."""
    tools = [TOOL_DOCS[t] for t in spec.tools] + [
        f"{child}(task): delegate to {child}; it starts with no memory of this conversation, sees only the "
        f"workspace and your task string, and returns its report" for child in spec.children]
    paper = (f"The paper to reproduce is the workspace file {paper_file}: read it completely (read_file) "
             "before you act." if paper_text is None else f"Paper ({paper_file} in the workspace):\n{paper_text}")
    return (f"AGENT: {spec.name}\n{spec.duty}\n\nTools:\n" + "\n".join(f"- {t}" for t in tools)
            + '\n\nEach reply: one or more actions, each a JSON object {"tool": "<name>", "args": {...}} in its own '
              "```json block. They run in order as one step and you see all their results as the next message; "
              "an action that fails stops the ones after it. State is shared only through workspace files.\n\n"
            + paper)


def parse_actions(text: str) -> list[tuple[str, dict]] | str:
    """The (tool, args) of every action of a reply, in order, or why it has none (see the module
    docstring); a `write_file` without content takes the next fenced block that is not an action."""
    actions: list[dict] = []
    for lang, body in fenced_blocks(text):
        found = _actions_in(body) if lang in ("json", "") else []
        if found:
            actions += found
        elif actions and actions[-1].get("tool") == "write_file" and _wants_content(actions[-1]):
            actions[-1] = {**actions[-1], "args": {**actions[-1]["args"], "content": body}}
    if not actions:
        bare = strip_think(text)
        actions = _actions_in(bare) or [v for v in [first_json_object(bare)] if v is not None and "tool" in v]
    if not actions:
        return 'no action: reply with JSON objects {"tool": ..., "args": {...}}'
    parsed = []
    for action in actions:
        args = action.get("args", {})
        if not isinstance(args, dict):
            return f"the args of {action['tool']!r} must be a JSON object"
        parsed.append((action["tool"], args))
    return parsed


def _actions_in(text: str) -> list[dict]:
    """The actions of a JSON object or list of objects with a string "tool"; [] when it is neither."""
    value = loads_lenient(text)
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, dict) and isinstance(v.get("tool"), str) for v in values):
        return []
    return [{**v, "args": v.get("args", {})} for v in values if isinstance(v, dict)]  # all are, checked above


def _wants_content(action: dict) -> bool:
    return isinstance(action["args"], dict) and "content" not in action["args"]
