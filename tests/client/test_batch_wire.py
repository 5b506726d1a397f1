"""Each provider's batch wire (OpenAI's Batch API, Anthropic's Message Batches, Gemini's batch mode) through the real
aiohttp transport against loopback servers that follow the documented protocols: answers read as a live call reads
them, requests refused one by one, expiry, cancellation, a batch that fails whole, and hostile results files."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from engine.client.client import ModelClient
from engine.client.providers import PROVIDERS, Provider
from engine.client.providers.batch import (
    BatchAPI,
    BatchFailure,
    BatchOutcome,
    BatchReply,
    BatchStatus,
    BatchTarget,
    SubmitError,
)
from engine.client.providers.gemini_batch import INLINE_MAX_BYTES, INLINE_MAX_REQUESTS
from engine.client.request import RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.session import Sessions
from engine.client.transport import BatchTransport
from engine.errors import ClientError
from engine.model.model_config import ModelConfig
from engine.redact import Redactor
from tests import fake_anthropic, fake_gemini, fake_openai
from tests.factories import make_test
from tests.fake_anthropic import FakeAnthropic
from tests.fake_batches import AnthropicBatchServer, BatchServer, GeminiBatchServer, OpenAIBatchServer, Plan
from tests.fake_gemini import FakeGemini
from tests.fake_openai import FakeOpenAI

KEY = "sk-batch-wire-KEY-0123456789abcdef"
APIS = ["chat", "completions", "anthropic", "gemini"]


def asking(question: str) -> Any:
    """A test asking `question` (as its one user message, or its prompt for a completions API)."""
    return make_test(messages=({"role": "user", "content": question},), prompt=question)


@dataclass
class Rig:
    """A provider's live fake with its batch server mounted, and how to script both."""

    api: str
    live: Any
    batches: BatchServer
    model: ModelConfig
    answer: Callable[[str], Any]   # text -> the live fake's reply with that text
    refuse: Callable[[int, str], Any]   # (status, message) -> the live fake's reply answering that error

    @property
    def provider(self) -> Provider:
        return PROVIDERS[self.api]

    def prompt_of(self, body: dict[str, Any]) -> str:
        """The question a request body asks, as each API carries it."""
        if self.api == "completions":
            return str(body["prompt"])
        if self.api == "chat":
            return str(body["messages"][-1]["content"])
        if self.api == "anthropic":
            return str(body["messages"][-1]["content"][0]["text"])
        return str(body["contents"][-1]["parts"][0]["text"])

    def body(self, question: str) -> dict[str, Any]:
        """The body a live call of this question sends, not streamed: what a batch carries."""
        return prepare(self.model, asking(question), RequestSettings(stream=False)).body


@pytest.fixture(params=APIS)
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    api = request.param
    live: Any
    if api in ("chat", "completions"):
        live = FakeOpenAI()
        batches: BatchServer = OpenAIBatchServer(live)

        def answer(text: str) -> Any:
            return fake_openai.Reply(content=text)

        def refuse(status: int, message: str) -> Any:
            return fake_openai.Reply(fault=f"http_{status}", error_message=message)
    elif api == "anthropic":
        live = FakeAnthropic()
        batches = AnthropicBatchServer(live)

        def answer(text: str) -> Any:
            return fake_anthropic.Reply(text=text)

        def refuse(status: int, message: str) -> Any:
            return fake_anthropic.Reply(status=status, message=message)
    else:
        live = FakeGemini()
        batches = GeminiBatchServer(live)

        def answer(text: str) -> Any:
            return fake_gemini.Reply(text=text)

        def refuse(status: int, message: str) -> Any:
            return fake_gemini.Reply(status=status, message=message)
    live.start()
    model = ModelConfig(name="m", model=f"{api}-1", base_url=live.base_url, api=api, timeout_s=10.0)
    yield Rig(api, live, batches, model, answer, refuse)
    live.stop()


