"""An image through `engine run` to the scripted server: the payload part by part, and no bytes in the results."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq

from engine.suite import content_parts, load_suites
from tests.fake_openai import FakeOpenAI, Reply
from tests.images_util import write_png
from tests.run.e2e import engine
from tests.run.helpers import make_model, run_jobs

SUITE = """\
suite: invoices
tests:
  - id: total
    messages:
      - role: system
        content: Read the scan.
      - role: user
        content:
          - text: "What is the total of {{ who }}'s invoice?"
          - image: scans/invoice.png
            detail: high
          - text: Answer with the number only.
    cases: [{who: Ada}]
    eval: {contains: "42"}
"""
MODELS = "models:\n  vision:\n    base_url: {url}\n    model: vision-1\n    timeout_s: 5\n    max_retries: 0\n"


def project(folder: Path, base_url: str) -> tuple[Path, Path, bytes]:
    data = write_png(folder / "scans" / "invoice.png", (12, 34, 56))
    (folder / "invoices.yaml").write_text(SUITE)
    (folder / "models.yaml").write_text(MODELS.format(url=base_url))
    return folder / "invoices.yaml", folder / "models.yaml", data


def test_an_image_reaches_the_server_as_a_data_url_and_results_keep_only_its_reference(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="42")
    suite, models, data = project(tmp_path, fake_openai.base_url)
    out = tmp_path / "results"
    done = engine("run", str(suite), "--models", str(models), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    [body] = fake_openai.requests
    system, user = body["messages"]
    assert system == {"role": "system", "content": "Read the scan."}
    text, image, tail = user["content"]
    assert text == {"type": "text", "text": "What is the total of Ada's invoice?"}
    assert tail == {"type": "text", "text": "Answer with the number only."}
    assert image["type"] == "image_url" and set(image["image_url"]) == {"url", "detail"}
    assert image["image_url"]["detail"] == "high"
    prefix, encoded = image["image_url"]["url"].split(",", 1)
    assert prefix == "data:image/png;base64" and base64.b64decode(encoded) == data

    [part] = sorted((out / "latest").glob("part-*.parquet"))
    table = pq.read_table(part)
    row = table.to_pylist()[0]
    assert row["passed"] is True and row["variant"] is None
    stored = json.loads(row["prompt"])
    assert stored[1]["content"][1] == {"type": "image_file", "image_file": {
        "path": "scans/invoice.png", "sha256": hashlib.sha256(data).hexdigest(), "mime": "image/png",
        "bytes": len(data), "detail": "high"}}
    raw = part.read_bytes() + (out / "latest" / "_journal.sqlite").read_bytes()
    assert encoded.encode() not in raw and b"base64," not in raw   # neither the Parquet nor the journal holds bytes
    for name in table.column_names:   # no column anywhere holds the encoded image
        assert encoded not in json.dumps(table.column(name).to_pylist(), default=str)


def test_dry_run_prints_a_placeholder_not_the_bytes(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suite, models, data = project(tmp_path, fake_openai.base_url)
    done = engine("run", str(suite), "--models", str(models), "--dry-run")
    assert done.returncode == 0, done.stderr
    url = json.loads(done.stdout)["body"]["messages"][1]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,<") and base64.b64encode(data).decode() not in done.stdout
    assert fake_openai.requests == []


def test_an_image_deleted_after_load_is_an_error_row_and_nothing_is_sent(tmp_path: Path,
                                                                         fake_openai: FakeOpenAI) -> None:
    suite, _, _ = project(tmp_path, fake_openai.base_url)
    [loaded], diagnostics = load_suites([suite])
    assert diagnostics == []
    (tmp_path / "scans" / "invoice.png").unlink()
    content_parts._data_url.cache_clear()
    run_dir = tmp_path / "run"
    stats = asyncio.run(run_jobs(run_dir, [make_model(fake_openai.base_url)], list(loaded.tests)))
    assert stats.errors == 1 and fake_openai.requests == []
    [row] = pq.read_table(sorted(run_dir.glob("part-*.parquet"))[0]).to_pylist()
    assert row["error_kind"] == "image" and "cannot be read any more" in row["error_message"]
