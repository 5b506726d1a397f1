"""The load-speed fast paths of engine/base/render.py and engine/evaluators/node.py give exactly
what the general code gives: each is checked against a copy of the code as it was before them (f4a67ce).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jinja2 import Environment, StrictUndefined, TemplateSyntaxError

from engine.base.render import UndefinedError, is_template, render, render_value
from engine.evaluators import compile_spec
from engine.evaluators.node import has_template


def reference_render_value(value: Any, variables: Mapping[str, Any]) -> Any:
    """render_value before the fast paths: strings through `render`'s single-expression rule, then walks."""
    if isinstance(value, str):
        return render_value(value, variables) if is_template(value) else value
    if isinstance(value, Mapping):
        return {k: reference_render_value(v, variables) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [reference_render_value(v, variables) for v in value]
    return value


def reference_has_template(value: Any) -> bool:
    if isinstance(value, str):
        return is_template(value)
    if isinstance(value, Mapping):
        return any(reference_has_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(reference_has_template(v) for v in value)
    return False


class Text(str):
    pass


class Level(enum.IntEnum):
    HIGH = 3


VARIABLES = {"a": 2, "golden": {"age": 31}, "name": "Ann"}
SAMPLES: list[Any] = [
    0, 1, -3, 2.5, True, False, None, "", "plain", "{ not a template }", "{{ a }}", " {{ a }} ", "x {{ a }}",
    "{% if a %}yes{% endif %}", "{{ golden.age }}", Text("plain"), Text("{{ a }}"), Level.HIGH,
    {"k": 1, "t": "{{ name }}"}, [1, "{{ a }}", [None, {"x": "{{ a }}"}]], ("{{ a }}", 2),
    OrderedDict(x="{{ a }}"), MappingProxyType({"y": [True, "{{ name }}!"]}), {"empty": {}, "list": []},
]


@pytest.mark.parametrize("value", SAMPLES, ids=repr)
def test_render_value_fast_paths_match_the_general_walk(value: Any) -> None:
    got, want = render_value(value, VARIABLES), reference_render_value(value, VARIABLES)
    assert got == want and type(got) is type(want)
    assert has_template(value) == reference_has_template(value)


def test_plain_values_come_back_as_the_same_object_and_containers_as_copies() -> None:
    text, number = "no template here", 12.5
    assert render_value(text, {}) is text and render_value(number, {}) is number
    mapping = {"a": "x"}
    copied = render_value(mapping, {})
    assert copied == mapping and copied is not mapping   # callers may change what they get back


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["{{ a }}", "{{ name }}", "{% if a %}1{% endif %}", "{{ a + 1 }}", "{x}"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12)


def _outcome(fn: Any, *args: Any) -> Any:
    """What `fn(*args)` gives: its value, or the type and words of what it raised."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the same failure, with the same words, is expected of both
        return type(exc), str(exc)


@settings(max_examples=300, deadline=None)
@given(json_values)
@example("{%")   # not a template jinja can read: both raise the same TemplateSyntaxError
def test_render_value_equals_the_general_walk_on_any_yaml_value(value: Any) -> None:
    assert _outcome(render_value, value, VARIABLES) == _outcome(reference_render_value, value, VARIABLES)
    assert has_template(value) == reference_has_template(value)


def test_undefined_variables_still_raise_through_the_fast_paths() -> None:
    with pytest.raises(UndefinedError):
        render_value({"x": ["{{ missing }}"]}, {})
    with pytest.raises(UndefinedError):
        render("{{ missing }}", {})


@pytest.mark.parametrize("spec", [
    {"contains": "x"}, {"contains": "x", "weight": 1}, {"contains": "x", "weight": "{{ a }}"},
    {"contains": "x", "must": False}, {"contains": "x", "must": True}, {"contains": "x", "must": "{{ a }}"},
    {"contains": "x", "threshold": 0.5, "weight": 0}, {"all": [{"contains": "x"}, {"equals": "y", "weight": 2}]},
])
def test_unwritten_common_options_compile_as_their_defaults(spec: dict[str, Any]) -> None:
    """weight/must not written are 1.0/False without being rendered, exactly as rendering the defaults gave."""
    node = compile_spec(spec, VARIABLES)
    assert node.problem is None
    assert node.weight == float(reference_render_value(spec.get("weight", 1), VARIABLES))
    assert node.must == bool(reference_render_value(spec.get("must", False), VARIABLES))


_LITERALS = st.sampled_from(["", "What is ", " + ", "?", "id-", "é ", "{ x }", "}", "{"])
_PLACEHOLDERS = st.builds(lambda name, left, right: "{{" + left + name + right + "}}",
                          st.sampled_from(["a", "b", "name", "missing", "golden", "true"]),
                          st.sampled_from(["", " ", "  "]), st.sampled_from(["", " "]))


def reference_render(text: str, variables: Mapping[str, Any]) -> str:
    """`render` before the parts were split once per text (655f782): `re.sub` with a callback per placeholder."""
    import re

    from engine.base.render import _SIMPLE_VAR, _template, render_bounded, simple_names

    if not is_template(text):
        return text
    if simple_names(text) is None:
        return render_bounded(_template(text), variables)

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            raise UndefinedError(f"'{name}' is undefined")
        return str(variables[name])

    return _SIMPLE_VAR.sub(value, text)


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(st.one_of(_LITERALS, _PLACEHOLDERS), max_size=6),
       values=st.fixed_dictionaries({}, optional={"a": st.integers(-5, 5), "b": st.sampled_from(["x", "", "2.5"]),
                                                  "name": st.sampled_from([None, True, 1.5, [1], {"k": 1}]),
                                                  "golden": st.text(max_size=3)}))
def test_simple_placeholders_render_as_before(parts: list[str], values: dict[str, Any]) -> None:
    text = "".join(parts)
    assert _outcome(reference_render, text, values) == _outcome(render, text, values), text


@pytest.mark.parametrize("text, expected", [
    ("{{{a}}", TemplateSyntaxError), ("x {{{ a }} y", TemplateSyntaxError), ("{{{'k': 7}['k']}}", "7"),
    ("{ {{a}}", "{ 1"), ("{{a}}}", "1}"), ("{{ a }}{{ a }}", "11"),
])
def test_a_brace_before_a_placeholder_is_read_as_jinja_reads_it(text: str, expected: str | type) -> None:
    """The substitution shortcut matched `{{a}}` inside `{{{a}}` and kept the brace; Jinja refuses the text."""
    jinja = Environment(undefined=StrictUndefined)
    if isinstance(expected, str):
        assert render(text, {"a": 1}) == jinja.from_string(text).render(a=1) == expected
    else:
        with pytest.raises(expected):
            jinja.from_string(text)
        with pytest.raises(expected):
            render(text, {"a": 1})
