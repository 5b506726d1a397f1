from pathlib import Path

import pytest
from harness_helpers import run_exec

from engine.errors import HarnessError, SuiteError
from engine.harness import templates

BUILTINS = ["bash", "humaneval", "node", "python-function", "python-script"]


def test_every_builtin_harness_is_valid() -> None:
    assert templates.builtin_names() == BUILTINS
    for name in BUILTINS:
        harness = templates.load_harness(name)
        assert harness.name == name
        assert harness.score in ("exit_code", "cases")


def test_a_suite_harness_next_to_the_suite(tmp_path: Path) -> None:
    (tmp_path / "upper.yaml").write_text(
        "language: python\nrun: [python, main.py]\nscore: exit_code\n"
        "files:\n  main.py: |\n    {{ code }}\n    print(shout({{ word | py }}))\n")
    verdict = run_exec({"harness": "./upper.yaml", "vars": {"word": "hi"}, "expect_stdout": "HI"},
                       "```python\ndef shout(w):\n    return w.upper()\n```", suite_dir=tmp_path)
    assert verdict.passed, verdict.reason


def test_a_harness_outside_the_suite_folder_is_refused(tmp_path: Path) -> None:
    suite_dir = tmp_path / "suites"
    suite_dir.mkdir()
    (tmp_path / "evil.yaml").write_text("language: python\nrun: [python, main.py]\nscore: exit_code\n"
                                        "files: {main.py: x}\n")
    with pytest.raises(HarnessError, match="outside this suite's folder"):
        templates.load_harness("../evil.yaml", suite_dir)
    verdict = run_exec({"harness": "../evil.yaml"}, "x", suite_dir=suite_dir)
    assert verdict.error and "outside this suite's folder" in verdict.reason


def test_unknown_builtin_names_the_choices() -> None:
    with pytest.raises(HarnessError, match="python-function"):
        templates.load_harness("pyhton-function")


def test_an_invalid_harness_points_at_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("language: python\nrun: [python, main.py]\nscore: stdout\n"
                                       "files: {main.py: x}\nextra: 1\n")
    with pytest.raises(SuiteError) as caught:
        templates.load_harness("./bad.yaml", tmp_path)
    text = str(caught.value)
    assert f"{tmp_path / 'bad.yaml'}:3:1: error: at score" in text
    assert f"{tmp_path / 'bad.yaml'}:5:1: error: at the top level: unknown key 'extra'" in text


def test_a_template_that_does_not_compile_is_reported(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("language: python\nrun: [python, main.py]\nscore: exit_code\n"
                                          "files:\n  main.py: '{{ code '\n")
    with pytest.raises(SuiteError, match=r"broken.yaml:5:3: error: template files/main.py does not compile"):
        templates.load_harness("./broken.yaml", tmp_path)


def test_a_missing_template_variable_is_an_error_verdict_naming_the_fix() -> None:
    verdict = run_exec({"harness": "humaneval"}, "    return 1\n")
    assert verdict.error
    assert "'test' is undefined" in verdict.reason and "vars" in verdict.reason


def test_a_harness_file_may_not_write_outside_the_work_folder(tmp_path: Path) -> None:
    (tmp_path / "escape.yaml").write_text("language: python\nrun: [python, main.py]\nscore: exit_code\n"
                                          "files: {'../x.py': x}\n")
    with pytest.raises(SuiteError, match="files"):
        templates.load_harness("./escape.yaml", tmp_path)


def test_the_worked_example_in_the_docs_runs(repo_root: Path, tmp_path: Path) -> None:
    import re

    from ruamel.yaml import YAML

    from engine.model import Answer

    text = (repo_root / "docs" / "harnesses.md").read_text()
    section = text[text.index("## Writing your own harness"):]
    harness_yaml, suite_yaml = re.findall(r"```yaml\n(.*?)\n```\n", section, re.DOTALL)[:2]
    (tmp_path / "roman.harness.yaml").write_text(harness_yaml)
    test = YAML(typ="safe").load(suite_yaml)["tests"][0]
    spec = test["eval"]["exec"]
    assert run_exec(spec, Answer.from_golden(test["golden"]).text, suite_dir=tmp_path).passed
    wrong = run_exec(spec, "```python\ndef to_roman(n):\n    return 'I' * n\n```", suite_dir=tmp_path)
    assert not wrong.passed and "to_roman(4) gave 'IIII', expected 'IV'" in wrong.reason
