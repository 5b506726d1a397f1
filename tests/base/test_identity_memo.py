"""engine.base.identity_memo: built once per object, never answered for another object with a reused id."""

from __future__ import annotations

from typing import Any

from engine.base.identity_memo import by_identity


def test_builds_once_per_object_and_empties_past_its_size() -> None:
    calls: list[Any] = []

    @by_identity(2)
    def build(obj: dict[str, int]) -> int:
        calls.append(obj)
        return len(obj)

    a, b, c = {"x": 1}, {"x": 1, "y": 2}, {}
    assert [build(a), build(a), build(b), build(a)] == [1, 1, 2, 1]
    assert calls == [a, b]                      # an equal dict is not the same object: built by identity
    assert build({"x": 1}) == 1 and len(calls) == 3
    build(c)                                    # past the size: the memo was emptied, then holds c
    build(a)
    assert calls[-2:] == [c, a]


def test_an_entry_is_never_given_to_another_object() -> None:
    @by_identity(8)
    def build(obj: Any) -> Any:
        return obj

    first = build({"k": 1})                     # the memo holds the dict, so its id cannot be reused meanwhile
    assert build({"k": 2}) == {"k": 2} and first == {"k": 1}
