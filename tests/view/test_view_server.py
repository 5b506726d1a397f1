"""The `engine view` server over a real run on loopback: paging and filters, the token and the Host check, the
labels file (concurrent writes serialised), JSON that cannot carry markup, and `engine analyze` reading the labels."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow.parquet as pq
import pytest
from aiohttp import web

from engine.analysis.labels import LABELS_FILE, read_labels
from engine.view.server import COOKIE, CSP, make_app, new_token
from engine.view.store import Store, find_runs
from tests.engine_proc import run_engine
from tests.view.viewrun import HOSTILE, ViewServer

KEY = "sk-test-not-a-real-key"
HEADERS = {"X-Engine-View": "1"}


class Live:
    """The app served on 127.0.0.1 (a free port) in this test's event loop."""

    def __init__(self, root: Path, token: str = "") -> None:
        self.store = Store(root)
        self.app = make_app(self.store, token=token, reviewer="tester")
        self.runner = web.AppRunner(self.app)
        self.base = ""

    async def __aenter__(self) -> Live:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.base = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


@pytest.fixture()
async def live(results_copy: Path) -> AsyncIterator[tuple[Live, aiohttp.ClientSession, str]]:
    async with Live(results_copy) as server, aiohttp.ClientSession() as session:
        run = next(iter(find_runs(results_copy)))
        yield server, session, run


async def _get(session: aiohttp.ClientSession, url: str, **params: Any) -> tuple[int, Any, bytes]:
    async with session.get(url, params=params) as response:
        body = await response.read()
        return response.status, (json.loads(body) if response.content_type == "application/json" else None), body


def _label(run: str, attempt: dict[str, Any], label: str, note: str | None = None) -> dict[str, Any]:
    return {"run": run, "label": label, "note": note,
            **{k: attempt[k] for k in ("model", "suite", "test_id", "case_index", "attempt", "test_hash")}}


async def test_runs_and_summary_carry_the_analysis_figures(live: tuple[Live, aiohttp.ClientSession, str]) -> None:
    server, session, run = live
    status, runs, _ = await _get(session, server.base + "/api/runs")
    assert status == 200 and [r["run"] for r in runs] == [run]
    assert runs[0]["tests"] == 4 and runs[0]["rows"] == 8 and runs[0]["errors"] == 0
    assert {m["model"]: m["pass_rate"] for m in runs[0]["models"]} == {"fast": 1.0, "other": 0.5}
    status, summary, _ = await _get(session, server.base + "/api/summary", run=run)
    assert status == 200
    # The same figures as `engine analyze --format json` (one source).
    done = run_engine("analyze", server.store.run(run).folder, "--format", "json")
    assert done.returncode == 0, done.stderr
    analyzed = json.loads(done.stdout)
    assert summary["models"] == analyzed["models"]
    assert summary["comparisons"] == analyzed["comparisons"]
    assert summary["suites"] == ["geo"] and summary["tags"] == ["agent", "geo"]


async def test_grid_pages_and_filters(live: tuple[Live, aiohttp.ClientSession, str]) -> None:
    server, session, run = live
    url = server.base + "/api/grid"

    async def ids(**params: Any) -> list[str]:
        status, page, _ = await _get(session, url, run=run, **params)
        assert status == 200, page
        return [r["test_id"] for r in page["rows"]]

    status, page, _ = await _get(session, url, run=run, limit=3)
    assert page["total"] == 4 and len(page["rows"]) == 3 and page["models"] == ["fast", "other"]
    assert await ids(limit=3, offset=3) == ["weather"]
    assert await ids(failed=1) == ["country-Spain", "weather"]
    assert await ids(errors=1) == []
    assert await ids(tag="agent") == ["weather"]
    assert await ids(**{"class": "saturated"}) == ["country-Italy", "france"]
    assert await ids(q="SCRIPT>ALERT") == ["country-Italy"]        # the answer, case-insensitive
    assert await ids(q="wear in paris") == ["weather"]              # the prompt
    assert await ids(suite="nope") == []
    spain = (await _get(session, url, run=run, failed=1))[1]["rows"][0]
    assert spain["cells"] == [{"passed": 1, "scored": 1, "rows": 1, "unscored": 0, "score": 1.0},
                              {"passed": 0, "scored": 1, "rows": 1, "unscored": 0, "score": 0.0}]
    status, error, _ = await _get(session, url, run=run, **{"class": "bogus"})
    assert status == 400 and "bogus" in error["error"]
    status, _, _ = await _get(session, url, run="../../etc")
    assert status == 404


