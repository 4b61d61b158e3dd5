"""Held-out Pass@1 / Pass@N at equal node budget: single-agent GRPO vs MARS2 without and with
tree-consistent shaping, on the procedural family with tiny agents, over several seeds.

Per seed the agents are cold-started (SFT) once and each variant trains from copies of them:
  single     1 agent, best-of-N rollouts (one GRPO group per task)
  mars2      all agents, AB-MCTS-A trees, advantages normalised over each tree (no shaping)
  mars2+tcs  the same with tree-consistent shaping (gamma, lambda = 0.5)
  mars2+tcs/agent  the same, advantages normalised per (tree, agent) instead of per tree
Evaluation: every variant searches the held-out tasks with AB-MCTS-A and its own agents at the same
node budget. Also printed: the cold-start agents before RL, all of them (`sft`, the baseline of the
MARS2 rows) and the first alone (`sft/1`, the baseline of `single`). Error bars: the standard error over
seeds of each variant's mean Pass@1 and Pass@N (nan with one seed).

    python -m experiments.mars2_compare --seeds 0 1 --rl-steps 8    # about 15 min per seed on 2 cores
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from dataclasses import asdict, is_dataclass, replace
from pathlib import Path

from coral.benchmarks.splits import build_tasks
from coral.mars2.cold_start import AGENT_BATCH_SIZE, first_stage, second_stage
from coral.mars2.recipe import MARS2Config, cold_start, evaluate_search, train_mars2
from coral.policy.hf import HFPolicy
from coral.report.error_bars import mean_se
from coral.sandbox import Sandbox

# the MARS2Config fields of each level of a cold start: the first SFT (solve and, refine_from "mutants", mutant
# refine examples; `refine_examples` also sizes the tokenizer's corpus), then with refine_from "own" the second SFT
# on the agents' own refine examples (sampled at rl.temperature, max_new_tokens)
FIRST_FIELDS = ("seed", "n_train_tasks", "min_depth", "max_depth", "agents", "agent_shapes", "sft", "solutions_per_task",
                "refine_from", "refine_examples", "refine_keep_examples")
# fields that enter the key only when set, so the cold starts cached before they existed keep their keys
KEYED_WHEN_SET = {"refine_keep_examples": 0}
SECOND_FIELDS = FIRST_FIELDS + ("refine_samples_per_task", "refine_tasks", "refine_keep_fraction", "refine_sft", "rl",
                                "max_new_tokens")
# the second level of a cold start with keep drills (refine_from "mutants", keep_drills > 0: cold_start.drill_stage)
DRILL_FIELDS = FIRST_FIELDS + ("keep_drills", "drill_sft")
VARIANTS = {
    "single": dict(algorithm="best_of_n", shaping=False, agents=1),
    "mars2": dict(algorithm="abmcts", shaping=False),
    "mars2+tcs": dict(algorithm="abmcts", shaping=True),
    "mars2+tcs/agent": dict(algorithm="abmcts", shaping=True, advantage_group="tree_agent"),
}


def _cold_start_fields(cfg: MARS2Config, level: str = "final") -> dict:
    """The fields that make `cfg`'s cold start: its first level's, or its final level's (refine_from "own", or
    keep_drills set: a second stage over the first)."""
    names = FIRST_FIELDS
    if level == "final" and cfg.refine_from == "own":
        names = SECOND_FIELDS
    elif level == "final" and cfg.keep_drills:
        names = DRILL_FIELDS
    return {k: asdict(v) if is_dataclass(v) else v for k, v in ((k, getattr(cfg, k)) for k in names)
            if KEYED_WHEN_SET.get(k, object()) != v}


def cold_start_key(cfg: MARS2Config, level: str = "final") -> str:
    """The name of `cfg`'s cold start (or of its first level): a hash of the fields that make it, its cache folder."""
    return hashlib.sha256(json.dumps(_cold_start_fields(cfg, level), sort_keys=True).encode()).hexdigest()[:12]


def cold_start_name(cfg: MARS2Config, cache: Path) -> str:
    """What identifies a cached cold start's agents: its key and a digest of the weights it saved, so that
    results made with a cold start that was deleted and trained again (another machine, other code) are
    not mistaken for this one's."""
    where = Path(cache) / cold_start_key(cfg)
    if not (where / "done").exists():
        raise FileNotFoundError(f"{where}: no finished cold start to name (run cached_cold_start first)")
    return weights_name(where, label=where.name)  # raises for a finished one that saved no weights


def weights_name(where: Path, pattern: str = "agent*/*.safetensors", label: str | None = None) -> str:
    """`label` (default: the folder `where`) and the digest of its weight files, as `label:digest`: how a result
    names the cold start it measured."""
    return f"{where if label is None else label}:{weights_digest(where, pattern)}"


def weights_digest(where: Path, pattern: str = "agent*/*.safetensors") -> str:
    """A digest of the weight files under `where` that match `pattern` (default: the agents agent0, agent1, ...
    of a MARS2 cold start; a CoRe-Code run's kept cold start is `*.pt` in its sft/cold_start)."""
    files = sorted(Path(where).glob(pattern))
    if not files:
        raise FileNotFoundError(f"{where}: no {pattern} to digest")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(where).as_posix().encode() + f.read_bytes())
    return digest.hexdigest()[:12]


def _load(where: Path, n: int) -> list:
    return [HFPolicy.load(where / f"agent{i}", batch_size=AGENT_BATCH_SIZE) for i in range(n)]


