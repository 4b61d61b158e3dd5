"""The efficacy studies of issue #24, one command each, on the fixed protocol of efficacy_protocol.py:

    python -m experiments.efficacy scaling   # A: best-of-N vs AB-MCTS-A, 1 and 2 agents, budgets 4-32, no training
    python -m experiments.efficacy mars2     # B: single-agent GRPO vs MARS2 with/without shaping, equal samples
    python -m experiments.efficacy corecode  # C: CoRe-Code role ablation and single-coder GRPO at equal codes

`--set '{"field": value}'` overrides the study's config fields (ScalingConfig / TrainingStudyConfig).
Each writes its per-run JSON (command, config, commit, load average, numbers) under the config's `out`
and its table into a section of docs/results/efficacy.md. Run from the repository root with
PYTHONPATH=. so the checkout's `coral` is the one imported.

This script does NOT hold any study logic; it parses the command line and calls the study.
"""

from __future__ import annotations

import argparse

from experiments.efficacy_protocol import set_fields

STUDIES = {  # name -> (module, config class, entry point)
    "scaling": ("efficacy_scaling", "ScalingConfig", "run"),
    "mars2": ("efficacy_training", "TrainingStudyConfig", "run_mars2"),
    "corecode": ("efficacy_corecode", "TrainingStudyConfig", "run_corecode"),
}


def main(argv: list[str] | None = None) -> None:
    import importlib

    from coral.config import from_mapping

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=sorted(STUDIES))
    ap.add_argument("--set", default="{}", help="JSON of config fields, e.g. '{\"seeds\": [0, 1, 2], \"n_test_tasks\": 40}'")
    args = ap.parse_args(argv)
    fields = set_fields(args.set)
    module_name, cls_name, entry = STUDIES[args.study]
    module = importlib.import_module(f"experiments.{module_name}")
    cfg = from_mapping(getattr(module, cls_name) if hasattr(module, cls_name) else
                       getattr(importlib.import_module("experiments.efficacy_training"), cls_name), fields, "--set")
    getattr(module, entry)(cfg)


if __name__ == "__main__":
    main()
