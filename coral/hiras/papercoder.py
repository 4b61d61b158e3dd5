"""The PaperCoder baseline: planning conversation, config extraction, per-file analysis and coding, and an
optional repair stage.

Stages and the context of each, as in Paper2Code's scripts (a stage is skipped on a rerun when its
artifact exists, so a run resumes):
1. planning: one conversation of four turns: overall plan; architecture with the file list as
   `[CONTENT]{json}[/CONTENT]`; logic design with a "Logic Analysis" per file and a dependency-ordered
   "Task list"; config.yaml. -> artifacts/planning_trajectories.json, architecture.json, task_list.json
2. config extraction: the first yaml block of turn 4 -> artifacts/planning_config.yaml, repo/config.yaml
3. analysis: one stateless call per task-list file: the paper, the plan, the architecture and logic
   design replies as written, config.yaml, and the file's own Logic Analysis line
   -> artifacts/analysis/<file>.md
4. coding: one stateless call per file in task-list order: the same context (logic design included),
   every earlier file's code and the file's analysis. The first fenced block is the file; a reply
   without one is written whole, as Paper2Code does. -> repo/<file> (raw reply in artifacts/coding/)
5. repair, optional (`repair_rounds` > 0; off by default, Paper2Code's debugging script being a step
   the user runs by hand): run `repair_command` on repo/ in the sandbox; when it fails, one call with the
   repository's code and the output answers with `Filename: <path>` and SEARCH/REPLACE edits, applied
   as Paper2Code's debugging step applies them (search and replace texts stripped, every occurrence
   replaced); up to `repair_rounds` rounds, then one last run records the exit code.
Only the task-list entry config.yaml is not coded or analysed (it comes from stage 2), as in PaperCoder.

The prompts are coral's own wording. Differences from the original: one system prompt for all stages;
think spans are removed from a reply before it is written whole; an empty search text is refused (the
original would insert the replacement between every character).

Failures are data: a reply that does not parse adds a line to `PipelineResult.errors`; a stage
without which later stages cannot run (no file list, no task list) ends the run with status
"failed".

This module does NOT judge the repository (coral.hiras.judges does).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from coral.config import UserInputError
from coral.hiras.execution import command_sandbox, run_command
from coral.hiras.llm import Ledger
from coral.hiras.paper import Paper, prompt_text
from coral.hiras.parsing import content_json, first_code_block, strip_think
from coral.hiras.workspace import Workspace, WorkspaceError, repo_files
from coral.policy.base import Message, Policy

SYSTEM = ("You are an expert researcher and research engineer. You turn a research paper into a complete, "
          "runnable Python repository that reproduces its method and experiments faithfully.")

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

CONTEXT = ("Paper:\n{paper}\n\nPlan:\n{plan}\n\nArchitecture:\n{architecture}\n\nLogic design:\n{logic}\n\n"
           "config.yaml:\n```yaml\n{config}\n```\n\n")

ANALYSIS = (CONTEXT + "Write a detailed logic analysis of the file {file}{purpose}: its classes and functions, "
            "their inputs and outputs, the algorithm steps taken from the paper, the settings it reads from "
            "config.yaml and what it imports from other files. Do not write the code yet.")

CODING = (CONTEXT + "Files written so far:\n{done}\nLogic analysis of {file}:\n{analysis}\n\nWrite the complete "
          "file {file}, following the design, consistent with the files written so far and reading settings "
          "from config.yaml. Answer with the whole file in one fenced code block.")

REPAIR = ("Repository:\n{code}\nThe command `{command}` failed with this output:\n{output}\n\nFix the repository "
          "so that the command succeeds, changing as little as possible. Answer with edits only; for each:\n"
          "Filename: <path>\n<<<<<<< SEARCH\n<the exact lines to change>\n=======\n<their replacement>\n"
          ">>>>>>> REPLACE")

_EDIT = re.compile(r"<<<<<<< SEARCH\n(.*?)\n=======\n(.*?)\n>>>>>>> REPLACE", re.S)


@dataclass(frozen=True)
class PaperCoderConfig:
    max_new_tokens: int = 2048
    temperature: float = 0.0
    repair_rounds: int = 0  # 0: the released pipeline (no execution)
    repair_command: str = "python main.py"
    command_timeout_s: float = 60.0
    command_memory_mb: int = 2048

    def __post_init__(self) -> None:
        if self.repair_rounds < 0:
            raise UserInputError(f"repair_rounds must be >= 0, got {self.repair_rounds}")


@dataclass
class PipelineResult:
    status: str  # "done" | "failed"
    repo_dir: Path
    files: list[str] = field(default_factory=list)  # repository files written, in order
    artifacts: list[str] = field(default_factory=list)  # every file written this run, in order (out-dir relative)
    errors: list[str] = field(default_factory=list)
    repairs: list[dict] = field(default_factory=list)  # per round: exit code before it, edits applied, failed
    final_exit_code: int | str | None = None  # of the last run of the repair command (None: never run)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    wall_s: float = 0.0


class PaperCoder:
    """Runs the stages of the module docstring into `out_dir` (artifacts/, repo/, logs/)."""

    def __init__(self, policy: Policy, out_dir: str | Path, config: PaperCoderConfig = PaperCoderConfig()) -> None:
        self.policy, self.config = policy, config
        self.out = Workspace(out_dir)
        self.ledger = Ledger(self.out.root / "logs", config.max_new_tokens, config.temperature)
        self.result = PipelineResult("done", self.out.root / "repo")

    def _save(self, rel: str, text: str) -> None:
        self.out.write(rel, text)
        self.result.artifacts.append(rel)

    def _chat(self, agent: str, prompt: str) -> str:
        reply, _ = self.ledger.chat(self.policy, agent, [{"role": "system", "content": SYSTEM},
                                                         {"role": "user", "content": prompt}])
        return reply

    def plan(self, paper: Paper) -> list[Message]:
        """The four-turn planning conversation (loaded when it exists)."""
        if self.out.exists("artifacts/planning_trajectories.json"):
            return json.loads(self.out.read("artifacts/planning_trajectories.json"))
        messages: list[Message] = [{"role": "system", "content": SYSTEM}]
        for turn in PLAN_TURNS:
            messages.append({"role": "user", "content": turn.format(paper=prompt_text(paper))})
            reply, _ = self.ledger.chat(self.policy, "planning", messages)
            messages.append({"role": "assistant", "content": reply})
        self._save("artifacts/planning_trajectories.json", json.dumps(messages, indent=1))
        return messages

    def design(self, messages: list[Message]) -> tuple[dict, dict[str, str]] | None:
        """(logic design, context for the later stages) from the planning replies; None on failure."""
        replies = [strip_think(m["content"]) for m in messages if m["role"] == "assistant"]
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
        # later stages see the replies as written (think spans removed), as Paper2Code's extract_planning gives them
        return logic, {"plan": replies[0], "architecture": replies[1], "logic": replies[2], "config": config}

    def analyse(self, paper: Paper, context: dict[str, str], files: list[str], purposes: dict[str, str]) -> dict[str, str]:
        analyses = {}
        for rel in files:
            path = f"artifacts/analysis/{rel}.md"
            if not self.out.exists(path):
                purpose = f" (intended for: {purposes[rel]})" if purposes.get(rel, "").strip() else ""
                prompt = ANALYSIS.format(paper=prompt_text(paper), file=rel, purpose=purpose, **context)
                self._save(path, strip_think(self._chat("analysis", prompt)))
            analyses[rel] = self.out.read(path)
        return analyses

    def code(self, paper: Paper, context: dict[str, str], files: list[str], analyses: dict[str, str]) -> None:
        done = ""
        for rel in files:
            target = f"repo/{rel}"
            if not self.out.exists(target):
                reply = self._chat("coding", CODING.format(paper=prompt_text(paper), file=rel, done=done or "(none)\n",
                                                           analysis=analyses[rel], **context))
                self._save(f"artifacts/coding/{rel}.md", reply)
                code = first_code_block(reply)
                if code is None:  # Paper2Code writes the whole reply when it holds no fenced block
                    self.result.errors.append(f"coding {rel}: no fenced code block; the whole reply is the file")
                    code = strip_think(reply)
                self._save(target, code)
            self.result.files.append(rel)
            done += f"```\n## File name: {rel}\n{self.out.read(target)}\n```\n"

    def repair(self) -> None:
        """Stage 5 of the module docstring; a round whose reply is saved was applied before (resume)."""
        repo = Workspace(self.result.repo_dir)
        command, timeout_s = self.config.repair_command, self.config.command_timeout_s
        with command_sandbox(timeout_s, self.config.command_memory_mb) as sandbox:
            for k in range(1, self.config.repair_rounds + 1):
                ran = run_command(sandbox, repo, command, timeout_s)
                if ran.ok:
                    break
                path = f"artifacts/debugging/round_{k}.md"
                if self.out.exists(path):
                    continue
                code = "".join(f"```\n## File name: {rel}\n{text}\n```\n\n" for rel, text in repo_files(repo.root).items())
                output = (ran.error + "\n" if ran.error else "") + ran.output
                reply = self._chat("debugging", REPAIR.format(code=code, command=command, output=output))
                applied, failed = apply_edits(reply, repo)
                self.result.repairs.append({"round": k, "exit_code": ran.exit_code, "applied": applied,
                                            "failed": failed})
                self._save(path, f"exit code: {ran.exit_code}\n\n{output}\n\nreply:\n{reply}")
            self.result.final_exit_code = run_command(sandbox, repo, command, timeout_s).exit_code

    def run(self, paper: Paper) -> PipelineResult:
        start = time.perf_counter()
        try:
            self._run(paper)
        except WorkspaceError as exc:  # a file name from the model that leaves the repository
            self.result.errors.append(f"unsafe path from the model: {exc}")
            self.result.status = "failed"
        self.result.usage = self.ledger.totals()
        self.result.wall_s = time.perf_counter() - start
        self.out.write("status.json", json.dumps({
            "status": self.result.status, "errors": self.result.errors, "files": self.result.files,
            "repairs": self.result.repairs, "final_exit_code": self.result.final_exit_code,
            "usage": self.result.usage}, indent=1))
        return self.result

    def _run(self, paper: Paper) -> None:
        design = self.design(self.plan(paper))
        if design is None:
            self.result.status = "failed"
            return
        logic, context = design
        files = [f for f in logic["Task list"] if f != "config.yaml"]
        for rel in files:
            Workspace(self.result.repo_dir).resolve(rel)  # refuse unsafe names before any call
        purposes = {row[0]: str(row[1]) for row in logic.get("Logic Analysis", [])
                    if isinstance(row, list) and len(row) >= 2 and isinstance(row[0], str)}
        self.code(paper, context, files, self.analyse(paper, context, files, purposes))
        if not self.result.files:
            self.result.status = "failed"
        elif self.config.repair_rounds:
            self.repair()


def apply_edits(reply: str, repo: Workspace) -> tuple[list[str], list[str]]:
    """Apply the `Filename:` + SEARCH/REPLACE edits of `reply` to `repo`; (edits applied, edits refused
    with why), each named "<file> edit <k>"."""
    blocks = re.split(r"Filename:\s*([^\n]+)", strip_think(reply))
    if len(blocks) < 3:
        return [], ["no 'Filename:' line in the reply"]
    applied, failed = [], []
    for name, body in zip(blocks[1::2], blocks[2::2], strict=True):
        name, edits = name.strip(), _EDIT.findall(body)
        if not edits:
            failed.append(f"{name}: no SEARCH/REPLACE edit")
            continue
        try:
            text = repo.read(name)
        except WorkspaceError as exc:
            failed.append(f"{name}: {exc}")
            continue
        changed = text
        for k, (search, replace) in enumerate(edits, 1):
            search, replace = search.strip(), replace.strip()
            if search and search in changed:
                changed = changed.replace(search, replace)
                applied.append(f"{name} edit {k}")
            else:
                failed.append(f"{name} edit {k}: " + ("empty search text" if not search else "search text not found"))
        if changed != text:
            repo.write(name, changed)
    return applied, failed


def _str_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)
