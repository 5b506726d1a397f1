"""`base_urls` end to end: `engine run` spreads one model over two loopback servers; `served_by` in Parquet,
the replica's credentials nowhere in the run folder; a run folder from before the column still loads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engine.analysis.load import load
from engine.results.schema import SCHEMA
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

SECRET = "hunter2-replica-pass"

SUITE = "suite: bulk\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"question {{ n }}\"\n    eval: {contains: ok}\n" \
        "    cases:\n" + "\n".join(f"      - {{n: {i}}}" for i in range(20)) + "\n"

MODELS = """\
models:
  spread:
    base_urls: [{first}, {second}]
    model: spread-1
    concurrency: 4
    timeout_s: 10
  single:
    base_url: {second}
    model: single-1
    timeout_s: 10
"""


def test_one_model_over_two_replicas_records_served_by_and_never_the_password(tmp_path: Path) -> None:
    first, second = FakeOpenAI().start(), FakeOpenAI().start()
    try:
        for server in (first, second):
            server.responder = lambda body: Reply(content="ok", delay_s=0.01)
        secret_url = first.base_url.replace("http://", f"http://bob:{SECRET}@")
        (tmp_path / "suites").mkdir()
        (tmp_path / "suites" / "bulk.yaml").write_text(SUITE)
        (tmp_path / "models.yaml").write_text(MODELS.format(first=secret_url, second=second.base_url))
        out = tmp_path / "results"
        done = engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"), "--out", str(out),
                      "--quiet")
        assert done.returncode == 0, done.stderr
        spread_calls = (Counter(b["model"] for b in first.requests), Counter(b["model"] for b in second.requests))
    finally:
        first.stop()
        second.stop()
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    df = pd.read_parquet(run_dir)
    spread = df[df["model"] == "spread"]
    masked = first.base_url.replace("http://", "http://***@")
    assert Counter(spread["served_by"]) == {masked: spread_calls[0]["spread-1"],
                                            second.base_url: spread_calls[1]["spread-1"]}
    assert spread_calls[0]["spread-1"] >= 5 and spread_calls[1]["spread-1"] >= 5     # both took a share
    assert df[df["model"] == "single"]["served_by"].isna().all()
    assert spread["passed"].all()
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"the replica's password reached {path.name}"
    assert SECRET not in done.stdout + done.stderr


def test_a_run_folder_from_before_the_new_columns_still_loads(tmp_path: Path) -> None:
    new = ("served_by", "trimmed_requests", "trimmed_messages")
    old_schema = pa.schema([f for f in SCHEMA if f.name not in new])
    row = {name: None for name in old_schema.names}
    row.update(schema_version=1, run_id="old", model="m", suite="s", test_id="t", test_hash="h", attempt=0,
               score=1.0, passed=True, tags=[], tool_calls=[], evaluators=[])
    folder = tmp_path / "old-run"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist([row], schema=old_schema), folder / "part-00000.parquet")
    df = load(folder)
    assert len(df) == 1
    assert all(name in df.columns for name in new)
    assert df[list(new)].isna().all().all()
