"""models.yaml -> named `ModelConfig`s, validated against schemas/models.schema.json.

API keys are never read here: `api_key_env` names the environment variable the client reads at call
time, so no key can reach results, logs or messages through this module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.base.yaml import FileKind, load_yaml_file
from engine.errors import Diagnostic
from engine.local.registry import entry_defaults, is_scripted
from engine.model.mcp_server import McpServerSpec
from engine.model.model_config import (
    DEFAULT_MAX_TOKENS,
    BatchSettings,
    ModelConfig,
    RateLimit,
    max_tokens_floor,
)
from engine.model.test import TestKey
from engine.redact import looks_like_key, secret_query_names
from engine.suite.mcp import compile_mcp
from engine.suite.schema import validate

__all__ = ["load_models", "load_models_file", "raised_max_tokens"]

_MODELS_FILE = FileKind("models", "a models file needs `models:` with one entry per model (see models.example.yaml)",
                        "a models file holds a few entries; check that this is the right file")


def load_models(path: str | Path) -> tuple[dict[str, ModelConfig], list[Diagnostic]]:
    """Load a models file.

    Args:
        path: The models.yaml file.

    Returns:
        (name -> ModelConfig, diagnostics). The mapping is empty when the file has any error.
    """
    configs, _, diagnostics = load_models_file(path)
    return configs, diagnostics


def load_models_file(path: str | Path) -> tuple[dict[str, ModelConfig], dict[str, Any], list[Diagnostic]]:
    """Load a models file with its `defaults:` (e.g. `{judge: NAME}`, the default judge model).

    Returns:
        (name -> ModelConfig, defaults, diagnostics); empty mappings when the file has any error. A
        `defaults.judge` naming no entry is an error at its line.
    """
    name = str(path)
    file = Path(path)
    if not file.is_file():
        return {}, {}, [Diagnostic(name, 0, 0, "no such models file; check the path, "
                                            "or copy models.example.yaml to start one")]
    loaded = load_yaml_file(file, name, kind=_MODELS_FILE)
    if loaded.diagnostics:
        return {}, {}, loaded.diagnostics
    data = loaded.data
    if not isinstance(data, dict):
        return {}, {}, [Diagnostic(name, 1, 1, "a models file must be a mapping with a `models:` key")]
    problems = validate(data, loaded.positions, name, "models") or _entry_problems(
        data, loaded.positions, name, (_pasted_key, _no_room, _key_places, _unbatchable))
    servers: dict[str, tuple[McpServerSpec, ...]] = {}
    if not problems:
        problems = _mcp_servers(data, loaded.positions, name, str(file.parent), servers)
    defaults = dict(data.get("defaults") or {})
    for role in ("judge", "embedding"):   # defaults.embedding: the model `similar` evaluators use
        named = defaults.get(role)
        if not problems and named is not None and named not in data["models"]:
            line, col = loaded.positions.of(("defaults", role))
            problems = [Diagnostic(name, line, col, f"defaults.{role} names {named!r}, which is not under "
                                                    f"`models:`; add it there or name one of: "
                                                    f"{', '.join(sorted(data['models']))}")]
    if problems:
        return {}, {}, problems
    configs = {model_name: replace(_config(model_name, spec), mcp=servers.get(model_name, ()))
               for model_name, spec in data["models"].items()}
    return configs, defaults, _entry_problems(data, loaded.positions, name, (_key_in_url,), severity="warning")


def _mcp_servers(data: dict[str, Any], positions: Any, file: str, base_dir: str,
                 out: dict[str, tuple[McpServerSpec, ...]]) -> list[Diagnostic]:
    """Each model's `mcp:` block compiled into `out` (engine.suite.mcp); its problems at their lines."""
    problems = []
    for model_name, spec in data["models"].items():
        if "mcp" not in spec:
            continue
        compiled, found = compile_mcp(spec["mcp"], ("models", model_name, "mcp"), base_dir)
        for problem in found:
            line, col = positions.of(problem.path, key=problem.key)
            problems.append(Diagnostic(file, line, col, problem.message))
        if found:
            continue
        at = [("models", model_name, "mcp", i) for i in range(len(compiled))] if isinstance(spec["mcp"], list) \
            else [("models", model_name, "mcp")]
        out[model_name] = tuple(replace(server, declared=(file, *positions.of(where)))
                                for server, where in zip(compiled, at, strict=True))
    return problems