@dataclass
class Session:
    """A batch API over the real transport, and how to drive a batch to its end."""

    api: BatchAPI

    async def until_ended(self, batch_id: str, polls: int = 20) -> list[BatchStatus]:
        seen = []
        for _ in range(polls):
            seen.append(await self.api.poll(batch_id))
            if seen[-1].ended:
                return seen
        raise AssertionError(f"batch {batch_id} did not end in {polls} polls: {seen[-1]}")

    async def outcomes(self, status: BatchStatus, custom_ids: Sequence[str]) -> list[tuple[str, BatchOutcome]]:
        return [pair async for pair in self.api.results(status, custom_ids)]


async def session_of(rig: Rig, sessions: Sessions, model: ModelConfig | None = None) -> Session:
    model = model or rig.model
    batch = rig.provider.batch
    assert batch is not None
    target = BatchTarget(str(model.base_url), model, rig.provider.headers(KEY), Redactor([KEY]))
    return Session(batch.open(BatchTransport(sessions, model), target))


def parsed(rig: Rig, outcome: BatchOutcome) -> CallResult:
    assert isinstance(outcome, BatchReply), outcome
    result = CallResult()
    rig.provider.parse(outcome.body, result, Redactor([KEY]))
    return result


async def live_call(rig: Rig, question: str) -> CallResult:
    async with Sessions(4) as sessions:
        client = ModelClient(sessions, {"m": KEY})
        return await client.call(rig.model, prepare(rig.model, asking(question),
                                                     RequestSettings(stream=False)))


@pytest.fixture
async def sessions() -> AsyncIterator[Sessions]:
    async with Sessions(4) as opened:
        yield opened


QUESTIONS = {f"q{i}": f"What is {i} plus {i}?" for i in range(5)}


