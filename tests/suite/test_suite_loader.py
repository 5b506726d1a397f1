"""load_suites: expansion of cases, defaults, tools, named evaluators, prompts, variables and hashes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.evaluators import score
from engine.model.answer import Answer
from engine.suite import load_suites

VALID = Path(__file__).resolve().parent / "fixtures" / "valid"


@pytest.fixture(scope="module")
def capitals():
    suites, diagnostics = load_suites([VALID / "capitals.yaml"])
    assert diagnostics == []
    [suite] = suites
    return {t.id: t for t in suite.tests}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_cases_expand_to_one_test_per_row_with_rendered_ids_and_prompts(capitals) -> None:
    first, second = capitals["add-2-3"], capitals["add-10--4"]
    assert (first.case_index, second.case_index) == (0, 1)
    assert first.messages[-1] == {"role": "user", "content": "What is 2 + 3?"}
    assert first.golden == 5 and second.golden == 6
    assert first.variables == {"a": 2, "b": 3, "golden": 5, "suite": "capitals", "test_id": "add-2-3"}
    assert first.eval == {"numeric": "{{ golden }}"}  # evaluator templates render at scoring time


def test_defaults_apply_and_the_system_text_leads(capitals) -> None:
    test = capitals["capital-france"]
    assert test.max_tokens == 32 and test.threshold == 1.0 and test.repeat == 1
    assert test.messages[0] == {"role": "system", "content": "Answer with one word."}
    assert test.prompt == "Answer with one word.\n\nWhat is the capital of France?"
    assert test.tags == ("knowledge",)
    assert test.line == 25 and test.file.endswith("capitals.yaml") and test.suite_dir.endswith("valid")


def test_tools_resolve_to_openai_function_dicts(capitals) -> None:
    [tool] = capitals["weather-paris"].tools
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "get_weather"
    assert tool["function"]["description"] == "Current weather for a city."
    assert tool["function"]["parameters"]["required"] == ["city"]
    assert capitals["capital-france"].tools == ()


def test_use_is_inlined_so_the_eval_is_self_contained(capitals) -> None:
    spec = capitals["capital-italy"].eval
    assert "use" not in spec and spec["name"] == "one_word"
    assert spec["all"][1] == {"equals": "{{ golden }}", "weight": 3}


def test_use_options_override_the_named_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "suite: s\nevaluators:\n  w: {contains: x, weight: 1}\ntests:\n"
                 "  - id: a\n    prompt: p\n    eval: {use: w, weight: 5, name: mine}\n")
    [suite], _ = load_suites([path])
    assert suite.tests[0].eval == {"contains": "x", "weight": 5, "name": "mine"}


def test_messages_tests_keep_their_turns_and_join_for_completions(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "suite: s\ndefaults: {system: Be brief.}\ntests:\n  - id: a\n    messages:\n"
                 "      - {role: user, content: 'Hi {{ name }}'}\n      - {role: assistant, content: Hello}\n"
                 "      - {role: user, content: Again}\n    cases: [{name: Ann}]\n    eval: {none: true}\n")
    [suite], diagnostics = load_suites([path])
    assert diagnostics == []
    [test] = suite.tests
    assert [m["role"] for m in test.messages] == ["system", "user", "assistant", "user"]
    assert test.prompt == "Be brief.\n\nHi Ann\n\nHello\n\nAgain"
    assert test.id == "a[0]"  # a plain id with cases gets the row number


def test_hash_is_stable_and_tracks_what_is_sent_and_scored(tmp_path: Path) -> None:
    base = "suite: s\ntests:\n  - id: a\n    prompt: What?\n    eval: {contains: x}\n"
    h1 = load_suites([write(tmp_path, "a.yaml", base)])[0][0].tests[0].hash
    h2 = load_suites([write(tmp_path, "b.yaml", base.replace("suite: s", "suite: t").replace("id: a", "id: b")
                            + "    tags: [new]\n")])[0][0].tests[0].hash
    h3 = load_suites([write(tmp_path, "c.yaml", base.replace("What?", "Why?"))])[0][0].tests[0].hash
    h4 = load_suites([write(tmp_path, "d.yaml", base.replace("{contains: x}", "{contains: y}"))])[0][0].tests[0].hash
    assert len(h1) == 16
    assert h1 == h2  # id, suite and tags are not content
    assert len({h1, h3, h4}) == 3


def test_folders_are_searched_recursively_and_non_suites_skipped(tmp_path: Path) -> None:
    write(tmp_path, "b.yaml", "suite: b\ntests:\n  - {id: x, prompt: p, eval: {none: true}}\n")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "a.yml", "suite: a\ntests:\n  - {id: x, prompt: p, eval: {none: true}}\n")
    write(tmp_path, "models.yaml", "models:\n  m: {base_url: 'http://127.0.0.1:1/v1'}\n")
    suites, diagnostics = load_suites([tmp_path])
    assert diagnostics == []
    assert [s.id for s in suites] == ["b", "a"]  # sorted by path: b.yaml < sub/a.yml


def test_suite_ids_must_be_unique_across_files(tmp_path: Path) -> None:
    write(tmp_path, "one.yaml", "suite: same\ntests:\n  - {id: x, prompt: p, eval: {none: true}}\n")
    two = write(tmp_path, "two.yaml", "\nsuite: same\ntests:\n  - {id: x, prompt: p, eval: {none: true}}\n")
    suites, diagnostics = load_suites([tmp_path])
    assert len(suites) == 1
    [diag] = diagnostics
    assert diag.file == str(two) and diag.line == 2 and "already used by" in diag.message


def test_a_bad_file_does_not_hide_a_good_one(tmp_path: Path) -> None:
    write(tmp_path, "good.yaml", "suite: good\ntests:\n  - {id: x, prompt: p, eval: {none: true}}\n")
    write(tmp_path, "bad.yaml", "suite: bad\ntests:\n  - {id: x, promt: p}\n")
    suites, diagnostics = load_suites([tmp_path])
    assert [s.id for s in suites] == ["good"]
    assert diagnostics and all(d.file.endswith("bad.yaml") for d in diagnostics)


def test_missing_path_is_a_diagnostic(tmp_path: Path) -> None:
    suites, [diag] = load_suites([tmp_path / "nope.yaml"])
    assert suites == [] and "no such file" in diag.message


def test_tests_are_frozen(capitals) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        capitals["person"].id = "x"  # type: ignore[misc]


def test_harness_file_inside_the_suite_folder_is_accepted(tmp_path: Path) -> None:
    write(tmp_path, "h.yaml", "language: python\nrun: [python, main.py]\nscore: exit_code\nfiles: {main.py: x}\n")
    path = write(tmp_path, "s.yaml", "suite: s\ntests:\n  - id: a\n    prompt: p\n    eval:\n"
                 "      exec: {harness: ./h.yaml}\n")
    [suite], diagnostics = load_suites([path])
    assert diagnostics == [] and suite.tests[0].eval["exec"]["harness"] == "./h.yaml"


@pytest.mark.parametrize(("harness", "problem"), [
    ("python", "unknown harness 'python'; built-in harnesses: bash, humaneval"),
    ("./missing.yaml", "the harness file './missing.yaml' does not exist next to this suite"),
    ("./broken.yaml", "the harness './broken.yaml' is not a valid harness file"),
])
@pytest.mark.parametrize("golden_check", [True, False])
def test_a_harness_that_does_not_resolve_fails_validation_without_a_golden(
        tmp_path: Path, harness: str, problem: str, golden_check: bool) -> None:
    write(tmp_path, "broken.yaml", "language: python\nrun: [python, main.py]\n")
    path = write(tmp_path, "s.yaml", "suite: s\ntests:\n  - id: a\n    prompt: p\n    eval:\n"
                 f"      exec: {{harness: '{harness}'}}\n")
    suites, diagnostics = load_suites([path], golden_check=golden_check)
    assert suites == []
    assert [d.line for d in diagnostics] == [6] and problem in diagnostics[0].message, diagnostics


def test_an_option_written_before_its_kind_still_names_the_kind(tmp_path: Path) -> None:
    """`{mode: any, contains: [...]}`: the kind is the registry key, wherever its options sit (the first key
    used to be taken for the kind, and the test was left with no evaluator at all)."""
    path = write(tmp_path, "s.yaml", "suite: s\ntests:\n  - id: a\n    prompt: p\n"
                 "    eval: {mode: any, case_sensitive: true, contains: [Paris, Lyon]}\n")
    [suite], diagnostics = load_suites([path])
    assert diagnostics == []
    test = suite.tests[0]
    assert test.evaluator is not None and test.evaluator.kind == "contains"
    assert score(test, Answer(text="to Lyon")).passed and not score(test, Answer(text="to lyon")).passed
