import json
import runpy
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "hiras_vs_papercoder.py"
CHECKOUTS = Path(__file__).parent / "fixtures" / "checkouts"


def run_bench(monkeypatch, capsys, *flags):
    monkeypatch.setattr(sys, "argv", [str(BENCH), "--model", "scripted-demo", "--n", "2", *flags])
    runpy.run_path(str(BENCH), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("| pipeline | status | files judged | main.py exit |") and "p2c-ex" in lines[1]
    return {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in lines[3:6]}, lines[6]


def test_bench_judges_both_pipelines_and_the_gold_on_the_same_file_set(tmp_path, monkeypatch, capsys):
    rows, prompts = run_bench(monkeypatch, capsys, "--out-dir", str(tmp_path))
    assert set(rows) == {"hiras", "papercoder", "gold"}
    for name in rows:
        assert rows[name][2] == "4: config.yaml data.py main.py snc.py"  # code and config: no plan/, no paper.md
        assert rows[name][3] == "0"  # every repository's main.py ran in the sandbox and exited 0
        assert rows[name][7:10] == ["3.00 (2/2)"] * 3  # the scripted judge's fixed score, through all protocols
    assert rows["hiras"][1] == "done" and rows["papercoder"][1] == "done"
    assert prompts == "prompts: p2c-ex: coral variant; ref-based: coral variant; ref-free: coral variant"
    judged = json.loads((tmp_path / "judges.json").read_text())
    assert judged["hiras/ref-free"]["files"] == judged["papercoder/ref-free"]["files"]


def test_bench_uses_the_released_prompt_files_of_the_given_checkouts(tmp_path, monkeypatch, capsys):
    _, prompts = run_bench(monkeypatch, capsys, "--out-dir", str(tmp_path), "--paper2code-checkout",
                           str(CHECKOUTS / "Paper2Code"), "--hiras-checkout", str(CHECKOUTS / "HiRAS"))
    assert prompts == (f"prompts: p2c-ex: {CHECKOUTS / 'HiRAS/prompts/p2c-ex/p2c-ex.yaml'}; "
                       f"ref-based: {CHECKOUTS / 'Paper2Code/data/prompts/ref_based.txt'}; "
                       f"ref-free: {CHECKOUTS / 'Paper2Code/data/prompts/ref_free.txt'}")


def test_a_pipeline_that_wrote_nothing_is_judged_as_an_empty_repository(tmp_path, monkeypatch, capsys):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["I cannot help with that."]))  # no action, no file list, no judgement
    rows, _ = run_bench(monkeypatch, capsys, "--out-dir", str(tmp_path / "out"), "--model", f"scripted:{replies}",
                        "--step-multiplier", "0.1")
    assert rows["hiras"][1] == "budget_exhausted" and rows["papercoder"][1] == "failed"
    for name in ("hiras", "papercoder"):
        assert rows[name][2] == "0: " and rows[name][7:10] == ["none valid (0/2)"] * 3  # asked, like any repository
