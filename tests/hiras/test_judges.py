import json
import shutil
from pathlib import Path

import pytest

from coral.hiras.judges import aggregate, judge_repo, parse_judgement
from coral.hiras.paper import FIXTURE_PAPER, FIXTURE_REFERENCE, load_paper
from coral.policy.scripted import ScriptedPolicy

CHECKOUTS = Path(__file__).parent / "fixtures" / "checkouts"  # prompts of ours with the released files' placeholders
PAPER2CODE, HIRAS = CHECKOUTS / "Paper2Code", CHECKOUTS / "HiRAS"


def sample(score, critiques=()):
    return json.dumps({"critique_list": list(critiques), "score": score})


def checkouts(paper2code=None, hiras=None):
    from coral.hiras.judge_prompts import Checkouts

    return Checkouts(paper2code, hiras)


@pytest.fixture
def small(tmp_path):
    """A one-line paper and a workspace holding code, config, planning notes and the paper file."""
    (tmp_path / "p.md").write_text("SNC paper.\n")
    repo = tmp_path / "repo"
    for rel, text in {"main.py": "print(1)\n", "config.yaml": "k: 1\n", "plan/plan.md": "notes\n",
                      "plan/task_list.json": "{}\n", "paper.md": "SNC paper.\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return load_paper(tmp_path / "p.md"), repo


CODE = "```## File name: config.yaml\nk: 1\n\n```\n\n```## File name: main.py\nprint(1)\n\n```\n\n"


def test_the_released_ref_free_file_is_sent_verbatim_as_one_system_message_with_its_placeholders_filled(small):
    paper, repo = small
    policy = ScriptedPolicy([sample(4)])
    result = judge_repo(repo, paper, policy, "ref-free", n=2, checkouts=checkouts(paper2code=PAPER2CODE))
    expected = ("Fixture ref-free prompt (test data, not the released text).  \nScore 1\u20135; it\u2019s "
                "{not a format field} and 100% literal.\n---\nPaper:\nSNC paper.\n\nCode:\n" + CODE
                + "\n---\nAnswer in JSON.")
    assert policy.calls == [({"role": "system", "content": expected},)] * 2
    assert result.prompt_source == str(PAPER2CODE / "data/prompts/ref_free.txt")
    assert result.files == ["config.yaml", "main.py"]  # no planning notes, no paper file


def test_a_changed_checkout_file_changes_the_prompt_byte_for_byte(small, tmp_path):
    paper, repo = small
    copy = tmp_path / "p2c"
    shutil.copytree(PAPER2CODE, copy)
    path = copy / "data/prompts/ref_free.txt"
    path.write_bytes(path.read_bytes().replace(b"Answer in JSON.", b"\xc2\xa0tab\there\r\nline  "))
    policy = ScriptedPolicy([sample(4)])
    judge_repo(repo, paper, policy, "ref-free", n=1, checkouts=checkouts(paper2code=copy))
    assert policy.calls[0][0]["content"].endswith("---\n\u00a0tab\there\r\nline  ")


def test_ref_based_fills_the_gold_repository_read_with_papercoders_file_set(small, tmp_path):
    paper, repo = small
    gold = tmp_path / "gold"
    gold.mkdir()
    (gold / "README.md").write_text("how to run\n")
    (gold / "model.py").write_text("x = 2\n")
    policy = ScriptedPolicy([sample(4)])
    judge_repo(repo, paper, policy, "ref-based", gold_dir=gold, n=1, checkouts=checkouts(paper2code=PAPER2CODE))
    gold_code = "```## File name: README.md\nhow to run\n\n```\n\n```## File name: model.py\nx = 2\n\n```\n\n"
    assert policy.calls[0][0]["content"] == ("Fixture ref-based prompt (test data).\nPaper:\nSNC paper.\n\nGold:\n"
                                             + gold_code + "\nTarget:\n" + CODE + "\nEnd \u2014")


def test_the_released_p2c_ex_yaml_value_gets_the_file_count_and_tree(small):
    paper, repo = small
    (repo / "src").mkdir()
    (repo / "src/model.py").write_text("y = 3\n")
    policy = ScriptedPolicy([sample(4)])
    judge_repo(repo, paper, policy, "p2c-ex", n=1, checkouts=checkouts(hiras=HIRAS))
    code = CODE + "```## File name: src/model.py\ny = 3\n\n```\n\n"
    assert policy.calls[0][0]["content"] == (
        "Fixture P2C-Ex prompt \u2014 it\u2019s test data.\nSNC paper.\n\nFile Count: 3\n"
        "File Structure: \nconfig.yaml\nmain.py\nsrc/\n  model.py\n" + code + "\nDone.")


def test_a_json_paper_is_filled_in_as_evalpy_formats_the_loaded_object(tmp_path, small):
    _, repo = small
    (tmp_path / "paper.json").write_text('{"title": "SNC", "body_text": [{"text": "it\'s", "cite_spans": []}]}')
    policy = ScriptedPolicy([sample(4)])
    judge_repo(repo, load_paper(tmp_path / "paper.json"), policy, "ref-free", n=1,
               checkouts=checkouts(paper2code=PAPER2CODE))
    assert "Paper:\n{'title': 'SNC', 'body_text': [{'text': \"it's\"}]}\nCode:" in policy.calls[0][0]["content"]


def test_without_a_checkout_coral_variant_is_used_and_named(small):
    paper, repo = small
    policy = ScriptedPolicy([sample(4)])
    result = judge_repo(repo, paper, policy, "p2c-ex", n=1)
    assert result.prompt_source == "coral variant" and len(result.prompt_sha256) == 64
    prompt = policy.calls[0][0]["content"]
    assert "File count: 2\nFile structure: \nconfig.yaml\nmain.py\n```## File name: config.yaml" in prompt
    assert "Fixture" not in prompt


@pytest.mark.parametrize("content, missing", [("{{Paper}} only", "{{Code}}"), ("{{Code}} only", "{{Paper}}")])
def test_a_released_file_without_a_placeholder_is_refused_naming_it(tmp_path, small, content, missing):
    (tmp_path / "c/data/prompts").mkdir(parents=True)
    (tmp_path / "c/data/prompts/ref_free.txt").write_text(content)
    with pytest.raises(ValueError, match=f"ref_free.txt: no {missing} placeholder"):
        judge_repo(small[1], small[0], ScriptedPolicy(["x"]), "ref-free", checkouts=checkouts(paper2code=tmp_path / "c"))


def test_a_checkout_without_the_prompt_file_is_a_one_line_error_naming_the_path(tmp_path, small):
    with pytest.raises(ValueError, match="p2c-ex.yaml: no such file; is .* a checkout of KOU-199024/HiRAS"):
        judge_repo(small[1], small[0], ScriptedPolicy(["x"]), "p2c-ex", checkouts=checkouts(hiras=tmp_path))
    with pytest.raises(ValueError, match="--paper2code-checkout .*nowhere: no such directory"):
        judge_repo(small[1], small[0], ScriptedPolicy(["x"]), "ref-free",
                   checkouts=checkouts(paper2code=tmp_path / "nowhere"))


# Paper2Code's eval.py on each answer shape, worked out by hand from its code: json.loads(answer.strip()), else
# json.loads of the first "```json\n...\n```"; int(score); answer["critique_list"]; any exception drops it.
SHAPES = [
    ('{"critique_list": [], "score": 4}', (4, "[]")),
    ('  \n{"critique_list": "terse", "score": 2}\n', (2, "terse")),
    ('{"score": 4}', None),  # no critique_list: KeyError
    ('{"critique_list": [], "score": 3.7}', (3, "[]")),  # int() truncates
    ('{"critique_list": [], "score": 5.9}', (5, "[]")),
    ('{"critique_list": [], "score": true}', (1, "[]")),  # int(True) == 1
    ('{"critique_list": [], "score": "4"}', (4, "[]")),
    ('{"critique_list": [], "score": "4.5"}', None),  # int("4.5") raises
    ('{"critique_list": [], "score": 0.5}', None),  # int -> 0, outside 1-5
    ('{"critique_list": [], "score": 6}', None),
    ('Verdict:\n```json\n{"critique_list": [{"file_name": "a.py"}], "score": 5}\n```\nDone.',
     (5, '[{"file_name": "a.py"}]')),
    ('```JSON\n{"critique_list": [], "score": 5}\n```', None),  # the fence must say json
    ('```json\n{"critique_list": [], "score": 5}```', None),  # no newline before the closing fence
    ('Verdict: {"critique_list": [], "score": 2}', None),  # prose around bare JSON
    ('<think>hmm</think>{"critique_list": [], "score": 2}', None),  # no think-tag removal
    ('{"critique_list": [], "score": 4,}', None),  # no trailing-comma repair
    ("{'critique_list': [], 'score': 4}", None),  # no Python-literal repair
    ('[{"critique_list": [], "score": 4}]', None),  # a list has no ["score"]
]


@pytest.mark.parametrize("answer, expected", SHAPES)
def test_answers_parse_as_paper2codes_evalpy_parses_them(answer, expected):
    parsed = parse_judgement(answer)
    if expected is None:
        assert isinstance(parsed, str)  # dropped, with the reason
    else:
        assert parsed == expected


def test_aggregate_drops_invalid_samples_and_averages_the_rest():
    samples = [sample(4), sample(2), "garbage", sample(9), sample(5.9)]
    result = aggregate(samples, "ref-free", ["main.py"])
    assert result.scores == [4, 2, 5] and result.valid_n == 3 and result.n == 5
    assert result.score == pytest.approx(11 / 3)
    assert result.dropped[0].startswith("parsing error: JSONDecodeError") and result.dropped[1] == "score 9 is outside 1-5"


def test_aggregate_with_no_valid_sample_has_no_score():
    result = aggregate(["x", sample(0)], "ref-free", [])
    assert result.score is None and result.valid_n == 0 and result.n == 2


@pytest.mark.parametrize("files", [{}, {"config.yaml": "lr: 0.1\n", "README.md": "# SNC\nfit() then predict()"},
                                   {"snc.py": '"""Only a docstring."""\nimport math\n'}])
def test_p2c_ex_asks_the_judge_about_empty_or_config_only_repositories_too(tmp_path, files):
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    policy = ScriptedPolicy([sample(4), sample(2)])
    result = judge_repo(tmp_path, load_paper(FIXTURE_PAPER), policy, "p2c-ex", n=2)
    assert len(policy.calls) == 2 and result.scores == [4, 2] and result.score == 3.0  # the judge's, no rule of ours


def test_ref_based_needs_gold_files(tmp_path):
    with pytest.raises(ValueError, match="needs a gold repository"):
        judge_repo(FIXTURE_REFERENCE, load_paper(FIXTURE_PAPER), ScriptedPolicy(["x"]), "ref-based", gold_dir=tmp_path)
    with pytest.raises(ValueError, match="'nope' is not one of"):
        judge_repo(FIXTURE_REFERENCE, load_paper(FIXTURE_PAPER), ScriptedPolicy(["x"]), "nope")


def test_judge_repo_samples_n_times_and_reports_files_and_usage():
    policy = ScriptedPolicy([sample(5), sample(3), "oops"])
    result = judge_repo(FIXTURE_REFERENCE, load_paper(FIXTURE_PAPER), policy, "ref-based",
                        gold_dir=FIXTURE_REFERENCE, n=3)
    assert len(policy.calls) == 3
    assert result.score == 4.0 and result.valid_n == 2
    assert result.files == ["config.yaml", "data.py", "main.py", "snc.py"]
    assert result.usage["completion_tokens"] > 0


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
