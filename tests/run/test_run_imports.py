"""What a run does not import (issue #22 item 2: fixed cost before the first call)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.engine_proc import checkout_env


def test_runner_and_a_parquet_part_leave_pyarrow_compute_unimported(tmp_path):
    # A fresh interpreter: this test process has imported everything already.
    code = (
        "import sys\n"
        "import engine.run.runner, engine.run.inputs\n"
        "from engine.results.writer import table_from_json_lines\n"
        "from engine.results.schema import SCHEMA\n"
        "import json\n"
        "row = {name: None for name in SCHEMA.names}\n"
        "row['started_at'] = 1764756000000000\n"
        "table = table_from_json_lines(1, json.dumps(row).encode())\n"
        "assert table.schema.equals(SCHEMA, check_metadata=True), table.schema\n"
        "print(table.column('started_at').type, table.column('started_at').chunk(0).view('int64')[0].as_py())\n"
        "print(sorted(m for m in ('pyarrow.compute',) if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["timestamp[us, tz=UTC] 1764756000000000", "[]"]


# A whole `engine run` in a fresh interpreter (not the tests' fork server, which pre-imports the CLI), then
# the modules it imported. Run the way `python -m engine` runs it.
_RUN_THEN_LIST_MODULES = (
    "import json, runpy, sys\n"
    "sys.argv = ['engine', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('engine', run_name='__main__', alter_sys=True)\n"
    "except SystemExit as exc:\n"
    "    assert exc.code in (0, None), exc.code\n"
    "watched = ('jsonschema', 'fastjsonschema', 'numpy', 'pandas')\n"
    "print('IMPORTED', json.dumps(sorted(m for m in watched if m in sys.modules)))\n"
)


def _imported_by_a_run(tmp_path: Path, base_url: str, suite: str) -> list[str]:
    (tmp_path / "suite.yaml").write_text(suite)
    (tmp_path / "models.yaml").write_text(f"models:\n  m:\n    base_url: {base_url}\n    model: m-1\n")
    out = subprocess.run([sys.executable, "-c", _RUN_THEN_LIST_MODULES, "run", str(tmp_path / "suite.yaml"),
                          "--models", str(tmp_path / "models.yaml"), "--out", str(tmp_path / "results"), "--quiet"],
                         capture_output=True, text=True, env=checkout_env(), check=False)
    assert out.returncode == 0, out.stderr
    assert list((tmp_path / "results").glob("*/part-*.parquet")), "the run wrote no results"
    line = next(line for line in out.stdout.splitlines() if line.startswith("IMPORTED "))
    return json.loads(line[len("IMPORTED "):])


def test_a_plain_run_never_imports_jsonschema_numpy_or_pandas(tmp_path: Path, fake_openai) -> None:
    # jsonschema costs 80-110 ms to import: a valid suite is checked by the compiled fastjsonschema
    # pre-check, and only the evaluators and tools that need jsonschema import it. numpy: pyarrow is
    # loaded without it (engine/_arrow.py, 11 MB and ~0.2 s), and pandas is never needed.
    suite = ("suite: plain\ntests:\n  - id: a\n    prompt: say ok\n    eval: {contains: ok}\n"
             "  - id: \"b-{{ n }}\"\n    prompt: \"say {{ n }}\"\n    eval: {regex: ok}\n    cases: [{n: 1}, {n: 2}]\n")
    assert _imported_by_a_run(tmp_path, fake_openai.base_url, suite) == ["fastjsonschema"]


def test_a_run_with_a_json_schema_evaluator_imports_it(tmp_path: Path, fake_openai) -> None:
    # The other side of the test above: the check sees jsonschema when a suite needs it.
    suite = "suite: js\ntests:\n  - id: a\n    prompt: say ok\n    eval: {json_schema: {type: object}}\n"
    assert _imported_by_a_run(tmp_path, fake_openai.base_url, suite) == ["fastjsonschema", "jsonschema"]
