"""`engine view` in a real headless Chromium (DevTools protocol): open a run made by `engine run`, filter to failures,
read an agent's conversation, label two attempts by keyboard, reload and find the labels, and an XSS answer stays
text. Each page's screenshot is written to $ENGINE_VIEW_SHOTS when set (docs/images/view-*.png come from it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pyarrow.parquet as pq
import pytest

from tests.view.cdp import CHROMIUM, Browser
from tests.view.viewrun import HOSTILE, ViewServer, documented_link

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,   # a Chromium start and two engine runs: `make test-slow`
    pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (/usr/bin/chromium): "
                                                      "apt-get install -y chromium"),
]


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ENGINE_VIEW_SHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def test_browse_filter_read_label_reload(two_runs: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(two_runs, results, symlinks=True)
    shots = _shots(tmp_path)
    server = ViewServer(results, "--reviewer", "tester")
    browser = await Browser(tmp_path / "profile").start()
    try:
        await browser.goto(server.url, "runs")
        runs = await browser.js("[...document.querySelectorAll('main tbody tr')].length")
        assert runs == 2
        await browser.screenshot(shots / "view-runs.png")

        # Open the older run (the one where `other` fails), then filter to failures.
        await browser.js("[...document.querySelectorAll('main a[href^=\"#/run\"]')].at(-1).click()")
        await browser.ready("run")
        assert await browser.js("document.querySelectorAll('#grid tbody tr').length") == 4
        await browser.js("document.getElementById('failed').click(); document.getElementById('apply').click()")
        await browser.wait("location.hash.includes('failed=1') && document.body.dataset.ready === 'yes'")
        listed = await browser.js("[...document.querySelectorAll('#grid tbody tr td:first-child')]"
                                  ".map(c => c.textContent)")
        assert listed == ["geo/country-Spain#1", "geo/weather"]
        await browser.screenshot(shots / "view-run.png")

        # The agent test: the conversation turn by turn, with the tool call and its result.
        await browser.js("[...document.querySelectorAll('#grid a')].find(a => a.textContent === 'geo/weather').click()")
        await browser.ready("test")
        conversation = await browser.js("document.querySelector('.conversation').textContent")
        assert "get_weather" in conversation and "turn 1" in conversation and "temp_c" in conversation
        assert "ok in" in conversation   # the tool event's status and latency beside the call
        assert await browser.js("document.querySelectorAll('.attempt').length") == 2

        # Label both attempts from the keyboard: right on the first, a note and wrong on the second.
        await browser.key("r")
        await browser.wait("document.querySelectorAll('.attempt')[0].querySelector('.right.on') !== null")
        await browser.key("j")
        await browser.js("document.querySelectorAll('.attempt .note')[1].value = 'answered from memory'")
        await browser.key("w")
        await browser.wait("document.querySelectorAll('.attempt')[1].querySelector('.wrong.on') !== null")
        await browser.screenshot(shots / "view-test-agent.png")

        await browser.js("document.body.dataset.ready = 'no'")
        await browser.call("Page.reload")
        await browser.ready("test")
        states = await browser.js("[...document.querySelectorAll('.attempt')].map(a => [a.dataset.model, "
                                  "a.querySelector('.status').textContent, a.querySelector('.note').value])")
        assert states == [["fast", "labelled right by tester", ""],
                          ["other", "labelled wrong by tester", "answered from memory"]]
        run_dir = next(p for p in results.iterdir() if (p / "_labels.parquet").exists())
        labels = pq.read_table(run_dir / "_labels.parquet").to_pylist()
        assert [(r["model"], r["label"], r["reviewer"]) for r in labels] == [("fast", "right", "tester"),
                                                                           ("other", "wrong", "tester")]

        # The answer carrying markup: shown as text, no dialog, no element made from it.
        run = run_dir.name
        await browser.goto(f"{server.base}/#/test?run={run}&suite=geo&test_id=country-Italy&case=0", "test")
        answers = await browser.js("[...document.querySelectorAll('pre.answer')].map(p => p.textContent)")
        assert all(HOSTILE in a for a in answers) and len(answers) == 2
        assert await browser.js("document.querySelectorAll('main script, main img').length") == 0
        assert browser.dialogs == []
        await browser.screenshot(shots / "view-test-xss.png")

        # docs/viewing.md's example link opens that test's page, every model's attempt at the Spain case.
        page, query = documented_link(run)
        await browser.goto(f"{server.base}/#/{page}?{urlencode(query)}", "test")
        shown = await browser.js("[...document.querySelectorAll('.attempt')].map(a => [a.dataset.model, "
                                 "a.querySelector('pre.answer').textContent])")
        assert shown == [["fast", "Madrid"], ["other", "Barcelona"]]
        assert "geo/country-Spain#1" in await browser.js("document.getElementById('crumbs').textContent")

        # Two runs compared: the tests whose verdict changed.
        names = sorted(p.name for p in results.iterdir() if p.is_dir() and not p.is_symlink())
        await browser.goto(f"{server.base}/#/diff?a={names[0]}&b={names[1]}", "diff")
        flips = await browser.js("[...document.querySelectorAll('main table')[1].querySelectorAll('tbody tr')]"
                                 ".map(r => r.textContent)")
        assert len(flips) == 1 and "country-Spain" in flips[0] and "fail→pass" in flips[0]
        await browser.screenshot(shots / "view-diff.png")
        assert browser.console == []
    finally:
        await browser.close()
        server.stop()
