"""A faster `__init__` for frozen dataclasses made in great numbers (`Test`, `Verdict`, `Answer`).

A frozen dataclass's generated `__init__` sets each field with `object.__setattr__(self, name, value)` (its own
`__setattr__` refuses): a slot-wrapper call that packs its arguments into a tuple, slices it and unpacks it
again, ~100 ns a field. `dict_init` generates the same `__init__` (the same parameters, defaults and default
factories, `__post_init__` called last) writing each field into the instance's `__dict__` instead, in field
order. Writing a key the class's shared keys already hold keeps the instance's dict shared ("split"), so the
instances still share one key table (a plain `__dict__.update` does not: it gave each `Test` its own dict,
832 instead of 288 bytes, and was reverted in issue #22 item 3's third pass). What it costs is the dict
object itself, made on the first `__dict__` access (63 bytes an instance, which any `vars()`, pickling or
`__dict__` read made anyway).

Measured (issue #22 item 3, fourth pass; timeit, min of 5): an 11-field frozen dataclass 1.80 -> 0.63 µs, `Test`
3.7 -> 1.2 µs (10,003 are made by the bench suite's first load: its instructions 6,364 M -> 5,945 M under
callgrind with `Verdict` and `Answer` done alike).
tests/base/test_frozen_init.py holds the generated `__init__` to the dataclass's on every field and default.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

__all__ = ["dict_init"]

T = TypeVar("T")


class _Factory:
    """The default of a parameter whose field has a `default_factory` (shown as `<factory>`, as dataclasses do)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def dict_init(cls: type[T]) -> type[T]:
    """Replace a frozen dataclass's `__init__` by one that writes the fields into `__dict__` (see the module).

    Args:
        cls: A frozen dataclass without `__slots__`, whose `__init__` dataclasses generated.

    Returns:
        The same class.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" in cls.__dict__:
        raise TypeError(f"dict_init needs a frozen dataclass without __slots__, not {cls.__name__}")
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    signature: list[str] = []
    body: list[str] = ["    _d = self.__dict__"]
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        has_factory = f.default_factory is not dataclasses.MISSING
        if f.init:
            if has_factory:
                names[f"_factory_{f.name}"] = f.default_factory
                signature.append(f"{f.name}=_FACTORY")
                body.append(f"    _d[{f.name!r}] = _factory_{f.name}() if {f.name} is _FACTORY else {f.name}")
                continue
            if f.default is not dataclasses.MISSING:
                names[f"_default_{f.name}"] = f.default
                signature.append(f"{f.name}=_default_{f.name}")
            else:
                signature.append(f.name)
            body.append(f"    _d[{f.name!r}] = {f.name}")
        elif has_factory:
            names[f"_factory_{f.name}"] = f.default_factory
            body.append(f"    _d[{f.name!r}] = _factory_{f.name}()")
        elif f.default is not dataclasses.MISSING:
            # dataclasses leave such a field to the class attribute; here it is set, so that every instance's
            # dict has every key from `__init__` on (keys added later end the sharing).
            names[f"_default_{f.name}"] = f.default
            body.append(f"    _d[{f.name!r}] = _default_{f.name}")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(signature)}):\n" + "\n".join(body) + "\n"
    exec(source, names)  # our own code, generated from the class's fields as dataclasses generates its own
    init = names["__init__"]
    generated = cls.__init__
    if _parameters(init) != _parameters(generated):   # keyword-only fields, InitVars...: not handled here
        raise TypeError(f"dict_init cannot reproduce {cls.__name__}.__init__'s parameters")
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = generated.__doc__
    init.__annotations__ = dict(generated.__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def _parameters(function: Any) -> list[tuple[str, Any, str]]:
    """(name, kind, default as shown) of each parameter: `<factory>` either way for a default factory."""
    return [(p.name, p.kind, repr(p.default)) for p in inspect.signature(function).parameters.values()]
