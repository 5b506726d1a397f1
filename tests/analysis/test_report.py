"""The HTML report: self-contained, safe against markup in answers, and drawn by a real headless Chromium."""

from __future__ import annotations

import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from builders import grid_rows, write_run

from engine.analysis import load
from engine.analysis.report import write_report

CHROMIUM = Path("/usr/bin/chromium")
GRID = {
    "good": {"disc": [1, 1], "sat": [1, 1], "floor": [0, 0], "flaky": [1, 0], "grad": [.8, .8]},
    "mid": {"disc": [1, 1], "sat": [1, 1], "floor": [0, 0], "flaky": [1, 1], "grad": [.5, .5]},
    "bad": {"disc": [0, 0], "sat": [1, 1], "floor": [0, None], "flaky": [1, 1], "grad": [.2, .2]},
}
HOSTILE = "</script><img src=x onerror=alert(1)>"


@pytest.fixture()
def report_file(tmp_path: Path) -> Path:
    rows = grid_rows(GRID, threshold=0.5)
    for r in rows:
        if r["test_id"] == "floor":
            r["answer"] = HOSTILE
            r["prompt"] = "What is the capital of France? (floor prompt)"
    write_run(tmp_path / "results" / "run-1", rows)
    return write_report(load(tmp_path / "results"), tmp_path / "out" / "report.html", sources=["results"])


def test_report_is_self_contained_and_escapes_results_text(report_file: Path) -> None:
    text = report_file.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the page must not fetch anything"
    assert "<link" not in text
    # The hostile answer appears only as escaped JSON inside the data block, never as live markup.
    assert HOSTILE not in text
    assert text.count("</script>") == 2  # the data block and the script block close; nothing else does


def _png_pixels(path: Path) -> tuple[int, int, bytes, int]:
    """Decode an 8-bit non-interlaced RGB(A) PNG (what Chromium writes) to raw pixels, without PIL."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    out = bytearray()
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return width, height, bytes(out), channels


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.browser
@pytest.mark.slow      # two Chromium starts: `make test-slow` (.ci/run runs it)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (/usr/bin/chromium): "
                                                  "apt-get install -y chromium")
def test_report_renders_in_headless_chromium(report_file: Path, tmp_path: Path) -> None:
    url = report_file.resolve().as_uri()
    dom = _chromium(["--virtual-time-budget=5000", "--dump-dom", url], tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-rendered="yes"' in html, "the report script did not finish"
    # Heatmap: 5 tests × 3 models drawn by the script (the static HTML has no <rect class="cell">).
    assert html.count('class="cell"') == 15
    assert html.count('class="dot"') == 5
    # The drill-down opened on the floor test, with its prompt, the hostile answer as text, evaluator reasons.
    drill = html[html.index('id="drilldown"'):]
    assert "s/floor" in drill and "capital of France" in drill
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in drill
    assert "expected 'x', got 'y'" in drill
    outside_scripts = re.sub(r"<script\b.*?</script>", "", html, flags=re.DOTALL)
    assert "<img" not in outside_scripts  # the hostile answer never became an element
    assert re.search(r'id="list-floor".*s/floor', html, re.DOTALL)
    assert re.search(r'id="list-flaky".*s/flaky', html, re.DOTALL)

    shot = tmp_path / "shot.png"
    result = _chromium(["--window-size=1200,2600", "--hide-scrollbars", f"--screenshot={shot}", url],
                       tmp_path / "profile-shot")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    width, height, pixels, channels = _png_pixels(shot)
    assert (width, height) == (1200, 2600)   # tall enough that the heatmap is wholly on screen
    # Not blank: many distinct colours, and the heatmap's saturated reds and greens are on screen.
    colours = {pixels[i:i + 3] for i in range(0, len(pixels), channels * 7)}
    assert len(colours) > 50
    reds = sum(1 for i in range(0, len(pixels), channels) if pixels[i] > 150 and pixels[i + 1] < 80)
    greens = sum(1 for i in range(0, len(pixels), channels) if pixels[i + 1] > 140 and pixels[i] < 90)
    assert reds > 200 and greens > 200


def test_cli_report_writes_the_file(tmp_path: Path) -> None:
    write_run(tmp_path / "run", grid_rows(GRID))
    from tests.engine_proc import run_engine

    out = tmp_path / "r.html"
    done = run_engine("report", tmp_path / "run", "-o", out)
    assert done.returncode == 0, done.stderr
    assert out.exists() and "report-data" in out.read_text()
    missing = run_engine("report", tmp_path / "nope", "-o", out)
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr and "Traceback" not in missing.stderr
