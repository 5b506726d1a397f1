"""A size and time budget for suite templates: Jinja's sandbox keeps code out, this keeps work bounded.

The sandbox refuses unsafe attributes and calls, but not a template that is merely huge:
`{{ 3 ** 300000000 }}` computes for minutes, nested `range(99999)` loops run 10^10 times, and
`'x' * 2000000000` or `'x'|center(2000000000)` allocate 2 GB. `BudgetedEnvironment` refuses each
*before* doing the work, with a `TemplateBudgetError` that says which limit was hit:

- arithmetic: `**` and `*` whose integer result would pass `MAX_INT_BITS`, and `*` / `%` / `~` /
  `str.format` / padding filters and methods whose text would pass `MAX_OUTPUT_CHARS`;
- loops: every `{% for %}` iteration and every item of `range()` counts against `MAX_STEPS` per
  render, and the render's wall time against `MAX_SECONDS` (checked as steps are taken);
- output: `render_bounded` stops a render as soon as its text passes `MAX_OUTPUT_CHARS`.

Suites are expanded by `engine validate` before any run, so a template over budget is a validate
error naming the test (`cannot fill in this test's templates: template budget: ...`).
"""

from __future__ import annotations

import contextlib
import re
import string
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jinja2 import nodes
from jinja2.filters import do_center, do_format, do_indent, do_slice
from jinja2.sandbox import SandboxedEnvironment, SecurityError

__all__ = ["MAX_INT_BITS", "MAX_OUTPUT_CHARS", "MAX_SECONDS", "MAX_STEPS", "BudgetedEnvironment",
           "TemplateBudgetError", "budget", "render_bounded"]

MAX_OUTPUT_CHARS = 2_000_000    # a rendered string (a prompt of ~500k tokens is already past any model)
MAX_STEPS = 1_000_000           # loop iterations and range() items per render
MAX_SECONDS = 2.0               # per render; a test's templates normally take microseconds
MAX_INT_BITS = 64_000           # integers up to ~19,000 digits

_WIDTH = re.compile(r"%[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")
_PADDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})


class TemplateBudgetError(SecurityError):
    """A template would do more work or make more text than a suite template may."""

    def __init__(self, what: str) -> None:
        super().__init__(f"template budget: {what}; suite templates are limited to {MAX_OUTPUT_CHARS:,} characters "
                         f"of text, {MAX_STEPS:,} loop steps and {MAX_SECONDS:g} s per render")


