"""A read promptfoo config written as suites: one per prompt, each test asking what promptfoo would send.

For every test (defaultTest merged, each combination of its vars one test) the vars are read and prepared as
promptfoo's renderPrompt prepares them, each assert becomes its evaluator or a `not_carried` placeholder, and
each prompt rendered with the vars becomes the suite's prompt or messages; a test whose prompt cannot be made
as promptfoo makes it is left out and listed at the top of the suite. The models file, the python scorers and
the images the prompts carry are written beside the suites.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.importers.promptfoo.asserts import (
    AssertSite,
    combined_eval,
    describe,
    engine_problem,
    kinds,
    literal,
    map_assert,
    share,
    string_transform,
)
from engine.importers.promptfoo.config import MODEL_NAME, Config, Note, Prompt, one_line, slug
from engine.importers.promptfoo.js import NotCarried, js_string
from engine.importers.promptfoo.python import Scorers
from engine.importers.promptfoo.render import (
    Images,
    chat_messages,
    engine_messages,
    load_file_vars,
    prepare_vars,
    render_prompt,
)
from engine.importers.promptfoo.testcases import ReadTest, default_test, read_tests, var_combinations, with_defaults

__all__ = ["Imported", "import_promptfoo"]

_TEST_ID = re.compile(r"[^a-z0-9_.]+")
_SKIPPED_OPTIONS = {
    "storeOutputAs": "a later test reads this test's answer: each imported test asks on its own",
    "transformVars": "its vars are computed by JavaScript: write them out",
    "rubricPrompt": "the engine's judge uses its own prompt (a suite's `judge_prompt:` can replace it)",
}


@dataclass
class Imported:
    """What `import_promptfoo` wrote, and what it could not carry over.

    Args:
        suites: The suite files written (one per prompt that kept a test).
        models: The models file, or None when no provider could be imported.
        scorers: The python scorer modules written.
        tests: The tests imported (each var combination one).
        notes: Everything not carried over, at its place.
        test_ids: Every test's id in promptfoo's order of tests (its `testIdx`), left-out ones included.
        prompt_suites: Per prompt, in promptfoo's order (its `promptIdx`), the suite name, or None when none
            was written.
    """

    suites: list[Path] = field(default_factory=list)
    models: Path | None = None
    scorers: list[Path] = field(default_factory=list)
    tests: int = 0
    notes: list[Note] = field(default_factory=list)
    test_ids: list[str] = field(default_factory=list)
    prompt_suites: list[str | None] = field(default_factory=list)


class _Builder:
    """Maps one read config to suites; `build` writes them."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.scorers = Scorers(config.files, config.folder)
        self.images = Images()

    def build(self, out: Path) -> Imported:
        config = self.config
        config.note_unread_keys()
        prompts = config.prompts()
        models = config.providers()
        default = default_test(config)
        judge = self._judge(default, models)
        name = slug(str(config.data.get("description") or config.path.stem), _TEST_ID)[:40].strip("-.") or "promptfoo"
        suites: list[list[dict[str, Any]]] = [[] for _ in prompts]
        left_out: list[str] = []
        carried_notes: list[str] = []
        used: set[str] = set()
        order: list[str] = []
        count = 0
        for number, at in enumerate(read_tests(config), start=1):
            test = with_defaults(at.test, default)
            stem = slug(str(test["description"]), _TEST_ID) if test.get("description") else ""
            options = test.get("options") or {}
            combos = ([dict(test.get("vars") or {})] if options.get("disableVarExpansion")
                      else var_combinations(config, test.get("vars") or {}, at.where))
            for variant, variables in enumerate(combos, start=1):
                wanted = (stem or f"test-{number}") + (f"-{variant}" if len(combos) > 1 else "")
                test_id, n = wanted, 2
                while test_id in used:
                    test_id, n = f"{wanted}-{n}", n + 1
                used.add(test_id)
                order.append(test_id)
                try:
                    variables = prepare_vars(load_file_vars(copy.deepcopy(variables), config.files, config.folder,
                                                            at.where))
                except NotCarried as exc:
                    config.note(at.where, f"test {test_id} left out: {exc}")
                    left_out.append(f"{config.short(at.where)} test {test_id}: {exc}")
                    continue
                evaluation, python = self._evaluation(test, at, test_id, variables, judge, carried_notes,
                                                      first=variant == 1)
                count += 1
                for tests_of_prompt, prompt in zip(suites, prompts, strict=True):
                    entry = self._entry(test, test_id, prompt, variables, at, evaluation, python, left_out)
                    if entry is not None:
                        tests_of_prompt.append(entry)
        try:
            result = self._write(out, name, prompts, suites, models, count, left_out, carried_notes)
        except OSError as exc:
            raise ConfigError(f"cannot write the suites to {out}: {exc.strerror or exc}; choose another --out "
                              "folder") from None
        result.test_ids = order
        return result

    def _judge(self, default: Mapping[str, Any], models: Mapping[str, Any]) -> str | None:
        config = self.config
        grading = (default.get("options") or {}).get("provider")
        if grading is None:
            return None
        ident = grading.get("id") if isinstance(grading, Mapping) else grading
        judge = slug(str(ident), MODEL_NAME) if isinstance(ident, str) else None
        if judge not in models:
            config.note(config.root.at("defaultTest"), "defaultTest.options.provider (the grader) is not one of the "
                                                       "imported providers; name the judge in models.yaml "
                                                       "(`defaults: {judge: NAME}`)")
            return None
        return judge

    def _evaluation(self, test: dict[str, Any], at: ReadTest, test_id: str, variables: Mapping[str, Any],
                    judge: str | None, carried_notes: list[str], first: bool) -> tuple[dict[str, Any], bool]:
        """The test's eval (every assert carried or a placeholder), and whether a python scorer needs the vars."""
        config = self.config
        options = test.get("options") or {}
        for option, reason in _SKIPPED_OPTIONS.items():
            if option in options and first:
                config.note(at.where, f"test {test_id}: option `{option}` not imported: {reason}")
        test_transform = options.get("transform", options.get("postprocess"))
        steps: tuple[str, ...] | None = () if test_transform is None else string_transform(test_transform)
        evals: list[dict[str, Any]] = []
        for assertion, (own, index) in test["_asserts"]:
            if not isinstance(assertion, Mapping):
                continue
            where = at.assert_at(index) if own else config.root.at("defaultTest", "assert", index)
            site = AssertSite(where=where, files=config.files, base=config.folder, judge=judge, scorers=self.scorers,
                              transform=steps)
            spec, why = map_assert(assertion, variables, site)
            refused = engine_problem(spec, config.folder) if spec is not None else None
            if refused is not None:
                spec, why = None, f"`{assertion.get('type')}` is not carried: the engine would refuse it as written "\
                                  f"({refused})"
            if spec is None:
                text = f"{describe(assertion)} (promptfoo assert at {config.short(where)})"
                spec = {"not_carried": literal(text)}
                if first:
                    config.note(where, f"test {test_id}: {why}; the test keeps a `not_carried` placeholder, an error "
                                       "until you replace it")
                    carried_notes.append(f"{config.short(where)} test {test_id}: {describe(assertion)}: {why}")
            elif first and "judge" in spec and not judge:
                config.note(where, f"test {test_id}: name the judge: `defaults: {{judge: NAME}}` in models.yaml")
            elif first and kinds(spec) & {"cost"}:
                config.note(where, f"test {test_id}: the cost check reads the run's cost: give the model its price in "
                                   "models.yaml (`price: {input: ..., output: ...}` per million tokens), as promptfoo "
                                   "knows OpenAI's prices")
            elif first and "similar" in spec:
                config.note(where, f"test {test_id}: name the embedding model: `defaults: {{embedding: NAME}}` in "
                                   "models.yaml")
            evals.append(spec)
        threshold = test.get("threshold")
        if threshold is not None:
            # promptfoo holds the weighted mean to a number threshold and ignores any other value.
            try:
                test["threshold"] = share(threshold, "threshold")
            except NotCarried as exc:
                test["threshold"] = None
                if isinstance(threshold, (int, float)) and not isinstance(threshold, bool):
                    evals.append({"not_carried": literal(f"threshold {threshold} (promptfoo test at "
                                                         f"{config.short(at.where)}): no score meets it")})
                if first:
                    config.note(at.where, f"test {test_id}: {exc}" + ("" if evals and "not_carried" in evals[-1]
                                                                      else "; promptfoo ignores it, and so does the "
                                                                           "import"))
        python = any("python" in kinds(spec) for spec in evals)
        return combined_eval(evals, test.get("threshold")), python

    def _entry(self, test: Mapping[str, Any], test_id: str, prompt: Prompt, variables: Mapping[str, Any],
               at: ReadTest, evaluation: dict[str, Any], python: bool, left_out: list[str]) -> dict[str, Any] | None:
        """One suite's test: what the prompt asks with these vars, and the eval; None when it is left out."""
        config = self.config
        wanted = test.get("prompts")
        if wanted is not None and not _prompt_allowed(prompt.label, wanted):
            return None
        options = test.get("options") or {}
        raw = js_string(options.get("prefix") or "") + prompt.raw + js_string(options.get("suffix") or "")
        try:
            if "_conversation" in raw:
                raise NotCarried("the prompt reads `_conversation`, the answers of earlier tests: each imported "
                                 "test asks on its own")
            messages = engine_messages(chat_messages(render_prompt(raw, variables)), self.images)
        except NotCarried as exc:
            config.note(at.where, f"test {test_id} left out of the suite for prompt {prompt.label!r} "
                                  f"({config.short(prompt.where)}): {exc}")
            left_out.append(f"{config.short(at.where)} test {test_id} (prompt {prompt.label}): {exc}")
            return None
        entry: dict[str, Any] = {"id": test_id}
        if test.get("description"):
            entry["description"] = literal(js_string(test["description"]))
        if len(messages) == 1 and messages[0]["role"] == "user" and isinstance(messages[0]["content"], str):
            entry["prompt"] = literal(messages[0]["content"])
        else:
            entry["messages"] = [{"role": m["role"], "content": _literal_content(m["content"])} for m in messages]
        entry["eval"] = evaluation
        if isinstance(test.get("threshold"), float):
            entry["threshold"] = test["threshold"]
        if python:
            entry["cases"] = [_case_row(variables)]   # promptfoo's python asserts read the vars
        return entry

    def _write(self, out: Path, name: str, prompts: list[Prompt], suites: list[list[dict[str, Any]]],
               models: dict[str, Any], count: int, left_out: list[str], carried_notes: list[str]) -> Imported:
        from ruamel.yaml import YAML

        config = self.config
        result = Imported(tests=count, notes=config.notes)
        out.mkdir(parents=True, exist_ok=True)
        yaml = YAML(typ="rt")
        yaml.width = 4096
        yaml.allow_unicode = True
        header = [f"# Imported from {config.path.name} by `engine import promptfoo`; check it with `engine validate`."]
        if carried_notes:
            header.append("# Not carried over: each is a `not_carried` check in its test, an error until you replace "
                          "it with an evaluator that does its job:")
            header += [f"#   {one_line(line)}" for line in carried_notes]
        if left_out:
            header.append("# Left out (promptfoo's prompt could not be made the same way):")
            header += [f"#   {one_line(line)}" for line in left_out]
        labels = [slug(p.label, _TEST_ID) for p in prompts]
        for number, prompt in enumerate(prompts, start=1):
            label = labels[number - 1]
            suite_name = name if len(prompts) == 1 else \
                f"{name}-{label[:40].strip('-.') if label and labels.count(label) == 1 else number}"
            suite: dict[str, Any] = {
                "suite": suite_name,
                "description": f"Imported from {config.path.name} by `engine import promptfoo`"
                               + (f" (prompt {prompt.label[:60]})" if len(prompts) > 1 else "") + "."}
            if config.mcp_models:
                # A model with MCP servers calls their tools in a conversation (promptfoo's providers call them
                # inside one answer): every test runs as one, to the model's answer.
                suite["defaults"] = {"agent": {"max_turns": 8}}
            suite["tests"] = suites[number - 1]
            if not suite["tests"]:
                config.note(prompt.where, f"prompt {prompt.label!r}: no test could be imported for it; no suite "
                                          "written")
                result.prompt_suites.append(None)
                continue
            result.prompt_suites.append(suite_name)
            path = out / f"{suite_name}.yaml"
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("\n".join(header) + "\n")
                yaml.dump(suite, handle)
            result.suites.append(path)
        result.scorers = self.scorers.write(out)
        for image, data in self.images.files.items():
            (out / image).parent.mkdir(parents=True, exist_ok=True)
            (out / image).write_bytes(data)
        if models:
            result.models = out / "models.yaml"
            with open(result.models, "w", encoding="utf-8") as handle:
                handle.write(f"# Imported from {config.path.name} by `engine import promptfoo`. Keys are read from "
                             "the environment variable each api_key_env names, never written here.\n")
                yaml.dump({"models": models}, handle)
        return result