async def test_a_batched_answer_is_read_into_the_same_result_as_the_live_answer(rig: Rig, sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer(f"answer to {rig.prompt_of(body)}")
    rig.batches.plan = Plan(polls=3)
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([(cid, rig.body(q)) for cid, q in QUESTIONS.items()])
    seen = await wire.until_ended(batch_id)
    assert [s.state for s in seen] == ["running", "running", "ended"]
    assert seen[-1].ended_as == "completed" and seen[-1].counts.succeeded == 5 and seen[-1].counts.pending == 0
    outcomes = dict(await wire.outcomes(seen[-1], list(QUESTIONS)))
    assert sorted(outcomes) == sorted(QUESTIONS)
    for cid, question in QUESTIONS.items():
        batched, live = parsed(rig, outcomes[cid]), await live_call(rig, question)
        assert batched.text == live.text == f"answer to {question}"
        assert (batched.finish_reason, batched.prompt_tokens, batched.completion_tokens, batched.served_model) == \
            (live.finish_reason, live.prompt_tokens, live.completion_tokens, live.served_model)
    assert rig.batches.submitted == list(QUESTIONS)
    assert KEY not in json.dumps(rig.live.requests)


async def test_a_request_the_provider_refused_is_an_errored_outcome_and_the_others_are_answered(
        rig: Rig, sessions: Sessions) -> None:
    def respond(body: dict[str, Any]) -> Any:
        question = rig.prompt_of(body)
        return rig.refuse(400, f"too long, key {KEY}") if question == QUESTIONS["q2"] else rig.answer("fine")
    rig.live.responder = respond
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([(cid, rig.body(q)) for cid, q in QUESTIONS.items()])
    status = (await wire.until_ended(batch_id))[-1]
    outcomes = dict(await wire.outcomes(status, list(QUESTIONS)))
    refused = outcomes.pop("q2")
    assert isinstance(refused, BatchFailure) and refused.kind == "errored"
    assert "too long" in refused.message and KEY not in refused.message and "***" in refused.message
    assert refused.error().kind == "batch_errored" and not refused.error().retryable
    assert all(parsed(rig, outcome).text == "fine" for outcome in outcomes.values())


async def test_an_expired_batch_leaves_its_unanswered_requests_expired(rig: Rig, sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("in time")
    rig.batches.plan = Plan(answer_first=2)
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([(cid, rig.body(q)) for cid, q in QUESTIONS.items()])
    status = (await wire.until_ended(batch_id))[-1]
    assert status.ended_as == "expired"
    outcomes = dict(await wire.outcomes(status, list(QUESTIONS)))
    assert [parsed(rig, outcomes[c]).text for c in ("q0", "q1")] == ["in time", "in time"]
    late = [outcomes[c] for c in ("q2", "q3", "q4")]
    assert all(isinstance(o, BatchFailure) and o.kind == "expired" and o.error().retryable for o in late)
    assert len(rig.live.requests) == 2   # the server answered only what it got to


async def test_a_cancelled_batch_answers_nothing_more_and_its_requests_are_cancelled(rig: Rig,
                                                                                  sessions: Sessions) -> None:
    rig.batches.plan = Plan(polls=5)
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([(cid, rig.body(q)) for cid, q in QUESTIONS.items()])
    assert not (await wire.api.poll(batch_id)).ended
    cancelling = await wire.api.cancel(batch_id)
    status = cancelling if cancelling.ended else (await wire.until_ended(batch_id))[-1]
    assert status.ended_as == "cancelled"
    outcomes = dict(await wire.outcomes(status, list(QUESTIONS)))
    assert sorted(outcomes) == sorted(QUESTIONS)
    assert {o.kind for o in outcomes.values() if isinstance(o, BatchFailure)} == {"cancelled"}
    assert all(isinstance(o, BatchFailure) for o in outcomes.values())
    assert rig.live.requests == []


async def test_a_batch_that_fails_whole_fails_each_request_with_its_reason(rig: Rig, sessions: Sessions) -> None:
    if rig.api == "anthropic":
        pytest.skip("Message Batches refuse a bad batch at creation; none fails whole later")
    rig.batches.plan = Plan(fail="line 3: unknown field `tempreature`")
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([(cid, rig.body(q)) for cid, q in QUESTIONS.items()])
    status = (await wire.until_ended(batch_id))[-1]
    assert status.ended_as == "failed" and "tempreature" in str(status.error)
    outcomes = dict(await wire.outcomes(status, list(QUESTIONS)))
    assert all(isinstance(o, BatchFailure) and o.kind == "failed" and "tempreature" in o.message
               for o in outcomes.values())


async def test_a_batch_the_provider_would_refuse_is_refused_before_anything_is_sent(rig: Rig,
                                                                                 sessions: Sessions) -> None:
    wire = await session_of(rig, sessions)
    body = rig.body("hi")
    for requests in ([], [("a b", body)], [("same", body), ("same", body)], [("x" * 65, body)]):
        with pytest.raises(ValueError, match=r"batch|custom id"):
            await wire.api.submit(requests)
    assert rig.batches.log == []


async def test_a_submit_the_server_refused_created_nothing(rig: Rig, sessions: Sessions) -> None:
    if rig.api != "anthropic":
        pytest.skip("the fake refuses a streamed request at creation only for Message Batches")
    wire = await session_of(rig, sessions)
    with pytest.raises(SubmitError) as refused:
        await wire.api.submit([("a", {**rig.body("hi"), "stream": True})])
    assert refused.value.sent is False and refused.value.status == 400


async def test_a_submit_to_a_server_that_is_not_there_was_not_sent(rig: Rig, sessions: Sessions) -> None:
    wire = await session_of(rig, sessions, replace(rig.model, base_url="http://127.0.0.1:9/v1", connect_timeout_s=2))
    with pytest.raises(SubmitError) as failed:
        await wire.api.submit([("a", rig.body("hi"))])
    assert failed.value.sent is False and failed.value.retryable


HOSTILE_IDS = ["good", "huge", "wrongtype", "notjson", "missing", "dup"]


def hostile_lines(rig: Rig, reply: dict[str, Any]) -> bytes:
    """A results file with one good line, one over the cap, one of the wrong types, one not JSON, a line for an
    id never asked for, a duplicate, and none at all for `missing`."""
    big = "x" * (2 << 20)
    if rig.api in ("chat", "completions"):
        def line(cid: str, body: Any, status: Any = 200) -> dict[str, Any]:
            return {"id": "r", "custom_id": cid, "response": {"status_code": status, "body": body}, "error": None}
        wrong = line("wrongtype", reply, status="200")
    elif rig.api == "anthropic":
        def line(cid: str, body: Any, status: Any = 200) -> dict[str, Any]:
            return {"custom_id": cid, "result": {"type": "succeeded", "message": body}}
        wrong = {"custom_id": "wrongtype", "result": {"type": "succeeded", "message": "a string"}}
    else:
        def line(cid: str, body: Any, status: Any = 200) -> dict[str, Any]:
            return {"key": cid, "response": body}
        wrong = {"key": "wrongtype", "response": ["not", "an", "object"]}
    rows = [json.dumps(line("good", reply)), json.dumps(line("huge", {**reply, "pad": big})), json.dumps(wrong),
            '{"custom_id": "notjson", "key": "notjson", "response": {', json.dumps(line("stranger", reply)),
            "[1, 2]", json.dumps(line("dup", reply)), json.dumps(line("dup", {"bogus": True})), "", "  "]
    return "\n".join(rows).encode() + b"\n"


async def test_a_hostile_results_file_gives_each_request_one_outcome_and_never_crashes(
        rig: Rig, sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("honest")
    wire = await session_of(rig, sessions)
    first = await wire.api.submit([("probe", rig.body("probe"))])
    status = (await wire.until_ended(first))[-1]
    reply = json.loads(parsed_body(dict(await wire.outcomes(status, ["probe"]))["probe"]))
    # A Gemini batch this large goes as a file, whose responses file is the one sent back verbatim.
    count = INLINE_MAX_REQUESTS + 1 if rig.api == "gemini" else len(HOSTILE_IDS)
    ids = HOSTILE_IDS + [f"more{i}" for i in range(count - len(HOSTILE_IDS))]
    rig.batches.plan = Plan(results_raw=hostile_lines(rig, reply))
    model = replace(rig.model, max_response_mb=0.5)
    wire = await session_of(rig, sessions, model)
    batch_id = await wire.api.submit([(cid, rig.body(cid)) for cid in ids])
    status = (await wire.until_ended(batch_id))[-1]
    outcomes = await wire.outcomes(status, ids)
    assert sorted(cid for cid, _ in outcomes) == sorted(ids)
    got = dict(outcomes)
    assert parsed(rig, got["good"]).text == "honest"
    assert isinstance(got["dup"], BatchReply) and parsed(rig, got["dup"]).text == "honest"   # the first line wins
    huge = got["huge"]
    assert isinstance(huge, BatchFailure) and huge.kind == "errored" and "limit" in huge.message
    for cid in ("wrongtype", "notjson"):
        outcome = got[cid]
        assert isinstance(outcome, BatchFailure) and outcome.kind == "errored", (cid, outcome)
    missing = got["missing"]
    assert isinstance(missing, BatchFailure) and missing.kind == "failed" and "mention" in missing.message


def parsed_body(outcome: BatchOutcome) -> bytes:
    assert isinstance(outcome, BatchReply), outcome
    return outcome.body


async def test_a_results_line_over_the_models_reply_cap_is_an_errored_outcome(rig: Rig, sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("y" * (3 << 20))
    wire = await session_of(rig, sessions, replace(rig.model, max_response_mb=1.0))
    batch_id = await wire.api.submit([("big", rig.body("big")), ("small", rig.body("small"))])
    status = (await wire.until_ended(batch_id))[-1]
    outcomes = dict(await wire.outcomes(status, ["big", "small"]))
    assert all(isinstance(o, BatchFailure) and "over the" in o.message for o in outcomes.values())


async def test_a_gemini_batch_goes_inline_when_small_and_as_an_uploaded_file_when_large(sessions: Sessions) -> None:
    live = FakeGemini()
    batches = GeminiBatchServer(live)
    live.start()
    try:
        live.responder = lambda body: fake_gemini.Reply(text=body["contents"][-1]["parts"][0]["text"].upper())
        model = ModelConfig(name="m", model="gemini-1", base_url=live.base_url, api="gemini", timeout_s=10.0)
        provider = PROVIDERS["gemini"]
        assert provider.batch is not None
        api = provider.batch.open(BatchTransport(sessions, model),
                                  BatchTarget(live.base_url, model, provider.headers(KEY), Redactor([KEY])))
        wire = Session(api)
        for count, uploads in ((3, 0), (INLINE_MAX_REQUESTS + 1, 2)):
            before = len(batches.log)
            ids = [f"n{i}" for i in range(count)]
            body = prepare(model, asking("abc"), RequestSettings(stream=False)).body
            batch_id = await wire.api.submit([(cid, body) for cid in ids])
            status = (await wire.until_ended(batch_id))[-1]
            outcomes = dict(await wire.outcomes(status, ids))
            assert all(parsed_text("gemini", o) == "ABC" for o in outcomes.values())
            log = batches.log[before:]
            assert sum(1 for entry in log if entry.startswith("POST /upload/")) == uploads
            assert any(entry.startswith("GET /download/") for entry in log) == bool(uploads)
        assert live.keys == {KEY}
    finally:
        live.stop()


def parsed_text(api: str, outcome: BatchOutcome) -> str:
    assert isinstance(outcome, BatchReply), outcome
    result = CallResult()
    PROVIDERS[api].parse(outcome.body, result, Redactor([KEY]))
    return result.text


async def test_anthropic_results_are_read_from_the_api_host_whatever_results_url_names(sessions: Sessions) -> None:
    live = FakeAnthropic()
    batches = AnthropicBatchServer(live)
    live.start()
    try:
        live.responder = lambda body: fake_anthropic.Reply(text="here")
        model = ModelConfig(name="m", model="claude-1", base_url=live.base_url, api="anthropic", timeout_s=10.0)
        provider = PROVIDERS["anthropic"]
        assert provider.batch is not None
        wire = Session(provider.batch.open(BatchTransport(sessions, model),
                                           BatchTarget(live.base_url, model, provider.headers(KEY), Redactor([KEY]))))
        body = prepare(model, asking("q"), RequestSettings(stream=False)).body
        batch_id = await wire.api.submit([("a", body)])
        batches.jobs.jobs[batch_id].extra["results_url"] = "https://collector.example/steal"
        status = (await wire.until_ended(batch_id))[-1]
        assert status.results == (f"{live.base_url}/messages/batches/{batch_id}/results",)
        assert parsed_text("anthropic", dict(await wire.outcomes(status, ["a"]))["a"]) == "here"
    finally:
        live.stop()


def test_every_api_with_a_batch_method_publishes_its_limits_and_the_half_price() -> None:
    for name in APIS:
        batch = PROVIDERS[name].batch
        assert batch is not None and batch.discount == 0.5
        assert batch.limits.max_requests >= 50_000 and batch.limits.max_bytes >= 200_000_000
        assert batch.size("a", {"x": "é"}) > len('{"x":"é"}')


async def test_polling_a_batch_the_provider_does_not_know_raises_its_error_masked(rig: Rig,
                                                                                sessions: Sessions) -> None:
    wire = await session_of(rig, sessions)
    unknown = {"chat": "batch_404", "completions": "batch_404", "anthropic": "msgbatch_404",
               "gemini": "batches/404"}[rig.api]
    with pytest.raises(ClientError) as failed:
        await wire.api.poll(unknown)
    assert failed.value.status == 404 and not failed.value.retryable and KEY not in str(failed.value)


# -- the key where the live calls send it, and hostile batch objects ------------------------------------------------


def by_query(rig: Rig) -> ModelConfig:
    """The rig's model with its key sent as the query parameter `key` (`api_key_query`), as its live calls do."""
    return replace(rig.model, api_key_env="BATCH_WIRE_KEY", api_key_query="key")


def the_real_batch_api(sessions: Sessions, model: ModelConfig) -> Session:
    """The batch API the run opens for `model` (`ModelClient.batch_api`): its key where the live calls send it."""
    _, api = ModelClient(sessions, {"m": KEY}).batch_api(model)
    return Session(api)


async def test_a_key_sent_in_the_query_authenticates_every_batch_call_and_is_kept_nowhere(
        rig: Rig, sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("keyed")
    rig.batches.key_query = ("key", KEY)   # a batch call without ?key=KEY is refused (401)
    wire = the_real_batch_api(sessions, by_query(rig))
    # more than go inline: Gemini uploads a file, at the URL its upload's start names
    questions = {f"k{i}": f"What is {i}?" for i in range(INLINE_MAX_REQUESTS + 1)}
    batch_id = await wire.api.submit([(cid, rig.body(q)) for cid, q in questions.items()])
    statuses = await wire.until_ended(batch_id)
    outcomes = dict(await wire.outcomes(statuses[-1], list(questions)))
    assert sorted(outcomes) == sorted(questions)
    assert all(parsed(rig, outcome).text == "keyed" for outcome in outcomes.values())
    if rig.api == "gemini":
        assert "POST /upload/v1beta/files" in rig.batches.log
    if rig.api == "anthropic":   # its results_url, as the server named it, without the key the download carried
        assert statuses[-1].results == (f"{rig.live.base_url}/messages/batches/{batch_id}/results",)
    assert KEY not in repr((batch_id, statuses, outcomes))


async def test_a_refused_batch_call_that_echoes_its_url_has_the_query_key_masked(rig: Rig,
                                                                                 sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("fine")
    rig.batches.key_query = ("key", "another-key")
    wire = the_real_batch_api(sessions, by_query(rig))
    with pytest.raises(SubmitError) as refused:
        await wire.api.submit([("a", rig.body("a"))])
    assert refused.value.status == 401 and not refused.value.sent
    assert "key=***" in str(refused.value) and KEY not in str(refused.value)


def _batch_key(rig: Rig) -> str:
    return "name" if rig.api == "gemini" else "id"


async def test_a_batch_id_that_holds_the_key_is_refused_before_it_is_kept(rig: Rig, sessions: Sessions) -> None:
    echoed = ("batches/" if rig.api == "gemini" else "") + KEY
    rig.batches.plan = Plan(patch=lambda batch: batch.update({_batch_key(rig): echoed}))
    wire = await session_of(rig, sessions)
    with pytest.raises(SubmitError) as refused:
        await wire.api.submit([("a", rig.body("a"))])
    assert "holds a secret" in str(refused.value) and KEY not in str(refused.value)
    assert refused.value.sent   # the batch was created: the run must not send it again


async def test_a_batch_status_over_its_size_cap_is_an_error_naming_the_batch(rig: Rig, sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("fine")
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([("a", rig.body("a"))])
    pad = "x" * ((64 << 20) + 1 if rig.api == "gemini" else (1 << 20) + 1)   # Gemini's holds inline answers
    rig.batches.jobs.jobs[batch_id].plan = Plan(patch=lambda batch: batch.update(pad=pad))
    with pytest.raises(ClientError) as refused:
        await wire.api.poll(batch_id)
    assert refused.value.kind == "response_too_large" and str(refused.value).startswith("the batch: ")


#: Per API, a batch object's documented field given the wrong type, and the place the error must name.
WRONG_TYPES: dict[str, list[tuple[Callable[[dict[str, Any]], None], str]]] = {
    "chat": [(lambda b: b.update(status=7), "`batch.status`"),
             (lambda b: b.update(request_counts=[1, 2]), "`batch.request_counts`"),
             (lambda b: b["request_counts"].update(total="many"), "`request_counts.total`"),
             (lambda b: b["request_counts"].update(completed=-3), "`request_counts.completed`"),
             (lambda b: b.update(status="completed", output_file_id=["file-1"]), "`batch.output_file_id`"),
             (lambda b: b.update(status="completed", output_file_id="file 1?x=y"), "`batch.output_file_id`")],
    "anthropic": [(lambda b: b.update(processing_status=None), "`processing_status`"),
                  (lambda b: b.update(request_counts="all"), "`batch.request_counts`"),
                  (lambda b: b["request_counts"].update(succeeded=True), "`request_counts.succeeded`"),
                  (lambda b: b.update(processing_status="ended", results_url=17), "`batch.results_url`")],
    "gemini": [(lambda b: b.update(metadata=["PENDING"]), "`operation.metadata`"),
               (lambda b: b["metadata"].update(state={"s": 1}), "`metadata.state`"),
               (lambda b: b["metadata"].update(batchStats=3), "`metadata.batchStats`"),
               (lambda b: b["metadata"]["batchStats"].update(requestCount="1e9"), "`batchStats.requestCount`"),
               (lambda b: b["metadata"].update(state="BATCH_STATE_SUCCEEDED", output={"responsesFile": 5}),
                "`output.responsesFile`")],
}
WRONG_TYPES["completions"] = WRONG_TYPES["chat"]


async def test_a_batch_status_with_a_wrong_type_is_an_error_naming_the_field(rig: Rig, sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("fine")
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([("a", rig.body("a"))])
    for patch, place in WRONG_TYPES[rig.api]:
        rig.batches.jobs.jobs[batch_id].plan = Plan(patch=patch)
        with pytest.raises(ClientError) as refused:
            await wire.api.poll(batch_id)
        assert refused.value.kind == "bad_response" and place in str(refused.value), (place, refused.value)


@pytest.mark.parametrize("rig", ["anthropic"], indirect=True)
async def test_anthropic_results_url_that_carries_the_key_is_not_kept(rig: Rig, sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("here")
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([("a", rig.body("q"))])
    base_url = rig.live.base_url
    rig.batches.jobs.jobs[batch_id].extra["results_url"] = f"{base_url}/messages/batches/{batch_id}/results" \
                                                           f"?token={KEY}"
    status = (await wire.until_ended(batch_id))[-1]
    assert status.results == (f"{base_url}/messages/batches/{batch_id}/results",)
    assert parsed_text("anthropic", dict(await wire.outcomes(status, ["a"]))["a"]) == "here"


@pytest.mark.parametrize("rig", ["gemini"], indirect=True)
async def test_gemini_inline_responses_that_are_not_a_list_fail_each_request_saying_so(rig: Rig,
                                                                                       sessions: Sessions) -> None:
    rig.live.responder = lambda body: rig.answer("here")

    def as_text(operation: dict[str, Any]) -> None:
        output = operation["metadata"].get("output")
        if output is not None:
            output["inlinedResponses"]["inlinedResponses"] = "none today"
    rig.batches.plan = Plan(patch=as_text)
    wire = await session_of(rig, sessions)
    batch_id = await wire.api.submit([("a", rig.body("q")), ("b", rig.body("r"))])
    status = (await wire.until_ended(batch_id))[-1]
    outcomes = dict(await wire.outcomes(status, ["a", "b"]))
    assert sorted(outcomes) == ["a", "b"]
    for outcome in outcomes.values():
        assert isinstance(outcome, BatchFailure) and outcome.kind == "failed"
        assert "`output.inlinedResponses.inlinedResponses` is a string, expected a list" in outcome.message


@pytest.mark.parametrize("chunk", [b"x" * 65536, b"\n" * 65536, b'{"custom_id": "z", "key": "z"}\n' * 2048],
                         ids=["one-endless-line", "endless-blank-lines", "endless-strangers"])
async def test_a_results_file_that_never_ends_is_cut_off_at_its_cap(rig: Rig, sessions: Sessions,
                                                                    chunk: bytes) -> None:
    rig.live.responder = lambda body: rig.answer("fine")
    rig.batches.plan = Plan(results_endless=chunk)
    wire = await session_of(rig, sessions, replace(rig.model, max_response_mb=0.01))
    question = "a" * (INLINE_MAX_BYTES + 1)   # over what goes inline: Gemini's answers come as a responses file
    batch_id = await wire.api.submit([("a", rig.body(question))])
    status = (await wire.until_ended(batch_id))[-1]
    with pytest.raises(ClientError) as cut:
        await wire.outcomes(status, ["a"])
    assert cut.value.kind == "response_too_large" and not cut.value.retryable
    assert "the results file" in str(cut.value) or "the batch's results" in str(cut.value) or \
        "the responses file" in str(cut.value)