@pytest.mark.parametrize("path,params,named", [
    ("test", {"suite": "geo", "test_id": "france", "case": str(10**23)}, "case"),
    ("test", {"suite": "geo", "test_id": "france", "case": "1e23"}, "case"),
    ("test", {"suite": "geo", "test_id": "france", "case": "-2"}, "case"),
    ("test", {"suite": "geo", "test_id": "france", "case": str(2**31)}, "case"),
    ("test", {"suite": "geo", "case": "0"}, "test_id"),
    ("test", {"test_id": "france"}, "suite"),
    ("grid", {"offset": "1e3"}, "offset"),
    ("grid", {"offset": "-1"}, "offset"),
    ("grid", {"offset": str(10**40)}, "offset"),
    ("grid", {"limit": "0"}, "limit"),
    ("grid", {"limit": "ten"}, "limit"),
    ("grid", {"limit": "5.5"}, "limit"),
    ("grid", {"failed": "maybe"}, "failed"),
    ("grid", {"errors": "2"}, "errors"),
    ("grid", {"class": "bogus"}, "bogus"),
])
async def test_malformed_parameters_are_a_400_naming_the_parameter(live: tuple[Live, aiohttp.ClientSession, str],
                                                                   path: str, params: dict[str, str],
                                                                   named: str) -> None:
    server, session, run = live
    status, error, body = await _get(session, f"{server.base}/api/{path}", run=run, **params)
    assert status == 400, body
    assert named in error["error"] and "Traceback" not in error["error"]


async def test_parameters_at_their_bounds_are_answered(live: tuple[Live, aiohttp.ClientSession, str]) -> None:
    server, session, run = live
    status, page, _ = await _get(session, server.base + "/api/grid", run=run, offset=10**12, limit=10**12,
                                 failed="true", errors="no")
    assert status == 200 and page["rows"] == [] and page["limit"] == 200
    status, test, _ = await _get(session, server.base + "/api/test", run=run, suite="geo", test_id="france",
                                 case=str(2**31 - 1))
    assert status == 200 and test["attempts"] == [] and test["test"] is None
    status, test, _ = await _get(session, server.base + "/api/test", run=run, suite="geo", test_id="france")
    assert status == 200 and len(test["attempts"]) == 2


Served = tuple[Live, aiohttp.ClientSession, str]


async def test_json_cannot_carry_markup_and_no_key_reaches_a_page(live: Served) -> None:
    server, session, run = live
    status, data, body = await _get(session, server.base + "/api/test", run=run, suite="geo",
                                    test_id="country-Italy", case=0)
    assert status == 200 and b"<" not in body and b">" not in body
    assert [a["answer"] for a in data["attempts"]] == [f"Rome {HOSTILE}"] * 2
    pages = [body]
    for path, params in (("/", {}), ("/static/app.js", {}), ("/api/runs", {}), ("/api/summary", {"run": run}),
                         ("/api/grid", {"run": run}),
                         ("/api/test", {"run": run, "suite": "geo", "test_id": "weather"})):
        async with session.get(server.base + path, params=params) as response:
            assert response.status == 200
            assert response.headers["Content-Security-Policy"] == CSP
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            pages.append(await response.read())
    assert not any(KEY.encode() in page or b"ENGINE_TEST_KEY" in page for page in pages)
    script = (Path(__file__).resolve().parents[2] / "engine/view/static/app.js").read_text(encoding="utf-8")
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "document.write" not in script


async def test_the_agent_attempt_holds_its_conversation(live: tuple[Live, aiohttp.ClientSession, str]) -> None:
    server, session, run = live
    _, data, _ = await _get(session, server.base + "/api/test", run=run, suite="geo", test_id="weather")
    fast = data["attempts"][0]
    assert fast["model"] == "fast" and fast["outcome"] == "completed" and fast["turns"] == 2
    assert [m["role"] for m in fast["transcript"]] == ["user", "assistant", "tool", "assistant"]
    assert fast["transcript"][1]["tool_calls"][0]["name"] == "get_weather"
    assert fast["tool_events"][0]["status"] == "ok" and fast["transcript"][1]["latency_s"] is not None
    assert [n["path"] for n in fast["evaluators"]][:3] == ["all", "all/0.tool_sequence", "all/1.final_answer"]


async def test_labels_are_appended_serialised_and_shown(live: tuple[Live, aiohttp.ClientSession, str]) -> None:
    server, session, run = live
    _, data, _ = await _get(session, server.base + "/api/test", run=run, suite="geo", test_id="weather")
    fast, other = data["attempts"]
    bodies = [_label(run, fast if i % 2 else other, "right" if i % 3 else "wrong", f"note {i}") for i in range(20)]

    async def post(body: dict[str, Any]) -> int:
        async with session.post(server.base + "/api/label", json=body, headers=HEADERS) as response:
            return response.status

    assert await asyncio.gather(*(post(b) for b in bodies)) == [200] * 20
    folder = server.store.run(run).folder
    table = pq.read_table(folder / LABELS_FILE)
    assert table.num_rows == 20 and table.column_names == [
        "model", "suite", "test_id", "case_index", "attempt", "test_hash", "label", "note", "reviewer", "at"]
    assert set(table["reviewer"].to_pylist()) == {"tester"}
    assert not [p for p in folder.iterdir() if p.name.startswith(".labels")]   # no temporary left behind
    # A later label replaces the earlier one on the page.
    assert await post(_label(run, other, "wrong", "answered from memory")) == 200
    _, data, _ = await _get(session, server.base + "/api/test", run=run, suite="geo", test_id="weather")
    assert data["attempts"][1]["review"]["label"] == "wrong"
    assert data["attempts"][1]["review"]["note"] == "answered from memory"
    # The results are untouched: `load` skips the labels file.
    _, runs, _ = await _get(session, server.base + "/api/runs")
    assert runs[0]["rows"] == 8


