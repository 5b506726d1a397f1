from engine.model import Answer, ToolCall, Verdict


def test_golden_tool_envelope_becomes_calls() -> None:
    answer = Answer.from_golden({"tool_calls": [{"name": "f", "arguments": {"x": 1}}], "content": ""})
    assert answer.tool_calls == (ToolCall.from_arguments("f", {"x": 1}),)
    assert answer.finish_reason == "tool_calls"


def test_golden_json_value_is_scored_as_json_text() -> None:
    assert Answer.from_golden({"name": "Alice", "age": 30}).text == '{"name": "Alice", "age": 30}'
    assert Answer.from_golden(5).text == "5"


def test_invalid_json_arguments_are_flagged_not_dropped() -> None:
    call = ToolCall.from_raw("f", '{"x": ')
    assert call.valid_json is False and call.arguments is None and call.raw_arguments == '{"x": '


def test_verdict_walk_paths() -> None:
    leaf = Verdict(1.0, True, "ok", kind="contains")
    root = Verdict(1.0, True, "ok", kind="all", children=(leaf, Verdict(0.0, False, "no", kind="regex")))
    assert [p for p, _ in root.walk()] == ["all", "all/0.contains", "all/1.regex"]


def test_diagnostic_is_printed_gcc_style() -> None:
    from engine.errors import Diagnostic

    assert str(Diagnostic("s.yaml", 3, 9, "bad")) == "s.yaml:3:9: error: bad"
    assert str(Diagnostic("s.yaml", 0, 0, "no such file")) == "s.yaml: error: no such file"
