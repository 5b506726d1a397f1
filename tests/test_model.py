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


def test_a_batched_call_costs_the_batch_price() -> None:
    from engine.model.model_config import ModelConfig, cost_of

    live = ModelConfig("m", "m", price_in=2.0, price_out=8.0)
    assert cost_of(live, 1_000_000, 1_000_000) == 10.0
    assert cost_of(live, 1_000_000, 1_000_000, batch=True) == 5.0   # the providers' published half
    given = ModelConfig("m", "m", price_in=2.0, price_out=8.0, price_batch_in=1.5, price_batch_out=3.0)
    assert cost_of(given, 1_000_000, 1_000_000, batch=True) == 4.5
    quarter = ModelConfig("m", "m", price_in=2.0, price_out=8.0, batch_discount=0.25)
    assert cost_of(quarter, 1_000_000, 1_000_000, batch=True) == 7.5
    # cached prompt tokens: the cache price less the discount too (Anthropic's batch discount stacks with caching)
    cached = ModelConfig("m", "m", price_in=3.0, price_out=15.0, price_cache_read=0.3)
    assert cost_of(cached, 1_000_000, 0, 400_000, batch=True) == (600_000 * 1.5 + 400_000 * 0.15) / 1e6
    batch_only = ModelConfig("m", "m", price_batch_in=1.0, price_batch_out=2.0)
    assert (cost_of(batch_only, 10**6, 10**6), cost_of(batch_only, 10**6, 10**6, batch=True)) == (None, 3.0)
