"""`engine run --batch` end to end, per provider (OpenAI's Batch API, Anthropic's Message Batches, Gemini's batch
mode), against loopback servers that speak each protocol (tests/fake_batches.py) on the live fakes' responders.

A 200-call suite batched gives the verdicts of the same suite run live, its rows priced at the batch price with
their `batch_id`; a run killed (SIGKILL) once its batches were sent is resumed by polling them, and the servers'
request logs show nothing was sent twice; expired batches and requests refused one by one give error rows, which
`--retry-errors` sends again, and only those.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests import fake_anthropic, fake_gemini, fake_openai
from tests.fake_anthropic import FakeAnthropic
from tests.fake_batches import AnthropicBatchServer, BatchServer, GeminiBatchServer, OpenAIBatchServer, Plan
from tests.fake_gemini import FakeGemini
from tests.fake_openai import FakeOpenAI
from tests.run.e2e import engine, start_engine

KEY = "sk-batch-run-SECRET-0123456789abcdef"
CALLS = 200
ENV = {"BATCH_TEST_KEY": KEY, "ENGINE_BATCH_POLL_S": "0.05"}

SUITE = """\
suite: sums
defaults:
  max_tokens: 16
tests:
  - id: sum
    prompt: "What is {{ n }} plus {{ n }}?"
    eval: {numeric: "{{ (n | int) * 2 }}"}
    cases_from: cases.csv
"""

MODELS = """\
models:
  m:
    api: {api}
    base_url: {base_url}
    model: {model}
    api_key_env: BATCH_TEST_KEY
    timeout_s: 20
    price: {{input: 2, output: 8}}
"""
#: The batched runs' batches: 200 calls in three (80, 80, 40), sent as they fill and as the tests run out.
BATCH = "    batch: {size: 80, max_wait_s: 30}\n"


def question(body: dict[str, Any], api: str) -> int:
    """The n a request asks about, as each API carries the prompt."""
    if api == "chat":
        text = body["messages"][-1]["content"]
    elif api == "anthropic":
        text = body["messages"][-1]["content"][0]["text"]
    else:
        text = body["contents"][-1]["parts"][0]["text"]
    return int(str(text).split()[2])


@dataclass
class Provider:
    """A provider's live fake with its batch server, and the models file and suite that call it."""

    api: str
    live: Any
    batches: BatchServer
    folder: Path

    def answer(self, refuse: set[int] | None = None) -> None:
        """Answer n + n, wrongly for every n divisible by 3; refuse (HTTP 400) the ns in `refuse`."""
        refused = refuse or set()

        def respond(body: dict[str, Any]) -> Any:
            n = question(body, self.api)
            text = str(2 * n if n % 3 else 2 * n + 1)
            if self.api == "chat":
                return fake_openai.Reply(fault="http_400", error_message="bad request") if n in refused else \
                    fake_openai.Reply(content=text, usage={"prompt_tokens": 1000, "completion_tokens": 100})
            if self.api == "anthropic":
                return fake_anthropic.Reply(status=400, message="bad request") if n in refused else \
                    fake_anthropic.Reply(text=text, usage={"input_tokens": 1000, "output_tokens": 100})
            return fake_gemini.Reply(status=400, message="bad request") if n in refused else \
                fake_gemini.Reply(text=text, usage={"promptTokenCount": 1000, "candidatesTokenCount": 100,
                                                    "totalTokenCount": 1100})
        self.live.responder = respond

    def run(self, *args: str, models: str = "models.yaml") -> Any:
        return engine("run", str(self.folder / "sums.yaml"), "--models", str(self.folder / models),
                      "--no-cache", "--quiet", *args, env=ENV)

    def creates(self) -> list[str]:
        """The batch-create requests the server has seen."""
        create = {"chat": "POST /v1/batches", "anthropic": "POST /v1/messages/batches"}.get(self.api)
        return [line for line in self.batches.log if line == create or (create is None and
                                                                         line.endswith(":batchGenerateContent"))]


