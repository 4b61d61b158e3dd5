"""`coral reproduce` and `coral judge`: argument parsing over coral.hiras, registered on coral's CLI.

    coral reproduce PAPER [PAPER ...] --model M [--manager-model M2] --out-dir DIR [--pipeline hiras|papercoder]
    coral judge REPO --paper PAPER [--gold DIR] --protocol ref-free|ref-based|p2c-ex --model M [--n 8]
                [--paper2code-checkout DIR] [--hiras-checkout DIR] [--files code|all]

`--model` is any `load_policy` spec; `scripted-demo` replays the fixture paper's scripted agents
(coral.hiras.demo), for trying the commands without a model. Exit status 1 when a paper of a
batch did not finish ("done"), 0 otherwise.

This module does NOT hold logic of its own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coral.config import UserInputError
from coral.hiras.demo import ScriptedAgents, hiras_replies, papercoder_replies
from coral.hiras.hiras import HirasConfig
from coral.hiras.judge_prompts import Checkouts
from coral.hiras.judges import PROTOCOLS, judge_repo
from coral.hiras.llm import Prices
from coral.hiras.paper import load_paper
from coral.hiras.papercoder import PaperCoderConfig
from coral.hiras.reproduce import PIPELINES, reproduce_batch
from coral.hiras.workspace import FILE_SETS
from coral.policy import load_policy
from coral.policy.base import DTYPE_CHOICES, DTYPE_HELP, Policy
from coral.terminal import Bar, print_metrics, print_table

DEMO_MODEL = "scripted-demo"


def policy_for(spec: str, pipeline: str = "hiras", dtype: str = "auto") -> Policy:
    """The policy of `--model spec` for a pipeline ("hiras", "papercoder") or "judge"; `dtype` is the
    precision of a model that runs in this process (coral.policy.load_policy)."""
    if spec == DEMO_MODEL and pipeline == "judge":
        raise UserInputError(f"--model {DEMO_MODEL} only replays the reproduction agents; a judge needs a model "
                         "(or scripted:<replies.json>)")
    if spec == DEMO_MODEL:
        if pipeline == "hiras":
            return ScriptedAgents(hiras_replies())
        return ScriptedAgents({"papercoder": papercoder_replies()}, default="papercoder")

    return load_policy(spec, dtype=dtype)


class ShownPolicy:
    """`policy` with every generate call shown on a progress row: replies so far (of `total` when known),
    completion tokens, elapsed time (ticking while a call runs) and, with a total, the time left."""

    def __init__(self, policy: Policy, bar: Bar, label: str, total: int | None = None):
        self.policy, self.bar, self.tokens = policy, bar, 0
        self.row = bar.row(label, total, tokens=0)

    def generate(self, requests, *args, **kwargs):
        out = self.policy.generate(requests, *args, **kwargs)
        self.tokens += sum(c.usage.get("completion_tokens", len(c.completion_ids)) for c in out)
        self.bar.advance(self.row, len(requests), tokens=self.tokens)
        return out

    def __getattr__(self, name: str):  # everything else is the policy's own
        return getattr(self.policy, name)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    policy = policy_for(args.model, args.pipeline, args.dtype)
    manager = policy_for(args.manager_model, args.pipeline, args.dtype) if args.manager_model else None
    if args.model == DEMO_MODEL and manager is not None:
        raise UserInputError("--manager-model cannot be combined with --model scripted-demo (one script serves all agents)")
    if args.pipeline == "papercoder" and args.paper_in_prompt:
        raise UserInputError("--paper-in-prompt is a HiRAS option; the PaperCoder baseline always has the paper "
                             "in its prompts, as the original does")
    if args.pipeline != "papercoder" and args.repair_rounds:
        raise UserInputError("--repair-rounds is the PaperCoder baseline's repair stage (--pipeline papercoder); "
                             "HiRAS runs and fixes code with its execution agent")
    config = HirasConfig(step_multiplier=args.step_multiplier, command_timeout_s=args.command_timeout_s,
                         max_new_tokens=args.max_new_tokens, paper_in_prompt=args.paper_in_prompt)
    baseline = PaperCoderConfig(max_new_tokens=args.max_new_tokens, repair_rounds=args.repair_rounds,
                                command_timeout_s=args.command_timeout_s)
    # an agent decides when it is done: no total, so no time left, but every call shows
    with Bar(not args.no_progress, {"tokens": "{} completion tokens"}) as bar:
        policy = ShownPolicy(policy, bar, f"reproduce ({args.pipeline}): model replies")
        manager = ShownPolicy(manager, bar, "reproduce: manager replies") if manager is not None else None
        results = reproduce_batch(args.papers, policy, args.out_dir, args.pipeline, manager, config, _prices(args),
                                  baseline)
    rows = []
    for paper, status in results.items():
        tokens = status.get("usage", {}).get("total", {})
        usd = status.get("cost", {}).get("usd")
        rows.append([Path(paper).name, status["status"], f"{tokens.get('prompt_tokens', 0)}+"
                     f"{tokens.get('completion_tokens', 0)}", f"{tokens.get('wall_s', 0.0):.1f}",
                     "n/a" if usd is None else f"${usd:.4f}"])
    print_table(f"coral reproduce: {args.pipeline} / {args.model}", ["paper", "status", "tokens", "model s", "cost"],
                rows, [f"{paper}: error: {s['error']}" for paper, s in results.items() if s.get("error")]
                + [f"runs: {Path(args.out_dir) / Path(p).stem}" for p in results])
    return 0 if all(s["status"] == "done" for s in results.values()) else 1


def _prices(args: argparse.Namespace):
    """Prices from the two flags: both or neither."""
    given = (args.usd_per_mtok_prompt, args.usd_per_mtok_completion)
    if given == (None, None):
        return None
    if None in given:
        raise UserInputError("--usd-per-mtok-prompt and --usd-per-mtok-completion go together: give both or neither")
    try:
        return Prices(*given)
    except ValueError as exc:
        raise UserInputError(str(exc)) from None


def checkouts_from(args: argparse.Namespace) -> Checkouts:
    """The judges' prompt checkouts from --paper2code-checkout and --hiras-checkout."""
    return Checkouts(*(None if d is None else Path(d) for d in (args.paper2code_checkout, args.hiras_checkout)))


