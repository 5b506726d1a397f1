"""Tests held compactly (engine.suite.stored_tests): a test read back is the test the loader expanded, every test's key
is there without reading it, and no expanded Test stays in memory after loading."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from engine.base.yaml import load_yaml_file
from engine.evaluators import score
from engine.model.answer import Answer
from engine.model.test import Test
from engine.suite import load_suites, stored_tests
from engine.suite.checks import Report
from engine.suite.expand import Expander
from engine.suite.schema import validate
from engine.suite.stored_tests import TestSet, definition_samples, joined, keys_of, subset
from engine.suite.variants import apply_variants

ROOT = Path(__file__).resolve().parents[2]
# Suites of every shape: case rows inline and from files, variants, agents, workspaces, images, judges, tools.
SUITES = sorted([*ROOT.glob("suites/*.yaml"), *ROOT.glob("tests/fixtures/**/*.yaml")])
_NOT_COMPARED = ("evaluator", "agent_tools", "golden_turns", "case_origin", "images", "workspace")


def _expanded(path: Path) -> list[Test]:
    """The suite's tests as the expander makes them, before any store."""
    loaded = load_yaml_file(path)
    report = Report(str(path), loaded.positions)
    report.diagnostics.extend(validate(loaded.data, loaded.positions, str(path), "suite"))
    return list(apply_variants(loaded.data, report, Expander(loaded.data, report, path.parent).expand(set())))


def _sound_suites() -> list[Path]:
    return [p for p in SUITES if (found := load_suites([p]))[0] and not any(d.severity == "error" for d in found[1])]


