"""The PaperCoder baseline: planning conversation, config extraction, per-file analysis and coding.

Stages (each skipped on a rerun when its artifact exists, so a run resumes):
1. planning: one conversation of four turns: overall plan; architecture with the file list as
   `[CONTENT]{json}[/CONTENT]`; logic design with a dependency-ordered "Task list"; config.yaml.
   -> artifacts/planning_trajectories.json, architecture.json, task_list.json
2. config extraction: the first yaml block of turn 4 -> artifacts/planning_config.yaml, repo/config.yaml
3. analysis: one stateless call per file of the task list -> artifacts/analysis/<file>.md
4. coding: one call per file in task-list order with every earlier file's code in context; the
   first fenced block is the file -> repo/<file> (raw reply in artifacts/coding/<file>.md)
Files named *.yaml in the task list are not coded (config.yaml comes from stage 2), as in PaperCoder.

Failures are data: a reply that does not parse adds a line to `PipelineResult.errors`; a stage
without which later stages cannot run (no file list, no task list) ends the run with status
"failed", a file whose reply has no fenced block is skipped and the run goes on.

This module does NOT run or debug the generated code (PaperCoder has no execution stage).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from coral.hiras.llm import Ledger
from coral.hiras.paper import Paper
from coral.hiras.parsing import content_json, first_code_block, strip_think
from coral.hiras.workspace import Workspace, WorkspaceError
from coral.policy.base import Message, Policy

SYSTEM = ("You are an expert researcher and research engineer. You turn a research paper into a complete, "
          "runnable Python repository that reproduces its method and experiments faithfully. Use only the "
          "Python standard library and PyYAML unless the paper needs more.")

PLAN_TURNS = (
    "Paper:\n{paper}\n\nWrite an overall plan to reproduce this paper: the method's components, the data, "
    "the experimental settings and hyperparameters, and how results are evaluated and reported.",
    "Design the software architecture. Answer with [CONTENT]{{json}}[/CONTENT], the JSON having the keys "
    "\"Implementation approach\" (string), \"File list\" (list of relative file paths, main.py included), "
    "\"Data structures and interfaces\" (string) and \"Program call flow\" (string).",
    "Design the logic. Answer with [CONTENT]{{json}}[/CONTENT], the JSON having the keys \"Required packages\" "
    "(list), \"Logic Analysis\" (list of [file, what it must do]), \"Task list\" (the files to write, each "
    "after every file it imports) and \"Shared Knowledge\" (string).",
    "Write config.yaml holding every hyperparameter and setting of the experiments, in one ```yaml block.",
)

ANALYSIS = ("Paper:\n{paper}\n\nPlan:\n{plan}\n\nArchitecture:\n{architecture}\n\nLogic design:\n{logic}\n\n"
            "config.yaml:\n{config}\n\nWrite a detailed logic analysis of the file {file}: its classes and "
            "functions, their inputs and outputs, the algorithm steps taken from the paper, and what it imports "
            "from other files. Do not write the code yet.")

CODING = ("Paper:\n{paper}\n\nPlan:\n{plan}\n\nArchitecture:\n{architecture}\n\nconfig.yaml:\n{config}\n\n"
          "Files written so far:\n{done}\nLogic analysis of {file}:\n{analysis}\n\nWrite the complete file {file}, "
          "consistent with the files written so far and reading settings from config.yaml. Answer with the whole "
          "file in one fenced code block.")


@dataclass
class PipelineResult:
    status: str  # "done" | "failed"
    repo_dir: Path
    files: list[str] = field(default_factory=list)  # repository files written, in order
    artifacts: list[str] = field(default_factory=list)  # every file written this run, in order (out-dir relative)
    errors: list[str] = field(default_factory=list)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    wall_s: float = 0.0


class PaperCoder:
    """Runs the stages of the module docstring into `out_dir` (artifacts/, repo/, logs/)."""

    def __init__(self, policy: Policy, out_dir: str | Path, max_new_tokens: int = 2048, temperature: float = 0.0) -> None:
        self.policy = policy
        self.out = Workspace(out_dir)
        self.ledger = Ledger(self.out.root / "logs", max_new_tokens, temperature)
        self.result = PipelineResult("done", self.out.root / "repo")

    def _save(self, rel: str, text: str) -> None:
        self.out.write(rel, text)
        self.result.artifacts.append(rel)

    def _load_json(self, rel: str) -> object | None:
        return json.loads(self.out.read(rel)) if self.out.exists(rel) else None

    def plan(self, paper: Paper) -> list[Message] | None:
        """The four-turn planning conversation (loaded when it exists)."""
        saved = self._load_json("artifacts/planning_trajectories.json")
        if saved is not None:
            return saved
        messages: list[Message] = [{"role": "system", "content": SYSTEM}]
        for turn in PLAN_TURNS:
            messages.append({"role": "user", "content": turn.format(paper=paper.text)})
            reply, _ = self.ledger.chat(self.policy, "planning", messages)
            messages.append({"role": "assistant", "content": reply})
        self._save("artifacts/planning_trajectories.json", json.dumps(messages, indent=1))
        return messages

    def design(self, messages: list[Message]) -> tuple[dict, dict, str] | None:
        """(architecture, logic design, config yaml) parsed from the planning replies; None on failure."""
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        architecture, logic = content_json(replies[1]), content_json(replies[2])
        if not architecture or not _str_list(architecture.get("File list")):
            self.result.errors.append("planning turn 2: no [CONTENT] JSON with a list of strings under 'File list'")
            return None
        if not logic or not _str_list(logic.get("Task list")):
            self.result.errors.append("planning turn 3: no [CONTENT] JSON with a list of strings under 'Task list'")
            return None
        config = first_code_block(replies[3], "yaml")
        if config is None:
            self.result.errors.append("planning turn 4: no ```yaml block; config.yaml left empty")
            config = ""
        if not self.out.exists("artifacts/task_list.json"):
            self._save("artifacts/architecture.json", json.dumps(architecture, indent=1))
            self._save("artifacts/task_list.json", json.dumps(logic, indent=1))
            self._save("artifacts/planning_config.yaml", config)
            self._save("repo/config.yaml", config)
        return architecture, logic, config

    def analyse(self, paper: Paper, context: dict[str, str], files: list[str]) -> dict[str, str]:
        analyses = {}
        for rel in files:
            path = f"artifacts/analysis/{rel}.md"
            if not self.out.exists(path):
                reply, _ = self.ledger.chat(self.policy, "analysis", [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": ANALYSIS.format(paper=paper.text, file=rel, **context)}])
                self._save(path, strip_think(reply))
            analyses[rel] = self.out.read(path)
        return analyses

    def code(self, paper: Paper, context: dict[str, str], files: list[str], analyses: dict[str, str]) -> None:
        done = ""
        for rel in files:
            target = f"repo/{rel}"
            if not self.out.exists(target):
                prompt = CODING.format(paper=paper.text, file=rel, done=done or "(none)\n", analysis=analyses[rel],
                                       plan=context["plan"], architecture=context["architecture"],
                                       config=context["config"])
                reply, _ = self.ledger.chat(self.policy, "coding", [{"role": "system", "content": SYSTEM},
                                                                    {"role": "user", "content": prompt}])
                self._save(f"artifacts/coding/{rel}.md", reply)
                code = first_code_block(reply)
                if code is None:
                    self.result.errors.append(f"coding {rel}: no fenced code block in the reply; file not written")
                    continue
                self._save(target, code)
            self.result.files.append(rel)
            done += f"```\n## File name: {rel}\n{self.out.read(target)}\n```\n"

    def run(self, paper: Paper) -> PipelineResult:
        start = time.perf_counter()
        try:
            self._run(paper)
        except WorkspaceError as exc:  # a file name from the model that leaves the repository
            self.result.errors.append(f"unsafe path from the model: {exc}")
            self.result.status = "failed"
        self.result.usage = self.ledger.totals()
        self.result.wall_s = time.perf_counter() - start
        self.out.write("status.json", json.dumps({"status": self.result.status, "errors": self.result.errors,
                                                  "files": self.result.files, "usage": self.result.usage}, indent=1))
        return self.result

    def _run(self, paper: Paper) -> None:
        messages = self.plan(paper)
        design = self.design(messages)
        if design is None:
            self.result.status = "failed"
            return
        architecture, logic, config = design
        files = [f for f in logic["Task list"] if not f.endswith((".yaml", ".yml"))]
        for rel in files:
            Workspace(self.result.repo_dir).resolve(rel)  # refuse unsafe names before any call
        plan = next(m["content"] for m in messages if m["role"] == "assistant")
        context = {"plan": strip_think(plan), "architecture": json.dumps(architecture, indent=1),
                   "logic": json.dumps(logic, indent=1), "config": config}
        self.code(paper, context, files, self.analyse(paper, context, files))
        if not self.result.files:
            self.result.status = "failed"


def _str_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)
