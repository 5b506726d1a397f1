"""What a run does not import (issue #22 item 2: fixed cost before the first call)."""

from __future__ import annotations

import subprocess
import sys


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
