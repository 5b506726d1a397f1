"""`engine import promptfoo`: each assert's mapping scored on real answers, notes at file:line, keys never copied,
dropped checks kept as placeholders that never pass."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from engine.evaluators.scoring import score
from engine.importers.promptfoo import import_promptfoo
from engine.importers.promptfoo.asserts import AssertSite, map_assert
from engine.importers.promptfoo.files import Files, Where
from engine.importers.promptfoo.python import Scorers
from engine.model.answer import Answer
from engine.suite import load_models, load_suites
from tests.engine_proc import run_engine

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "promptfoo"


def _map(assertion: dict[str, Any], variables: dict[str, Any] | None = None, tmp: Path | None = None,
         judge: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    folder = tmp or FIXTURE
    files = Files(folder)
    site = AssertSite(where=Where(folder / "promptfooconfig.yaml", 3), files=files, base=folder, judge=judge,
                      scorers=Scorers(files, folder))
    return map_assert(assertion, variables or {}, site)


def _verdict(assertion: dict[str, Any], answer: str, tmp_path: Path) -> tuple[bool, bool]:
    """The mapped evaluator's (passed, error) on `answer`, through a real suite load and the engine's scorer."""
    spec, why = _map(assertion)
    assert spec is not None, why
    path = tmp_path / "one.yaml"
    with open(path, "w", encoding="utf-8") as handle:
        YAML().dump({"suite": "one", "tests": [{"id": "t", "prompt": "q", "eval": spec}]}, handle)
    suites, diagnostics = load_suites([path], golden_check=False)
    assert [str(d) for d in diagnostics] == []
    verdict = score(suites[0].tests[0], Answer(text=answer))
    return bool(verdict.passed), verdict.error


# (assert, answer, promptfoo's verdict), as promptfoo's src/assertions/*.ts decide them.
CASES = [
    ({"type": "contains", "value": "Paris"}, "in Paris", True),
    ({"type": "contains", "value": "Paris"}, "in paris", False),
    ({"type": "contains", "value": 42}, "it is 42", True),
    ({"type": "icontains", "value": "PARIS"}, "in paris", True),
    ({"type": "not-contains", "value": "sorry"}, "Sorry!", True),
    ({"type": "not-icontains", "value": "sorry"}, "Sorry!", False),
    ({"type": "equals", "value": "42"}, "42", True),
    ({"type": "equals", "value": "42"}, " 42", False),
    ({"type": "equals", "value": 42}, "42.0", False),
    ({"type": "equals", "value": "a.b"}, "axb", False),
    ({"type": "not-equals", "value": "42"}, "43", True),
    ({"type": "equals", "value": {"a": 1}}, '{"a": 1.0}', True),
    ({"type": "equals", "value": {"a": 1}}, '```json\n{"a": 1}\n```', False),   # JSON.parse of the whole answer
    ({"type": "starts-with", "value": "Yes"}, "Yes sir", True),
    ({"type": "starts-with", "value": "Yes"}, " Yes", False),
    ({"type": "regex", "value": r"(?<n>\d+)-(?<m>\d+)"}, "12-12", True),
    ({"type": "not-regex", "value": r"\d"}, "none", True),
    ({"type": "is-json"}, '{"a": [1]}', True),
    ({"type": "is-json"}, " \n[1, 2]\n", True),
    ({"type": "is-json"}, "no", False),
    ({"type": "is-json"}, '```json\n{"a": 1}\n```', False),                      # no fence unwrapped
    ({"type": "is-json"}, 'Here: {"a": 1}', False),
    ({"type": "is-json", "value": {"type": "object", "required": ["a"]}}, '{"b": 1}', False),
    ({"type": "is-json", "value": "{type: object, required: [a]}"}, '{"a": 1}', True),   # a YAML text schema
    ({"type": "contains-json"}, 'see {"a": 1} here', True),
    ({"type": "contains-json"}, "see [1, 2] here", False),                        # objects only, as promptfoo
    ({"type": "contains-any", "value": ["red", "green"]}, "Green", False),
    ({"type": "icontains-any", "value": "red, green"}, "Green", True),
    ({"type": "contains-all", "value": ["red", "green"]}, "green and red", True),
    ({"type": "contains-all", "value": ["red", "green"]}, "green\nand Red", False),
    ({"type": "icontains-all", "value": ["red", "green"]}, "GREEN\nand Red", True),
    ({"type": "not-contains-any", "value": ["x", "y"]}, "a y", False),
    ({"type": "contains", "value": "paris", "transform": "output.toLowerCase()"}, "PARIS!", True),
    ({"type": "contains", "value": "Paris", "transform": "output.toLowerCase()"}, "Paris", None),   # not carried
    ({"type": "equals", "value": "exact", "transform": "output.trim()"}, "  exact\n", True),
    ({"type": "equals", "value": "exact", "transform": "output.trim()"}, "  exact words", False),
    ({"type": "starts-with", "value": "PAR", "transform": "output.trim().toUpperCase()"}, " paris", True),
    ({"type": "icontains", "value": "Paris", "transform": "return output.toUpperCase()"}, "PARIS", True),
    ({"type": "equals", "value": "a", "transform": "output.split(',')[0]"}, "a,b", None),
    ({"type": "regex", "value": "a", "transform": "output.trim()"}, "a", None),
]


@pytest.mark.parametrize(("assertion", "answer", "expected"), CASES,
                         ids=[f"{c[0]['type']}-{i}" for i, c in enumerate(CASES)])
def test_each_mapped_assert_gives_promptfoos_verdict(assertion: dict[str, Any], answer: str, expected: bool | None,
                                                     tmp_path: Path) -> None:
    if expected is None:   # promptfoo runs it; the engine cannot say it the same way: not carried, with why
        spec, why = _map(assertion)
        assert spec is None and why is not None and "transform" in why
        return
    assert _verdict(assertion, answer, tmp_path) == (expected, False)


def test_contains_all_scores_0_or_1_as_promptfoo_does(tmp_path: Path) -> None:
    spec, _ = _map({"type": "contains-all", "value": ["a", "b", "c"], "weight": 3})
    assert spec is not None and spec["weight"] == 3
    path = tmp_path / "one.yaml"
    with open(path, "w", encoding="utf-8") as handle:
        YAML().dump({"suite": "one", "tests": [{"id": "t", "prompt": "q", "eval": spec}]}, handle)
    suites, _ = load_suites([path], golden_check=False)
    verdict = score(suites[0].tests[0], Answer(text="a and b"))
    assert verdict.score == 0.0 and not verdict.passed      # two of three found: no partial credit


def test_a_regex_re2_cannot_run_is_reported_not_imported() -> None:
    spec, why = _map({"type": "regex", "value": r"(?<n>\d+)-\k<n>"})
    assert spec is None and why is not None and "`regex`" in why and "RE2" in why


def test_values_render_with_the_vars_and_model_graded_asserts_become_judge_and_similar() -> None:
    rubric, _ = _map({"type": "llm-rubric", "value": "Polite about {{ topic }}"}, {"topic": "refunds"})
    closed, _ = _map({"type": "model-graded-closedqa", "value": "Says 30 days"}, judge="grader")
    similar, _ = _map({"type": "similar", "value": "Thirty days", "threshold": 0.9})
    latency, _ = _map({"type": "latency", "threshold": 1500})
    assert rubric == {"judge": {"rubric": "Polite about refunds"}}
    assert closed == {"judge": {"rubric": "Says 30 days", "model": "grader"}}
    assert similar == {"similar": {"reference": "Thirty days"}, "threshold": 0.9}
    assert latency == {"latency_s": {"max": 1.5}, "name": "latency"}


@pytest.mark.parametrize("kind", ["javascript", "levenshtein", "webhook", "ruby", "moderation"])
def test_unmapped_asserts_say_what_to_do(kind: str) -> None:
    spec, why = _map({"type": kind, "value": "x"})
    assert spec is None and why is not None and f"`{kind}`" in why and ("use" in why or "read" in why
                                                                        or "rewrite" in why or "pick" in why)


def test_the_fixture_imports_and_validates(tmp_path: Path) -> None:
    imported = import_promptfoo(FIXTURE / "promptfooconfig.yaml", tmp_path)
    assert imported.notes == []
    suites, diagnostics = load_suites(imported.suites, golden_check=False)
    assert [str(d) for d in diagnostics] == []
    ids = [t.id for t in suites[0].tests]
    assert len(ids) == imported.tests == 26
    assert ids[:2] == ["capital-of-france", "contains-is-case-sensitive"]
    assert "test-21-1" in ids and "test-21-2" in ids          # no description: test-N; a list var: one per value
    assert ids[-4:] == ["from-a-yaml-tests-file", "csv-contains", "csv-icontains-any", "csv-plain-equals"]
    models, problems = load_models(imported.models)  # type: ignore[arg-type]
    assert [str(p) for p in problems] == []
    assert models["scripted"].model == "scripted-model"


def _write(folder: Path, text: str) -> Path:
    config = folder / "promptfooconfig.yaml"
    config.write_text(text, encoding="utf-8")
    return config


def test_notes_name_the_file_and_line_and_a_literal_key_is_never_copied(tmp_path: Path) -> None:
    (tmp_path / "doc.txt").write_text("a long document\n", encoding="utf-8")
    config = _write(tmp_path, """\
