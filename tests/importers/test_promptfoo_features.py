"""`engine import promptfoo` beyond plain asserts, on tests/fixtures/promptfoo_features: the prompt asked is the one
promptfoo renders (chat JSON with Nunjucks tags, image parts, file vars, vars that name vars, filters), python
asserts run as promptfoo runs them, transforms and is-json's strictness carried, and what is not carried kept as a
placeholder that never passes. test_promptfoo_compare.py runs promptfoo itself on the same config."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.evaluators.scoring import score
from engine.importers.promptfoo import Imported, import_promptfoo
from engine.model.answer import Answer
from engine.model.test import Test
from engine.suite import load_suites
from tests.images_util import write_png

FEATURES = Path(__file__).resolve().parent.parent / "fixtures" / "promptfoo_features"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Imported, dict[str, dict[str, Test]], bytes]:
    folder = tmp_path_factory.mktemp("features")
    shutil.copytree(FEATURES, folder / "config")
    pixel = write_png(folder / "config" / "pixel.png")
    result = import_promptfoo(folder / "config" / "promptfooconfig.yaml", folder / "out")
    suites, diagnostics = load_suites(result.suites, golden_check=False)
    assert [d.severity for d in diagnostics] == ["warning"] * 6   # two placeholders in each of three suites
    by_suite = {s.id.rsplit("-", 1)[-1]: {t.id.removesuffix("[0]"): t for t in s.tests} for s in suites}
    return result, by_suite, pixel


def test_what_is_not_carried_is_listed_at_its_file_and_line(imported) -> None:  # type: ignore[no-untyped-def]
    result, suites, _ = imported
    config = FEATURES.name
    notes = [f"{Path(n.file).parent.name}/{Path(n.file).name}:{n.line}: {n.message.split(';')[0]}"
             for n in result.notes]
    assert notes == [
        "config/promptfooconfig.yaml:70: test javascript-is-not-carried: `javascript` is not carried: JavaScript "
        "does not run here",
        "config/promptfooconfig.yaml:94: test a-transform-the-engine-cannot-say: its `transform: "
        "output.split(' ')[0]` is not carried (only a chain of trim(), toLowerCase(), toUpperCase() on `output` is)",
        "config/promptfooconfig.yaml:115: test a-json-file-var-is-its-text left out of the suite for prompt 'chat' "
        "(promptfooconfig.yaml:11): the rendered prompt looks like JSON but does not parse, so promptfoo itself "
        "fails on it",
    ], config
    assert "a-json-file-var-is-its-text" in suites["text"] and "a-json-file-var-is-its-text" not in suites["chat"]
    header = result.suites[0].read_text(encoding="utf-8").split("suite:", 1)[0]
    assert "promptfooconfig.yaml:70 test javascript-is-not-carried: javascript: output.length < 100" in header
    assert "Left out" in header and "a-json-file-var-is-its-text (prompt chat)" in header


def test_the_text_prompt_is_promptfoos(imported) -> None:  # type: ignore[no-untyped-def]
    _, suites, _ = imported
    # vars naming vars filled in, a text file trimmed, a YAML file as its compact JSON (2.0 as 2)
    assert suites["text"]["python-file-assert-returning-a-bool"].messages == ({"role": "user", "content": (
        'Answer briefly. Q: py-bool about cats and their food.\nBackground: The doc says hello.\n'
        'Meta: {"owner":"Ada","count":2}')},)
    # a JSON file var is its text, trimmed; an assert value renders with the vars too
    test = suites["text"]["a-json-file-var-is-its-text"]
    assert 'Background: {"id": 7, "tags": ["a", "b"]}' in test.messages[0]["content"]
    assert score(test, Answer(text='I saw {"ID": 7, "tags": ["A", "b"]}')).passed


def test_a_chat_json_prompt_with_nunjucks_tags_becomes_its_messages(imported) -> None:  # type: ignore[no-untyped-def]
    _, suites, _ = imported
    assert list(suites["chat"]["not-python"].messages) == [
        {"role": "system", "content": "Background: The doc says hello."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "noted 1"},
        {"role": "user", "content": 'Say "hello"'},          # `load` read the JSON, `dump` quoted it back
        {"role": "assistant", "content": "noted 2"},
        {"role": "user", "content": "Q: py-not (CATS AND THEIR FOOD)"},
    ]


def test_image_parts_become_the_engines_image_parts(imported) -> None:  # type: ignore[no-untyped-def]
    result, suites, pixel = imported
    [message] = suites["vision"]["not-python"].messages
    text, image = message["content"]
    assert text == {"type": "text", "text": "Q: py-not. What is in this picture of cats?"}
    assert image["type"] == "image_file"
    file = image["image_file"]
    assert file["detail"] == "low" and file["mime"] == "image/png"
    assert (result.suites[0].parent / file["path"]).read_bytes() == pixel   # written beside the suites


# (test, answer, promptfoo's verdict): python asserts read as promptfoo reads their results, transforms, and
# is-json's JSON.parse of the whole answer.
VERDICTS = [
    ("python-file-assert-returning-a-bool", "Paris.", True),
    ("python-file-assert-returning-a-bool", "Lyon.", False),
    ("python-file-assert-returning-a-grading-result", "Paris.", True),     # score 0.75, and a pass
    ("python-grading-result-that-fails", "Lyon.", False),
    ("inline-python-expression", "Paris!", True),
    ("inline-python-expression", "Rome!", False),
    ("inline-python-body-with-a-threshold", "one two three four five six", True),   # 0.6 >= 0.5
    ("inline-python-body-with-a-threshold", "one two", False),                      # 0.2 < 0.5
    ("not-python", "No way", False),
    ("not-python", "Sure", True),
    ("transform-to-lower-case", "PARIS!", True),
    ("transform-to-lower-case", "Lyon", False),
    ("transform-trim-then-equals", "\n  exact words  \n", True),
    ("transform-trim-then-equals", "exact words!", False),
    ("test-transform", "paris, then", True),
    ("is-json-refuses-a-fence", '```json\n{"ok": true}\n```', False),
    ("is-json-takes-bare-json", '{"ok": true}', True),
    ("object-equals-refuses-a-fence", '```json\n{"ok": true}\n```', False),
    ("object-equals-refuses-a-fence", '{"ok": true}', True),
    ("contains-json-finds-objects-only", "[1, 2]", False),
    ("contains-json-finds-objects-only", 'so {"a": 1}', True),
]


@pytest.mark.parametrize(("test_id", "answer", "passed"), VERDICTS)
def test_each_verdict_is_promptfoos(imported, test_id: str, answer: str, passed: bool) -> None:  # type: ignore[no-untyped-def]
    _, suites, _ = imported
    verdict = score(suites["text"][test_id], Answer(text=answer))
    assert not verdict.error and verdict.passed is passed, verdict


def test_a_grading_results_score_is_kept_beside_its_pass(imported) -> None:  # type: ignore[no-untyped-def]
    _, suites, _ = imported
    verdict = score(suites["text"]["python-file-assert-returning-a-grading-result"], Answer(text="Paris"))
    python = next(v for _, v in verdict.walk() if v.kind == "python")
    assert (python.score, python.passed, python.reason) == (0.75, True, "graded cats")


@pytest.mark.parametrize("test_id", ["javascript-is-not-carried", "a-transform-the-engine-cannot-say"])
def test_a_test_that_lost_a_check_never_passes(imported, test_id: str) -> None:  # type: ignore[no-untyped-def]
    _, suites, _ = imported
    verdict = score(suites["text"][test_id], Answer(text="Paris, short"))   # every carried check passes
    assert verdict.error and not verdict.passed and "was not carried over" in verdict.reason
