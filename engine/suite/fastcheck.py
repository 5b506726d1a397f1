"""A fast "is this document valid at all?" pre-check, with fastjsonschema.

jsonschema walks 10,000 tests in about 1.4 s; fastjsonschema's generated code does it in 0.15 s but only
says "invalid" with its first error. So documents are first asked here, and only an invalid one pays
for jsonschema's import and its full, explained walk (engine.suite.schema). A test checks both paths
report the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engine.base.flat import FlatKey, flat_key

__all__ = ["FAST_PATH_MIN_NODES", "quickly_valid"]


# From this many YAML nodes on, first ask a compiled fastjsonschema validator whether the document is valid
# at all (0.15 s against 1.4 s for jsonschema on 10,000 tests); only an invalid document pays for
# jsonschema's import and error walk. Every size is asked (was: from 20,000 nodes, when each process compiled
# the validator, 0.25 s): it is now loaded from its cache in 5 ms (compiled in 65-105 ms on a miss), against
# 80-110 ms to import jsonschema and 15 ms to walk a 2,000-case suite with it (issue #22 item 2, third pass).
FAST_PATH_MIN_NODES = 0


# Keywords whose value maps names to schemas: their keys are names (a property may be called `const`).
_NAMES_TO_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def _draft7(value: Any, names: bool = False) -> Any:
    """The schema as draft-07 for fastjsonschema: `dependentSchemas` is draft-07's `dependencies`, and
    `const: X` is written `enum: [X]` (the same test: fastjsonschema generates both with one comparison), so
    that `detailed_exceptions=False` can generate it (see `_OPTIONS`)."""
    if isinstance(value, dict):
        if names:
            return {k: _draft7(v) for k, v in value.items()}
        out = {}
        for k, v in value.items():
            if k == "const" and "enum" not in value:
                out["enum"] = [v]
            else:
                out["dependencies" if k == "dependentSchemas" else k] = _draft7(v, k in _NAMES_TO_SCHEMAS)
        return out
    if isinstance(value, list):
        return [_draft7(v) for v in value]
    return value


# `use_default=False`: validating must never write defaults into the document. `detailed_exceptions=False`:
# only "valid or not" is asked here (jsonschema explains a failure), so no error message is built; with
# details, each rejected oneOf/anyOf branch built one (18,584 on the bench suite; 0.09 -> 0.08 s of CPU to
# validate it, medians of 5, runs back to back). fastjsonschema 2.22 cannot
# generate `const` without details (KeyError 'definition_rule'), hence `enum` in `_draft7`.
_OPTIONS: dict[str, Any] = {"use_default": False, "detailed_exceptions": False}

# The generated code names every value it walks for its messages: `(name_prefix or "data") + ".tests[{x}]"
# .format(**locals())` is built for each test and each nested evaluator, copying the caller's locals (some 50
# names at the top level), though `detailed_exceptions=False` never shows a message. The names are only ever
# message text (the valid/invalid answer does not read them), so the `.format` calls are cut from the source:
# validating the 10,003-test bench suite 0.110 -> 0.071 s of CPU (medians of 7, the two validators run in
# turn in one process, load ~8; issue #22, bench/README.md "Issue #22 item 3, third pass").
_NAME_FORMAT = ".format(**locals())"
# Part of the cache file's stamp: a cached validator generated before (or after) this rewrite is not reused.
_REWRITE = "names-unformatted-1"


def _generated_source(schema: dict[str, Any], fastjsonschema: Any) -> str:
    """fastjsonschema's validator for `schema`, without the message names it would format on every call."""
    return fastjsonschema.compile_to_code(schema, **_OPTIONS).replace(_NAME_FORMAT, "")


# Schema name -> its compiled validator (None: fastjsonschema is not installed), built once per process.
_VALIDATORS: dict[str, Any] = {}


def _fast_validator(name: str, source: Mapping[str, Any]) -> Any:
    if name not in _VALIDATORS:
        _VALIDATORS[name] = _compile(name, source)
    return _VALIDATORS[name]


def _compile(name: str, source: Mapping[str, Any]) -> Any:
    try:
        import fastjsonschema
    except ImportError:
        return None
    schema = _draft7(source)
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    # The generated module names its entry function after the schema's `$id`, as `compile` finds it.
    entry = fastjsonschema.RefResolver.from_schema(schema, handlers={}, store={}).get_scope_name()
    try:
        return getattr(_cached_module(name, schema, fastjsonschema), entry)
    except Exception:  # noqa: BLE001 - an unwritable cache only costs the compile time
        return fastjsonschema.compile(schema, **_OPTIONS)


