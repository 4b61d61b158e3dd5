import runpy
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "hiras_vs_papercoder.py"


def test_bench_prints_both_pipelines_and_the_gold_row_with_three_judges(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(BENCH), "--model", "scripted-demo", "--n", "2", "--out-dir", str(tmp_path)])
    runpy.run_path(str(BENCH), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("| pipeline | status | files | main.py exit |") and "p2c-ex" in lines[1]
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in lines[3:]}
    assert set(rows) == {"hiras", "papercoder", "gold"}
    for name in rows:
        assert rows[name][3] == "0"  # every repository's main.py ran in the sandbox and exited 0
        assert rows[name][6:9] == ["3.00 (2/2)"] * 3  # the scripted judge's fixed score, through all protocols
    assert rows["hiras"][1] == "done" and rows["papercoder"][1] == "done"