prompts: ["Summarise: {{ doc }}"]
providers:
  - id: openai:chat:gpt-4o-mini
    config: {apiKey: sk-live-abcdef123456, temperature: 0.2, response_format: {type: json_object}}
  - id: anthropic:messages:claude-3
  - id: file://my_provider.py
tests:
  - description: Summary!
    vars: {doc: file://doc.txt}
    assert:
      - type: javascript
        value: output.length < 100
      - type: contains
        value: document
      - type: levenshtein
        threshold: 5
        value: a document
  - description: Summary!
    vars: {doc: short}
""")
    imported = import_promptfoo(config, tmp_path / "out")
    notes = [str(n) for n in imported.notes]
    text = "\n".join(notes)
    assert f"{config}:3: provider openai-chat-gpt-4o-mini: its literal apiKey was not copied" in text
    assert "export OPENAI_API_KEY=" in text
    assert f"{config}:3: provider openai-chat-gpt-4o-mini: config response_format not imported" in text
    assert f"{config}:5: provider 'anthropic:messages:claude-3' not imported" in text
    assert f"{config}:6: provider 'file://my_provider.py' not imported" in text
    assert f"{config}:11: test summary: `javascript` is not carried" in text
    assert f"{config}:15: test summary: `levenshtein` is not carried" in text
    written = "".join(p.read_text(encoding="utf-8") for p in tmp_path.joinpath("out").iterdir())
    assert "sk-live" not in written
    assert "api_key_env: OPENAI_API_KEY" in written
    suite_text = imported.suites[0].read_text(encoding="utf-8")
    assert "#   promptfooconfig.yaml:11 test summary: javascript: output.length < 100: `javascript` is not " \
           "carried" in suite_text
    suites, diagnostics = load_suites(imported.suites, golden_check=False)
    assert [d.severity for d in diagnostics] == ["warning", "warning"]   # each placeholder, shown by validate
    first, second = suites[0].tests
    assert [first.id, second.id] == ["summary", "summary-2"]
    assert first.messages[-1]["content"] == "Summarise: a long document"
    # The checks that were carried pass; the test is still an error, never a pass, until the placeholders go.
    verdict = score(first, Answer(text="a document"))
    assert verdict.error and not verdict.passed and "output.length < 100" in verdict.reason
    assert second.eval == {"none": True}    # no assert: recorded, unscored


def test_prompts_become_suites_and_templates_in_answers_stay_text(tmp_path: Path) -> None:
    (tmp_path / "chat.json").write_text('[{"role": "system", "content": "Be terse."},'
                                        ' {"role": "user", "content": "{{ q }}"}]', encoding="utf-8")
    config = _write(tmp_path, """\
description: Two prompts
prompts:
  - file://chat.json
  - {raw: "Q: {{ q }}", label: plain}
providers: [openai:chat:m]
tests:
  - vars: {q: "Show {{ braces"}
    assert: [{type: contains, value: "{{ q }}"}]
  - vars: {q: "{% endraw %} and {{ x }}"}
    assert: [{type: contains, value: "endraw"}]
""")
    imported = import_promptfoo(config, tmp_path / "out")
    assert [p.name for p in imported.suites] == ["two-prompts-chat.yaml", "two-prompts-plain.yaml"]
    suites, diagnostics = load_suites(imported.suites, golden_check=False)
    assert [str(d) for d in diagnostics] == []
    assert suites[0].tests[0].messages[0] == {"role": "system", "content": "Be terse."}
    assert suites[1].tests[0].messages[-1]["content"] == "Q: Show {{ braces"
    assert suites[1].tests[1].messages[-1]["content"] == "Q: {% endraw %} and {{ x }}"
    assert score(suites[1].tests[1], Answer(text="a {% endraw %} b")).passed


def test_the_cli_writes_and_reports(tmp_path: Path) -> None:
    config = _write(tmp_path, "prompts: [hi]\nproviders: [openai:chat:m]\ntests:\n  - assert: [{type: javascript, "
                              "value: 'output.length'}]\n")
    done = run_engine("import", "promptfoo", str(config), "-o", str(tmp_path / "out"), env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert f"{config}:4: warning: test test-1: `javascript` is not carried" in done.stderr
    assert "1 test(s); 1 thing(s) not imported as written" in done.stdout
    bad = run_engine("import", "promptfoo", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "x"),
                     env=dict(os.environ))
    assert bad.returncode == 2 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr
