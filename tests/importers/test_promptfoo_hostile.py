"""`engine import promptfoo` on hostile or odd input: bounded YAML, no file outside the config's folder unless
asked, generators and scripts reported (never empty tests), and every failure a message at a place, never a
traceback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from engine.errors import ConfigError
from engine.importers.promptfoo import import_promptfoo
from engine.suite import load_suites
from tests.engine_proc import run_engine


def _config(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "promptfooconfig.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _laughs() -> str:
    """A billion-laughs promptfoo config of about 2.6 KB: 9^15 "lol"s once its aliases are expanded."""
    lines = ['laughter_00: &laughter_00 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"laughter_{i:02}: &laughter_{i:02} [{', '.join([f'*laughter_{i - 1:02}'] * 9)}]" for i in range(1, 16)]
    return "\n".join(lines) + "\nprompts: [hi]\nproviders: [openai:chat:m]\ntests:\n  - vars: {x: *laughter_15}\n"


def test_a_billion_laughs_config_is_refused_at_once(tmp_path: Path) -> None:
    text = _laughs()
    assert 2400 < len(text) < 2800
    config = _config(tmp_path, text)
    with pytest.raises(ConfigError, match=r"promptfooconfig.yaml:\d+:\d+: .*repeats anchors"):
        import_promptfoo(config, tmp_path / "out")
    done = run_engine("import", "promptfoo", str(config), "-o", str(tmp_path / "out"), env=dict(os.environ))
    assert done.returncode == 2 and "repeats anchors" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_deep_nesting_is_refused_at_its_place(tmp_path: Path) -> None:
    config = _config(tmp_path, "prompts: [hi]\ntests:\n  - vars: {x: " + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(ConfigError, match="nested more than 100 levels deep"):
        import_promptfoo(config, tmp_path / "out")
    deep_json = '[{"role": "user", "content": "hi"}, ' + "[" * 5000 + "]" * 5000 + "]"
    (tmp_path / "deep.json").write_text(deep_json, encoding="utf-8")
    config = _config(tmp_path, "prompts: [file://deep.json]\ntests:\n  - assert: [{type: contains, value: x}]\n")
    imported = import_promptfoo(config, tmp_path / "out")   # a chat prompt nested past any parser: left out
    assert imported.suites == [] and any("left out" in n.message for n in imported.notes)


@pytest.mark.parametrize(("where", "text"), [
    ("a var", "prompts: ['{{ x }}']\ntests:\n  - vars: {x: file://../outside/secret.txt}\n"
              "    assert: [{type: contains, value: a}]\n"),
    ("a prompt", "prompts: [file://../outside/secret.txt]\ntests:\n  - assert: [{type: contains, value: a}]\n"),
    ("a tests file", "prompts: [hi]\ntests: file://../outside/tests.yaml\n"),
    ("an assert value", "prompts: [hi]\ntests:\n  - assert: [{type: equals, value: file://../outside/secret.txt}]\n"),
    ("a link", "prompts: ['{{ x }}']\ntests:\n  - vars: {x: file://link.txt}\n"
               "    assert: [{type: contains, value: a}]\n"),
])
def test_files_outside_the_configs_folder_are_refused_unless_allowed(tmp_path: Path, where: str, text: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret", encoding="utf-8")
    (outside / "tests.yaml").write_text("- vars: {q: the secret}\n  assert: [{type: contains, value: a}]\n")
    config = _config(tmp_path / "config", text)
    (tmp_path / "config" / "link.txt").symlink_to(outside / "secret.txt")
    done = run_engine("import", "promptfoo", str(config), "-o", str(tmp_path / "out"), env=dict(os.environ))
    assert done.returncode == 2, where
    assert f"{config}:" in done.stderr and "outside the config's folder" in done.stderr
    assert "--allow-outside" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
    allowed = run_engine("import", "promptfoo", str(config), "-o", str(tmp_path / "out"), "--allow-outside",
                         env=dict(os.environ))
    assert allowed.returncode == 0, allowed.stderr


def test_unknown_nunjucks_filters_are_reported_at_their_place_and_known_ones_work(tmp_path: Path) -> None:
    config = _config(tmp_path, """\
