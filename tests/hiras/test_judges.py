import json

import pytest

from coral.hiras.judges import aggregate, build_prompt, code_verification, judge_repo, parse_judgement
from coral.hiras.paper import FIXTURE_PAPER, FIXTURE_REFERENCE, load_paper
from coral.policy.scripted import ScriptedPolicy


def sample(score, critiques=()):
    return json.dumps({"critique_list": list(critiques), "score": score})


def test_parse_accepts_integer_scores_in_range_and_reasons_for_the_rest():
    assert parse_judgement(sample(4)) == (4, "[]")
    assert parse_judgement("<think>hmm</think>```json\n" + sample("5") + "\n```") == (5, "[]")
    assert parse_judgement(sample(3.0))[0] == 3
    assert parse_judgement(sample(0)) == "score 0 is outside 1-5"
    assert parse_judgement(sample(6)) == "score 6 is outside 1-5"
    assert parse_judgement(sample(3.5)) == "score 3.5 is not an integer"
    assert parse_judgement(sample(True)) == "score True is not an integer"
    assert parse_judgement('{"critique_list": []}') == "no 'score' field"
    assert parse_judgement("I think it is a 4") == "no JSON object"


def test_aggregate_drops_invalid_samples_and_averages_the_rest():
    samples = [sample(4), sample(2), "garbage", sample(9), sample(5)]
    result = aggregate(samples, "ref-free", ["main.py"])
    assert result.scores == [4, 2, 5] and result.valid_n == 3 and result.n == 5
    assert result.score == pytest.approx(11 / 3)
    assert result.dropped == ["no JSON object", "score 9 is outside 1-5"]


def test_aggregate_with_no_valid_sample_has_no_score():
    result = aggregate(["x", sample(0)], "ref-free", [])
    assert result.score is None and result.valid_n == 0 and result.n == 2


def test_p2c_ex_prompt_holds_the_file_count_tree_and_verification():
    paper = load_paper(FIXTURE_PAPER)
    files = {"main.py": "print(1)\n", "src/model.py": "def f():\n    return 1\n", "src/util/io.py": "x = (\n"}
    _, verification = code_verification(files)
    prompt = build_prompt("p2c-ex", paper, files, verification=verification)
    assert "File count: 3\n" in prompt
    assert "File structure:\nmain.py\nsrc/\n  model.py\n  util/\n    io.py\n" in prompt
    assert "src/util/io.py: SYNTAX ERROR line 1" in prompt
    assert "Code verification" in prompt and paper.text in prompt
    assert "File count" not in build_prompt("ref-free", paper, files)


def test_ref_based_needs_gold_files_and_puts_them_in_the_prompt():
    paper = load_paper(FIXTURE_PAPER)
    with pytest.raises(ValueError, match="needs a gold repository"):
        build_prompt("ref-based", paper, {"a.py": "x=1"}, gold={})
    prompt = build_prompt("ref-based", paper, {"a.py": "x=1"}, gold={"gold.py": "y=2"})
    assert prompt.index("## File name: gold.py") < prompt.index("## File name: a.py")
    with pytest.raises(ValueError, match="'nope' is not one of"):
        build_prompt("nope", paper, {})


def test_judge_repo_samples_n_times_and_reports_files_and_usage(tmp_path):
    policy = ScriptedPolicy([sample(5), sample(3), "oops"])
    result = judge_repo(FIXTURE_REFERENCE, load_paper(FIXTURE_PAPER), policy, "ref-based",
                        gold_dir=FIXTURE_REFERENCE, n=3)
    assert len(policy.calls) == 3
    assert result.score == 4.0 and result.valid_n == 2
    assert result.files == ["config.yaml", "data.py", "main.py", "snc.py"]
    assert result.usage["completion_tokens"] > 0


@pytest.mark.parametrize("files", [{}, {"config.yaml": "lr: 0.1\n", "README.md": "# SNC\nfit() then predict()"},
                                   {"snc.py": '"""Only a docstring."""\nimport math\n'}])
def test_p2c_ex_scores_empty_or_config_only_repositories_1_without_asking(tmp_path, files):
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    policy = ScriptedPolicy([sample(5)])
    result = judge_repo(tmp_path, load_paper(FIXTURE_PAPER), policy, "p2c-ex", n=4)
    assert result.score == 1.0 and policy.calls == []
    assert result.verification.startswith("no executable code")


def test_judge_of_a_missing_repository_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere: no such directory"):
        judge_repo(tmp_path / "nowhere", load_paper(FIXTURE_PAPER), ScriptedPolicy(["x"]), "ref-free")


class SeedRecorder:
    """A policy that answers a fixed judgement and records each request's seed."""

    def __init__(self):
        self.seeds = []

    def generate(self, requests):
        from coral.policy.base import Completion

        self.seeds += [r.sampling.seed for r in requests]
        return [Completion(text=sample(3), prompt_ids=[], completion_ids=[]) for _ in requests]


def test_every_judge_sample_has_its_own_stream_and_a_rejudged_repo_the_same_ones(tmp_path):
    paper = load_paper(FIXTURE_PAPER)
    other = tmp_path / "other"
    other.mkdir()
    (other / "main.py").write_text("print(1)\n")
    runs = {}
    for name, repo, protocol in [("a", FIXTURE_REFERENCE, "ref-free"), ("again", FIXTURE_REFERENCE, "ref-free"),
                                 ("other repo", other, "ref-free"), ("other protocol", FIXTURE_REFERENCE, "p2c-ex")]:
        policy = SeedRecorder()
        judge_repo(repo, paper, policy, protocol, n=3)
        runs[name] = policy.seeds
    assert runs["a"] == runs["again"]  # the same judgement twice: the same samples
    seeds = runs["a"] + runs["other repo"] + runs["other protocol"]
    assert len(set(seeds)) == 9  # no two samples of a repo, of two repos or of two protocols share a stream


def test_each_call_of_each_agent_in_the_ledger_has_its_own_stream():
    from coral.hiras.llm import Ledger
    from coral.seeding import sampling_seed

    policy, ledger = SeedRecorder(), Ledger(temperature=0.7, seed=5)
    for agent in ("coder", "coder", "planner"):
        ledger.chat(policy, agent, [{"role": "user", "content": "hi"}])
    assert policy.seeds == [sampling_seed(5, 0, "coder", 0), sampling_seed(5, 0, "coder", 1),
                            sampling_seed(5, 0, "planner", 0)]
    assert len(set(policy.seeds)) == 3
