"""The HTML report shows every section `engine analyze` prints, checked in the DOM headless Chromium renders.

The run folder is made by the real pipeline: `engine run` (a subprocess) on three suites - the example
workspace tasks and the example judged suite from suites/, and a prompt-variants suite with repeats written
here - for three models: `builtin: golden` and two models on the loopback fake OpenAI server, one of which is
also the judge. So the results hold workspace rows (diffs), judge verdicts, variants and repeated attempts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from test_report import CHROMIUM, _chromium, _png_pixels

from tests.fake_openai import FakeOpenAI, Reply

ROOT = Path(__file__).resolve().parents[2]
VARIANTS_SUITE = """\
suite: qa
variants:
  good: {system: "MODE-GOOD"}
  bad: {system: "MODE-BAD"}
tests:
  - id: "q-{{ n }}"
    prompt: "question {{ n }}"
    repeat: 3
    golden: ok
    cases: [{n: 0}, {n: 1}, {n: 2}, {n: 3}, {n: 4}, {n: 5}]
    eval: {contains: ok}
"""
MODELS = """\
models:
  golden: {{builtin: golden}}
  gemma-chat: {{base_url: "{url}", model: sharp-1, timeout_s: 10, max_retries: 0, price: {{input: 1.0, output: 2.0}}}}
  dull: {{base_url: "{url}", model: dull-1, timeout_s: 10, max_retries: 0}}
  # suites/judged.yaml's judge and embedder: only judge and embed here (not among the run's --model names)
  smollm2-tools: {{base_url: "{url}", model: judge-1, timeout_s: 10, max_retries: 0}}
  smollm2-embed: {{base_url: "{url}", model: embed-1, timeout_s: 10, max_retries: 0}}
