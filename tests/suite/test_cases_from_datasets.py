"""`cases_from: {dataset: ...}` through Hugging Face `datasets` (the `[datasets]` extra, installed by `make test`).

The datasets are written in the test with `save_to_disk` and read back offline; nothing touches the network.
"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from engine.suite import load_suites

TEST = """suite: s
tests:
  - id: q-{{ id }}
    prompt: "Q: {{ question }}"
    eval: {contains: "{{ golden }}"}
"""
ROWS = {"id": ["a", "b", "c"], "question": ["Capital of France?", "Capital of Japan?", "Capital of Iceland?"],
        "golden": ["Paris", "東京", "Reykjavík"], "level": [1, 2, 3]}


def load(tmp_path: Path, cases_from: str, *, key: str = "cases_from") -> tuple[list[Any], list[str]]:
    path = tmp_path / "s.yaml"
    path.write_text(TEST + f"    {key}: {cases_from}\n", encoding="utf-8")
    suites, diagnostics = load_suites([path], golden_check=True)
    return [t for s in suites for t in s.tests], [str(d).replace(str(tmp_path) + "/", "") for d in diagnostics]


@pytest.fixture
def datasets() -> Any:
    """The `datasets` module, imported here rather than at collection: it costs each pytest-xdist worker
    ~0.7 CPU-s to import (pandas, fsspec, huggingface_hub), and only the worker running these tests needs it."""
    return pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, datasets: Any) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)


def test_a_saved_dataset_gives_the_same_tests_as_inline_cases(tmp_path: Path, datasets: Any) -> None:
    datasets.Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "capitals"))
    from_ds, problems = load(tmp_path, "{dataset: capitals, columns: [id, question, golden], filter: 'level < 3'}")
    assert problems == []
    assert [t.id for t in from_ds] == ["q-a", "q-b"]
    inline, problems = load(tmp_path, "[{id: a, question: Capital of France?, golden: Paris},"
                                      " {id: b, question: Capital of Japan?, golden: 東京}]", key="cases")
    assert problems == []
    assert [t.hash for t in from_ds] == [t.hash for t in inline]
    assert from_ds == inline


def test_a_dataset_dict_picks_test_or_the_named_split(tmp_path: Path, datasets: Any) -> None:
    both = datasets.DatasetDict({"train": datasets.Dataset.from_dict({k: v[:1] for k, v in ROWS.items()}),
                                 "test": datasets.Dataset.from_dict({k: v[1:] for k, v in ROWS.items()})})
    both.save_to_disk(str(tmp_path / "dd"))
    tests, problems = load(tmp_path, "{dataset: dd}")
    assert problems == [] and [t.id for t in tests] == ["q-b", "q-c"]
    tests, problems = load(tmp_path, "{dataset: dd, split: train}")
    assert problems == [] and [t.id for t in tests] == ["q-a"]
    _, problems = load(tmp_path, "{dataset: dd, split: validation}")
    assert problems == ["dd: error: this dataset has no split 'validation'; its splits are: train, test"]


def test_a_golden_failing_in_a_dataset_row_names_the_row(tmp_path: Path, datasets: Any) -> None:
    rows = dict(ROWS, golden=["Paris", "Kyoto", "Reykjavík"])
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "bad"))
    path = tmp_path / "s.yaml"
    path.write_text(TEST.replace('"{{ golden }}"', "Paris") + "    cases_from: {dataset: bad}\n", encoding="utf-8")
    _, diagnostics = load_suites([path], golden_check=True)
    assert [d.line for d in diagnostics] == [0, 0]
    assert str(diagnostics[0]).startswith("bad: error: row 2: test 'q-b' (defined at ")


def test_a_hub_name_missing_from_the_cache_is_a_clear_error_offline(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _, problems = load(tmp_path, "{dataset: nobody/no-such-dataset, split: test}")
    assert len(problems) == 1
    assert problems[0].startswith("nobody/no-such-dataset: error: cannot load this dataset (offline: only the local "
                                  "cache is read): ")


def test_without_the_extra_the_error_names_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_datasets(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "datasets" or name.startswith("datasets."):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    _, problems = load(tmp_path, "{dataset: owner/name}")
    assert problems == ["owner/name: error: reading cases from a dataset needs the Hugging Face `datasets` package: "
                        "pip install '.[datasets]'"]
