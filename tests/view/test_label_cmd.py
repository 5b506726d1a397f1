"""`engine label`: an attempt's verdict labelled from the command line lands in the same `_labels.parquet` the
viewer writes, shows on the viewer's test page, and counts in `engine analyze`; a row that does not exist, or one
with no verdict, is a clear error that writes nothing."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pyarrow.parquet as pq
import pytest

from engine.analysis.labels import LABELS_FILE
from engine.view.store import find_runs
from tests.engine_proc import run_engine
from tests.fake_openai import FakeOpenAI, Reply
from tests.view.test_view_server import Live
from tests.view.viewrun import DOC, documented_link


def _label(run: Path, *args: object) -> tuple[int, str]:
    done = run_engine("label", run, *args)
    return done.returncode, (done.stdout + done.stderr).strip()


async def test_a_label_given_by_name_is_the_viewers_label(results_copy: Path) -> None:
    run = results_copy / "latest"
    code, said = _label(run, "--model", "other", "--test", "country-Spain", "wrong", "--note", "Barcelona is not it",
                        "--reviewer", "ann")
    assert code == 0, said
    assert said == (f"labelled the verdict of other's attempt 0 at geo/country-Spain#1 (failed) wrong as ann; "
                    f"1 label(s) in {run / LABELS_FILE}")
    code, said = _label(run, "right", "--model", "other", "--test", "geo/country-Spain", "--case", "1",
                        "--attempt", "0", "--reviewer", "ann")
    assert code == 0 and "replacing your earlier 'wrong'" in said, said
    rows = pq.read_table(run / LABELS_FILE).to_pylist()
    assert [(r["model"], r["test_id"], r["case_index"], r["attempt"], r["label"], r["note"], r["reviewer"])
            for r in rows] == [("other", "country-Spain", 1, 0, "wrong", "Barcelona is not it", "ann"),
                               ("other", "country-Spain", 1, 0, "right", None, "ann")]
    # The viewer's test page shows it on that attempt (its own reading of the same file).
    async with Live(results_copy) as server, aiohttp.ClientSession() as session:
        name = next(iter(find_runs(results_copy)))
        async with session.get(server.base + "/api/test", params={"run": name, "suite": "geo",
                                                                  "test_id": "country-Spain", "case": 1}) as response:
            data = await response.json()
    reviews = {a["model"]: a["review"] for a in data["attempts"]}
    assert reviews["fast"] is None and (reviews["other"]["label"], reviews["other"]["reviewer"]) == ("right", "ann")
    # engine analyze counts it.
    done = run_engine("analyze", run)
    assert done.returncode == 0, done.stderr
    assert "1 label" in done.stdout


@pytest.mark.parametrize("args, message", [
    (("--model", "othr", "--test", "france", "right"),
     "error: no model 'othr' in RUN - did you mean 'other'? (its models: fast, other)"),
    (("--model", "other", "--test", "frnce", "right"),
     "error: no test 'frnce' for other in RUN - did you mean 'france'? (4 tests; `engine analyze RUN --format csv` "
     "lists them)"),
    (("--model", "other", "--test", "country-Spain", "--case", "3", "right"),
     "error: no case 3 in other's rows of geo/country-Spain in RUN (cases 1)"),
    (("--model", "other", "--test", "france", "--case", "1", "right"),
     "error: geo/france has no cases: leave out --case"),
    (("--model", "other", "--test", "france", "--attempt", "2", "right"),
     "error: no attempt 2 in other's rows of geo/france in RUN (attempts 0, counted from 0)"),
    (("--model", "other", "--test", "france", "maybe"),
     "error: 'maybe': say whether the verdict is `right` or `wrong`"),
])
def test_a_row_that_does_not_exist_is_an_error_naming_what_there_is(results_copy: Path, args: tuple[str, ...],
                                                                    message: str) -> None:
    run = results_copy / "latest"
    code, said = _label(run, *args)
    assert (code, said) == (2, message.replace("RUN", str(run)))
    assert not (run / LABELS_FILE).exists()


def test_a_folder_of_runs_is_not_a_run(results_copy: Path) -> None:
    code, said = _label(results_copy, "--model", "other", "--test", "france", "right")
    assert code == 2, said
    assert said.startswith(f"error: {results_copy} is not a run folder but holds 1 run(s): give one "), said


SUITE = """\
suite: s
tests:
  - id: twice
    prompt: "Say ok."
    repeat: 2
    eval: {contains: ok}
  - id: broken
    prompt: "Fail please."
    eval: {contains: ok}
"""


def test_repeats_need_an_attempt_and_an_error_row_has_no_verdict(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(fault="http_400") if "Fail" in str(body) else Reply(content="ok")
    (tmp_path / "s.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(f"models:\n  m:\n    base_url: {fake_openai.base_url}\n    model: m-1\n"
                                          "    max_retries: 0\n")
    done = run_engine("run", tmp_path / "s.yaml", "--models", tmp_path / "models.yaml", "--out", tmp_path / "out",
                      "--quiet")
    assert done.returncode in (0, 1), done.stderr
    run = tmp_path / "out" / "latest"
    code, said = _label(run, "--model", "m", "--test", "twice", "right")
    assert (code, said) == (2, "error: m ran s/twice 2 times (attempts 0, 1): give --attempt K")
    code, said = _label(run, "--model", "m", "--test", "broken", "wrong")
    assert (code, said) == (2, "error: m's attempt 0 at s/broken is an error row (http_400): it has no verdict "
                               "to label")
    assert not (run / LABELS_FILE).exists()
    code, said = _label(run, "--model", "m", "--test", "twice", "--attempt", "1", "right")
    assert code == 0 and said.startswith("labelled the verdict of m's attempt 1 at s/twice (passed) right as "), said



async def test_the_documented_link_names_what_the_test_page_shows(results_copy: Path) -> None:
    """The link's keys are what the test page asks the server for (`/api/test`), and they name the Spain case."""
    name = next(iter(find_runs(results_copy)))
    page, query = documented_link(name)
    assert page == "test"
    async with Live(results_copy) as server, aiohttp.ClientSession() as session, \
            session.get(server.base + "/api/test", params=query) as response:
        assert response.status == 200
        data = await response.json()
    assert (data["suite"], data["test_id"], data["case_index"]) == ("geo", "country-Spain", 1)
    assert [(a["model"], a["answer"]) for a in data["attempts"]] == [("fast", "Madrid"), ("other", "Barcelona")]


def test_the_documented_label_command_works(results_copy: Path) -> None:
    import re
    import shlex

    line = re.search(r"^engine label results/latest (.*)$", DOC, flags=re.M)
    assert line is not None
    code, said = _label(results_copy / "latest", *shlex.split(line.group(1)))
    assert code == 0 and " at geo/country-Spain#1 (failed) wrong as " in said, said


def test_every_option_of_engine_label_is_documented() -> None:
    import typer

    from engine.cli import app

    command = typer.main.get_command(app).commands["label"]   # type: ignore[attr-defined]
    options = [opt for param in command.params for opt in param.opts if opt.startswith("--")]
    assert {"--model", "--test", "--case", "--attempt", "--note", "--reviewer"} <= set(options)
    section = DOC.split("### Labelling from the command line", 1)[1].split("\n## ", 1)[0]
    assert all(option in section for option in options), [o for o in options if o not in section]
