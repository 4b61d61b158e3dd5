"""HiRAS: a manager agent that reproduces a paper by calling sub-agents as tools (see agents.py).

Each call of an agent starts a fresh conversation (system prompt + the caller's task string), so
agents share state only through workspace files; the paper is one of them (paper.md, .tex or .json,
written before the manager starts). One model reply is one step and may hold several actions, run in
order (a failing one stops the rest of the step); an agent that uses its step budget without
`final_report` is stopped and its caller receives a `budget_exhausted` report saying so. A sub-agent's report comes back to its caller with the workspace file tree as
it stands after the call, so a manager always inspects the workspace before its next decision.
Every call is a node of the call tree (task, report, steps, tokens, children) saved to calls.json.

Commands run only through `run_command` (execution agent), which goes through coral's sandbox;
file tools go through `Workspace`, which refuses paths outside the workspace. Errors of a tool
(unknown tool, bad path, missing argument) are observations the agent sees. Each action's observation
is capped at its last OBSERVATION_LIMIT_CHARS characters; read_file pages a long file instead.

This module does NOT use smolagents: its CodeAgent executes model-written Python in-process on
the host (our rule is: no agent runs code on the host) and its models would bypass coral's
Policy protocol and token ledger; the managed-agents-as-tools pattern takes ~150 lines here.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coral.hiras.agents import (
    AGENTS,
    READ_LIMIT_CHARS,
    REPORT_STATUSES,
    parse_actions,
    step_budgets,
    system_prompt,
)
from coral.hiras.execution import command_sandbox, run_command
from coral.hiras.llm import Ledger, Usage
from coral.hiras.paper import Paper
from coral.hiras.workspace import Workspace, WorkspaceError, file_tree
from coral.policy.base import Policy
from coral.sandbox import Sandbox

OBSERVATION_LIMIT_CHARS = 12_000


@dataclass
class Report:
    agent: str
    status: str  # "success" | "error" | "partial" | "budget_exhausted"
    summary: str
    steps: int


@dataclass
class CallRecord:
    id: int
    agent: str
    task: str
    report: Report | None = None
    usage: Usage = field(default_factory=Usage)  # this call's own model tokens (children not included)
    wall_s: float = 0.0
    actions: list[dict] = field(default_factory=list)  # {"tool", "args" (content elided), "observation"}
    children: list[CallRecord] = field(default_factory=list)

    def total_usage(self) -> Usage:
        total = Usage()
        total.add(self.usage)
        for child in self.children:
            total.add(child.total_usage())
        return total


@dataclass
class HirasConfig:
    step_multiplier: float = 1.0
    command_timeout_s: float = 60.0
    command_memory_mb: int = 2048  # address-space limit of each sandboxed command (inherited by its children)
    max_new_tokens: int = 2048
    temperature: float = 0.0
    paper_in_prompt: bool = False  # coral's earlier variant: the paper pasted into every system prompt


PAPER_FILES = {"markdown": "paper.md", "latex": "paper.tex", "json": "paper.json"}


class HirasRun:
    """One attempt of a HiRAS run in `run_dir` (workspace/, logs/, calls.json)."""

    def __init__(self, policy: Policy, run_dir: str | Path, manager_policy: Policy | None = None,
                 config: HirasConfig = HirasConfig()) -> None:
        self.policy, self.manager_policy, self.config = policy, manager_policy or policy, config
        self.run_dir = Path(run_dir)
        self.workspace = Workspace(self.run_dir / "workspace")
        self.ledger = Ledger(self.run_dir / "logs", config.max_new_tokens, config.temperature)
        self.budgets = step_budgets(config.step_multiplier)
        self._sandbox: Sandbox | None = None
        self._next_id = 0
        self.paper: Paper | None = None
        self.paper_file = ""

    def run(self, paper: Paper, task: str) -> CallRecord:
        """Put the paper into the workspace and call the manager with `task`; the root of the call tree
        comes back."""
        self.paper, self.paper_file = paper, PAPER_FILES[paper.format]
        self.workspace.write(self.paper_file, paper.text)
        try:
            return self.call("manager", task)
        finally:
            if self._sandbox is not None:
                self._sandbox.close()

    def call(self, agent: str, task: str, parent: CallRecord | None = None) -> CallRecord:
        spec = AGENTS[agent]
        record = CallRecord(self._next_id, agent, task)
        self._next_id += 1
        if parent is not None:
            parent.children.append(record)
        policy = self.manager_policy if spec.manager else self.policy
        assert self.paper is not None, "run() gives the paper before the first call"
        paper_text = self.paper.text if self.config.paper_in_prompt else None
        messages = [{"role": "system", "content": system_prompt(spec, self.paper_file, paper_text)},
                    {"role": "user", "content": task}]
        start = time.perf_counter()
        for step in range(1, self.budgets[agent] + 1):
            reply, used = self.ledger.chat(policy, agent, messages)
            record.usage.add(used)
            messages.append({"role": "assistant", "content": reply})
            observation = self._step(record, reply, step)
            if record.report is not None:
                break
            messages.append({"role": "user", "content": "Observation:\n" + observation})
        else:
            last = record.actions[-1]["tool"] if record.actions else "none"
            record.report = Report(agent, "budget_exhausted", f"{agent} was stopped after its budget of "
                                   f"{self.budgets[agent]} steps without a final_report (last action: {last})",
                                   self.budgets[agent])
        record.wall_s = time.perf_counter() - start
        return record

    def _step(self, record: CallRecord, reply: str, step: int) -> str:
        """Run the actions of one reply in order; the observation the agent sees next (each action's result,
        numbered when there are several). A valid final_report sets `record.report` and ends the step; a
        failing action ends it too, and the actions after it are not run (as an exception ends a code block)."""
        actions = parse_actions(reply)
        if isinstance(actions, str):
            record.actions.append(_action_log(actions, actions, step, reply))
            return actions
        parts = []
        for i, (tool, args) in enumerate(actions):
            if tool == "final_report":
                report = self._final_report(record.agent, args, step)
                if isinstance(report, Report):
                    record.report = report
                    return ""
                observation, failed = report, True
            else:
                observation, failed = self._act(record, tool, args)
            observation = observation[-OBSERVATION_LIMIT_CHARS:]
            record.actions.append(_action_log((tool, args), observation, step))
            parts.append(observation if len(actions) == 1 else f"[{i + 1}] {tool}:\n{observation}")
            if failed and i + 1 < len(actions):
                parts.append(f"[{len(actions) - i - 1} later actions not run: action {i + 1} failed]")
                break
        return "\n\n".join(parts)

    def _final_report(self, agent: str, args: dict, step: int) -> Report | str:
        status, summary = args.get("status"), args.get("summary")
        if status not in REPORT_STATUSES or not isinstance(summary, str):
            return f"error: final_report needs status in {REPORT_STATUSES} and a summary string"
        return Report(agent, status, summary, step)

    def _act(self, record: CallRecord, tool: str, args: dict) -> tuple[str, bool]:
        """Run one tool call of `record.agent`: (observation, whether it failed). A command that exits
        non-zero fails, as HiRAS's bash tool raises on a non-zero exit."""
        spec = AGENTS[record.agent]
        if tool in spec.children:
            if not isinstance(args.get("task"), str) or not args["task"].strip():
                return f"error: {tool} needs a non-empty 'task' string", True
            child = self.call(tool, args["task"], record)
            assert child.report is not None, "a finished call has its report"
            return (f"Report of {tool}: " + json.dumps(asdict(child.report))
                    + f"\nWorkspace after the call:\n{file_tree(self.workspace.files()) or '(empty)'}"), False
        if tool not in spec.tools:
            return (f"error: {record.agent} has no tool {tool!r}; its tools: {list(spec.tools) + list(spec.children)}",
                    True)
        try:
            return self._file_or_command(tool, args)
        except WorkspaceError as exc:
            return f"error: {exc}", True
        except KeyError as exc:
            return f"error: {tool} is missing argument {exc.args[0]!r}", True

    def _file_or_command(self, tool: str, args: dict) -> tuple[str, bool]:
        if tool == "list_files":
            return file_tree(self.workspace.files()) or "(empty workspace)", False
        if tool == "read_file":
            return _page(self.workspace.read(args["path"]), args["path"], args.get("start", 0))
        if tool == "write_file":
            if not isinstance(args["content"], str):
                return "error: write_file content must be a string", True
            self.workspace.write(args["path"], args["content"])
            return f"wrote {args['path']} ({len(args['content'])} characters)", False
        result = run_command(self._sandbox_for_commands(), self.workspace, str(args["command"]),
                             self.config.command_timeout_s)
        if result.error:
            return f"error: {result.error}\noutput:\n{result.output}", True
        written = f"\nfiles written: {result.files_written}" if result.files_written else ""
        return f"exit code: {result.exit_code}{written}\noutput:\n{result.output}", not result.ok

    def _sandbox_for_commands(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = command_sandbox(self.config.command_timeout_s, self.config.command_memory_mb)
        return self._sandbox


def _page(text: str, path: str, start: object) -> tuple[str, bool]:
    """read_file's answer: READ_LIMIT_CHARS of `text` from `start`, and where the next part starts."""
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= len(text):
        return f"error: read_file start must be an integer in 0-{len(text)}, got {start!r}", True
    end = start + READ_LIMIT_CHARS
    more = f"\n[{len(text) - end} more characters: read_file({path!r}, start={end})]" if end < len(text) else ""
    return text[start:end] + more, False


def _action_log(action: tuple[str, dict] | str, observation: str, step: int, reply: str = "") -> dict:
    if isinstance(action, str):  # the rejected reply is kept, so the report can show it beside the reason
        return {"step": step, "tool": "invalid", "args": {}, "observation": observation[:2000], "reply": reply[:2000]}
    tool, args = action
    shown = {k: (v if k != "content" else f"<{len(str(v))} characters>") for k, v in args.items()}
    return {"step": step, "tool": tool, "args": shown, "observation": observation[:2000]}


def record_to_dict(record: CallRecord) -> dict:
    """The call tree as plain JSON (children nested, totals included)."""
    return {"id": record.id, "agent": record.agent, "task": record.task,
            "report": asdict(record.report) if record.report else None, "usage": asdict(record.usage),
            "total_usage": asdict(record.total_usage()), "wall_s": round(record.wall_s, 4),
            "actions": record.actions, "children": [record_to_dict(c) for c in record.children]}
