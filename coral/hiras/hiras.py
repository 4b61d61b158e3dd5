"""HiRAS: a manager agent that reproduces a paper by calling sub-agents as tools (see agents.py).

Each call of an agent starts a fresh conversation (system prompt + the caller's task string), so
agents share state only through workspace files. One model reply is one step; an agent that uses
its step budget without `final_report` is stopped and its caller receives a `budget_exhausted`
report saying so. A sub-agent's report comes back to its caller with the workspace file tree as
it stands after the call, so a manager always inspects the workspace before its next decision.
Every call is a node of the call tree (task, report, steps, tokens, children) saved to calls.json.

Commands run only through `run_command` (execution agent), which goes through coral's sandbox;
file tools go through `Workspace`, which refuses paths outside the workspace. Errors of a tool
(unknown tool, bad path, missing argument) are observations the agent sees and counts as a step.

This module does NOT use smolagents: its CodeAgent executes model-written Python in-process on
the host (our rule is: no agent runs code on the host) and its models would bypass coral's
Policy protocol and token ledger; the managed-agents-as-tools pattern takes ~150 lines here.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coral.hiras.agents import AGENTS, REPORT_STATUSES, parse_action, step_budgets, system_prompt
from coral.hiras.execution import run_command
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


class HirasRun:
    """One attempt of a HiRAS run in `run_dir` (workspace/, logs/, calls.json)."""

    def __init__(self, policy: Policy, run_dir: str | Path, manager_policy: Policy | None = None,
                 config: HirasConfig = HirasConfig()) -> None:
        self.policy, self.manager_policy, self.config = policy, manager_policy or policy, config
        self.run_dir = Path(run_dir)
        self.workspace = Workspace(self.run_dir / "workspace")
        self.ledger = Ledger(self.run_dir / "logs", config.max_new_tokens, config.temperature)
        self.budgets = step_budgets(config.step_multiplier)
        self._sandbox = None
        self._next_id = 0
        self.paper: Paper | None = None

    def run(self, paper: Paper, task: str) -> CallRecord:
        """Call the manager with `task`; the root of the call tree comes back."""
        self.paper = paper
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
        messages = [{"role": "system", "content": system_prompt(spec, self.paper.text)},
                    {"role": "user", "content": task}]
        start = time.perf_counter()
        for step in range(1, self.budgets[agent] + 1):
            reply, used = self.ledger.chat(policy, agent, messages)
            record.usage.add(used)
            messages.append({"role": "assistant", "content": reply})
            action = parse_action(reply)
            if isinstance(action, tuple) and action[0] == "final_report":
                report = self._final_report(agent, action[1], step)
                if isinstance(report, Report):
                    record.report = report
                    break
                observation = report
            else:
                observation = action if isinstance(action, str) else self._act(record, *action)
            record.actions.append(_action_log(action, observation))
            messages.append({"role": "user", "content": "Observation:\n" + observation[-OBSERVATION_LIMIT_CHARS:]})
        else:
            last = record.actions[-1]["tool"] if record.actions else "none"
            record.report = Report(agent, "budget_exhausted", f"{agent} was stopped after its budget of "
                                   f"{self.budgets[agent]} steps without a final_report (last action: {last})",
                                   self.budgets[agent])
        record.wall_s = time.perf_counter() - start
        return record

    def _final_report(self, agent: str, args: dict, step: int) -> Report | str:
        status, summary = args.get("status"), args.get("summary")
        if status not in REPORT_STATUSES or not isinstance(summary, str):
            return f"error: final_report needs status in {REPORT_STATUSES} and a summary string"
        return Report(agent, status, summary, step)

    def _act(self, record: CallRecord, tool: str, args: dict) -> str:
        """Run one tool call of `record.agent` and return the observation."""
        spec = AGENTS[record.agent]
        if tool in spec.children:
            if not isinstance(args.get("task"), str) or not args["task"].strip():
                return f"error: {tool} needs a non-empty 'task' string"
            child = self.call(tool, args["task"], record)
            return (f"Report of {tool}: " + json.dumps(asdict(child.report))
                    + f"\nWorkspace after the call:\n{file_tree(self.workspace.files()) or '(empty)'}")
        if tool not in spec.tools:
            return f"error: {record.agent} has no tool {tool!r}; its tools: {list(spec.tools) + list(spec.children)}"
        try:
            return self._file_or_command(tool, args)
        except WorkspaceError as exc:
            return f"error: {exc}"
        except KeyError as exc:
            return f"error: {tool} is missing argument {exc.args[0]!r}"

    def _file_or_command(self, tool: str, args: dict) -> str:
        if tool == "list_files":
            return file_tree(self.workspace.files()) or "(empty workspace)"
        if tool == "read_file":
            return self.workspace.read(args["path"])
        if tool == "write_file":
            if not isinstance(args["content"], str):
                return "error: write_file content must be a string"
            self.workspace.write(args["path"], args["content"])
            return f"wrote {args['path']} ({len(args['content'])} characters)"
        result = run_command(self._sandbox_for_commands(), self.workspace, str(args["command"]),
                             self.config.command_timeout_s)
        if result.error:
            return f"error: {result.error}\noutput:\n{result.output}"
        written = f"\nfiles written: {result.files_written}" if result.files_written else ""
        return f"exit code: {result.exit_code}{written}\noutput:\n{result.output}"

    def _sandbox_for_commands(self):
        if self._sandbox is None:
            self._sandbox = Sandbox(workers=1, allow_subprocess=True, cache=False,
                                    timeout_s=self.config.command_timeout_s + 15.0,
                                    memory_mb=self.config.command_memory_mb)
        return self._sandbox


def _action_log(action: tuple[str, dict] | str, observation: str) -> dict:
    if isinstance(action, str):
        return {"tool": "invalid", "args": {}, "observation": observation[:2000]}
    tool, args = action
    shown = {k: (v if k != "content" else f"<{len(str(v))} characters>") for k, v in args.items()}
    return {"tool": tool, "args": shown, "observation": observation[:2000]}


def record_to_dict(record: CallRecord) -> dict:
    """The call tree as plain JSON (children nested, totals included)."""
    return {"id": record.id, "agent": record.agent, "task": record.task,
            "report": asdict(record.report) if record.report else None, "usage": asdict(record.usage),
            "total_usage": asdict(record.total_usage()), "wall_s": round(record.wall_s, 4),
            "actions": record.actions, "children": [record_to_dict(c) for c in record.children]}
