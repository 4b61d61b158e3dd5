from coral.hiras.parsing import (
    content_json,
    first_code_block,
    first_json_object,
    loads_lenient,
    strip_think,
)


def test_think_spans_are_removed_even_when_unclosed():
    assert strip_think("<think>plan [CONTENT]{}[/CONTENT]</think>answer") == "answer"
    assert strip_think("answer<think>still thinking") == "answer"


def test_content_block_with_trailing_comma_and_fence_parses():
    text = 'Here:\n[CONTENT]\n```json\n{"File list": ["a.py", "b.py",],}\n```\n[/CONTENT]'
    assert content_json(text) == {"File list": ["a.py", "b.py"]}


def test_content_block_in_python_literal_syntax_parses():
    assert content_json("[CONTENT]{'Task list': ['main.py'], 'ok': True}[/CONTENT]") == {
        "Task list": ["main.py"], "ok": True}


def test_missing_tags_fall_back_to_first_json_object_and_garbage_gives_none():
    assert content_json('sure! {"a": {"b": "}"}} trailing') == {"a": {"b": "}"}}
    assert content_json("[CONTENT] not json [/CONTENT]") is None
    assert loads_lenient("{'a': ") is None
    assert first_json_object("no braces") is None


def test_first_code_block_skips_think_and_matches_language():
    text = "<think>```python\nwrong\n```</think>\n```yaml\nlr: 1\n```\n```python\nprint(1)\n```"
    assert first_code_block(text) == "lr: 1\n"
    assert first_code_block(text, "python") == "print(1)\n"
    assert first_code_block("no code") is None