@pytest.mark.parametrize("path", _sound_suites(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_test_read_back_is_the_test_the_loader_expanded(path: Path) -> None:
    [suite], _ = load_suites([path])
    assert isinstance(suite.tests, TestSet)
    expected = _expanded(path)
    read = list(suite.tests)
    assert read == expected   # every compared field: id, messages, variables, hash, settings, tools, ...
    for got, want in zip(read, expected, strict=True):
        for name in _NOT_COMPARED[1:]:
            assert getattr(got, name) == getattr(want, name), name
        assert (got.evaluator is None) == (want.evaluator is None)
        if want.evaluator is not None:
            assert got.evaluator.kinds() == want.evaluator.kinds()
            if want.golden is not None and want.agent is None and not (want.evaluator.is_async
                                                                        or want.evaluator.blocking):
                answer = Answer.from_golden(want.golden)
                assert score(got, answer) == score(want, answer)   # the same verdict, reason and details
    fields = ("suite", "id", "hash", "case_index", "variant", "repeat", "agent", "tags", "file", "line", "max_tokens")
    assert [tuple(getattr(k, f) for f in fields) for k in keys_of(suite.tests)] == [
        tuple(getattr(t, f) for f in fields) for t in expected]


def _write(folder: Path, rows: int) -> Path:
    (folder / "rows.csv").write_text("city,capital\n" + "".join(f"c{i},C{i}\n" for i in range(rows)))
    path = folder / "s.yaml"
    path.write_text("suite: s\ntests:\n"
                    "  - id: \"q-{{ city }}\"\n    prompt: \"Capital of {{ city }}?\"\n"
                    "    eval: {contains: \"{{ capital }}\"}\n    cases_from: rows.csv\n"
                    "  - id: plain\n    prompt: hi\n    eval: {contains: hi}\n    tags: [smoke]\n")
    return path


def _live_tests() -> int:
    gc.collect()
    return sum(isinstance(o, Test) for o in gc.get_objects())


def test_no_expanded_test_is_held_after_loading(tmp_path: Path) -> None:
    before = _live_tests()
    suites, _ = load_suites([_write(tmp_path, 3000)])
    assert len(suites[0].tests) == 3001
    assert _live_tests() == before


def test_the_spool_moves_to_a_file_and_reads_back_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, 500)
    [in_memory], _ = load_suites([path])
    monkeypatch.setattr(stored_tests, "SPOOL_MEMORY_BYTES", 2000)
    [on_disk], _ = load_suites([path])
    assert list(on_disk.tests) == list(in_memory.tests)
    assert on_disk.tests[-1].id == "plain" and on_disk.tests[499].variables["capital"] == "C499"
    verdicts = [score(t, Answer(text=f"It is C{i}.")).passed for i, t in enumerate(on_disk.tests[:3])]
    assert verdicts == [True, True, True]   # each row's evaluator, rebuilt with its own variables
    assert not score(on_disk.tests[1], Answer(text="It is C0.")).passed


def test_selections_and_joins_stay_compact_views(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "t.yaml").write_text("suite: t\ntests:\n  - id: other\n    prompt: yo\n"
                                           "    eval: {contains: yo}\n")
    a_path = _write(tmp_path / "a", 10)
    suites, _ = load_suites([a_path, tmp_path / "b" / "t.yaml"])
    everything = joined(s.tests for s in suites)
    assert isinstance(everything, TestSet) and len(everything) == 12
    picked = subset(everything, [11, 0, 10])
    assert isinstance(picked, TestSet)
    assert [t.id for t in picked] == ["other", "q-c0", "plain"]
    assert [k.id for k in keys_of(picked)] == ["other", "q-c0", "plain"]
    assert [t.id for t in everything[2:4]] == ["q-c2", "q-c3"]
    assert [t.id for t in picked[::-1]] == ["plain", "q-c0", "other"]


def test_definition_samples_read_one_test_a_definition_or_every_row_the_kinds_ask_for(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "suite: s\ntests:\n"
        "  - id: \"j-{{ n }}\"\n    prompt: \"q {{ n }}\"\n    eval: {judge: {rubric: ok, model: \"{{ grader }}\"}}\n"
        "    cases: [{n: 1, grader: big}, {n: 2, grader: small}, {n: 3, grader: big}]\n"
        "  - id: \"c-{{ n }}\"\n    prompt: \"q {{ n }}\"\n    eval: {contains: \"{{ n }}\"}\n"
        "    cases: [{n: 1}, {n: 2}, {n: 3}]\n")
    [suite], _ = load_suites([tmp_path / "s.yaml"])
    assert [t.id for t in definition_samples(suite.tests)] == ["j-1", "c-1"]
    every_judge = list(definition_samples(suite.tests, every_row_of=frozenset({"judge"})))
    assert [t.id for t in every_judge] == ["j-1", "j-2", "j-3", "c-1"]
    assert [t.evaluator.scorer.spec.model for t in every_judge[:3]] == ["big", "small", "big"]


def test_definition_samples_see_a_kind_final_answer_holds(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "suite: s\ntests:\n"
        "  - id: \"a-{{ n }}\"\n    prompt: \"q {{ n }}\"\n    agent: {max_turns: 2}\n"
        "    eval: {final_answer: {judge: {rubric: ok, model: \"{{ grader }}\"}}}\n"
        "    cases: [{n: 1, grader: big}, {n: 2, grader: small}]\n")
    [suite], diagnostics = load_suites([tmp_path / "s.yaml"])
    assert diagnostics == []
    every_judge = list(definition_samples(suite.tests, every_row_of=frozenset({"judge"})))
    assert [t.id for t in every_judge] == ["a-1", "a-2"]
    assert [t.evaluator.held.scorer.spec.model for t in every_judge] == ["big", "small"]


def test_a_temporary_folder_that_cannot_take_the_tests_is_an_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(stored_tests, "SPOOL_MEMORY_BYTES", 2000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    suites, diagnostics = load_suites([_write(tmp_path, 500)])
    assert suites == []
    [problem] = diagnostics
    assert f"in a temporary file in {tmp_path / 'gone'}" in problem.message and "TMPDIR" in problem.message
