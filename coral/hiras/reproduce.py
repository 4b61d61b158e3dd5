"""`reproduce`: run HiRAS or the PaperCoder baseline on papers, resumably, one run dir per paper.

Run dir `<out_dir>/<paper name>/`: status.json (status, errors, usage, cost, wall time), usage.json
(calls, tokens, model wall time and US dollars per agent; dollars only when prices are given),
logs/<agent>.jsonl (every model call), and for HiRAS workspace/ (the
repository), calls.json (one call tree per attempt) and report.html; for PaperCoder repo/ and
artifacts/. A paper whose status is "done" is skipped on a rerun; any other status reruns, and
the rerun continues from the files already there (PaperCoder skips finished stages; the HiRAS
manager is told which files exist). In a batch, a paper that fails (bad file, model error) gets
status "failed" with the error and the batch goes on.

This module does NOT judge the repositories (coral.hiras.judges does).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from coral.config import UserInputError
from coral.hiras.hiras import PAPER_FILES, HirasConfig, HirasRun, record_to_dict
from coral.hiras.llm import Prices, priced
from coral.hiras.paper import load_paper
from coral.hiras.papercoder import PaperCoder, PaperCoderConfig
from coral.hiras.report import write_html
from coral.hiras.workspace import file_tree
from coral.policy.base import Policy

log = logging.getLogger(__name__)
PIPELINES = ("hiras", "papercoder")
TASK = ("Reproduce the paper as a runnable Python repository in the workspace: plan it, analyse each file, "
        "write the code, run it with the execution agent and fix what fails.")


def _read_status(run_dir: Path) -> dict:
    path = run_dir / "status.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _cost(usage: dict[str, dict]) -> dict:
    """The run's cost in status.json: model wall time always, dollars when prices were given."""
    total = usage["total"]
    return {"model_wall_s": total["wall_s"], "usd": total["usd"]}


def run_hiras(paper_path: str | Path, policy: Policy, run_dir: str | Path, manager_policy: Policy | None = None,
              config: HirasConfig = HirasConfig(), prices: Prices | None = None) -> dict:
    """One HiRAS attempt (or none when the run dir says done); returns the status dict."""
    run_dir = Path(run_dir)
    status = _read_status(run_dir)
    if status.get("status") == "done":
        return status
    paper = load_paper(paper_path)
    run = HirasRun(policy, run_dir, manager_policy, config)
    existing = [f for f in run.workspace.files() if f not in PAPER_FILES.values()]  # the paper is put there each time
    task = TASK if not existing else (f"{TASK}\nAn earlier attempt stopped; the workspace already holds:\n"
                                      f"{file_tree(existing)}\nContinue from these files.")
    start = time.perf_counter()
    root = run.run(paper, task)
    assert root.report is not None, "a finished call has its report"
    attempts = json.loads((run_dir / "calls.json").read_text()) if (run_dir / "calls.json").is_file() else []
    attempts.append(record_to_dict(root))
    (run_dir / "calls.json").write_text(json.dumps(attempts, indent=1))
    usage = priced(run.ledger.totals(), prices)
    (run_dir / "usage.json").write_text(json.dumps(usage, indent=1))
    write_html(attempts, run_dir / "report.html", title=f"HiRAS run: {paper.name}")
    status = {"status": "done" if root.report.status == "success" else root.report.status,
              "pipeline": "hiras", "report": root.report.summary, "files": run.workspace.files(), "usage": usage,
              "cost": _cost(usage), "wall_s": round(time.perf_counter() - start, 3), "attempts": len(attempts)}
    (run_dir / "status.json").write_text(json.dumps(status, indent=1))
    return status


def run_papercoder(paper_path: str | Path, policy: Policy, run_dir: str | Path,
                   config: PaperCoderConfig = PaperCoderConfig(), prices: Prices | None = None) -> dict:
    run_dir = Path(run_dir)
    status = _read_status(run_dir)
    if status.get("status") == "done":
        return status
    result = PaperCoder(policy, run_dir, config).run(load_paper(paper_path))
    usage = priced(result.usage, prices)
    (run_dir / "usage.json").write_text(json.dumps(usage, indent=1))
    status = {**_read_status(run_dir), "pipeline": "papercoder", "usage": usage, "cost": _cost(usage),
              "wall_s": round(result.wall_s, 3)}
    (run_dir / "status.json").write_text(json.dumps(status, indent=1))
    return status


def reproduce_batch(papers: Sequence[str | Path], policy: Policy, out_dir: str | Path, pipeline: str = "hiras",
                    manager_policy: Policy | None = None, config: HirasConfig = HirasConfig(),
                    prices: Prices | None = None,
                    papercoder_config: PaperCoderConfig = PaperCoderConfig()) -> dict[str, dict]:
    """Run every paper into `<out_dir>/<stem>/`; a failure is recorded and the batch goes on. `config`
    is HiRAS's, `papercoder_config` the baseline's."""
    if pipeline not in PIPELINES:
        raise UserInputError(f"pipeline {pipeline!r} is not one of {PIPELINES}")
    results = {}
    for paper in papers:
        run_dir = Path(out_dir) / Path(paper).stem
        try:
            if pipeline == "hiras":
                results[str(paper)] = run_hiras(paper, policy, run_dir, manager_policy, config, prices)
            else:
                results[str(paper)] = run_papercoder(paper, policy, run_dir, papercoder_config, prices)
        except Exception as exc:  # one paper's failure must not stop the batch; it is recorded, not hidden
            log.error("reproduce %s failed: %s: %s", paper, type(exc).__name__, exc)
            status = {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "pipeline": pipeline}
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "status.json").write_text(json.dumps(status, indent=1))
            results[str(paper)] = status
    return results