async def test_label_writes_are_refused_unless_from_the_page(live: tuple[Live, aiohttp.ClientSession, str]) -> None:
    server, session, run = live
    _, data, _ = await _get(session, server.base + "/api/test", run=run, suite="geo", test_id="france")
    body = _label(run, data["attempts"][0], "right")
    url = server.base + "/api/label"
    async with session.post(url, json=body) as response:                  # no page header: a cross-site form
        assert response.status == 403
    async with session.post(url, data=json.dumps(body), headers={**HEADERS, "Content-Type": "text/plain"}) as response:
        assert response.status == 403
    async with session.post(url, json={**body, "label": "maybe"}, headers=HEADERS) as response:
        assert response.status == 400 and "right" in (await response.json())["error"]
    async with session.post(url, json={**body, "note": "x" * 100_000}, headers=HEADERS) as response:
        assert response.status == 413
    async with session.post(url, json={**body, "run": "nope"}, headers=HEADERS) as response:
        assert response.status == 404
    assert read_labels(server.store.run(run).folder).num_rows == 0


async def test_host_check_on_loopback_and_token_elsewhere(results_copy: Path) -> None:
    assert new_token("127.0.0.1") == "" and new_token("::1") == "" and new_token("localhost") == ""
    assert len(new_token("192.0.2.7")) >= 32
    async with Live(results_copy) as server, aiohttp.ClientSession() as session:
        async with session.get(server.base + "/api/runs", headers={"Host": "attacker.example"}) as response:
            assert response.status == 403
        async with session.get(server.base + "/api/runs", headers={"Host": "localhost"}) as response:
            assert response.status == 200
    token = "t0ken-" + "x" * 30
    async with Live(results_copy, token=token) as server:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.base + "/api/runs") as response:
                assert response.status == 403
            async with session.get(server.base + "/", params={"token": "wrong"}) as response:
                assert response.status == 403
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as session:
            async with session.get(server.base + "/", params={"token": token}) as response:
                assert response.status == 200 and COOKIE in response.cookies
            async with session.get(server.base + "/api/runs") as response:     # the cookie from the first visit
                assert response.status == 200


def test_engine_view_prints_its_url_and_serves(results_copy: Path) -> None:
    server = ViewServer(results_copy, "--reviewer", "cli")
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", server.url)

        async def fetch() -> tuple[int, str]:
            async with aiohttp.ClientSession() as session, session.get(server.base + "/api/me") as response:
                return response.status, (await response.json())["reviewer"]

        assert asyncio.run(fetch()) == (200, "cli")
    finally:
        server.stop()
    missing = run_engine("view", results_copy / "nope")
    assert missing.returncode == 2 and "not a folder" in missing.stderr and "Traceback" not in missing.stderr


def test_analyze_reports_agreement_with_the_labels(results_copy: Path) -> None:
    from engine.analysis.labels import append_labels

    run_dir = next(iter(find_runs(results_copy).values()))
    store = Store(results_copy)
    run = store.run(next(iter(find_runs(results_copy))))
    rows = [a for test in ("weather", "france") for a in run.attempts("geo", test, -1)["attempts"]]
    # The weather verdicts are right; `other` passing France is called wrong (the human says it should fail).
    labels = [{**{k: a[k] for k in ("model", "suite", "test_id", "case_index", "attempt", "test_hash")},
               "label": "wrong" if (a["test_id"], a["model"]) == ("france", "other") else "right",
               "reviewer": "ann", "note": None} for a in rows]
    append_labels(run_dir, labels)
    done = run_engine("analyze", run_dir)
    assert done.returncode == 0, done.stderr
    section = done.stdout[done.stdout.index("HUMAN LABELS"):]
    assert "4 labels, 4 on scored rows" in section
    assert "- verdict: n=4, agreement 0.750" in section and "too few (n < 10)" in section
    # Each check against the outcome that makes the labelled verdict true: `other` failed the weather on both
    # checks, so neither decided it alone, nor the `contains` final_answer holds (skipped); `fast`'s weather
    # checks, that inner `contains` too, each decided its right pass; France: `contains` agrees, then not.
    assert "- tool_sequence: n=1, agreement 1.000" in section and "- contains: n=3, agreement 0.667" in section
    assert "- final_answer: n=1, agreement 1.000" in section
    assert "- labelled checks skipped: 3 did not decide the verdict" in section
    assert "other geo/france attempt 0: verdict pass, ann says wrong" in section
    done = run_engine("analyze", run_dir, "--format", "json")
    report = json.loads(done.stdout)["labels"]
    # verdict vs truth: (T,T) (F,F) (T,T) (T,F): p_o = 3/4, p_e = 3/4·2/4 + 1/4·2/4 = 1/2, κ = 0.5
    assert report["verdict"]["kappa"] == pytest.approx(0.5)
    assert [d["model"] for d in report["disagreements"]] == ["other"]