def _cached_module(name: str, schema: dict[str, Any], fastjsonschema: Any) -> Any:
    """The generated validator, its compiled bytecode cached in the user's cache folder.

    Generating and compiling the suite schema's validator (700 KB of Python) takes 0.25-0.6 s per process;
    loading its marshalled code object 0.005 s. (Until issue #22 the module's entry was looked up as
    `validate`, which it does not define, so the file was written and never used.) The file name carries a hash of the
    schema, fastjsonschema's version and the bytecode format, so nothing stale is ever loaded.
    """
    import hashlib
    import importlib.util
    import marshal
    import os
    import types

    stamp = (json.dumps(schema, sort_keys=True) + json.dumps(_OPTIONS, sort_keys=True) + fastjsonschema.VERSION
             + importlib.util.MAGIC_NUMBER.hex() + _REWRITE)
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-eval-engine"
    path = base / f"fastschema_{name}_{digest}.marshal"
    code = None
    if path.is_file():
        try:
            code = marshal.loads(path.read_bytes())
        except (ValueError, EOFError, TypeError):
            code = None
    if code is None:
        code = compile(_generated_source(schema, fastjsonschema), f"<{name} schema validator>", "exec")
        base.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(marshal.dumps(code))
        os.replace(partial, path)  # atomic: a concurrent run sees no file or the whole file
    module = types.ModuleType(f"_engine_fastschema_{name}")
    exec(code, module.__dict__)  # our own generated validator, from our own schema
    module.__dict__["JsonSchemaValueException"] = _rejection(fastjsonschema)
    for function in [name for name in module.__dict__ if name.endswith(_EVALUATOR)]:
        module.__dict__[function] = _remembering(module.__dict__[function])
    return module


# The generated function that checks one evaluator (`$defs/evaluator`), looked up by name by its callers.
_EVALUATOR = "___defs_evaluator"


def _remembering(check: Callable[..., Any]) -> Callable[..., Any]:
    """`check`, remembering the flat evaluators it passed (engine.base.flat): whether one is valid depends on
    nothing else, and a suite repeats a few of them over thousands of tests (4,287 of the bench suite's 5,716
    tests write one of three). Validating the bench suite 0.042 -> 0.035 s of CPU (medians of 9, the function
    with and without a fresh memo in turn in one process; issue #22 item 3, fourth pass). An invalid one is
    checked every time (it raises), as is any evaluator with a list or mapping inside.
    """
    passed: set[FlatKey] = set()

    def remembered(data: Any, custom_formats: Any = None, name_prefix: Any = None) -> Any:
        key = flat_key(data)
        if key is not None and key in passed:
            return data
        result = check(data, {} if custom_formats is None else custom_formats, name_prefix)
        if key is not None and len(passed) < _REMEMBERED:
            passed.add(key)
        return result

    return remembered


_REMEMBERED = 4096


def _rejection(fastjsonschema: Any) -> type[Exception]:
    """The exception the generated code raises and catches, made without fastjsonschema's Python `__init__`.

    The generated code tries each `oneOf`/`anyOf` branch by raising and catching its exception: 18,584 times
    for the 10,003-test bench suite, each running `JsonSchemaValueException.__init__` (five attributes set in
    Python) for a message nobody reads (`quickly_valid` only asks valid-or-not). The generated functions look
    the name up in their module's globals, so the class set there is the one raised and caught: validating the
    bench suite 0.085 -> 0.068 s of CPU (the two classes in turn in one process, 5 rounds, load ~1.5; issue #22
    item 3, fourth pass). It stays a JsonSchemaValueException, so any caller that catches that still does.
    """
    class Rejected(fastjsonschema.JsonSchemaValueException):
        __init__ = Exception.__init__   # C-level: keeps the message in `args`, sets no attributes

    return Rejected


def quickly_valid(name: str, schema: Mapping[str, Any], data: Any) -> bool:
    """True when the compiled validator accepts `data`; False when it rejects it or is unavailable.

    Args:
        name: The schema's name (`suite`, `models`): the compiled validator is kept under it.
        schema: The schema itself (engine.suite.schema loads it; passed in so this module imports nothing back).
        data: The document.
    """
    check = _fast_validator(name, schema)
    if check is None:
        return False
    try:
        check(data)
    except Exception:  # noqa: BLE001 - JsonSchemaException, or anything odd: let jsonschema decide and explain
        return False
    return True