prompts:
  - "Shout {{ name | shout }}"
  - "Data {{ items | dump }} / {{ raw | load | first }} / {{ name | upper }}"
nunjucksFilters:
  shout: file://shout.js
tests:
  - vars: {name: ada, items: [1, 2.0, "x"], raw: '["first", 2]'}
    assert: [{type: contains, value: a}]
""")
    imported = import_promptfoo(config, tmp_path / "out")
    messages = [str(n) for n in imported.notes]
    assert f"{config}:4: `nunjucksFilters` not imported: custom filters are JavaScript" in messages[0]
    assert any(m.startswith(f"{config}:7: test test-1 left out of the suite for prompt 'prompt-1'") and
               "the filter `shout`" in m for m in messages)
    [suite], _ = load_suites(imported.suites, golden_check=False)
    assert suite.tests[0].messages[-1]["content"] == 'Data [1,2,"x"] / first / ADA'


def test_vars_given_as_files_are_merged_and_scripts_are_reported(tmp_path: Path) -> None:
    (tmp_path / "vars").mkdir()
    (tmp_path / "vars" / "a.yaml").write_text("city: Paris\ncountry: France\n", encoding="utf-8")
    (tmp_path / "vars" / "b.yaml").write_text("country: Spain\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    for name in ("one", "two"):
        (tmp_path / "docs" / f"{name}.txt").write_text(f"doc {name}\n", encoding="utf-8")
    config = _config(tmp_path, """\
