"""engine.base.frozen_init.dict_init: the same __init__ as the frozen dataclass's, fields written into a shared dict."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import tracemalloc
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

import pytest

from engine.base.frozen_init import dict_init
from engine.model import Answer, Test, ToolCall, Verdict


def _twin(decorated: bool) -> Any:
    @dataclass(frozen=True)
    class Sample:
        a: int
        b: str = "b"
        c: dict[str, Any] = field(default_factory=dict)
        d: list[int] = field(default_factory=lambda: [1])
        e: Any = field(default=None, init=False, compare=False)
        f: Any = field(default=None, repr=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "e", ("post", self.a))

    return dict_init(Sample) if decorated else Sample


@pytest.mark.parametrize("kwargs", [{"a": 1}, {"a": 2, "b": "x", "c": None, "f": {}}, {"a": 3, "d": []}])
def test_the_generated_init_gives_what_the_dataclasses_init_gives(kwargs: dict[str, Any]) -> None:
    fast_class = _twin(True)
    plain, fast = _twin(False)(**kwargs), fast_class(**kwargs)
    # The same values; an init=False field with a default is set in field order (dataclasses leave it to the
    # class attribute, so here `__post_init__` had put `e` after `f`).
    assert plain.__dict__ == fast.__dict__ and list(fast.__dict__) == ["a", "b", "c", "d", "e", "f"]
    assert repr(plain) == repr(fast)
    if list(kwargs) == ["a"]:
        assert fast_class(*kwargs.values()) == fast
    with pytest.raises(FrozenInstanceError):
        fast.a = 5
    assert fast_class(a=1).c is not fast_class(a=1).c   # a new dict per instance, as default_factory gives


@pytest.mark.parametrize("cls", [Test, Verdict, Answer, ToolCall])
def test_model_classes_keep_their_signature_and_shared_keys(cls: Any) -> None:
    generated = dataclass(frozen=True)(type(cls.__name__, (), {"__annotations__": {
        f.name: f.type for f in dataclasses.fields(cls)}, **{f.name: f for f in dataclasses.fields(cls)}}))
    assert [(p.name, p.kind, repr(p.default)) for p in inspect.signature(cls.__init__).parameters.values()] == \
        [(p.name, p.kind, repr(p.default)) for p in inspect.signature(generated.__init__).parameters.values()]
    kwargs: dict[str, Any] = {"Test": {"suite": "s", "id": "t", "file": "f", "line": 1, "messages": (), "prompt": "p",
                                       "eval": None},
                              "Verdict": {"score": 1.0, "passed": True, "reason": "r"}, "Answer": {},
                              "ToolCall": {"name": "f"}}[cls.__name__]
    one = cls(**kwargs)
    assert list(one.__dict__) == [f.name for f in dataclasses.fields(cls)]   # Test's two caches were set last before
    # The instances share their keys as the dataclass's own instances do: no more memory each than those take
    # once their dict is made (a dict of its own would take 300-550 bytes more).
    assert _bytes_each(lambda: cls(**kwargs)) <= _bytes_each(lambda: _with_dict(generated(**kwargs))) + 16
    with pytest.raises(FrozenInstanceError):
        setattr(one, "prompt" if cls is Test else "reason", "x")


def _with_dict(obj: Any) -> Any:
    obj.__dict__   # noqa: B018 - made, as `dict_init`'s instances have theirs
    return obj


def _bytes_each(make: Any, count: int = 2000) -> float:
    """Bytes allocated per instance, the instances kept alive."""
    tracemalloc.start()
    kept = [make() for _ in range(count)]
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(kept) == count
    return used / count


def test_a_tests_cached_json_keeps_the_dict_shared() -> None:
    test = Test(suite="s", id="t", file="f", line=1, messages=({"role": "user", "content": "q"},), prompt="q",
                eval=None, golden={"a": 1})
    assert test._messages_json is None and test.messages_json and test.golden_json == '{"a": 1}'
    assert sys.getsizeof(test.__dict__) < sys.getsizeof(dict(test.__dict__)) / 2   # 296 against 832 bytes


def test_what_it_cannot_reproduce_is_refused() -> None:
    @dataclass(frozen=True)
    class Keywords:
        a: int = field(kw_only=True)

    @dataclass
    class Mutable:
        a: int

    for cls in (Keywords, Mutable, ToolCall.__mro__[1], dataclass(frozen=True, slots=True)(type("S", (), {}))):
        with pytest.raises(TypeError):
            dict_init(cls)
