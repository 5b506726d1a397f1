from engine.harness.extract import extract_code


def test_first_block_in_the_language_asked_for_wins() -> None:
    text = "Setup:\n```bash\npip install x\n```\nCode:\n```python\nprint(1)\n```\n```python\nprint(2)\n```"
    got = extract_code(text, "python")
    assert got.code == "print(1)\n"
    assert got.source == "tagged" and got.note == ""


def test_aliases_count_as_the_language() -> None:
    assert extract_code("```py\nx = 1\n```", "python").code == "x = 1\n"
    assert extract_code("```js\nlet a\n```", "javascript").source == "tagged"
    assert extract_code("```sh\necho\n```", "bash").source == "tagged"


def test_else_the_first_fenced_block_with_a_note() -> None:
    got = extract_code("```\nprint(3)\n```\n```ruby\nputs 4\n```", "python")
    assert got.code == "print(3)\n"
    assert got.source == "fenced"
    assert "no ```python block" in got.note and "untagged" in got.note


def test_else_the_whole_answer_verbatim_with_a_note() -> None:
    body = "    return a + b\n"
    got = extract_code(body, "python")
    assert got.code == body  # indentation kept: HumanEval completions are function bodies
    assert got.source == "whole"
    assert "no fenced code block" in got.note


def test_unclosed_block_runs_to_the_end_and_tildes_work() -> None:
    assert extract_code("```python\nprint(1)\nprint(2)", "python").code == "print(1)\nprint(2)\n"
    assert extract_code("~~~python\nx\n~~~\n", "python").code == "x\n"


def test_a_longer_fence_may_hold_a_shorter_one() -> None:
    text = "````markdown\n```python\ninner\n```\n````\n"
    got = extract_code(text, "markdown")
    assert got.code == "```python\ninner\n```\n"