def _prompt_allowed(label: str, wanted: Any) -> bool:
    """A test's `prompts:` filter (labels, `Group:*` wildcards, a `Group` prefix)."""
    for ref in wanted if isinstance(wanted, list) else [wanted]:
        ref = js_string(ref)
        if ref == label or (ref.endswith("*") and label.startswith(ref[:-1])) or label.startswith(ref + ":"):
            return True
    return False


def _literal_content(content: Any) -> Any:
    if isinstance(content, str):
        return literal(content)
    return [{**part, "text": literal(part["text"])} if "text" in part else part for part in content]


def _case_row(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The vars as a case row (for the python scorers' `case`), as plain YAML values."""
    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value if isinstance(value, (str, int, float, bool)) or value is None else js_string(value)

    return {str(k): plain(v) for k, v in variables.items()}


def import_promptfoo(config: Path, out: Path, *, allow_outside: bool = False) -> Imported:
    """Write `out/<name>.yaml` (one suite per prompt), `out/models.yaml` and the python scorers from a config.

    Args:
        config: promptfoo's YAML config (`promptfooconfig.yaml`).
        out: The folder to write to (created if needed).
        allow_outside: Read files the config names outside its own folder (refused otherwise).

    Returns:
        The files written, the number of tests, and a note for everything not carried over.

    Raises:
        ConfigError: The config or a file it names cannot be read, or is refused (outside its folder, too big,
            an alias bomb); the message names the place and the fix.
    """
    return _Builder(Config(Path(config), allow_outside)).build(Path(out))