def _keep(where: Path, policies: list, key: dict) -> None:
    for i, policy in enumerate(policies):
        policy.save(where / f"agent{i}")
    (where / "key.json").write_text(json.dumps(key, indent=2))
    (where / "done").touch()


def cached_cold_start(cfg: MARS2Config, train: list, sandbox: Sandbox, cache: Path | None, progress: bool = False) -> list:
    """Cold start once per (seed, cold-start fields); later runs (another lr, more steps) reuse it. Cached in
    two levels, so that settings that differ only in the second SFT (refine_from "own", or keep drills) share the first. A
    stopped cold start resumes from its SFT checkpoints (`sft_ckpt` / `ckpt` in its cache folder)."""
    if cache is None:
        return cold_start(cfg, train, sandbox, progress=progress)
    first = cache / cold_start_key(cfg, "first")
    if (first / "done").exists():
        policies = _load(first, cfg.agents)
    else:
        policies = first_stage(cfg, train, sandbox, progress, checkpoint_dir=first / "sft_ckpt")
        _keep(first, policies, _cold_start_fields(cfg, "first"))
        shutil.rmtree(first / "sft_ckpt", ignore_errors=True)
    final = cache / cold_start_key(cfg)
    if final == first:
        return policies
    if (final / "done").exists():
        return _load(final, cfg.agents)
    second_stage(cfg, policies, train, sandbox, progress, checkpoint_dir=final / "ckpt")
    _keep(final, policies, _cold_start_fields(cfg))
    shutil.rmtree(final / "ckpt", ignore_errors=True)
    return policies


def run_seed(base: MARS2Config, seed: int, out: Path, cache: Path | None) -> dict[str, dict[str, float]]:
    cfg = replace(base, seed=seed)
    tasks = build_tasks(cfg.splits)
    rows = {}
    with Sandbox(workers=cfg.sandbox_workers) as sandbox:
        t0 = time.perf_counter()
        policies = cached_cold_start(cfg, tasks[0], sandbox, cache)
        print(f"seed {seed}: cold start {time.perf_counter() - t0:.0f}s", flush=True)
        rows["sft"], _ = evaluate_search(cfg, policies, tasks[1], sandbox)
        rows["sft/1"], _ = evaluate_search(cfg, policies[:1], tasks[1], sandbox)
        for name in ("sft", "sft/1"):
            print(f"seed {seed} {name:16s} pass@1 {rows[name]['pass@1']:.3f} pass@N {rows[name]['pass@n']:.3f}",
                  flush=True)
        for name, overrides in VARIANTS.items():
            vcfg = replace(cfg, out_dir=str(out / f"seed{seed}" / name.replace("/", "-")), **overrides)
            summary = train_mars2(vcfg, policies=policies[: vcfg.agents], tasks=tasks, sandbox=sandbox,
                                  progress=False, eval_before=False)
            rows[name] = summary["after"]
            print(f"seed {seed} {name:16s} pass@1 {rows[name]['pass@1']:.3f} pass@N {rows[name]['pass@n']:.3f}",
                  flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--rl-steps", type=int, default=8)
    ap.add_argument("--max-nodes-per-tree", type=int, default=8)
    ap.add_argument("--tasks-per-step", type=int, default=16)
    ap.add_argument("--n-test-tasks", type=int, default=100)
    ap.add_argument("--n-train-tasks", type=int, default=3000)
    ap.add_argument("--rl-lr", type=float, default=MARS2Config().rl.lr)
    ap.add_argument("--sft-epochs", type=float, default=MARS2Config().sft.epochs)
    ap.add_argument("--out", default="runs/experiment_mars2")
    ap.add_argument("--cold-cache", default="runs/mars2_cold", help="reuse cold starts from here ('' = never)")
    args = ap.parse_args()
    default = MARS2Config()
    base = MARS2Config(rl_steps=args.rl_steps, max_nodes_per_tree=args.max_nodes_per_tree,
                       tasks_per_step=args.tasks_per_step, n_test_tasks=args.n_test_tasks,
                       n_train_tasks=args.n_train_tasks, rl=replace(default.rl, lr=args.rl_lr),
                       sft=replace(default.sft, epochs=args.sft_epochs))
    out = Path(args.out)
    cache = Path(args.cold_cache) if args.cold_cache else None
    results = {seed: run_seed(base, seed, out, cache) for seed in args.seeds}
    print(f"\nheld-out, {args.n_test_tasks} tasks, node budget {args.max_nodes_per_tree}, {args.rl_steps} RL steps "
          f"at lr {args.rl_lr:g}, cold start {args.sft_epochs:g} epochs, "
          f"seeds {args.seeds}")
    print(f"{'variant':16s} {'pass@1 mean ± SE':>18s} {'pass@N mean ± SE':>18s}   per seed pass@1")
    for name in ["sft/1", "single", "sft", *list(VARIANTS)[1:]]:
        p1 = mean_se([results[s][name]["pass@1"] for s in args.seeds])
        pn = mean_se([results[s][name]["pass@n"] for s in args.seeds])
        print(f"{name:16s} {p1[0]:10.3f} ± {p1[1]:.3f} {pn[0]:10.3f} ± {pn[1]:.3f}   "
              + " ".join(f"{results[s][name]['pass@1']:.3f}" for s in args.seeds))
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2))


if __name__ == "__main__":
    main()