prompts: ["{{ city }} in {{ country }} / {{ doc }}"]
tests:
  - vars: [file://vars/a.yaml, file://vars/b.yaml]
    assert: [{type: contains, value: Paris}]
  - vars: file://vars/*.yaml
    assert: [{type: contains, value: Paris}]
  - vars: {city: Rome, country: Italy, doc: "file://docs/*.txt"}
    assert: [{type: contains, value: Rome}]
  - vars: {city: Oslo, country: Norway, doc: file://make_doc.py}
    assert: [{type: contains, value: Oslo}]
  - path: file://generate_tests.py
  - file://more_tests.py:make
""")
    imported = import_promptfoo(config, tmp_path / "out")
    [suite], _ = load_suites(imported.suites, golden_check=False)
    prompts = {t.id: t.messages[-1]["content"] for t in suite.tests}
    assert prompts == {"test-1": "Paris in Spain / ", "test-2": "Paris in Spain / ",
                       "test-3-1": "Rome in Italy / doc one", "test-3-2": "Rome in Italy / doc two"}
    notes = "\n".join(str(n) for n in imported.notes)
    assert f"{config}:9: test test-4 left out: var `doc` comes from running make_doc.py" in notes
    assert f"{config}:11: tests made by running generate_tests.py not imported" in notes
    assert f"{config}:12: tests made by running more_tests.py:make not imported" in notes


def test_a_standalone_tests_file_named_by_path_is_read(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("q,__expected\nhello,contains:hello\n", encoding="utf-8")
    config = _config(tmp_path, "prompts: ['{{ q }}']\ntests:\n  - path: file://rows.csv\n")
    imported = import_promptfoo(config, tmp_path / "out")
    [suite], _ = load_suites(imported.suites, golden_check=False)
    assert [(t.id, t.messages[-1]["content"]) for t in suite.tests] == [("row-1", "hello")]


# -- anything at all: only a ConfigError may come out, and what is written validates without an error --

_TEXT = st.lists(st.sampled_from([*"ab {}%#|:\"'\\/[],.-_\n*?\x00", "{{", "}}", "{%", "%}", "x", "file://", "../",
                                  "endraw", "dump", "load", ".txt", ".json", ".yaml", ".py", ".png", "$ref"]),
                 max_size=12).map("".join)
_VALUE: Any = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True) | _TEXT,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                           max_leaves=8)
_ASSERT = st.fixed_dictionaries({"type": st.sampled_from(
    ["contains", "icontains", "equals", "regex", "is-json", "contains-json", "starts-with", "contains-any",
     "contains-all", "not-contains", "python", "javascript", "similar", "llm-rubric", "assert-set", "latency",
     "levenshtein", "bogus", ""])}, optional={"value": _VALUE, "threshold": _VALUE, "transform": _VALUE,
                                              "weight": st.sampled_from([0, 1, 2.5])})
_CONFIG = st.fixed_dictionaries({"prompts": st.lists(_TEXT | st.just('[{"role": "user", "content": "{{ a }}"}]'),
                                                     min_size=1, max_size=2)},
                                optional={"tests": st.lists(st.fixed_dictionaries(
                                    {}, optional={"vars": st.dictionaries(st.sampled_from(["a", "b"]), _VALUE),
                                                  "assert": st.lists(_ASSERT, max_size=3),
                                                  "options": st.fixed_dictionaries({}, optional={
                                                      "transform": _VALUE, "prefix": _TEXT}),
                                                  "threshold": _VALUE}), max_size=3),
                                          "defaultTest": st.fixed_dictionaries({}, optional={
                                              "vars": st.dictionaries(st.sampled_from(["a", "c"]), _VALUE),
                                              "assert": st.lists(_ASSERT, max_size=2)})})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(_CONFIG)
def test_any_config_imports_or_is_refused_with_a_message(tmp_path: Path, data: dict[str, Any]) -> None:
    folder = tmp_path / "fuzz"
    folder.mkdir(exist_ok=True)
    config = folder / "promptfooconfig.yaml"
    with open(config, "w", encoding="utf-8") as handle:
        YAML(typ="safe", pure=True).dump(data, handle)
    try:
        imported = import_promptfoo(config, folder / "out")
    except ConfigError as exc:
        assert str(exc).strip() and "Traceback" not in str(exc)
        return
    if imported.suites:
        _, diagnostics = load_suites(imported.suites, golden_check=False)
        assert [str(d) for d in diagnostics if d.severity == "error"] == []


def test_local_refs_are_followed_and_loops_or_floods_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, """\
prompts: [hi]
assertionTemplates:
  pirate: {type: icontains, value: arrr}
tests:
  - assert:
      - $ref: '#/assertionTemplates/pirate'
""")
    imported = import_promptfoo(config, tmp_path / "out")
    [suite], _ = load_suites(imported.suites, golden_check=False)
    assert imported.notes == [] and suite.tests[0].eval == {"contains": "arrr"}
    _config(tmp_path, "prompts: [hi]\na: {$ref: '#/b'}\nb: {$ref: '#/a'}\n")
    with pytest.raises(ConfigError, match="reference loop"):
        import_promptfoo(config, tmp_path / "out")
    rows = ["r0: [x, x, x, x, x, x, x, x, x, x]"]
    rows += [f"r{i}: [{', '.join([repr({'$ref': f'#/r{i - 1}'})] * 10)}]" for i in range(1, 8)]
    _config(tmp_path, "prompts: [hi]\n" + "\n".join(rows) + "\ntests:\n  - vars: {x: {$ref: '#/r7'}}\n")
    with pytest.raises(ConfigError, match="too many references"):
        import_promptfoo(config, tmp_path / "out")


def test_an_out_folder_that_cannot_be_written_is_a_message(tmp_path: Path) -> None:
    config = _config(tmp_path / "config", "prompts: [hi]\ntests:\n  - assert: [{type: contains, value: a}]\n")
    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    done = run_engine("import", "promptfoo", str(config), "-o", str(tmp_path / "a-file"), env=dict(os.environ))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"cannot write the suites to {tmp_path / 'a-file'}" in done.stderr and "choose another --out" in done.stderr
