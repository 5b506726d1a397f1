"""The bad-suites corpus: each tests/fixtures/bad_suites/NAME.yaml is reported exactly as NAME.expected says.

An expected line ending in `: ...` matches any text after that point (used for golden-check lines, whose
reason text belongs to the evaluators).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.suite import load_suites
from tests.engine_proc import run_engine

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bad_suites"
FILES = sorted(CORPUS.glob("*.yaml"))


def test_the_corpus_is_big_enough() -> None:
    assert len(FILES) >= 40
    assert all(f.with_suffix(".expected").is_file() for f in FILES)


def _report(path: Path) -> list[str]:
    _, diagnostics = load_suites([path], golden_check=True)
    diagnostics.sort(key=lambda d: (d.line, d.col))
    return [str(d).replace(str(path), path.name) for d in diagnostics]


def _matches(expected: str, got: str) -> bool:
    if expected.endswith(": ..."):
        return got.startswith(expected[:-3])
    return expected == got


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_bad_suite_is_reported_as_expected(path: Path) -> None:
    expected = path.with_suffix(".expected").read_text(encoding="utf-8").splitlines()
    got = _report(path)
    assert len(got) == len(expected), "\n".join(got)
    for want, have in zip(expected, got, strict=True):
        assert _matches(want, have), f"\nwant: {want}\nhave: {have}"


@pytest.mark.parametrize("name", ["unknown_evaluator", "yaml_tab_indent", "many_errors_one_pass"])
def test_cli_reports_corpus_files_gcc_style(name: str, tmp_path: Path) -> None:
    path = CORPUS / f"{name}.yaml"
    proc = run_engine("validate", path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    expected = path.with_suffix(".expected").read_text(encoding="utf-8").splitlines()
    assert [line.replace(str(path), path.name) for line in lines[:-1]] == expected
    assert lines[-1].startswith(f"{len(expected)} error")


def test_the_fast_schema_path_reports_exactly_what_the_slow_path_does(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """Every file is pre-checked by fastjsonschema; it must never let an invalid file through."""
    from engine.suite import fastcheck

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fastcheck.FAST_PATH_MIN_NODES == 0   # the default: every file takes the fast path
    fast = {path.name: _report(path) for path in FILES}
    monkeypatch.setattr(fastcheck, "FAST_PATH_MIN_NODES", sys.maxsize)   # jsonschema alone
    slow = {path.name: _report(path) for path in FILES}
    assert fast == slow
    valid = Path(__file__).resolve().parent / "fixtures" / "valid"
    suites, diagnostics = load_suites([valid])
    assert diagnostics == [] and len(suites) == 1


def test_the_compiled_fast_validator_is_loaded_from_its_cache(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """The second process loads the marshalled validator instead of generating it again (0.25-0.6 s).

    Until issue #22 the cache file was written but never used: the loaded module has no `validate`, so every
    process fell back to `fastjsonschema.compile`.
    """
    import fastjsonschema

    from engine.suite import fastcheck
    from engine.suite.schema import load_schema

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(fastcheck, "_VALIDATORS", {})
    first = fastcheck._fast_validator("suite", load_schema("suite"))
    assert len(list((tmp_path / "llm-eval-engine").glob("fastschema_suite_*.marshal"))) == 1

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the validator was generated again instead of loaded from the cache")

    monkeypatch.setattr(fastjsonschema, "compile", refuse)
    monkeypatch.setattr(fastjsonschema, "compile_to_code", refuse)
    monkeypatch.setattr(fastcheck, "_VALIDATORS", {})
    second = fastcheck._fast_validator("suite", load_schema("suite"))
    assert second is not first
    valid = {"suite": "s", "tests": [{"id": "a", "prompt": "q", "eval": {"contains": "x"}}]}
    assert fastcheck.quickly_valid("suite", load_schema("suite"), valid)
    assert not fastcheck.quickly_valid("suite", load_schema("suite"), {**valid, "tests": [{"id": "a"}]})
    # The branches' exception is the light one (no Python `__init__`), and still fastjsonschema's kind.
    rejected = second.__globals__["JsonSchemaValueException"]
    assert rejected.__init__ is Exception.__init__ and issubclass(rejected, fastjsonschema.JsonSchemaValueException)
    # The evaluator check remembers the flat evaluators it passed, and still rejects a bad one every time.
    (evaluator,) = [name for name in second.__globals__ if name.endswith(fastcheck._EVALUATOR)]
    assert second.__globals__[evaluator].__name__ == "remembered"
    for _ in range(2):
        assert fastcheck.quickly_valid("suite", load_schema("suite"), valid)
        assert not fastcheck.quickly_valid("suite", load_schema("suite"), {
            **valid, "tests": [{"id": "a", "prompt": "q", "eval": {"contains": "x", "weight": "heavy"}}]})


def test_the_fast_validator_formats_no_names_and_judges_as_fastjsonschema_does(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    """The generated source has its `.format(**locals())` message names cut (issue #22); on every corpus
    file and on the valid fixture it says valid/invalid exactly as fastjsonschema's own validator does."""
    import fastjsonschema

    from engine.base.yaml import load_yaml_file
    from engine.suite import fastcheck
    from engine.suite.schema import load_schema

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(fastcheck, "_VALIDATORS", {})
    schema = fastcheck._draft7(load_schema("suite"))
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    original = fastjsonschema.compile_to_code(schema, **fastcheck._OPTIONS)
    assert fastcheck._NAME_FORMAT in original   # else the rewrite is moot: drop it
    assert fastcheck._NAME_FORMAT not in fastcheck._generated_source(schema, fastjsonschema)
    reference = fastjsonschema.compile(schema, **fastcheck._OPTIONS)
    valid = Path(__file__).resolve().parent / "fixtures" / "valid"
    verdicts = []
    for path in [*FILES, *sorted(valid.glob("*.yaml"))]:
        data = load_yaml_file(path).data
        if data is None:
            continue
        try:
            reference(data)
            expected = True
        except fastjsonschema.JsonSchemaException:
            expected = False
        assert fastcheck.quickly_valid("suite", load_schema("suite"), data) is expected, path.name
        verdicts.append(expected)
    assert True in verdicts and False in verdicts
