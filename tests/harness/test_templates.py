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


def _problems(tmp_path: Path, text: str) -> list[str]:
    """The diagnostics loading `text` as ./h.yaml gives, each as printed, with the folder cut off."""
    (tmp_path / "h.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(SuiteError) as caught:
        templates.load_harness("./h.yaml", tmp_path)
    return [str(d).replace(f"{tmp_path}/", "") for d in caught.value.diagnostics]


def test_an_invalid_harness_points_at_file_line_and_column(tmp_path: Path) -> None:
    assert _problems(tmp_path, "language: python\nrun: [python, main.py]\nscore: stdout\n"
                               "files: {main.py: x}\nextra: 1\n") == [
        "h.yaml:3:8: error: 'score' must be exit_code or cases, but it is the text 'stdout'; write one of them, "
        "e.g. `score: exit_code`",
        "h.yaml:5:1: error: unknown key 'extra' in the harness; the keys allowed are 'name', 'description', "
        "'language', 'files', 'run', 'score', 'timeout_s', 'memory_mb'",
    ]


def test_a_harness_that_is_not_valid_yaml_says_where_and_how_to_fix_it(tmp_path: Path) -> None:
    assert _problems(tmp_path, "language: python\nrun: [python, main.py\nscore: exit_code\n"
                               "files: {main.py: x}\n") == [
        "h.yaml:2:6: error: not valid YAML: did not find expected ',' or ']'; a [list] or {mapping} written on one "
        "line is not closed, or an item in it needs quotes"]
    assert _problems(tmp_path, "language: python\nlanguage: node\n") == [
        "h.yaml:2:1: error: duplicate key 'language' (first written on line 1); keep one of them"]
    assert _problems(tmp_path, "# to do\n") == [
        "h.yaml:1:1: error: the file is empty; a harness needs at least `language:`, `files:`, `run:` and `score:` "
        "(see docs/harnesses.md)"]


def test_a_harness_gets_the_suites_safety_rules(tmp_path: Path) -> None:
    assert _problems(tmp_path, "language: python\nrun: [python, main.py]\nscore: exit_code\n"
                               "files: !!python/object/apply:os.system [id]\n") == [
        "h.yaml:4:8: error: the tag '!!python/object/apply:os.system' is not allowed in harness files (only plain "
        "YAML values are); remove it"]
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6))
    [refused] = _problems(tmp_path, bomb)
    assert "repeats anchors" in refused


def test_unknown_keys_and_wrong_types_in_a_harness_are_said_in_plain_words(tmp_path: Path) -> None:
    assert _problems(tmp_path, "langauge: python\nrun: python main.py\nscore: exit_code\ntimeout_s: '10'\n"
                               "memory_mb: 8\nname: my harness\nfiles:\n  main.py: 3\n  ../x.py: x\n") == [
        "h.yaml:1:1: error: unknown key 'langauge' in the harness — did you mean 'language'?",
        "h.yaml:2:6: error: 'run' must be a list, but it is the text 'python main.py'; write a list, e.g. "
        "[python, main.py]",
        "h.yaml:4:12: error: 'timeout_s' must be a number, but it is the text '10'; write the number without quotes",
        "h.yaml:5:12: error: 'memory_mb' must be at least 16, but it is 8",
        "h.yaml:6:7: error: 'name' may only use letters, digits and _ . - and must start with a letter or digit, "
        "but it is the text 'my harness'",
        "h.yaml:8:12: error: the template of 'main.py' in 'files' must be text, but it is the number 3; YAML read 3 "
        "as the number 3: put it in quotes, '3', to keep it as text",
        "h.yaml:9:3: error: the file name '../x.py' in 'files' must be a relative path inside the work folder: "
        "letters, digits and _ . / - only, not starting with '/', no '..'",
    ]
    assert _problems(tmp_path, "- language: python\n") == [
        "h.yaml:1:1: error: the harness must be a mapping (key: value lines), but it is a list"]
    assert _problems(tmp_path, "language: python\nrun: []\nscore:\nfiles: {}\n") == [
        "h.yaml:2:6: error: 'run' must name the program to run, e.g. [python, main.py]",
        "h.yaml:3:7: error: 'score' must be exit_code or cases, but it is empty; write one of them, e.g. "
        "`score: exit_code`",
        "h.yaml:4:8: error: 'files' must name at least one file to write, e.g. `main.py: |` and its template on the "
        "lines below",
    ]
    assert _problems(tmp_path, "run: [python, 7]\nscore: cases\nfiles: {main.py: x}\n") == [
        "h.yaml:1:1: error: the harness needs 'language' (add `language:`; see docs/harnesses.md)",
        "h.yaml:1:15: error: item 2 of 'run' must be text, but it is the number 7; YAML read 7 as the number 7: put "
        "it in quotes, '7', to keep it as text",
    ]


