"""`engine validate` with MCP servers: each started once and its tools listed, the checks' tool names looked up,
goldens replayed through the real server; `--no-start` does none of it. docs/agents.md's worked example is the
suite (mcp-server-time from PyPI, installed by the dev extra)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.engine_proc import run_engine

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
FIXTURE = Path(__file__).with_name("mcp_fixture_server.py")


def _worked_example() -> str:
    section = DOC.read_text().split("## 10. MCP servers", 1)[1]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)[0]


def test_the_worked_example_validates_listing_the_servers_tools_and_replaying_its_goldens(tmp_path: Path) -> None:
    suite = tmp_path / "clock.yaml"
    suite.write_text(_worked_example())
    done = run_engine("validate", str(suite), timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{suite}:3:3: note: MCP server 'clock' lists 2 tool(s): get_current_time, convert_time" in done.stderr
    # a golden whose answer the server's result contradicts fails: it was replayed through the real server
    suite.write_text(_worked_example().replace('"16:30 in Paris is 00:30 the next day in Tokyo."',
                                               '"16:30 in Paris is 23:30 in Tokyo."'))
    broken = run_engine("validate", str(suite), timeout=300)
    assert broken.returncode == 1 and "meeting" in broken.stderr and "00:30" in broken.stderr, broken.stderr
    # --no-start: nothing started, nothing listed, the goldens that call servers not replayed
    skipped = run_engine("validate", "--no-start", str(suite), timeout=60)
    assert skipped.returncode == 0 and "lists" not in skipped.stderr, skipped.stderr


NAMES = """\
suite: names
mcp: {{name: fixture, command: [{python}, {fixture}, raw], prefix: shop_, timeout_s: 20}}
tests:
  - id: right
    prompt: Where is A-17?
    eval: {{tool_call: {{name: shop_lookup_order, args: {{order_id: [A-17]}}}}}}
  - id: unprefixed
    prompt: Where is A-17?
    eval:
      all:
        - tool_sequence: [lookup_order]
        - not: {{tool_call: {{name: drop_tables}}}}
  - id: broken-server
    prompt: Where is A-17?
    mcp: {{name: other, command: [{python}, {fixture}, silent], timeout_s: 2}}
    eval: {{tool_call: {{name: anything}}}}
"""


def test_names_the_checks_refer_to_are_looked_up_and_a_server_that_does_not_start_is_an_error(
        tmp_path: Path) -> None:
    suite = tmp_path / "names.yaml"
    suite.write_text(NAMES.format(python=sys.executable, fixture=FIXTURE))
    done = run_engine("validate", str(suite), timeout=300)
    lines = done.stderr.splitlines()
    assert done.returncode == 1, done.stderr
    assert any(":2:6: note: MCP server 'fixture' lists 4 tool(s): lookup_order, whoami, boom, stall" in line
               for line in lines), done.stderr
    assert any(":7:1: error: test 'unprefixed': its checks name 'lookup_order', which it is not offered" in line
               and "shop_lookup_order" in line for line in lines), done.stderr
    assert not any("drop_tables" in line or "'right'" in line for line in lines), done.stderr
    assert any(":15:10: error: MCP server 'other' did not start within 2 s" in line for line in lines), done.stderr
    assert run_engine("validate", "--no-start", str(suite), timeout=60).returncode == 0
