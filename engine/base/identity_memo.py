"""What is built from an object, kept per object by identity: for schemas, which are dicts (unhashable).

A suite's tests offer the same few tool schemas, each one dict object shared by every test that names the tool,
so what is built from a schema (a jsonschema validator, a compiled subset check) is built once per object. The
object is held beside what was built, so its id cannot be reused by another object while the entry lives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["by_identity"]

T = TypeVar("T")


def by_identity(size: int) -> Callable[[Callable[[Any], T]], Callable[[Any], T]]:
    """Decorate a one-argument builder so that it runs once per argument object; the memo is emptied once it
    holds `size` objects (a long process that loads many suites does not keep them all).
    """
    def decorate(build: Callable[[Any], T]) -> Callable[[Any], T]:
        held: dict[int, tuple[Any, T]] = {}

        @functools.wraps(build)
        def memoised(obj: Any) -> T:
            found = held.get(id(obj))
            if found is not None and found[0] is obj:
                return found[1]
            built = build(obj)
            if len(held) >= size:
                held.clear()
            held[id(obj)] = (obj, built)
            return built

        return memoised

    return decorate
