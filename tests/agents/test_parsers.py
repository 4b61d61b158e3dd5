from coral.agents.parsers import Parsed, extract_code, extract_plan, extract_text


def test_fenced_python_block_is_extracted():
    text = "Sure! Here it is:\n```python\ndef f(x):\n    return x + 1\n```\nHope this helps."
    assert extract_code(text, "f").value == "def f(x):\n    return x + 1"
    assert extract_code(text, "f").error is None


def test_last_block_defining_the_entry_point_wins_over_other_blocks():
    text = ("First try:\n```python\ndef f(x):\n    return x\n```\nExample:\n```python\nprint(f(2))\n```\n"
            "Better:\n```py\ndef f(x):\n    return 2 * x\n```")
    assert extract_code(text, "f").value == "def f(x):\n    return 2 * x"


def test_unterminated_fence_is_accepted():
    text = "```python\ndef f(xs):\n    return sorted(xs)\n"
    assert extract_code(text, "f").value == "def f(xs):\n    return sorted(xs)"


def test_raw_code_without_fence_is_found_after_prose():
    text = "The answer is below.\nimport math\n\ndef f(x):\n    return math.sqrt(x)"
    parsed = extract_code(text, "f")
    assert parsed.ok and parsed.value.startswith("import math")


def test_trailing_chatter_and_half_written_line_are_trimmed():
    text = "def f(x):\n    return x * 3\nThis function triples x and"
    assert extract_code(text, "f").value == "def f(x):\n    return x * 3"


def test_non_python_blocks_are_ignored():
    text = "```bash\npip install x\n```\n```python\ndef f():\n    return 1\n```"
    assert extract_code(text, "f").value == "def f():\n    return 1"


def test_missing_entry_point_is_reported_as_data_not_exception():
    parsed = extract_code("```python\ndef g(x):\n    return x\n```", "f")
    assert parsed.value is not None and "does not define 'f'" in parsed.error


def test_unparseable_code_is_returned_with_an_error_so_the_sandbox_can_judge_it():
    parsed = extract_code("```python\ndef f(x:\n    return\n```", "f")
    assert parsed.value is not None and parsed.error == "code does not parse"


def test_empty_and_prose_only_outputs_are_parse_failures():
    assert extract_code("", "f").error == "empty output"
    assert extract_code("I cannot solve this.", "f").value is None


def test_numbered_and_bulleted_plans_are_normalised():
    assert extract_plan("Plan:\n1) keep evens\n2. double each\n").value == "1. keep evens\n2. double each"
    assert extract_plan("- sort\n* reverse").value == "1. sort\n2. reverse"


def test_prose_plan_is_kept_as_one_step_with_a_note():
    parsed = extract_plan("just   sort the list")
    assert parsed.value == "1. just sort the list" and parsed.error is not None


def test_code_only_plan_is_a_failure():
    assert extract_plan("```python\nx = 1\n```").value is None


def test_text_parser_strips_and_flags_empty():
    assert extract_text("  notes \n").value == "notes"
    assert extract_text("   ").error == "empty output"


def test_parsing_code_with_syntax_warnings_emits_none():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parsed = extract_code("```python\ndef f(x):\n    return 1if x else 2\n```", "f")
    assert parsed.value == "def f(x):\n    return 1if x else 2"
    assert not [w for w in caught if issubclass(w.category, SyntaxWarning)]


def test_a_body_that_continues_the_prompts_function_is_kept_with_its_indentation():
    parsed = extract_code("    total = sum(xs)\n    return total\n", "f")
    assert parsed == Parsed("    total = sum(xs)\n    return total\n")
    # indented prose is no body: the definition after it is the code
    assert extract_code("  Here it is:\ndef f(x):\n    return 1\n", "f") == Parsed("def f(x):\n    return 1")


def test_a_fenced_body_and_a_body_followed_by_prose_are_bodies_too():
    assert extract_code("```python\n    return x\n```", "f") == Parsed("    return x\n")
    assert extract_code("\n    return x + 1\nThis adds one.", "f") == Parsed("    return x + 1\n")

