from engine.model.answer import Answer, ToolCall
from engine.model.verdict import Verdict


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


def test_a_tests_row_texts_are_computed_once_and_never_compared_copied_or_shown() -> None:
    # `messages_json` / `golden_json` are a memo on the Test: computed on first use, left out of equality,
    # repr and `dataclasses.replace`, and a pickled Test (Ray ships them) still answers them.
    import dataclasses
    import json
    import pickle

    from engine.model.test import Test

    def make(i: int) -> Test:
        return Test(suite="s", id=f"t{i}", file="s.yaml", line=1, messages=({"role": "user", "content": f"é {i}"},),
                    prompt=f"é {i}", eval={"contains": "ok"}, golden={"n": i} if i % 2 else None)

    tests = [make(i) for i in range(4)]
    for test in tests:
        assert test.messages_json == json.dumps(list(test.messages), ensure_ascii=False)
        assert test.golden_json == (None if test.golden is None else json.dumps(test.golden))
    assert tests[1].messages_json is tests[1].messages_json   # computed once
    assert "_messages_json" not in repr(tests[1]) and tests[1] == dataclasses.replace(tests[1]) == make(1)
    again = pickle.loads(pickle.dumps(tests[1]))
    assert again == tests[1] and again.golden_json == '{"n": 1}'