class _Budget:
    __slots__ = ("deadline", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.deadline = time.monotonic() + MAX_SECONDS

    def take(self, count: int) -> None:
        self.steps += count
        if self.steps > MAX_STEPS:
            raise TemplateBudgetError(f"more than {MAX_STEPS:,} loop steps")
        if time.monotonic() > self.deadline:
            raise TemplateBudgetError(f"the render took over {MAX_SECONDS:g} s")


_local = threading.local()


@contextlib.contextmanager
def budget() -> Iterator[None]:
    """One budget for everything rendered inside (nested uses share the outer one)."""
    if getattr(_local, "budget", None) is not None:
        yield
        return
    _local.budget = _Budget()
    try:
        yield
    finally:
        _local.budget = None


def _current() -> _Budget:
    active: _Budget | None = getattr(_local, "budget", None)
    return active if active is not None else _Budget()   # outside `budget()`: limits per use still hold


def _text_limit(size: int, what: str) -> None:
    if size > MAX_OUTPUT_CHARS:
        raise TemplateBudgetError(f"{what} would make {size:,} characters")


def _bits(value: int) -> int:
    return abs(value).bit_length()


def _check_binop(operator: str, left: Any, right: Any) -> None:
    ints = type(left) is int and type(right) is int
    if operator == "**" and ints and right > 0 and _bits(left) > 1 and _bits(left) * right > MAX_INT_BITS:
        raise TemplateBudgetError(f"{left} ** {right} is a number of about {_bits(left) * right:,} bits")
    if operator == "*":
        if ints and _bits(left) + _bits(right) > MAX_INT_BITS:
            raise TemplateBudgetError(f"a product of more than {MAX_INT_BITS:,} bits")
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and type(count) is int:
                _text_limit(len(seq) * count, "repeating a text or list")
    if operator == "%" and isinstance(left, str):
        _check_percent(left, right)
    if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        _text_limit(len(left) + len(right), "joining")


def _check_percent(fmt: str, args: Any) -> None:
    for match in _WIDTH.finditer(fmt):
        for number in match.groups():
            if number == "*":
                raise TemplateBudgetError("a `*` width in %-formatting is not allowed")
            if number is not None and int(number) > MAX_OUTPUT_CHARS:
                raise TemplateBudgetError(f"a %-format width of {int(number):,}")


def _check_format_string(fmt: str) -> None:
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return   # str.format raises the same error itself
    for _, _, spec, _ in fields:
        if not spec:
            continue
        if "{" in spec:
            raise TemplateBudgetError("a nested {} inside a format spec is not allowed")
        for number in re.findall(r"\d+", spec):
            if int(number) > MAX_OUTPUT_CHARS:
                raise TemplateBudgetError(f"a format width of {int(number):,}")


def _steps(iterable: Iterable[Any]) -> Iterator[Any]:
    """What a `{% for %}` loop iterates: each item is a step of the render's budget."""
    spend = _current()
    for item in iterable:
        spend.take(1)
        yield item


def _concat(values: list[Any]) -> str:
    """The `~` operator, refused past the text limit before the text is built."""
    parts = [str(v) for v in values]
    _text_limit(sum(map(len, parts)), "joining with ~")
    return "".join(parts)


def _range(*args: int) -> range:
    numbers = range(*args)
    _current().take(len(numbers))
    return numbers


def _center(value: Any, width: int = 80) -> str:
    if type(width) is int:
        _text_limit(width, "center()")
    return do_center(value, width)


def _indent(value: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    text = str(value)
    pad = width if type(width) is int else len(str(width))
    _text_limit(len(text) + pad * (text.count("\n") + 1), "indent()")
    return do_indent(value, width, first, blank)


def _format(value: str, *args: Any, **kwargs: Any) -> str:
    _check_percent(str(value), args)
    return do_format(value, *args, **kwargs)


def _slice(value: Any, slices: int, fill_with: Any = None) -> Any:
    if type(slices) is int:
        _current().take(max(0, slices))
    return do_slice(value, slices, fill_with)


class BudgetedEnvironment(SandboxedEnvironment):
    """Jinja's `SandboxedEnvironment` with the budget above on arithmetic, calls, loops and filters."""

    intercepted_binops = frozenset({"**", "*", "%", "+"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["range"] = _range
        self.filters.update({"center": _center, "indent": _indent, "format": _format, "slice": _slice,
                             "_budget_steps": _steps, "_budget_concat": _concat})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # Jinja names them so
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str):
            if name in _PADDING_METHODS and args and type(args[0]) is int:
                _text_limit(args[0], f"str.{name}()")
            elif name == "expandtabs":
                size = args[0] if args and type(args[0]) is int else 8
                _text_limit(len(owner) + owner.count("\t") * size, "str.expandtabs()")
            elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
                hits = owner.count(args[0]) if args[0] else len(owner) + 1
                _text_limit(len(owner) + hits * len(args[1]), "str.replace()")
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Any:
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str) and getattr(value, "__name__", "") in ("format", "format_map"):
            _check_format_string(owner)
        return super().wrap_str_format(value)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        """Parse, then route every loop through `_budget_steps` and every `~` through `_budget_concat`."""
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, "_budget_steps", [], [], None, None, lineno=loop.lineno)
        for parent in list(tree.find_all(nodes.Node)):
            for field_name, value in parent.iter_fields():
                if isinstance(value, nodes.Concat):
                    setattr(parent, field_name, _budgeted_concat(value))
                elif isinstance(value, list):
                    value[:] = [_budgeted_concat(v) if isinstance(v, nodes.Concat) else v for v in value]
        return tree


def _budgeted_concat(node: nodes.Concat) -> nodes.Filter:
    return nodes.Filter(nodes.List(node.nodes, lineno=node.lineno), "_budget_concat", [], [], None, None,
                        lineno=node.lineno)


def render_bounded(template: Any, variables: Mapping[str, Any]) -> str:
    """Render a compiled template under one budget, stopping once its text passes `MAX_OUTPUT_CHARS`."""
    with budget():
        parts = []
        size = 0
        for piece in template.generate(**variables):
            size += len(piece)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateBudgetError(f"the rendered text passed {MAX_OUTPUT_CHARS:,} characters")
            parts.append(piece)
        return "".join(parts)
