"""What a run is made of, loaded and checked before anything is paid: the tests, the models, the judges, the keys.

Every problem here stops the run before its first call: suite errors (exit 1), an unknown model, a missing API
key or an unresolvable judge (`UsageError`, exit 2). The keys' values are read from the environment and kept in
memory only (never in a message: `engine.redact`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.client.providers import provider
from engine.errors import EngineError, UsageError
from engine.model.model_config import BatchSettings, ModelConfig, batch_settings
from engine.model.test import Suite, Test
from engine.model.tree import Node
from engine.redact import looks_like_key

if TYPE_CHECKING:
    from engine.run.run_config import Invocation


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_tests(invocation: Invocation) -> Sequence[Test] | None:
    """The selected tests of the suites (held compactly: engine.suite.stored_tests), or None when a suite has errors."""
    from engine.run.jobs import select_listed, select_tests
    from engine.suite import load_suites
    from engine.suite.stored_tests import joined

    suites: list[Suite]
    suites, diagnostics = load_suites([Path(p) for p in invocation.paths])
    errors = [d for d in diagnostics if d.severity == "error"]
    for diagnostic in diagnostics:
        _err(str(diagnostic))
    if errors:
        _err(f"{len(errors)} error(s) in the suites: nothing was run; fix them (see `engine validate`)")
        return None
    tests = joined(suite.tests for suite in suites)
    if not tests:
        raise EngineError(f"no tests found in {', '.join(invocation.paths)}")
    if invocation.filter_file:   # exactly the tests the file lists; --filter narrows them further
        tests = select_listed(tests, Path(invocation.filter_file))
    selected = select_tests(tests, invocation.filters)
    if not selected:
        raise UsageError(f"--filter {' '.join(invocation.filters)} matches none of the {len(tests)} tests "
                         f"(a filter is a tag or a glob on the test id)")
    return selected


def load_models(invocation: Invocation) -> tuple[list[ModelConfig], dict[str, ModelConfig], dict[str, Any]]:
    """(the models to run, every entry of the models file, its `defaults:`)."""
    defaults: dict[str, Any] = {}
    if invocation.models_file:
        from engine.suite.models_file import load_models_file

        configs, defaults, diagnostics = load_models_file(Path(invocation.models_file))
        for diagnostic in diagnostics:
            _err(str(diagnostic))
        if any(d.severity == "error" for d in diagnostics):
            raise EngineError(f"{invocation.models_file} has errors: nothing was run")
    else:
        from engine.local import default_models, helper_models

        configs = default_models()
        answering = list(configs.values())
        configs = {**configs, **helper_models()}   # judges and `similar` find them; they answer no test
    if invocation.model_names:
        unknown = [n for n in invocation.model_names if n not in configs]
        if unknown:
            where = invocation.models_file or "the default models"
            raise UsageError(f"--model {', '.join(unknown)}: not in {where}; known: {', '.join(sorted(configs))}")
        chosen = [configs[n] for n in dict.fromkeys(invocation.model_names)]
    elif not invocation.models_file:
        chosen = answering
    else:
        chosen = list(configs.values())
    if invocation.max_retries is not None:
        chosen = [dataclasses.replace(m, max_retries=invocation.max_retries) for m in chosen]
    if invocation.max_response_mb is not None:
        chosen = [dataclasses.replace(m, max_response_mb=invocation.max_response_mb) for m in chosen]
    if not chosen:
        raise UsageError("no models to run: add some to the models file")
    return _batched(chosen, bool(invocation.batch)), configs, defaults


def _batched(models: list[ModelConfig], run_batch: bool) -> list[ModelConfig]:
    """The run's models with `batch` resolved (`BatchSettings` for a batched model, None for a live one), with a
    note for each model `--batch` leaves live: an embedded model (it runs here, free) or an API without a batch
    method. A live model is run, not refused: `--batch` asks for the batch price where there is one, and a run
    comparing a hosted model with a local one is the usual case.

    Raises:
        UsageError: A models file asks `batch:` of a model whose API has none.
    """
    out = []
    for model in models:
        settings = batch_settings(model, run_batch)
        if settings is not None and (model.builtin is not None or provider(model.api).batch is None):
            where = "runs on this machine" if model.builtin is not None else f"speaks `api: {model.api}`"
            if isinstance(model.batch, BatchSettings):
                raise UsageError(f"model {model.name!r} {where}, which has no batch API; remove `batch:` from its "
                                 "entry in the models file")
            _err(f"note: --batch: {model.name} {where}, which has no batch API: its calls go live")
            settings = None
        wire = provider(model.api).batch
        if settings is not None and model.batch_discount is None and wire is not None:   # the provider's published
            model = dataclasses.replace(model, batch_discount=1.0 - wire.discount)
        out.append(dataclasses.replace(model, batch=settings))
    return out


def judges(invocation: Invocation, tests: Sequence[Test], configs: dict[str, ModelConfig],
            defaults: dict[str, Any]) -> Any:
    """The judge models of the selected tests, resolved now: before any call is paid (UsageError, exit 2)."""
    from engine.evaluators.registry import MODEL_GRADED
    from engine.judge.caller import resolve_judges
    from engine.suite.stored_tests import definition_samples

    # A definition compiled row by row may name another judge or embedding model in each row: every row is read.
    judges = resolve_judges(definition_samples(tests, every_row_of=MODEL_GRADED), configs, defaults.get("judge"),
                            invocation.models_file or "the default models (no --models file)",
                            embedding_default=defaults.get("embedding"))
    if judges is not None and invocation.max_retries is not None:
        judges = dataclasses.replace(judges, models={
            name: dataclasses.replace(m, max_retries=invocation.max_retries) for name, m in judges.models.items()})
    return judges


def api_keys(models: list[ModelConfig]) -> dict[str, str | None]:
    keys: dict[str, str | None] = {}
    for model in models:
        if model.api_key_env:
            value = os.environ.get(model.api_key_env)
            if not value and looks_like_key(model.api_key_env):   # never repeat what may be the key itself
                raise UsageError(f"model {model.name}: api_key_env looks like an API key, not the NAME of an "
                                 f"environment variable; put the key in a variable (export OPENAI_API_KEY=...) "
                                 f"and write its name, e.g. api_key_env: OPENAI_API_KEY")
            if not value:
                raise UsageError(f"model {model.name} reads its API key from ${model.api_key_env}, which is not set; "
                                 f"export it, or remove api_key_env for a server without keys")
            urls = (model.base_url, *model.base_urls)
            if any("@" in (url or "").partition("//")[2].partition("/")[0] for url in urls):
                raise UsageError(f"model {model.name}: base_url carries a user:password and api_key_env is set too; "
                                 f"a request has one Authorization header: keep one of them")
            keys[model.name] = value
        else:
            keys[model.name] = None
    return keys


def _runs_programs(tree: Node) -> bool:
    """A check in the tree runs programs (it blocks), one a holder scores (`final_answer: {exec: ...}`) too: a
    holder awaits its held tree, so its own `blocking` does not say."""
    return tree.blocking or any(node.blocking for _, node in tree.walk())


def isolation_notice(tests: Iterable[Test]) -> None:
    """Say once, before any call, when the tests' programs (workspace commands, exec harnesses, python scorers:
    the evaluators that block because they run programs) get less than the sandbox's strongest level, and why.

    Raises:
        HarnessError: The sandbox settings are wrong (ENGINE_BWRAP, ENGINE_SANDBOX_LEVEL).
    """
    if not any(t.workspace is not None or (t.evaluator is not None and _runs_programs(t.evaluator)) for t in tests):
        return
    from engine.harness.isolation import isolation_report

    notice = isolation_report().notice()
    if notice is not None:
        _err(notice)
