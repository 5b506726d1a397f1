"""`engine validate | list | schema | init` as a person runs them: real subprocesses, real exit codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.engine_proc import run_engine

VALID = Path(__file__).resolve().parent / "fixtures" / "valid"


def engine(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_engine(*args, cwd=cwd)


def test_validate_valid_suite_exits_0() -> None:
    proc = engine("validate", str(VALID))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "0 errors, 0 warnings in 1 file (6 tests loaded)"


def test_validate_reports_all_files_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("suite: a\ntests:\n  - {id: x, prompt: p, eval: {contians: p}}\n")
    (tmp_path / "b.yaml").write_text("suite: b\ntests:\n  - {id: x, prompt: p, max_tokens: 0}\n")
    proc = engine("validate", str(tmp_path))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == f"{tmp_path / 'a.yaml'}:3:31: error: unknown evaluator 'contians' — did you mean 'contains'?"
    assert lines[1].startswith(f"{tmp_path / 'b.yaml'}:3:36: error: 'max_tokens' must be at least 1")
    assert lines[2] == "2 errors, 0 warnings in 2 files (0 tests loaded)"


def test_validate_usage_errors_exit_2(tmp_path: Path) -> None:
    assert engine("validate", str(tmp_path / "missing.yaml")).returncode == 2
    assert engine("validate").returncode == 2
    assert engine("schema", "nonsense").returncode == 2


def test_golden_check_runs_by_default_and_can_be_skipped(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("suite: g\ntests:\n  - id: a\n    prompt: p\n    golden: Paris\n    eval: {equals: Lyon}\n")
    checked = engine("validate", str(path))
    assert checked.returncode == 1 and "golden answer scores 0.00" in checked.stderr
    assert engine("validate", "--no-golden-check", str(path)).returncode == 0


def test_validate_checks_a_models_file(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  m: {base_url: 'ftp://x'}\n")
    proc = engine("validate", str(VALID), "--models", str(models))
    assert proc.returncode == 1
    assert f"{models}:2:17: error: 'base_url' must start with http:// or https://" in proc.stderr


def test_list_prints_a_row_per_test_with_hash() -> None:
    proc = engine("list", str(VALID))
    assert proc.returncode == 0
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split() == ["SUITE", "TEST", "TAGS", "EVALUATORS", "HASH"]
    assert len(lines) == 7
    row = next(line for line in lines if "capital-italy" in line).split()
    assert row[:4] == ["capitals", "capital-italy", "knowledge", "all,regex,equals"] and len(row[4]) == 16


def test_schema_prints_the_json_schemas() -> None:
    suite = json.loads(engine("schema").stdout)
    assert suite["title"] == "suite"
    assert json.loads(engine("schema", "models").stdout)["title"] == "models file"


def test_init_writes_a_starter_that_validates_and_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "new"
    assert engine("init", str(target)).returncode == 0
    starter = target / "my-first-suite.yaml"
    text = starter.read_text(encoding="utf-8")
    assert text.startswith("# yaml-language-server: $schema=") and "suite.schema.json" in text
    assert (target / text.split("$schema=")[1].split("\n")[0]).resolve().is_file()
    assert engine("validate", str(starter)).returncode == 0
    assert engine("init", str(target)).returncode == 2


def test_the_starters_schema_line_resolves_wherever_the_folder_goes(tmp_path: Path) -> None:
    """The schema line names a file in the suite's own folder: moved elsewhere, the folder keeps it, the suite
    validates against it, and `engine validate FOLDER` does not read the JSON file as a suite."""
    import shutil

    import jsonschema
    from ruamel.yaml import YAML

    from engine.suite.schema import load_schema

    assert engine("init", str(tmp_path / "made")).returncode == 0
    moved = tmp_path / "elsewhere" / "deeper" / "suites"
    shutil.move(str(tmp_path / "made"), moved)
    text = (moved / "my-first-suite.yaml").read_text(encoding="utf-8")
    named = moved / text.split("$schema=")[1].split("\n")[0]
    assert named.parent == moved and named.is_file()
    schema = json.loads(named.read_text(encoding="utf-8"))
    assert schema == load_schema("suite")
    jsonschema.validate(YAML(typ="safe", pure=True).load(text), schema)
    done = engine("validate", str(moved))
    assert done.returncode == 0, done.stderr
    assert "1 file" in done.stdout + done.stderr


def test_list_names_evaluator_kinds_not_their_options(repo_root: Path) -> None:
    proc = engine("list", str(repo_root / "suites" / "arithmetic.yaml"))
    kinds = {line.split()[3] for line in proc.stdout.strip().splitlines()[1:]}
    assert kinds == {"numeric"}  # `pattern:` is an option of numeric, not an evaluator


def test_the_example_suites_validate_with_nothing_to_say_on_the_default_models(repo_root: Path) -> None:
    """What `make run` shows first: no error, warning or note (the default configurations' floor, 8 tokens,
    raises none of the example suites' limits, and none demands a tool call of the completions API)."""
    proc = engine("validate", "--no-golden-check", str(repo_root / "suites"))
    assert proc.returncode == 0, proc.stderr
    [summary] = proc.stderr.splitlines()
    assert summary.startswith("0 errors, 0 warnings in "), proc.stderr


def test_validate_says_what_the_models_will_not_take_as_written(tmp_path: Path) -> None:
    """A max_tokens below a model's floor is a note (the run raises it); a tool call demanded of a
    completions-API model, which carries no tools, is a warning; neither fails the check."""
    suite = tmp_path / "s.yaml"
    suite.write_text("suite: s\ntools:\n  find_slots: {description: Free tables., parameters: {type: object}}\n"
                     "defaults: {max_tokens: 24}\ntests:\n"
                     "  - {id: plain, prompt: p, eval: {contains: x}}\n"
                     "  - {id: named, prompt: p, tools: [find_slots], tool_choice: find_slots, eval: {tool_call: "
                     "{name: find_slots}}}\n"
                     "  - {id: left-to-the-model, prompt: p, tools: [find_slots], tool_choice: auto, eval: {contains: "
                     "x}}\n"
                     "  - {id: short, prompt: p, max_tokens: 4, tools: [find_slots], tool_choice: required, eval: "
                     "{contains: x}}\n")
    models = tmp_path / "models.yaml"
    models.write_text("models:\n"
                      "  tiny: {builtin: smollm2-135m}\n"                                  # floor 64
                      "  complete: {builtin: gemma-3-270m, api: completions, params: {max_tokens: 16}}\n"
                      "  hosted: {base_url: 'https://api.example.com/v1', model: m}\n")   # floor 1024
    proc = engine("validate", str(suite), "--models", str(models))
    assert proc.returncode == 0, proc.stderr
    floor = ("a model's params.max_tokens (else 1024) is a floor a test can raise but not lower, so a reasoning "
             "model is not starved; a lower params.max_tokens in the models file lets the test's value through")
    uncallable = ("which the completions-API model(s) complete cannot make: the completions API carries no tools, so "
                  "neither they nor the choice are sent to them; give them `api: chat`, or leave them out with --model")
    assert proc.stderr.splitlines() == [
        f"{suite}:6:1: note: max_tokens 4 to 24 of 4 tests (first: 'plain') is raised to 64 for tiny: {floor}",
        f"{suite}:6:1: note: max_tokens 4 to 24 of 4 tests (first: 'plain') is raised to 1024 for hosted: {floor}",
        f"{suite}:7:1: warning: test 'named' demands a tool call (`tool_choice: find_slots`), {uncallable}",
        f"{suite}:9:1: note: max_tokens 4 of test 'short' is raised to 16 for complete: {floor}",
        f"{suite}:9:1: warning: test 'short' demands a tool call (`tool_choice: required`), {uncallable}",
        "0 errors, 2 warnings in 2 files (4 tests loaded)"]
    # without --models: the models `engine run` would use (floor 8; two gemma configurations on completions)
    alone = engine("validate", str(suite))
    assert alone.returncode == 0, alone.stderr
    assert "note: max_tokens 4 of test 'short' is raised to 8 for gemma-chat, gemma-complete, " \
           "gemma-complete-warm, smollm2-tools (the default embedded models)" in alone.stderr
    assert "completions-API model(s) gemma-complete, gemma-complete-warm (the default embedded models) cannot " \
           "make" in alone.stderr
