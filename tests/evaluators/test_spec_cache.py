"""The per-spec fast path in compose gives the verdicts the full path gives, whatever the order of specs."""

from __future__ import annotations

from engine.evaluators import compose, evaluate
from engine.model import Answer, Test


def _test(spec: dict, **fields: object) -> Test:
    return Test(suite="s", id="t", file="s.yaml", line=1, messages=({"role": "user", "content": "q"},),
                prompt="q", eval=spec, hash="h", **fields)


def test_repeated_specs_score_as_on_first_use() -> None:
    specs = [{"contains": "ok"}, {"contains": ["ok", "zz"], "mode": "any"}, {"equals": "no", "weight": 2},
             {"all": [{"contains": "ok"}, {"not": {"contains": "bad"}, "must": True}], "threshold": 0.5},
             {"contains": "{{ word }}"}]
    answer = Answer(text="ok fine")
    for spec in specs:
        test = _test(spec, variables={"word": "fine"})
        first = evaluate(spec, answer, test)
        for _ in range(3):
            assert evaluate(spec, answer, test) == first


def test_specs_alike_but_distinct_objects_keep_their_own_values() -> None:
    answer = Answer(text="apple")
    for word, passed in [("apple", True), ("pear", False)] * 50:
        spec = {"contains": word}
        test = _test(spec)
        assert evaluate(spec, answer, test).passed is passed
        assert evaluate(spec, answer, test).passed is passed     # the second use is the cached one
    assert len(compose._STATIC) <= compose._STATIC_LIMIT
