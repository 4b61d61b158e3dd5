"""experiments/debugger_testbed.py: its figures on hand-made records, and a tiny end-to-end run."""

import json

from experiments.debugger_testbed import figures, main


def _row(task, coder_passed, passed, debug_turns=1):
    return {"task_id": task, "passed": passed, "metrics": {"coder_passed": float(coder_passed),
                                                           "debug_turns": debug_turns if not coder_passed else 0}}


def test_figures_on_hand_made_records():
    greedy = [_row("a", True, True), _row("b", False, True), _row("c", False, False), _row("d", False, False, 0)]
    # task a: 4 samples, coder passes 3; its failing one rewritten and fixed: fresh for it = 3/3
    # task b: coder passes 1 of 4; of its 3 rewritten failures 1 fixed: fresh for each = 1/3
    sampled = ([_row("a", True, True)] * 3 + [_row("a", False, True)]
               + [_row("b", True, True), _row("b", False, True), _row("b", False, False), _row("b", False, False)])
    got = figures(greedy, sampled)
    assert got["greedy_coder"] == 0.25 and got["greedy_chain"] == 0.5
    assert got["greedy_rewritten"] == 2 and got["greedy_fix_rate"] == 0.5  # task d was not rewritten
    assert got["sampled_rewritten"] == 4 and got["sampled_fix_rate"] == 0.5
    assert abs(got["sampled_fresh"] - (1 + 3 * (1 / 3)) / 4) < 1e-12


def test_a_tiny_run_writes_both_debuggers_figures(tmp_path):
    main(["--seed", "0", "--tasks", "3", "--samples", "2", "--out", str(tmp_path), "--set",
          '{"n_train_tasks": 30, "d_model": 32, "n_layers": 1, "sandbox_workers": 1, "sft": {"epochs": 0.5}}'])
    saved = json.loads((tmp_path / "seed0" / "figures.json").read_text())
    assert {"scratch", "coder", "command", "commit"} <= set(saved)
    assert saved["scratch"]["tasks"] == saved["coder"]["tasks"] == 3
    assert (tmp_path / "seed0" / "eval_coder_sampled" / "samples.jsonl").is_file()
