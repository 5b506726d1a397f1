"""Prompt variants: a suite's `variants:` runs every test under each named way of asking.

    variants:
      terse:   {system: "Answer in one word."}
      verbose: {system: "Explain, then answer."}
      cot:     {prompt: "Think step by step. {{ prompt }}"}

Each test becomes one test per variant (in the suite's order, a test's variants side by side), with the
same id and case and its `variant` set; the runner's matrix is then tests x variants x models x repeats
with nothing else to know. What a variant changes:

    system   replaces the test's system message (or adds one first); a template over the case's variables
    prompt   replaces the text of the last user message (its first text part when it has parts);
             `{{ prompt }}` is that text, the case's variables work too

The evaluator, golden and settings stay the test's own. A variant's test hash is the test's hash mixed with
the variant's name and definition, so editing a variant re-runs only its rows on `--resume`, and the row key
(engine.results.rows.row_key) carries the name.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from engine.base.render import render
from engine.model.test import Test
from engine.suite.checks import Report, template_names
from engine.suite.content_parts import content_text
from engine.suite.hashing import canonical_json

__all__ = ["apply_variants"]


def apply_variants(data: Mapping[str, Any], report: Report, tests: Iterable[Test]) -> Iterator[Test]:
    """Every test once per variant of the suite (the tests as they are when it has none), one at a time.

    Args:
        data: The suite mapping (schema-valid).
        report: Where problems go (at `variants.NAME.system|prompt`).
        tests: The expanded tests.
    """
    variants: Mapping[str, Mapping[str, str]] = data.get("variants") or {}
    if not variants or not _check(variants, report):
        yield from tests
        return
    failed: set[tuple[str, str]] = set()
    for test in tests:
        for name, spec in variants.items():
            made = _one(test, name, spec)
            if isinstance(made, Test):
                yield made
            elif (name, made[0]) not in failed:   # the first test it fails for is enough to find it
                failed.add((name, made[0]))
                report.error(("variants", name, made[0]), made[1])


def _check(variants: Mapping[str, Mapping[str, str]], report: Report) -> bool:
    """Templates compile and a `prompt` keeps the test's prompt; False (reported) when any does not."""
    ok = True
    for name, spec in variants.items():
        for key in ("system", "prompt"):
            if key not in spec:
                continue
            names = template_names(spec[key])
            if isinstance(names, str):
                report.error(("variants", name, key), f"this template does not compile: {names}")
                ok = False
            elif key == "prompt" and "prompt" not in names:
                report.error(("variants", name, key), "a variant's `prompt` must use {{ prompt }} (the test's "
                             "own prompt), or every test would ask the same thing; add it")
                ok = False
    return ok


def _one(test: Test, name: str, spec: Mapping[str, str]) -> Test | tuple[str, str]:
    """The test under one variant, or (the variant key that failed, why)."""
    messages = [dict(m) for m in test.messages]
    where = f" for test '{test.id}'" + (f" (case row {test.case_index + 1})" if test.case_index is not None else "")
    if "system" in spec:
        try:
            system = render(spec["system"], test.variables)
        except Exception as exc:  # noqa: BLE001 - undefined variables, sandbox refusals: a message, not a crash
            return "system", f"cannot fill in variant '{name}'s system prompt{where}: {exc}"
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] = system
        else:
            messages.insert(0, {"role": "system", "content": system})
    if "prompt" in spec:
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "user"), None)
        if last is None:
            return "prompt", f"variant '{name}' rewrites the last user message, but{where} there is none"
        content = messages[last]["content"]
        text_at = None if isinstance(content, str) else \
            next((j for j, p in enumerate(content) if p.get("type") == "text"), None)
        if not isinstance(content, str) and text_at is None:
            return "prompt", f"variant '{name}' rewrites the last user message's text, but{where} it has only images"
        original = content if isinstance(content, str) else content[text_at]["text"]
        try:
            rewritten = render(spec["prompt"], {**test.variables, "prompt": original})
        except Exception as exc:  # noqa: BLE001 - as above
            return "prompt", f"cannot fill in variant '{name}'s prompt{where}: {exc}"
        if isinstance(content, str):
            messages[last]["content"] = str(rewritten)
        else:
            parts = list(content)
            parts[text_at] = {"type": "text", "text": str(rewritten)}  # type: ignore[index]
            messages[last]["content"] = parts
    digest = hashlib.sha256(f"{test.hash}\x1f{name}\x1f{canonical_json(dict(spec))}".encode()).hexdigest()[:16]
    return dataclasses.replace(test, messages=tuple(messages), variant=name, hash=digest,
                               prompt="\n\n".join(content_text(m["content"]) for m in messages))
