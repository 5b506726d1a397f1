"""The models table's cost and time to first token (`engine analyze`), and the report's timing columns: both
times to first token, rate-limit waits and system fingerprints, read from real Parquet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from builders import grid_rows, write_run

from engine.analysis import load
from engine.analysis.report import build_payload, write_report
from tests.engine_proc import run_engine

GRID = {"fast": {f"t{i}": [1, 1] for i in range(4)}, "slow": {f"t{i}": [1, 0] for i in range(4)}}
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    rows = grid_rows(GRID)
    for i, r in enumerate(rows):
        fast = r["model"] == "fast"
        # provider TTFT (first byte) is always earlier than the visible one (first content)
        r.update(ttft_provider_s=0.05 if fast else 0.4, ttft_visible_s=0.2 if fast else 1.5,
                 cost=0.0025 if fast else None, system_fingerprint=f"fp_{r['model']}_{i % 2}",
                 rate_limit_wait_s=0.0 if fast else (3.0 if i % 2 else 0.0))
    write_run(tmp_path / "results" / "run-1", rows)
    return tmp_path / "results"


def test_terminal_models_table_shows_cost_and_says_which_ttft(results: Path) -> None:
    done = run_engine("analyze", str(results), "--full", "--format", "markdown")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| model | tests"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert "p50 TTFT (visible) s" in cells and "cost" in cells
    by_model = {}
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("|"):
            break
        row = [c.strip() for c in line.strip("|").split("|")]
        by_model[row[0]] = dict(zip(cells, row, strict=True))
    assert by_model["fast"]["p50 TTFT (visible) s"] == "0.20" and by_model["slow"]["p50 TTFT (visible) s"] == "1.50"
    assert by_model["fast"]["cost"] == "0.0200"   # 8 rows at 0.0025
    assert by_model["slow"]["cost"] == "-"       # not priced


def test_report_payload_carries_both_ttfts_waits_and_fingerprints(results: Path) -> None:
    payload = build_payload(load(results))
    models = {m["model"]: m for m in payload["models"]}
    assert models["fast"]["ttft_provider_p50"] == pytest.approx(0.05)
    assert models["fast"]["ttft_visible_p50"] == pytest.approx(0.2)
    assert models["slow"]["ttft_provider_p50"] == pytest.approx(0.4)
    assert models["slow"]["ttft_visible_p50"] == pytest.approx(1.5)
    assert models["slow"]["rate_limit_wait_s"] == pytest.approx(12.0) and models["slow"]["rate_limited_rows"] == 4
    assert models["fast"]["rate_limit_wait_s"] == 0.0 and models["fast"]["rate_limited_rows"] == 0
    assert models["fast"]["fingerprints"] == ["fp_fast_0", "fp_fast_1"]
    assert models["slow"]["fingerprints"] == ["fp_slow_0", "fp_slow_1"]


def test_cached_rows_are_left_out_of_both_ttfts(tmp_path: Path) -> None:
    rows = grid_rows({"m": {"t0": [1, 1, 1]}})
    for r, (provider, cached) in zip(rows, ((0.1, False), (0.3, False), (9.0, True)), strict=True):
        r.update(ttft_provider_s=provider, ttft_visible_s=provider * 2, cached=cached)
    write_run(tmp_path / "r" / "run-1", rows)
    model = build_payload(load(tmp_path / "r"))["models"][0]
    assert model["ttft_provider_p50"] == pytest.approx(0.2) and model["ttft_visible_p50"] == pytest.approx(0.4)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (/usr/bin/chromium)")
def test_rendered_models_table_shows_the_timing_columns(results: Path, tmp_path: Path) -> None:
    import subprocess

    page = write_report(load(results), tmp_path / "report.html")
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
               page.resolve().as_uri()]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and 'data-rendered="yes"' in done.stdout, done.stderr[-2000:]
    table = done.stdout[done.stdout.index('id="models-table"'):].split("</table>", 1)[0]
    text = re.sub(r"<[^>]+>", "|", table)
    for header in ("p50 TTFT provider s", "p50 TTFT visible s", "rate-limit wait s", "fingerprints"):
        assert header in text
    assert "fp_slow_0, fp_slow_1" in text and "12.0 (4 rows)" in text