def test_a_template_that_does_not_compile_is_reported(tmp_path: Path) -> None:
    assert _problems(tmp_path, "language: python\nrun: [python, '{{ x ']\nscore: exit_code\n"
                               "files:\n  main.py: '{{ code '\n") == [
        "h.yaml:2:15: error: template run/1 does not compile: unexpected end of template, expected 'end of print "
        "statement'; check that every {{ ... }} and {% ... %} is closed",
        "h.yaml:5:3: error: template files/main.py does not compile: unexpected end of template, expected 'end of "
        "print statement'; check that every {{ ... }} and {% ... %} is closed",
    ]


def test_a_missing_template_variable_is_an_error_verdict_naming_the_fix() -> None:
    verdict = run_exec({"harness": "humaneval"}, "    return 1\n")
    assert verdict.error
    assert "'test' is undefined" in verdict.reason and "vars" in verdict.reason


def test_a_harness_file_may_not_write_outside_the_work_folder(tmp_path: Path) -> None:
    assert _problems(tmp_path, "language: python\nrun: [python, main.py]\nscore: exit_code\n"
                               "files: {'../x.py': x, /etc/y: z}\n") == [
        f"h.yaml:4:{col}: error: the file name '{name}' in 'files' must be a relative path inside the work folder: "
        "letters, digits and _ . / - only, not starting with '/', no '..'" for col, name in ((9, "../x.py"),
                                                                                             (23, "/etc/y"))]


def test_the_worked_example_in_the_docs_runs(repo_root: Path, tmp_path: Path) -> None:
    import re

    from engine.base.yaml import load_yaml_text
    from engine.model.answer import Answer

    text = (repo_root / "docs" / "harnesses.md").read_text()
    section = text[text.index("## Writing your own harness"):]
    harness_yaml, suite_yaml = re.findall(r"```yaml\n(.*?)\n```\n", section, re.DOTALL)[:2]
    (tmp_path / "roman.harness.yaml").write_text(harness_yaml)
    test = load_yaml_text(suite_yaml, "roman.yaml").data["tests"][0]
    spec = test["eval"]["exec"]
    assert run_exec(spec, Answer.from_golden(test["golden"]).text, suite_dir=tmp_path).passed
    wrong = run_exec(spec, "```python\ndef to_roman(n):\n    return 'I' * n\n```", suite_dir=tmp_path)
    assert not wrong.passed and "to_roman(4) gave 'IIII', expected 'IV'" in wrong.reason


def test_loading_suites_and_harnesses_reads_with_ruamel_c_parser_not_pyyaml(repo_root: Path) -> None:
    """One YAML library: suites and harnesses are read by ruamel.yaml's C parser, and PyYAML is never loaded."""
    import subprocess
    import sys

    code = ("import sys\nfrom engine.suite import load_suites\nfrom engine.harness import templates\n"
            "suites, problems = load_suites(['suites/'])\nassert suites and not problems, problems\n"
            "[templates.load_harness(n) for n in templates.builtin_names()]\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', '_yaml', '_ruamel_yaml')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['_ruamel_yaml']"