def add_checkout_flags(parser: argparse.ArgumentParser) -> None:
    """--paper2code-checkout, --hiras-checkout (shared with bench/hiras_vs_papercoder.py)."""
    parser.add_argument("--paper2code-checkout", default=None, metavar="DIR",
                        help="a local checkout of going-doer/Paper2Code: ref-free and ref-based use its "
                             "data/prompts/ref_free.txt and ref_based.txt verbatim; without it, coral's own "
                             "variants of those prompts")
    parser.add_argument("--hiras-checkout", default=None, metavar="DIR",
                        help="a local checkout of KOU-199024/HiRAS: p2c-ex uses its prompts/p2c-ex/p2c-ex.yaml "
                             "verbatim; without it, coral's own variant of that prompt")


def _cmd_judge(args: argparse.Namespace) -> int:
    # the n judgements are one batched call: the row shows its elapsed time until all n are back
    with Bar(not args.no_progress, {"tokens": "{} completion tokens"}) as bar:
        policy = ShownPolicy(policy_for(args.model, "judge", args.dtype), bar, f"judge ({args.protocol}): judgements", args.n)
        result = judge_repo(args.repo, load_paper(args.paper), policy, args.protocol, args.gold,
                            n=args.n, max_new_tokens=args.max_new_tokens, checkouts=checkouts_from(args),
                            file_set=args.files)
    if args.out:
        Path(args.out).write_text(json.dumps(result.to_dict(), indent=1))
    print_metrics(f"coral judge: {args.protocol} / {args.model}",
                  {"score": "none valid" if result.score is None else f"{result.score:.2f}",
                   "valid": f"{result.valid_n}/{result.n}", "files": len(result.files)},
                  [f"prompt: {result.prompt_source}"] + ([f"result: {args.out}"] if args.out else []))
    return 0


def add_research_commands(sub: argparse._SubParsersAction) -> None:
    """Register `reproduce` and `judge` on coral's subparsers; each sets `handler`."""
    dtype_help = f"{DTYPE_HELP} (default: auto)"

    p = sub.add_parser("reproduce", help="turn papers into repositories (HiRAS or the PaperCoder baseline)")
    p.add_argument("papers", nargs="+", metavar="PAPER", help="paper files: .md, .tex or s2orc .json")
    p.add_argument("--model", required=True, help=f"policy spec for the agents, or {DEMO_MODEL}")
    p.add_argument("--manager-model", default=None, help="policy spec for the two managers (default: --model)")
    p.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto", help=dtype_help)
    p.add_argument("--out-dir", required=True, help="one run directory per paper goes here")
    p.add_argument("--pipeline", choices=PIPELINES, default="hiras")
    p.add_argument("--no-progress", action="store_true", help="no progress row")
    p.add_argument("--step-multiplier", type=float, default=1.0, help="scales every agent's step budget")
    p.add_argument("--command-timeout-s", type=float, default=60.0, help="wall limit of each sandboxed command")
    p.add_argument("--max-new-tokens", type=int, default=2048, help="longest reply of one agent call, in tokens")
    p.add_argument("--repair-rounds", type=int, default=0,
                   help="PaperCoder only: rounds of run-and-repair after coding, like Paper2Code's debugging "
                        "step (default 0: the released pipeline, which never runs the code)")
    p.add_argument("--paper-in-prompt", action="store_true",
                   help="HiRAS only: paste the paper into every agent's prompt (coral's earlier variant) instead "
                        "of giving it as the workspace file paper.md (.tex, .json) that agents read")
    p.add_argument("--usd-per-mtok-prompt", type=float, default=None,
                   help="price of a million prompt tokens in US dollars (with the next flag: cost in usage.json)")
    p.add_argument("--usd-per-mtok-completion", type=float, default=None,
                   help="price of a million completion tokens in US dollars")
    p.set_defaults(handler=_cmd_reproduce)

    j = sub.add_parser("judge", help="score a repository against its paper (PaperCoder or P2C-Ex judge)")
    j.add_argument("repo", metavar="REPO", help="repository directory")
    j.add_argument("--paper", required=True, help="paper file: .md, .tex or s2orc .json")
    j.add_argument("--gold", default=None, help="gold repository directory (ref-based)")
    j.add_argument("--protocol", choices=PROTOCOLS, required=True)
    j.add_argument("--model", required=True, help="policy spec of the judge")
    j.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto", help=dtype_help)
    j.add_argument("--n", type=int, default=8, help="judgements sampled")
    j.add_argument("--max-new-tokens", type=int, default=1024)
    add_checkout_flags(j)
    j.add_argument("--files", choices=sorted(FILE_SETS), default="code",
                   help="target files shown to the judge: code (.py .sh .bash .yaml .yml: code and config, no "
                        "planning notes; default) or all (Paper2Code's read_all_files set, .md included)")
    j.add_argument("--out", default=None, help="write the full result as JSON here")
    j.add_argument("--no-progress", action="store_true", help="no progress row")
    j.set_defaults(handler=_cmd_judge)
