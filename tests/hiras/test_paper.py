import json
from pathlib import Path

import pytest

from coral.hiras.paper import FIXTURE_PAPER, clean_s2orc, load_paper

FIXTURES = Path(__file__).parent / "fixtures"


def test_s2orc_json_loses_spans_authors_bib_and_header_at_every_depth():
    paper = load_paper(FIXTURES / "snc_paper.json")
    data = json.loads(paper.text)
    assert paper.format == "json" and paper.name == "snc_paper"
    for key in ("header", "authors", "year", "venue", "identifiers", "_pdf_hash", "bib_entries"):
        assert key not in data
    assert data["abstract"] == [{"section": "Abstract", "text": "Centroids are pulled toward the global mean [1]."}]
    assert set(data["body_text"][0]) == {"section", "sec_num", "text"}
    assert data["ref_entries"] == {"FIGREF0": {"text": "Decision boundaries.", "type": "figure"}}


def test_clean_s2orc_leaves_the_input_untouched():
    data = {"a": [{"cite_spans": [1], "text": "x"}]}
    assert clean_s2orc(data) == {"a": [{"text": "x"}]}
    assert data == {"a": [{"cite_spans": [1], "text": "x"}]}


def test_latex_loses_comments_but_keeps_escaped_percent():
    text = load_paper(FIXTURES / "snc_paper.tex").text
    assert "internal note" not in text and "the one-line change" not in text
    assert r"A discount of 50\% is not a comment." in text
    assert r"$c_k = (1 - \lambda) \mu_k + \lambda m$." in text
    assert "\n\n\n" not in text


def test_markdown_fixture_is_read_as_is():
    paper = load_paper(FIXTURE_PAPER)
    assert paper.format == "markdown" and paper.text == FIXTURE_PAPER.read_text()


def test_bad_papers_fail_with_the_file_named(tmp_path):
    with pytest.raises(ValueError, match=r"paper .*x\.pdf: unknown format"):
        load_paper(tmp_path / "x.pdf")
    with pytest.raises(FileNotFoundError, match="missing.md: no such file"):
        load_paper(tmp_path / "missing.md")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(ValueError, match="bad.json: malformed JSON at line 1"):
        load_paper(bad)