#: A check of one model entry: each problem it finds there, as the place inside the entry and the message.
EntryCheck = Callable[[dict[str, Any]], Iterator[tuple[tuple[str | int, ...], str]]]


def _entry_problems(data: dict[str, Any], positions: Any, file: str, checks: Sequence[EntryCheck], *,
                    severity: str = "error") -> list[Diagnostic]:
    """Each model entry's problems, as `checks` find them, at their places in the file."""
    out = []
    for model_name, spec in data["models"].items():
        for where, message in (problem for check in checks for problem in check(spec)):
            line, col = positions.of(("models", model_name, *where))
            out.append(Diagnostic(file, line, col, message, severity=severity))
    return out


def _pasted_key(spec: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """An `api_key_env` that looks like a key (and names no set variable): refused, and never repeated."""
    value = spec.get("api_key_env")
    if isinstance(value, str) and looks_like_key(value) and value not in os.environ:
        yield ("api_key_env",), ("'api_key_env' looks like an API key itself; it must be the NAME of an environment "
                                 "variable that holds the key (e.g. OPENAI_API_KEY): move the key into such a "
                                 "variable")


def _no_room(spec: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """A `context_tokens` that leaves no room for a prompt beside the model's own `params.max_tokens`."""
    context, reply = spec.get("context_tokens"), (spec.get("params") or {}).get("max_tokens")
    if isinstance(context, int) and isinstance(reply, int) and reply >= context:
        yield ("context_tokens",), (f"context_tokens ({context}) leaves no room for a prompt beside "
                                    f"params.max_tokens ({reply}), the reply's room; raise context_tokens to the "
                                    "server's context or lower max_tokens")


def _key_places(spec: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """`api_key_header` / `api_key_query` need `api_key_env` (the key they send), and only one of them applies."""
    places = [place for place in ("api_key_header", "api_key_query") if place in spec]
    if len(places) > 1:
        yield (places[-1],), ("api_key_header and api_key_query both say where the key goes; keep the one your "
                              "API documents")
    elif places and not spec.get("api_key_env"):
        yield (places[0],), (f"{places[0]} says where the key goes, but there is no api_key_env naming the "
                             "environment variable that holds it; add api_key_env: YOUR_KEY_VARIABLE")


def _unbatchable(spec: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """`batch:` on an embedded model: its server runs on this machine and has no batch API (nor a price to halve)."""
    if spec.get("builtin") and spec.get("batch") not in (None, False):
        yield ("batch",), (f"batch: the embedded model {spec['builtin']!r} runs on this machine and has no batch "
                           "API (its calls cost nothing); remove `batch:` from this entry")


def _key_in_url(spec: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """A credential-named query parameter written into `base_url` / `base_urls` (a warning; never repeated)."""
    urls = [(("base_url",), spec.get("base_url"))] + [(("base_urls", i), url)
                                                       for i, url in enumerate(spec.get("base_urls") or ())]
    for where, url in urls:
        names = secret_query_names(url if isinstance(url, str) else None)
        if names:
            field = where[0] if len(where) == 1 else f"{where[0]}[{where[1]}]"
            yield where, (f"{field} carries the query parameter {names[0]!r}, which looks like a credential: it "
                          "would sit in the models file in clear (the engine masks it in what it writes). Put the "
                          "key in an environment variable named by api_key_env, and write "
                          f"`api_key_query: {names[0]}` to send it as that query parameter (or "
                          "`api_key_header: NAME` for an API that reads it from a header)")


def _config(name: str, spec: dict[str, Any]) -> ModelConfig:
    builtin = spec.get("builtin")
    if builtin:   # an embedded model's own floor, timeout and concurrency, for the keys the entry leaves out
        defaults = entry_defaults(builtin)
        if defaults:
            spec = {**defaults, **spec, "params": {**defaults["params"], **(spec.get("params") or {})}}
    price = spec.get("price") or {}
    base_urls = tuple(spec.get("base_urls") or ())
    base_url = spec.get("base_url") or (base_urls[0] if base_urls else None)
    return ModelConfig(
        name=name,
        model=spec.get("model") or builtin or name,
        base_url=base_url,
        api=spec.get("api", "chat"),
        api_key_env=spec.get("api_key_env"),
        api_key_header=spec.get("api_key_header"),
        api_key_query=spec.get("api_key_query"),
        concurrency=_int_or_none(spec.get("concurrency")),
        timeout_s=float(spec.get("timeout_s", 120.0)),
        connect_timeout_s=float(spec.get("connect_timeout_s", 10.0)),
        max_retries=int(spec.get("max_retries", 2)),
        stream=bool(spec.get("stream", True)),
        params=dict(spec.get("params") or {}),
        price_in=_float_or_none(price.get("input")),
        price_out=_float_or_none(price.get("output")),
        price_cache_read=_float_or_none(price.get("cache_read")),
        price_cache_write=_float_or_none(price.get("cache_write")),
        builtin=builtin,
        max_response_mb=float(spec.get("max_response_mb", 32.0)),
        structured_output=bool(spec.get("structured_output", False)),
        context_tokens=_int_or_none(spec.get("context_tokens")),
        base_urls=base_urls,
        rate_limit=_rate_limit(spec.get("rate_limit")),
        rate_limit_deadline_s=float(spec.get("rate_limit_deadline_s", 600.0)),
        batch=_batch(spec.get("batch")),
        price_batch_in=_float_or_none(price.get("batch_input")),
        price_batch_out=_float_or_none(price.get("batch_output")),
        batch_discount=_float_or_none(price.get("batch_discount")),
    )


def _batch(spec: Any) -> BatchSettings | bool | None:
    """A `batch:` value (the schema has checked its shape): true the defaults, a mapping its settings, false kept
    (live even under `--batch`), None when absent."""
    if spec is None or spec is False:
        return spec
    if spec is True:
        return BatchSettings()
    defaults = BatchSettings()
    return BatchSettings(size=int(spec.get("size", defaults.size)),
                         max_wait_s=float(spec.get("max_wait_s", defaults.max_wait_s)))


def _rate_limit(spec: Any) -> RateLimit | None:
    """A declared `rate_limit:` (the schema has checked its shape), or None."""
    if not spec:
        return None
    return RateLimit(requests_per_minute=_float_or_none(spec.get("requests_per_minute")),
                     tokens_per_minute=_float_or_none(spec.get("tokens_per_minute")))


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def raised_max_tokens(tests: Iterable[TestKey], models: Iterable[ModelConfig], *, which: str = "") -> list[Diagnostic]:
    """A note for each suite file whose tests ask for fewer max_tokens than a model's floor sends them.

    The floor (`engine.model.model_config.max_tokens_floor`) only raises a test's value, so a reasoning model is never
    starved by a suite written for small ones; the note says by how much and for which models, once per file
    and floor, at its first such test.

    Args:
        tests: The loaded tests, or their keys (`engine.suite.stored_tests.keys_of`).
        models: The models the tests would run on (scripted ones make no request and are left out).
        which: Words after the model names saying where they come from (" (the default embedded models)").
    """
    by_floor: dict[int, list[str]] = {}
    for model in models:
        if not is_scripted(model.builtin):
            by_floor.setdefault(max_tokens_floor(model), []).append(model.name)
    if not by_floor:
        return []
    found: dict[tuple[str, int], tuple[int, int, int, TestKey]] = {}   # (file, floor) -> count, least, most, first
    for test in tests:
        asked = test.max_tokens
        if asked is None:
            continue
        for floor in by_floor:
            if asked < floor:
                n, least, most, first = found.get((test.file, floor), (0, asked, asked, test))
                found[(test.file, floor)] = (n + 1, min(least, asked), max(most, asked),
                                             test if test.line < first.line else first)
    out = []
    for (file, floor), (n, least, most, first) in sorted(found.items(), key=lambda item: item[0]):
        values = f"{least}" if least == most else f"{least} to {most}"
        tests_text = f"test '{first.id}'" if n == 1 else f"{n} tests (first: '{first.id}')"
        out.append(Diagnostic(file, first.line, 1, (
            f"max_tokens {values} of {tests_text} is raised to {floor} for {', '.join(sorted(by_floor[floor]))}"
            f"{which}: a model's params.max_tokens (else {DEFAULT_MAX_TOKENS}) is a floor a test can raise but not "
            f"lower, so a reasoning model is not starved; a lower params.max_tokens in the models file lets the "
            f"test's value through"), severity="note"))
    return out
