"""HiRAS against the PaperCoder baseline on the fixture paper: scores of all three judges, tokens, wall time.

Both pipelines run with the same --model (any load_policy spec, or `scripted-demo`: the fixture's
scripted agents) into fresh run dirs under --out-dir; each resulting repository is run once in the
sandbox (`python main.py`) and judged by ref-free, ref-based (gold: the fixture's reference
implementation) and P2C-Ex with --judge-model (default: --model), --n samples each. Every pipeline is
judged on the same kind of file set: code and config (.py .sh .bash .yaml .yml), so HiRAS's planning
notes (plan/*.md, plan/task_list.json) and the paper file in its workspace never reach a judge, as
PaperCoder's artifacts/ never do; a pipeline that wrote no repository is judged as an empty one, as
P2C-Ex means to judge it. The judge prompts are the released files when
--paper2code-checkout / --hiras-checkout give local checkouts of the official repositories, else
coral's variants; the table's last line says which. Every judgement (files seen, prompt source and
sha256, why each dropped sample was dropped) goes to --out-dir/judges.json. The gold repository is
judged too, as a check of the judge. With `scripted-demo` the judge is a scripted policy answering a
fixed score of 3 and its scores measure nothing but the plumbing; tokens of scripted models are
characters / 4. "steps / actions": HiRAS's model replies over all calls and the tool calls they held
(delegations included, final reports not).

    .venv/bin/python bench/hiras_vs_papercoder.py --model scripted-demo
    .venv/bin/python bench/hiras_vs_papercoder.py --model smollm2 --max-new-tokens 256 --step-multiplier 0.1 --n 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from coral.hiras.cli import DEMO_MODEL, add_checkout_flags, checkouts_from, policy_for
from coral.hiras.execution import command_sandbox, run_command
from coral.hiras.hiras import HirasConfig
from coral.hiras.judges import PROTOCOLS, judge_repo
from coral.hiras.paper import FIXTURE_PAPER, FIXTURE_REFERENCE, load_paper
from coral.hiras.papercoder import PaperCoderConfig
from coral.hiras.reproduce import run_hiras, run_papercoder
from coral.hiras.workspace import Workspace, repo_files
from coral.policy.scripted import ScriptedPolicy


def reproduce(pipeline: str, args: argparse.Namespace) -> tuple[Path, dict, float]:
    run_dir = args.out_dir / pipeline
    shutil.rmtree(run_dir, ignore_errors=True)
    policy = policy_for(args.model, pipeline)
    start = time.perf_counter()
    try:
        if pipeline == "hiras":
            config = HirasConfig(step_multiplier=args.step_multiplier, max_new_tokens=args.max_new_tokens,
                                 paper_in_prompt=args.paper_in_prompt)
            status = run_hiras(FIXTURE_PAPER, policy, run_dir, config=config)
        else:
            config = PaperCoderConfig(max_new_tokens=args.max_new_tokens, repair_rounds=args.repair_rounds)
            status = run_papercoder(FIXTURE_PAPER, policy, run_dir, config)
    except Exception as exc:  # a model that breaks a pipeline is a result of the bench, printed as such
        status = {"status": f"crashed: {type(exc).__name__}: {exc}"[:80]}
    repo = run_dir / ("workspace" if pipeline == "hiras" else "repo")
    repo.mkdir(parents=True, exist_ok=True)  # a pipeline that wrote nothing is judged as an empty repository
    return repo, status, time.perf_counter() - start


def steps_and_actions(run_dir: Path) -> str:
    """HiRAS: model replies (steps) over every call of every attempt, and the tool calls they held."""
    path = run_dir / "calls.json"
    if not path.is_file():
        return "-"
    steps = actions = 0
    stack = json.loads(path.read_text())
    while stack:
        call = stack.pop()
        steps += (call["report"] or {}).get("steps", 0)
        actions += sum(a["tool"] != "invalid" for a in call["actions"])  # a valid final_report is not logged
        stack += call["children"]
    return f"{steps} / {actions}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEMO_MODEL,
                    help="the agents' model: a load_policy spec (smollm2, a directory, openai:URL#model) or scripted-demo")
    ap.add_argument("--judge-model", default=None, help="the judges' model (default: --model)")
    ap.add_argument("--n", type=int, default=4, help="judge samples per protocol")
    ap.add_argument("--max-new-tokens", type=int, default=2048, help="longest reply of any agent or judge, in tokens")
    ap.add_argument("--step-multiplier", type=float, default=1.0,
                    help="scales every HiRAS agent's step budget (32/16/10/16/32/32)")
    ap.add_argument("--repair-rounds", type=int, default=0, help="PaperCoder's optional run-and-repair rounds")
    ap.add_argument("--paper-in-prompt", action="store_true", help="HiRAS: the paper pasted into every prompt")
    add_checkout_flags(ap)
    ap.add_argument("--out-dir", type=Path, default=Path("runs/hiras_vs_papercoder"),
                    help="run directories of both pipelines (replaced on each run)")
    args = ap.parse_args()
    judge_spec = args.judge_model or args.model
    judge = (ScriptedPolicy([json.dumps({"critique_list": [], "score": 3})]) if judge_spec == DEMO_MODEL
             else policy_for(judge_spec, "judge"))
    checkouts, paper = checkouts_from(args), load_paper(FIXTURE_PAPER)
    rows, judged, sources = {}, {}, set()
    with command_sandbox(60.0, 2048) as sandbox:
        for pipeline in ("hiras", "papercoder", "gold"):
            repo, status, wall_s = ((FIXTURE_REFERENCE, {"status": "reference"}, 0.0) if pipeline == "gold"
                                    else reproduce(pipeline, args))
            files = list(repo_files(repo))
            ran = run_command(sandbox, Workspace(repo), "python main.py", 60.0) if "main.py" in files else None
            scores, judge_tokens = {}, 0
            for protocol in PROTOCOLS:
                try:
                    result = judge_repo(repo, paper, judge, protocol, FIXTURE_REFERENCE, n=args.n,
                                        max_new_tokens=args.max_new_tokens, checkouts=checkouts)
                except Exception as exc:  # e.g. a prompt longer than the model's context: shown, not hidden
                    scores[protocol] = f"crashed: {type(exc).__name__}: {exc}"[:60]
                    continue
                judged[f"{pipeline}/{protocol}"] = result.to_dict()
                sources.add(f"{protocol}: {result.prompt_source}")
                judge_tokens += sum(result.usage.values())
                shown = "none valid" if result.score is None else f"{result.score:.2f}"
                scores[protocol] = f"{shown} ({result.valid_n}/{result.n})"
            tokens = status.get("usage", {}).get("total", {})
            rows[pipeline] = [status["status"], f"{len(files)}: {' '.join(files)}",
                              "-" if ran is None else str(ran.exit_code),
                              f"{tokens.get('prompt_tokens', 0)}+{tokens.get('completion_tokens', 0)}",
                              f"{wall_s:.2f}", steps_and_actions(repo.parent), *scores.values(), str(judge_tokens)]
    header = ["pipeline", "status", "files judged", "main.py exit", "tokens (prompt+completion)", "wall s",
              "steps / actions", *PROTOCOLS, "judge tokens"]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "judges.json").write_text(json.dumps(judged, indent=1))
    print(f"model {args.model}, judge {judge_spec}, n {args.n}, paper {FIXTURE_PAPER.name}")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for name, row in rows.items():
        print("| " + " | ".join([name, *row]) + " |")
    print("prompts: " + "; ".join(sorted(sources)))


if __name__ == "__main__":
    main()
