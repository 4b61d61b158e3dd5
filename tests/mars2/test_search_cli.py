import json

import pytest

from coral.benchmarks import load_benchmark
from coral.cli import main
from coral.mars2.search import SearchConfig, run_search


def _scripted(tmp_path):
    task = load_benchmark("procedural-test", limit=1)[0]
    path = tmp_path / "replies.json"
    path.write_text(json.dumps([f"```python\n{task.reference}\n```", "```python\ndef f(xs):\n    return 0\n```"]))
    return f"scripted:{path}"


def test_search_saves_trees_and_a_viewer_and_resumes_a_partial_run(tmp_path, monkeypatch):
    import coral.mars2.search

    cfg = SearchConfig(bench="procedural-test", models=(_scripted(tmp_path),), limit=2, max_nodes=3,
                       out_dir=str(tmp_path / "s"), sandbox_workers=1)
    full = run_search(cfg, progress=False)
    saved = json.loads((tmp_path / "s" / "trees.json").read_text())
    assert [len(t["nodes"]) for t in saved["trees"]] == [4, 4]  # root + 3 nodes each
    assert (tmp_path / "s" / "trees.html").is_file() and full["nodes_per_tree"] == 3

    # crash after the first lockstep step, then resume from what was saved
    real_save = coral.mars2.search._save_trees
    calls = []

    def save_then_crash(path, trees, c, digests):
        real_save(path, trees, c, digests)
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt

    part = SearchConfig(**{**cfg.__dict__, "out_dir": str(tmp_path / "p")})
    monkeypatch.setattr(coral.mars2.search, "_save_trees", save_then_crash)
    with pytest.raises(KeyboardInterrupt):
        run_search(part, progress=False)
    monkeypatch.setattr(coral.mars2.search, "_save_trees", real_save)
    partial = json.loads((tmp_path / "p" / "trees.json").read_text())
    assert [len(t["nodes"]) for t in partial["trees"]] == [2, 2]
    resumed = run_search(part, progress=False)
    assert resumed["nodes_per_tree"] == 3
    assert resumed["pass@1"] == full["pass@1"] and resumed["pass@n"] == full["pass@n"]


def test_resuming_with_another_config_is_refused_with_a_clear_error(tmp_path, capsys):
    def args(max_nodes: str) -> list[str]:
        return ["search", "--bench", "procedural-test", "--models", _scripted(tmp_path), "--limit", "1",
                "--max-nodes", max_nodes, "--out-dir", str(tmp_path / "s"), "--sandbox-workers", "1",
                "--no-progress"]

    assert main(args("1")) == 0
    assert main(args("2")) == 2
    assert "was written with another config" in capsys.readouterr().err


def _model_dir(path, seed: int):
    from coral.policy import tiny_policy

    tiny_policy(seed=seed, d_model=16, n_layers=1).save(path)
    return str(path)


def test_a_model_retrained_at_the_same_path_is_refused_by_its_weights_not_accepted_by_its_path(tmp_path, capsys):
    """The first search's trees were grown by one model; the same directory then holds other weights: resuming
    would mix two models' nodes in one tree, so the search refuses, naming the model; --resume false regrows."""
    model = tmp_path / "coder"

    def args(*extra: str) -> list[str]:
        return ["search", "--bench", "procedural-test", "--models", str(model), "--limit", "1", "--max-nodes", "1",
                "--max-new-tokens", "4", "--out-dir", str(tmp_path / "s"), "--sandbox-workers", "1", "--no-progress",
                *extra]

    _model_dir(model, seed=0)
    assert main(args()) == 0
    assert main(args()) == 0  # same weights: resumed
    _model_dir(model, seed=1)  # "retrained": other weights at the same path
    capsys.readouterr()
    assert main(args()) == 2
    err = capsys.readouterr().err
    assert f"model {str(model)!r} has other weights than when these trees were grown" in err
    assert len(err.strip().splitlines()) == 1
    assert main(args("--resume", "false")) == 0  # grown anew with the new weights
    assert main(args()) == 0


def test_search_prints_its_results_also_without_progress(tmp_path, capsys):
    assert main(["search", "--bench", "procedural-test", "--models", _scripted(tmp_path), "--limit", "2",
                 "--max-nodes", "2", "--out-dir", str(tmp_path / "s"), "--sandbox-workers", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "coral search: abmcts / procedural-test" in out
    assert "pass@1" in out and "pass@n" in out and "nodes_per_tree" in out
    assert f"viewer: {tmp_path / 's' / 'trees.html'}" in out.replace("\n", "")
