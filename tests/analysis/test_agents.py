"""Agent figures in `engine analyze` and the transcript in the report's drill-down, from real Parquet.

Conversations are played through the real agent loop (engine/agent: replay_golden with tools compiled
from `returns` rules), written as results rows with the agent columns the design note plans
(builders.AGENT_SCHEMA), and read back with `load`. A single-turn run shows no agent figures.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from builders import AGENT_SCHEMA, agent_row, grid_rows, write_run

from engine.agent.golden import replay_golden
from engine.analysis import ANALYSIS_COLUMNS, analyze, load
from engine.analysis.agents import per_model_agents
from engine.analysis.render import render
from engine.analysis.report import build_payload, render_html
from engine.model.agent import AgentSettings
from engine.model.transcript import Transcript
from engine.suite.agent import compile_golden
from engine.suite.tools import compile_tools

TOOLS, _ = compile_tools({
    "find_slots": {"parameters": {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]},
                   "returns": [{"when": {"day": ["friday"]}, "result": {"free": ["19:00"]}}, {"error": "closed"}]},
    "book": {"parameters": {"type": "object", "properties": {"time": {"type": "string"}}, "required": ["time"]},
             "returns": [{"result": "booked {{ time }}", "set": {"booked": True}}]},
})
GOOD = [{"tool_calls": [{"name": "find_slots", "arguments": {"day": "friday"}}]},
        {"tool_calls": [{"name": "book", "arguments": {"time": "19:00"}}]}, "Booked at 19:00."]
INVENTS = [{"tool_calls": [{"name": "cancel_all", "arguments": {}}, {"name": "book", "arguments": "{time: 7"}]},
           "Done."]
LOOPS = [{"tool_calls": [{"name": "find_slots", "arguments": {"day": d}}]} for d in ("mon", "tue", "wed")] + ["?"]


def play(turns: list[Any], max_turns: int = 8) -> Transcript:
    compiled, problems = compile_golden(turns)
    assert problems == []
    return asyncio.run(replay_golden(compiled, [{"role": "user", "content": "Book Friday."}], TOOLS,
                                     AgentSettings(max_turns=max_turns), state={"booked": False}))


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    good, invents, loops = play(GOOD), play(INVENTS), play(LOOPS, max_turns=2)
    assert (good.outcome, invents.outcome, loops.outcome) == ("completed", "completed", "capped")
    rows = []
    for attempt in range(2):
        rows.append(agent_row(good, model="a", test_id="book", test_hash="h-book", attempt=attempt, score=1.0,
                              passed=True))
        rows.append(agent_row(good, model="a", test_id="look", test_hash="h-look", attempt=attempt, score=1.0,
                              passed=True))
        rows.append(agent_row(invents, model="b", test_id="book", test_hash="h-book", attempt=attempt, score=0.0,
                              passed=False))
        rows.append(agent_row(loops, model="b", test_id="look", test_hash="h-look", attempt=attempt, score=0.0,
                              passed=False))
    # A single-turn row in the same run: no conversation, so not counted in the agent figures.
    rows += grid_rows({"a": {"plain": [1]}, "b": {"plain": [0]}})
    return write_run(tmp_path_factory.mktemp("agents") / "run-1", rows, schema=AGENT_SCHEMA)


def test_per_model_agent_figures(agent_run: Path) -> None:
    analysis = analyze(load(agent_run, columns=ANALYSIS_COLUMNS))
    assert analysis.agents is not None
    figures = analysis.agents.set_index("model").to_dict(orient="index")
    # a: 4 conversations, each 3 turns (two tool turns, one answer), 2 calls, nothing invented.
    assert figures["a"] == {"conversations": 4, "mean_turns": 3.0, "mean_prose_turns": 1.0, "mean_tool_calls": 2.0,
                            "invented_tools": 0, "invented_rate": 0.0, "bad_tool_args": 0, "bad_args_rate": 0.0,
                            "completed": 4, "escalated": 0, "capped": 0, "stuck": 0, "failed": 0, "error": 0,
                            "other_outcome": 0}
    # b: 2 conversations with one invented tool and one bad-argument call (2 turns, 2 calls), 2 capped
    # after 2 turns of 1 call each (2 calls, no prose turn): turns 2, calls 2, prose turns 0.5 on average.
    assert figures["b"] == {"conversations": 4, "mean_turns": 2.0, "mean_prose_turns": 0.5, "mean_tool_calls": 2.0,
                            "invented_tools": 2, "invented_rate": 0.5, "bad_tool_args": 2, "bad_args_rate": 0.5,
                            "completed": 2, "escalated": 0, "capped": 2, "stuck": 0, "failed": 0, "error": 0,
                            "other_outcome": 0}


def test_analyze_shows_the_agent_table_and_exports_it(agent_run: Path) -> None:
    analysis = analyze(load(agent_run, columns=ANALYSIS_COLUMNS))
    text = render(analysis, "markdown", full=True)
    section = text[text.index("Agents (multi-turn"):]
    assert "| b | 4 | 2.00 | 0.50 | 2.00 | 2 (50.0%) | 2 (50.0%) | 2 | 0 | 2 | 0 | 0 | 0 |" in section
    # folded (the default): the outcome columns that are 0 for both models are said once under the table
    folded = render(analysis, "markdown")
    section = folded[folded.index("Agents (multi-turn"):]
    assert "| b | 4 | 2.00 | 0.50 | 2.00 | 2 (50.0%) | 2 (50.0%) | 2 | 2 |" in section
    assert "*0 in every row, so not shown: escalated, stuck, failed, error (--full shows them)*" in section
    rows = list(csv.DictReader(io.StringIO(render(analysis, "csv", table="agents"))))
    assert [(r["model"], r["capped"]) for r in rows] == [("a", "0"), ("b", "2")]
    assert [r["model"] for r in json.loads(render(analysis, "json"))["agents"]] == ["a", "b"]
    from tests.engine_proc import run_engine

    done = run_engine("analyze", agent_run, "-f", "markdown")
    assert done.returncode == 0 and "Agents (multi-turn" in done.stdout, done.stderr


def test_a_single_turn_run_shows_no_agent_figures(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", grid_rows({"a": {"t1": [1, 0]}, "b": {"t1": [0, 0]}}))
    analysis = analyze(load(run, columns=ANALYSIS_COLUMNS))
    assert analysis.agents is None and per_model_agents(load(run)) is None
    assert "Agents" not in render(analysis, "table") and json.loads(render(analysis, "json"))["agents"] == []
    # Once the schema declares the columns, a single-turn run has them all null: still nothing shown.
    nulls = write_run(tmp_path / "nulls", grid_rows({"a": {"t1": [1]}}), schema=AGENT_SCHEMA)
    assert analyze(load(nulls)).agents is None


def test_the_report_drill_down_carries_the_transcript(agent_run: Path) -> None:
    payload = build_payload(load(agent_run))
    index = next(t["index"] for t in payload["tests"] if t["test_id"] == "book")
    attempts = {a["model"]: a for a in payload["drill"][str(index)]}
    bad = attempts["b"]
    assert bad["agent"] == {"outcome": "completed", "turns": 2, "prose_turns": 1, "tool_calls_made": 2,
                            "invented_tools": 1, "bad_tool_args": 1, "state": '{"booked": false}'}
    assert [(m["role"], m["tool_name"], m["tool_status"]) for m in bad["transcript"]] == [
        ("user", None, None), ("assistant", None, None), ("tool", "cancel_all", "invented"),
        ("tool", "book", "bad_args"), ("assistant", None, None)]
    assert [c["name"] for c in bad["transcript"][1]["tool_calls"]] == ["cancel_all", "book"]
    assert "there is no tool named 'cancel_all'" in bad["transcript"][2]["content"]
    assert payload["agents"][1]["model"] == "b"
    plain = build_payload(load(write_run(agent_run.parent / "plain", grid_rows({"a": {"t": [1]}}))))
    assert plain["agents"] == [] and all(a["transcript"] == [] and a["agent"] is None
                                         for attempts in plain["drill"].values() for a in attempts)


# A minimal DOM for the report's script (it uses createElement(NS), createTextNode, getElementById,
# appendChild, removeChild, firstChild, setAttribute, textContent, addEventListener and style): enough to
# run the real script in node and print what it drew, where no browser is installed.
DOM_SHIM = r"""
const fs = require("fs");
const html = fs.readFileSync(process.argv[2], "utf8");
const json = html.match(/<script type="application\/json" id="report-data">([\s\S]*?)<\/script>/)[1];
const script = html.match(/<script>([\s\S]*?)<\/script>\s*<\/body>/)[1];
class N {
  constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; this.style = {}; this.text = ""; }
  appendChild(c) { this.children.push(c); return c; }
  removeChild(c) { this.children.splice(this.children.indexOf(c), 1); return c; }
  get firstChild() { return this.children[0] || null; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  getAttribute(k) { return this.attrs[k]; }
  addEventListener() {}
  set textContent(v) { this.children = []; this.text = v; }
  get textContent() { return this.text + this.children.map(c => c.textContent).join(""); }
  dump() {
    const esc = s => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
    if (this.tag === "#text") return esc(this.text);
    const attrs = Object.entries(this.attrs).map(([k, v]) => ` ${k}="${esc(v)}"`).join("");
    return `<${this.tag}${attrs}>${esc(this.text)}${this.children.map(c => c.dump()).join("")}</${this.tag}>`;
  }
}
const ids = {};
global.document = {
  body: new N("body"),
  createElement: t => new N(t), createElementNS: (ns, t) => new N(t),
  createTextNode: t => { const n = new N("#text"); n.text = String(t); return n; },
  getElementById: id => {
    if (!ids[id]) { ids[id] = new N("div"); ids[id].attrs.id = id; if (id === "report-data") ids[id].text = json; }
    return ids[id];
  },
};
global.window = {}; global.Node = N;
eval(script);
console.log(JSON.stringify({agents: ids["agents"].dump(), rendered: document.body.attrs["data-rendered"]}));
window.showTest(Number(process.argv[3]));
console.log(JSON.stringify({drill: ids["drilldown"].dump()}));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_report_script_draws_the_agent_table_and_folds_tool_results(agent_run: Path, tmp_path: Path) -> None:
    payload = build_payload(load(agent_run))
    page = tmp_path / "report.html"
    page.write_text(render_html(payload), encoding="utf-8")
    (tmp_path / "shim.js").write_text(DOM_SHIM, encoding="utf-8")
    index = next(t["index"] for t in payload["tests"] if t["test_id"] == "book")
    done = subprocess.run(["node", str(tmp_path / "shim.js"), str(page), str(index)], check=False,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    assert first["rendered"] == "yes"
    assert '<table id="agents-table">' in first["agents"] and "<td>2 (50.0%)</td>" in first["agents"]
    drill = second["drill"]
    assert "conversation completed · 3 turns (1 without a tool call) · 2 tool calls · 0 invented" in drill  # a
    drill = drill[drill.index("b · attempt"):]
    assert '1 bad arguments · final state {"booked": false}' in drill
    assert "conversation completed · 2 turns (1 without a tool call) · 2 tool calls · 1 invented" in drill
    # Each tool result is folded: a <details> whose summary names the tool and its status, the text inside.
    folds = re.findall(r"<details[^>]*><summary>(.*?)</summary><pre>(.*?)</pre></details>", drill)
    assert ("result of cancel_all · invented" in folds[0][0]) and "no tool named" in folds[0][1]
    assert folds[1][0] == "result of book · bad_args"
    assert "→ cancel_all({})" in drill and "→ book({time: 7)" in drill and "assistant · turn 2</span>Done." in drill