@pytest.fixture(params=["chat", "anthropic", "gemini"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Provider]:
    api = request.param
    live: Any = {"chat": FakeOpenAI, "anthropic": FakeAnthropic, "gemini": FakeGemini}[api]()
    batches: BatchServer = {"chat": OpenAIBatchServer, "anthropic": AnthropicBatchServer,
                            "gemini": GeminiBatchServer}[api](live)
    live.start()
    (tmp_path / "sums.yaml").write_text(SUITE, encoding="utf-8")
    (tmp_path / "cases.csv").write_text("n\n" + "".join(f"{n}\n" for n in range(CALLS)), encoding="utf-8")
    models = MODELS.format(api=api, base_url=live.base_url, model=f"{api}-model")
    (tmp_path / "models.yaml").write_text(models + BATCH, encoding="utf-8")
    (tmp_path / "live.yaml").write_text(models, encoding="utf-8")
    found = Provider(api, live, batches, tmp_path)
    found.answer()
    yield found
    live.stop()


def rows(out: Path) -> pd.DataFrame:
    frame = pd.read_parquet(next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink()))
    return frame.set_index("case_index").sort_index()


def _until_polled(provider: Provider, process: Any, calls: int | None = None, *, creates: int | None = None) -> None:
    """Wait until the server has been sent `calls` calls (or `creates` batches) and polled each batch (so each id
    is in the journal)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        polled = {line for line in provider.batches.log if line.startswith("GET") and "batches/" in line
                  and not line.endswith("/results")}
        sent = len(provider.batches.submitted) == calls if creates is None else len(provider.creates()) == creates
        if sent and len(polled) == len(provider.creates()):
            return
        time.sleep(0.01)
    raise AssertionError(f"the batches were not all sent and polled: {provider.batches.log[-5:]}")


def _kill_once_polled(provider: Provider, *args: str, calls: int | None = None, creates: int | None = None,
                      env: dict[str, str] | None = None) -> None:
    """Run `engine ARGS` (with `env`, else `ENV`) and kill it (SIGKILL) once its batches are sent and polled
    (`_until_polled`)."""
    process = start_engine(*args, env=env or ENV)
    try:
        _until_polled(provider, process, calls, creates=creates)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_a_batched_run_gives_the_live_verdicts_at_the_batch_price(provider: Provider, tmp_path: Path) -> None:
    live = provider.run("--out", str(tmp_path / "live"), models="live.yaml")
    assert live.returncode == 0, live.stderr
    provider.batches.plan = Plan(polls=2)
    batched = provider.run("--out", str(tmp_path / "batched"), "--batch")
    assert batched.returncode == 0, batched.stderr
    assert KEY not in batched.stdout + batched.stderr
    by_live, by_batch = rows(tmp_path / "live"), rows(tmp_path / "batched")
    assert len(by_batch) == CALLS and by_batch["error_kind"].isna().all()
    assert (by_batch["passed"] == by_live["passed"]).all()
    assert by_batch["passed"].sum() == sum(1 for n in range(CALLS) if n % 3)
    assert by_live["batch_id"].isna().all() and by_batch["batch_id"].notna().all()
    assert by_batch["batch_id"].nunique() == 3   # 80 + 80 + 40
    # 1000 prompt and 100 completion tokens at $2 and $8 per million, halved
    assert by_live["cost"].round(9).eq(0.0028).all() and by_batch["cost"].round(9).eq(0.0014).all()
    assert sorted(provider.batches.submitted) == sorted(set(provider.batches.submitted))
    assert len(provider.batches.submitted) == CALLS and len(provider.creates()) == 3
    # engine analyze sums the rows' cost: the batched run's is half the live one's
    for folder, total in (("live", "0.56"), ("batched", "0.28")):
        analyzed = engine("analyze", str(tmp_path / folder / "latest"))
        assert analyzed.returncode == 0, analyzed.stderr
        model_line = next(line for line in analyzed.stdout.splitlines() if line.lstrip("│ ").startswith("m "))
        assert total in model_line, analyzed.stdout
        said = " ".join(analyzed.stdout.replace("│", " ").split())
        assert ("200 of 200 rows answered through batches (cost at the batch price)" in said) == (folder == "batched")


def test_a_run_killed_once_its_batches_were_sent_is_resumed_without_sending_anything_twice(
        provider: Provider, tmp_path: Path) -> None:
    provider.batches.plan = Plan(delay_s=4.0)   # answered only well after the kill
    out = tmp_path / "out"
    args = ["run", str(provider.folder / "sums.yaml"), "--models", str(provider.folder / "models.yaml"), "--out",
            str(out), "--batch", "--no-cache", "--quiet"]
    _kill_once_polled(provider, *args, calls=CALLS)
    assert len(provider.creates()) == 3 and len(provider.batches.submitted) == CALLS
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    resumed = engine("run", "--resume", str(run_dir), "--quiet", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert len(provider.creates()) == 3 and len(provider.batches.submitted) == CALLS   # nothing sent again
    assert not any("cancel" in line for line in provider.batches.log)
    frame = rows(out)
    assert len(frame) == CALLS and frame["error_kind"].isna().all() and frame["batch_id"].nunique() == 3
    assert frame["passed"].sum() == sum(1 for n in range(CALLS) if n % 3)


def test_expired_and_refused_requests_are_error_rows_that_retry_errors_sends_again(
        provider: Provider, tmp_path: Path) -> None:
    provider.answer(refuse={1, 2})
    provider.batches.plan = Plan(answer_first=60)   # each batch expires with its first 60 requests answered
    out = tmp_path / "out"
    first = provider.run("--out", str(out), "--batch")
    assert first.returncode == 0, first.stderr
    frame = rows(out)
    kinds = frame["error_kind"].value_counts().to_dict()
    assert kinds == {"batch_expired": 20 + 20, "batch_errored": 2}, kinds   # 80 + 80 + 40: 20 + 20 + 0 left
    assert frame.loc[[1, 2], "error_message"].str.contains("bad request").all()
    errors = set(frame.index[frame["error_kind"].notna()])
    provider.answer()
    provider.batches.plan = Plan()
    sent_before = len(provider.batches.submitted)
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    again = engine("run", "--resume", str(run_dir), "--retry-errors", "--quiet", env=ENV)
    assert again.returncode == 0, again.stderr
    assert len(provider.batches.submitted) - sent_before == len(errors)   # only the error rows, in new batches
    frame = rows(out)
    assert len(frame) == CALLS and frame["error_kind"].isna().all()
    assert frame["passed"].sum() == sum(1 for n in range(CALLS) if n % 3)


def test_a_batch_cancelled_part_way_scores_what_it_finished_and_retry_errors_sends_only_the_rest(
        provider: Provider, tmp_path: Path) -> None:
    """Each batch is cancelled (from the provider's console) after answering its first 50 requests: those are
    scored rows, the rest `batch_cancelled` error rows, and `--retry-errors` sends exactly the cancelled ones."""
    provider.batches.plan = Plan(cancel_after=50)   # 80 + 80 + 40: 30 + 30 + 0 cancelled
    out = tmp_path / "out"
    first = provider.run("--out", str(out), "--batch")
    assert first.returncode == 0, first.stderr
    frame = rows(out)
    assert frame["error_kind"].value_counts().to_dict() == {"batch_cancelled": 60}
    finished = frame[frame["error_kind"].isna()]
    assert len(finished) == 140 and finished["batch_id"].notna().all() and finished["score"].notna().all()
    assert finished["passed"].sum() == sum(1 for n in finished.index if n % 3)
    assert frame.loc[frame["error_kind"].notna(), "passed"].isna().all()
    cancelled = {c for job in provider.batches.jobs.jobs.values() for c in job.left}
    assert len(cancelled) == 60
    provider.batches.plan = Plan()
    sent_before = len(provider.batches.submitted)
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    again = engine("run", "--resume", str(run_dir), "--retry-errors", "--quiet", env=ENV)
    assert again.returncode == 0, again.stderr
    assert sorted(provider.batches.submitted[sent_before:]) == sorted(cancelled)   # those, once each, and no other
    frame = rows(out)
    assert len(frame) == CALLS and frame["error_kind"].isna().all()
    assert frame["passed"].sum() == sum(1 for n in range(CALLS) if n % 3)


@pytest.mark.parametrize("provider", ["chat"], indirect=True)
def test_ctrl_c_stops_waiting_and_keeps_the_batches_sent_for_resume(provider: Provider, tmp_path: Path) -> None:
    provider.batches.plan = Plan(delay_s=3.0)
    out = tmp_path / "out"
    first = start_engine("run", str(provider.folder / "sums.yaml"), "--models", str(provider.folder / "models.yaml"),
                         "--out", str(out), "--batch", "--no-cache", "--quiet", env=ENV)
    try:
        _until_polled(provider, first, CALLS)
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 1, err
    assert "the batches sent stay with the provider" in err
    assert "3 batch(es) holding 200 rows are still with the provider (sent and paid, not cancelled)" in err
    assert not any("cancel" in line for line in provider.batches.log)
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    resumed = engine("run", "--resume", str(run_dir), "--quiet", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert len(provider.creates()) == 3 and len(provider.batches.submitted) == CALLS
    assert len(rows(out)) == CALLS and rows(out)["error_kind"].isna().all()


@pytest.mark.parametrize("provider", ["chat"], indirect=True)
def test_the_budget_counts_a_batch_when_it_is_sent_and_sends_only_what_fits(provider: Provider,
                                                                             tmp_path: Path) -> None:
    """Each request's estimate (its characters / 3 in, its max_tokens out, at the batch price) is about $0.0041:
    $0.5 lets the first batch of 80 go and 40-odd of the second; the rest is not sent, and has no row."""
    out = tmp_path / "out"
    first = provider.run("--out", str(out), "--batch", "--budget", "0.5")
    assert first.returncode == 1 and "stopped early (budget)" in first.stderr, first.stderr
    sent = len(provider.batches.submitted)
    assert 80 < sent < 160 and len(rows(out)) == sent   # every request sent has its row; none was left unsent
    assert rows(out)["cost"].sum() < 0.5
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    rest = engine("run", "--resume", str(run_dir), "--budget", "100", "--quiet", env=ENV)
    assert rest.returncode == 0, rest.stderr
    assert len(provider.batches.submitted) == CALLS and len(set(provider.batches.submitted)) == CALLS
    assert len(rows(out)) == CALLS


@pytest.mark.parametrize("provider", ["chat"], indirect=True)
def test_a_retry_killed_while_its_batch_runs_is_resumed_from_that_batch(provider: Provider, tmp_path: Path) -> None:
    """`--retry-errors` sends the expired calls in a new batch; killed while it runs, the next `--retry-errors`
    collects that batch instead of sending them a third time."""
    provider.batches.plan = Plan(answer_first=60)
    out = tmp_path / "out"
    assert provider.run("--out", str(out), "--batch").returncode == 0
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    expired = int(rows(out)["error_kind"].eq("batch_expired").sum())
    assert expired == 40
    provider.batches.plan = Plan(delay_s=3.0)
    _kill_once_polled(provider, "run", "--resume", str(run_dir), "--retry-errors", "--quiet", calls=CALLS + expired)
    creates = len(provider.creates())
    again = engine("run", "--resume", str(run_dir), "--retry-errors", "--quiet", env=ENV)
    assert again.returncode == 0, again.stderr
    assert len(provider.creates()) == creates and len(provider.batches.submitted) == CALLS + expired   # none again
    frame = rows(out)
    assert len(frame) == CALLS and frame["error_kind"].isna().all()


def test_batch_leaves_an_embedded_model_live_with_a_note_and_refuses_until_decided(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("suite: s\ntests:\n  - {id: t, prompt: hi, golden: hello, eval: {contains: "
                                     "hello}}\n", encoding="utf-8")
    (tmp_path / "models.yaml").write_text("models:\n  g: {builtin: golden}\n  h: {builtin: golden}\n",
                                          encoding="utf-8")
    common = ["run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"), "--out", str(tmp_path),
              "--quiet", "--batch"]
    done = engine(*common)
    assert done.returncode == 0, done.stderr
    assert "note: --batch: g runs on this machine, which has no batch API: its calls go live" in done.stderr
    assert "(2 rows, 0 errors)" in done.stdout
    refused = engine(*common, "--until-decided", "g,h")
    assert refused.returncode == 2 and "--until-decided with --batch" in refused.stderr


@pytest.mark.parametrize("provider", ["chat"], indirect=True)
def test_a_dry_run_shows_which_calls_would_go_in_a_batch(provider: Provider, tmp_path: Path) -> None:
    shown = provider.run("--out", str(tmp_path / "out"), "--dry-run")
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert len(lines) == CALLS and all(line["batch"] is True and line["body"]["stream"] is False for line in lines)
    assert "dry run: 200 call(s) for 1 model(s) x 200 test(s); m: 200 call(s) in 3 batch(es) of up to 80; nothing " \
        "was sent" in shown.stderr
    assert provider.batches.log == [] and not provider.live.requests   # nothing was sent


JUDGED = """\
suite: judged
tests:
  - id: "q-{{ n }}"
    prompt: "Refund policy, case {{ n }}?"
    eval: {judge: {rubric: "The answer must mention the 30-day limit."}}
    cases: [{n: 0}, {n: 1}, {n: 2}, {n: 3}, {n: 4}, {n: 5}]
"""


def _judged(live: FakeOpenAI, folder: Path, batch: str) -> Path:
    """The judged suite (answered live by `shop`: right for odd n) and its models file, whose judge `grader`
    has `batch` in its entry; the fake grades an answer pass when it says 30 days. The models file."""
    def respond(body: dict[str, Any]) -> Any:
        if body["model"] == "shop-1":
            n = int(body["messages"][-1]["content"].split()[-1].rstrip("?"))
            return fake_openai.Reply(content="Within 30 days." if n % 2 else "No refunds.")
        graded = body["messages"][0]["content"].split("\n[Answer to grade]\n", 1)[1]
        grade = "pass" if "30 days" in graded else "fail"
        return fake_openai.Reply(content=json.dumps({"reasoning": "r", "grade": grade}),
                                 usage={"prompt_tokens": 1000, "completion_tokens": 100})
    live.responder = respond
    (folder / "judged.yaml").write_text(JUDGED, encoding="utf-8")
    models = folder / "models.yaml"
    models.write_text(f"""\
defaults: {{judge: grader}}
models:
  shop: {{base_url: "{live.base_url}", model: shop-1, timeout_s: 20}}
  grader:
    base_url: "{live.base_url}"
    model: grader-1
    timeout_s: 20
    price: {{input: 2, output: 8}}
{batch}""", encoding="utf-8")
    return models


def _graded(bodies: list[dict[str, Any]]) -> list[int]:
    """The case each judge request grades (its question names it)."""
    return [int(body["messages"][0]["content"].split("[Question]\nRefund policy, case ", 1)[1].split("?")[0])
            for body in bodies if body["model"] == "grader-1"]


def test_a_judge_whose_entry_says_batch_grades_through_batches_at_the_batch_price(tmp_path: Path) -> None:
    """Judge calls of a run are independent of each other: a judge model that opts in (`batch:` in its entry)
    grades through its provider's batches, priced at the batch price, while the answering model stays live."""
    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    try:
        models = _judged(live, tmp_path, "    batch: {size: 4, max_wait_s: 0.2}\n")
        done = engine("run", str(tmp_path / "judged.yaml"), "--models", str(models), "--model",
                      "shop", "--out", str(tmp_path / "out"), "--quiet", "--no-cache",
                      env={**ENV, "ENGINE_JUDGE_CACHE": str(tmp_path / "judge.sqlite")})
        assert done.returncode == 0, done.stderr
        frame = rows(tmp_path / "out")
        assert frame["batch_id"].isna().all()   # the answers went live
        assert frame.set_index("test_id")["passed"].to_dict() == {f"q-{n}": bool(n % 2) for n in range(6)}
        assert frame["judge_cost"].round(9).eq(0.0014).all()   # 1000 and 100 tokens at $2 and $8, halved
        assert len(batches.submitted) == 6 and len(set(batches.submitted)) == 6
        assert all(not body.get("stream") for body in live.requests if body["model"] == "grader-1")
    finally:
        live.stop()


def test_a_judge_that_lost_batch_collects_its_batch_sent_on_resume_and_grades_the_rest_live(tmp_path: Path) -> None:
    """A run whose judge sent its first judge request in a batch is killed while it waits (`--concurrency 1`: one
    test at a time, so no other judge request is made meanwhile); the judge's entry then loses `batch:` and the
    run is resumed: the batch is collected (its judgement at the batch price), nothing of it is sent again,
    neither in a batch nor live, and only the 5 judge requests no batch holds go live, at the live price."""
    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    try:
        models = _judged(live, tmp_path, "    batch: {size: 1, max_wait_s: 60}\n")
        batches.plan = Plan(delay_s=3.0)   # answered only after the kill
        env = {**ENV, "ENGINE_JUDGE_CACHE": str(tmp_path / "judge.sqlite")}
        out = tmp_path / "out"
        judge = Provider("chat", live, batches, tmp_path)
        _kill_once_polled(judge, "run", str(tmp_path / "judged.yaml"), "--models", str(models), "--model", "shop",
                          "--out", str(out), "--concurrency", "1", "--quiet", "--no-cache", creates=1, env=env)
        in_batch = _graded([body for _, body in batches.jobs.jobs["batch_1"].requests])
        assert len(in_batch) == 1 and len(batches.submitted) == 1 and not _graded(live.requests)
        models.write_text(models.read_text(encoding="utf-8").replace("    batch: {size: 1, max_wait_s: 60}\n", ""),
                          encoding="utf-8")
        run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
        resumed = engine("run", "--resume", str(run_dir), "--quiet", env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert len(judge.creates()) == 1 and len(batches.submitted) == 1   # no judge request in a batch again
        batch = batches.jobs.jobs["batch_1"]
        assert batch.ended_as == "completed" and len(batch.answers) == 1   # collected: polled until it ended
        # the fake answered the batch's requests through the live responder too (logged with the live ones)
        answered = {custom_id for custom_id, _, _ in batch.answers}
        graded_live = Counter(_graded(live.requests)) - Counter(
            _graded([body for custom_id, body in batch.requests if custom_id in answered]))
        assert sorted(graded_live.elements()) == sorted(set(range(6)) - set(in_batch))   # only the rest, once each
        frame = rows(out).set_index("test_id")
        assert frame["error_kind"].isna().all()
        assert frame["passed"].to_dict() == {f"q-{n}": bool(n % 2) for n in range(6)}   # every row judged
        assert frame["judge_cost"].round(9).to_dict() == {
            f"q-{n}": 0.0014 if n in in_batch else 0.0028 for n in range(6)}
    finally:
        live.stop()


@pytest.mark.parametrize("entry", ["kept", "removed"])
def test_judge_calls_a_batch_failed_are_sent_again_by_retry_errors(entry: str, tmp_path: Path) -> None:
    """Every judge request of a run expires in its batch: six error rows. `--resume --retry-errors` sends those
    judge requests again (a failure is not paid), in a new batch while the judge's entry says `batch:`, live once
    it no longer does, instead of taking the same failure back from the batch that failed them."""
    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    try:
        entry_batch = "    batch: {size: 6, max_wait_s: 5}\n"
        models = _judged(live, tmp_path, entry_batch)
        batches.plan = Plan(answer_first=0)   # each batch ends expired, nothing answered
        env = {**ENV, "ENGINE_JUDGE_CACHE": str(tmp_path / "judge.sqlite")}
        out = tmp_path / "out"
        first = engine("run", str(tmp_path / "judged.yaml"), "--models", str(models), "--model", "shop",
                       "--out", str(out), "--quiet", "--no-cache", env=env)
        assert first.returncode != 2, first.stderr
        assert rows(out)["error_kind"].notna().all() and len(batches.submitted) == 6
        batches.plan = Plan()
        if entry == "removed":
            models.write_text(models.read_text(encoding="utf-8").replace(entry_batch, ""), encoding="utf-8")
        run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
        again = engine("run", "--resume", str(run_dir), "--retry-errors", "--quiet", env=env)
        assert again.returncode == 0, again.stderr
        frame = rows(out).set_index("test_id")
        assert frame["error_kind"].isna().all(), frame["error_kind"].to_dict()
        assert frame["passed"].to_dict() == {f"q-{n}": bool(n % 2) for n in range(6)}
        # judged once each, in the second run (the fake answers a batch's requests through the live responder too)
        assert sorted(_graded(live.requests)) == list(range(6))
        assert len(batches.submitted) == (12 if entry == "kept" else 6)
    finally:
        live.stop()


@pytest.mark.parametrize("provider", ["chat"], indirect=True)
@pytest.mark.parametrize("entry", ["removed", "resized"])
def test_a_resume_after_the_entry_changed_collects_the_batches_sent_and_sends_the_rest_as_the_entry_says_now(
        provider: Provider, entry: str, tmp_path: Path) -> None:
    """A run stopped by its budget with part of its calls in two batches (80 and 40-odd, the rest never sent) is
    killed while it waits for them; its entry then loses `batch:` (or its size becomes 30) and the run is resumed.
    The batches sent are collected, nothing of theirs is sent again, and the calls never sent go as the entry says
    now: live at the live price, or in batches of 30."""
    provider.batches.plan = Plan(delay_s=3.0)   # answered only after the kill
    out = tmp_path / "out"
    _kill_once_polled(provider, "run", str(provider.folder / "sums.yaml"), "--models",
                      str(provider.folder / "models.yaml"), "--out", str(out), "--budget", "0.5", "--no-cache",
                      "--quiet", creates=2)
    sent = list(provider.batches.submitted)
    assert len(provider.creates()) == 2 and 80 < len(sent) < 160
    (provider.folder / "models.yaml").write_text(
        (provider.folder / "live.yaml").read_text(encoding="utf-8")
        + ("" if entry == "removed" else "    batch: {size: 30, max_wait_s: 30}\n"), encoding="utf-8")
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    resumed = engine("run", "--resume", str(run_dir), "--budget", "100", "--quiet", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert provider.batches.submitted[:len(sent)] == sent
    assert len(set(provider.batches.submitted)) == len(provider.batches.submitted)   # nothing sent twice
    frame = rows(out)
    assert len(frame) == CALLS and frame["error_kind"].isna().all()
    assert frame["passed"].sum() == sum(1 for n in range(CALLS) if n % 3)
    old = frame["batch_id"].isin(["batch_1", "batch_2"])
    assert old.sum() == len(sent) and frame.loc[old, "cost"].round(9).eq(0.0014).all()   # collected, batch price
    rest = frame[~old]
    if entry == "removed":
        assert len(provider.creates()) == 2 and len(provider.batches.submitted) == len(sent)
        assert rest["batch_id"].isna().all() and rest["cost"].round(9).eq(0.0028).all()   # live, live price
    else:
        assert len(provider.batches.submitted) == CALLS
        sizes = rest["batch_id"].value_counts()
        assert sizes.max() == 30 and len(sizes) == -(-len(rest) // 30) and rest["cost"].round(9).eq(0.0014).all()