"""
ANSWERING = ("--model", "golden", "--model", "gemma-chat", "--model", "dull")
# (model, variant) -> the questions it answers right; the bad variant costs both models.
PASSES = {("sharp-1", "MODE-GOOD"): {0, 1, 2, 3, 4, 5}, ("sharp-1", "MODE-BAD"): {0, 1},
          ("dull-1", "MODE-GOOD"): {0, 1, 2}, ("dull-1", "MODE-BAD"): set()}


def respond(body: dict[str, Any]) -> Reply:
    """The fake models: graded answers for the variants suite, capitals for judged, prose for workspaces."""
    messages = body["messages"]
    first = str(messages[0].get("content"))
    if "[Answer to grade]" in first:             # a judge call (smollm2-tools and gemma-chat judge suites/judged.yaml)
        answer = first.split("[Answer to grade]\n", 1)[1].split("\n", 1)[0]
        grade = "pass" if any(city in answer for city in ("Nairobi", "Canberra")) else "fail"
        return Reply(content=json.dumps({"reasoning": "checked the city", "grade": grade}))
    user = str(messages[-1].get("content"))
    found = re.search(r"question (\d+)", user)
    if found:
        return Reply(content="ok" if int(found.group(1)) in PASSES[(body["model"], first)] else "no")
    if "Capital:" in user:
        sharp = body["model"] == "sharp-1"
        return Reply(content="Nairobi" if "Kenya" in user.rsplit("Country:", 1)[-1] and sharp else "Sydney")
    return Reply(content="I looked at the folder; nothing to change.")   # a workspace task: no tool call


def engine(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`engine ARGS`, forked from the test fork server (tests/engine_proc.py)."""
    from tests.engine_proc import run_engine

    return run_engine(*args, env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("report-run")
    suites = root / "suites"
    suites.mkdir()
    shutil.copy(ROOT / "suites" / "workspace_tasks.yaml", suites)
    shutil.copy(ROOT / "suites" / "judged.yaml", suites)
    shutil.copytree(ROOT / "suites" / "workspaces", suites / "workspaces")
    shutil.copytree(ROOT / "suites" / "checks", suites / "checks")
    (suites / "qa.yaml").write_text(VARIANTS_SUITE)
    server = FakeOpenAI().start()
    try:
        server.responder = respond
        (root / "models.yaml").write_text(MODELS.format(url=server.base_url))
        done = engine("run", str(suites), "--models", str(root / "models.yaml"), *ANSWERING,
                      "--out", str(root / "results"), "--quiet",
                      env={"ENGINE_JUDGE_CACHE": str(root / "cache" / "judge.sqlite")})
        assert done.returncode in (0, 1), done.stderr
    finally:
        server.stop()
    yield root / "results" / "latest"


class _Dom(HTMLParser):
    """The rendered DOM as {id: (attributes, text content)} for every element with an id."""

    VOID = frozenset({"br", "img", "meta", "link", "input", "hr", "col", "area", "base", "source", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.by_id: dict[str, tuple[dict[str, str | None], str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.VOID:
            self.stack.append((tag, dict(attrs), []))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            name, attrs, text = self.stack.pop()
            joined = "".join(text)
            if self.stack:
                self.stack[-1][2].append(joined)
            if attrs.get("id"):
                self.by_id[str(attrs["id"])] = (attrs, joined)
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.stack:
            self.stack[-1][2].append(data)


def _dom(html: str) -> dict[str, tuple[dict[str, str | None], str]]:
    parser = _Dom()
    parser.feed(re.sub(r"<script\b.*?</script>", "", html, flags=re.DOTALL))
    return parser.by_id


# Each section title `engine analyze --full --format markdown` prints -> the element of the report that shows it.
TERMINAL_TO_REPORT = {
    "Models": "models-table", "Agents": "agents-table", "pass@k": "passk-table",
    "Paired comparisons": "comparisons-table", "Prompt variants per model": "variants-table",
    "Paired variant comparisons": "variant-comparisons-table", "Discriminating tests": "list-discriminating",
    "Uninformative tests": "list-uninformative", "Saturated tests": "list-saturated", "Floor tests": "list-floor",
    "Flaky tests": "list-flaky", "Attempts that disagree": "list-mixed", "Suite health": "suites-table",
    "Judges": "judges-table", "Summary": "summary", "Not classed": "list-fallback-left-out",
}


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (/usr/bin/chromium): "
                                                  "apt-get install -y chromium")
def test_every_terminal_section_is_in_the_rendered_report(run_folder: Path, tmp_path: Path) -> None:
    done = engine("analyze", str(run_folder), "--full", "--format", "markdown")
    assert done.returncode == 0, done.stderr
    titles = re.findall(r"^##+ (.+)$", done.stdout, flags=re.MULTILINE)
    assert any(t.startswith("Judges") for t in titles) and any(t.startswith("Paired variant") for t in titles)
    assert any(t.startswith("Agents") for t in titles) and any(t.startswith("pass@k") for t in titles)
    report = tmp_path / "report.html"
    assert engine("report", str(run_folder), "-o", str(report)).returncode == 0
    # open the drill-down on a workspace test: its diff is folded under the attempt
    url = report.resolve().as_uri() + "#test=workspace_tasks/rename-files"
    rendered = _chromium(["--disable-quic", "--virtual-time-budget=5000", "--dump-dom", url], tmp_path / "p-dom")
    assert rendered.returncode == 0 and 'data-rendered="yes"' in rendered.stdout, rendered.stderr[-2000:]
    dom = _dom(rendered.stdout)

    html = rendered.stdout
    # the ids inside each <section id="section-..."> (sections do not nest)
    inside = {s: set(re.findall(r'id="([^"]+)"', html[html.index(f'id="{s}"'):].split("</section>", 1)[0]))
              for s in dom if s.startswith("section-")}

    def shown(element_id: str) -> str:
        """The text of an element that is drawn: present, not empty, neither it nor its section hidden."""
        assert element_id in dom, f"the report has no #{element_id}"
        attrs, text = dom[element_id]
        for section, ids in inside.items():
            assert element_id not in ids or "hidden" not in dom[section][0], f"#{element_id} is in hidden {section}"
        assert "hidden" not in attrs and text.strip(), f"#{element_id} is empty or hidden"
        return text

    for title in titles:
        key = next((k for k in TERMINAL_TO_REPORT if title.startswith(k)), None)
        assert key is not None, f"engine analyze prints a section the report does not map: {title!r}"
        shown(TERMINAL_TO_REPORT[key])
    # the contents, not only the frames
    assert "gemma-chat" in shown("judges-table") and "pass_fail" in shown("judges-table")
    agreement = shown("judge-agreement-table")
    assert "calibration labels" in agreement and "deterministic: regex" in agreement and "n=" in agreement
    variants = shown("variants-table")
    assert "good" in variants and "bad" in variants
    assert re.search(r"gemma-chat\s*good\s*bad", shown("variant-comparisons-table"))
    assert "2–3" in shown("passk-table") or "3" in shown("passk-table")
    assert "completed" in shown("agents-table")
    assert "workspace_tasks/rename-files" in shown("drill-title")
    drill = shown("drilldown")
    assert "failed commands" in drill and "refused paths" in drill and "workspace" in drill
    # golden renamed the photos: its diff is folded under a <details>; the fake models changed nothing
    assert re.search(r'<summary>workspace diff</summary><pre class="answer">--- a/photos/IMG_0001\.JPG', html)
    assert "<summary>workspace unchanged</summary>" in html
    notes = engine("analyze", str(run_folder), "--format", "json")
    for note in json.loads(notes.stdout)["notes"]:
        assert note in dom["notes"][1]

    shot = tmp_path / "report.png"
    taken = _chromium(["--disable-quic", "--window-size=1280,4000", "--hide-scrollbars", f"--screenshot={shot}",
                       url], tmp_path / "p-shot")
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    width, height, pixels, channels = _png_pixels(shot)
    assert (width, height) == (1280, 4000)
    colours = {pixels[i:i + 3] for i in range(0, len(pixels), channels * 11)}
    assert len(colours) > 50
    if os.environ.get("ENGINE_KEEP_SCREENSHOT"):      # to look at it: ENGINE_KEEP_SCREENSHOT=/tmp/report.png
        shutil.copy(shot, os.environ["ENGINE_KEEP_SCREENSHOT"])


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (/usr/bin/chromium): "
                                                  "apt-get install -y chromium")
def test_report_irt_shows_the_fit_engine_analyze_irt_prints(tmp_path: Path) -> None:
    from builders import grid_rows, write_run

    # 6 models of rising ability over 12 tests of rising difficulty (model m passes test t when m > t / 2)
    grid = {f"m{m}": {f"t{t:02d}": [1 if m > t / 2 else 0] * 2 for t in range(12)} for m in range(6)}
    write_run(tmp_path / "run", grid_rows(grid))
    terminal = engine("analyze", str(tmp_path / "run"), "--irt", "-f", "markdown")
    assert terminal.returncode == 0, terminal.stderr
    report = tmp_path / "irt.html"
    assert engine("report", str(tmp_path / "run"), "--irt", "-o", str(report)).returncode == 0
    rendered = _chromium(["--disable-quic", "--virtual-time-budget=5000", "--dump-dom", report.resolve().as_uri()],
                         tmp_path / "p")
    dom = _dom(rendered.stdout)
    assert "hidden" not in dom["section-irt"][0]
    abilities = dom["irt-table-0"][1]
    for m in range(6):
        assert f"m{m}" in abilities
    # the same thetas as the terminal prints
    thetas = re.findall(r"^\| (m\d) \| ([+-]\d\.\d\d) \[", terminal.stdout, flags=re.MULTILINE)
    assert len(thetas) == 6 and all(f"{model}{theta}" in abilities for model, theta in thetas)
    assert "not a test between two models" in dom["irt-notes"][1]
    plain = tmp_path / "plain.html"
    assert engine("report", str(tmp_path / "run"), "-o", str(plain)).returncode == 0
    assert '"irt": null' in plain.read_text()
