"""`similar` end to end: `engine run` in a subprocess against the loopback fake server, which answers and
embeds (bag-of-words vectors, tests/fake_openai.py), so every cosine here is computed by hand from word
counts. Also: the embedding cache (a re-run and a rescore make zero /embeddings calls, counted at the
server), a server error or a malformed reply as an error row, a bad spec at FILE:LINE:COL, validate calling
nothing, the reader's shape checks."""

from __future__ import annotations

import asyncio
import math
import re
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.client.response import CallResult
from engine.evaluators import compile_spec
from engine.evaluators.scoring import context, score_node_async
from engine.evaluators.similar import cosine
from engine.judge.embeddings import VectorReader
from engine.model.answer import Answer
from engine.redact import Redactor
from tests.factories import make_test
from tests.fake_openai import EMBEDDING_DIM, FakeOpenAI, Reply
from tests.run.e2e import engine

POLITE = "You can return it within 30 days."
RUDE = "No refunds, thank you."
OTHER = "Refunds within 30 days."

SUITE = """\
suite: shop
tests:
  - id: close
    prompt: "Refund policy? (polite)"
    golden: "Returns are accepted within 30 days."
    eval:
      similar: {reference: "{{ golden }}"}
      threshold: 0.4
  - id: far
    prompt: "Refund policy? (rude)"
    golden: "Returns are accepted within 30 days."
    eval:
      similar: {reference: "{{ golden }}", model: embedder}
      threshold: 0.4
  - id: same-words
    prompt: "Refund policy? (polite)"
    eval: {similar: "you can return it within 30 days"}
  - id: composed
    prompt: "Refund policy? (polite)"
    eval:
      all:
        - {contains: "30 days"}
        - {similar: "refunds within 30 days", weight: 3}
  - id: broken
    prompt: "Refund policy? (polite)"
    eval: {similar: {reference: "anything at all", model: broken}}
  - id: garbled
    prompt: "Refund policy? (polite)"
    eval: {similar: {reference: "anything else", model: garbled}}
"""

MODELS = """\
defaults: {{embedding: embedder}}
models:
  shop:
    base_url: {url}
    model: shop-1
    timeout_s: 5
  shop2:
    base_url: {url}
    model: shop-2
    timeout_s: 5
  twin:
    base_url: {url}
    model: twin-1
    timeout_s: 5
  embedder:
    base_url: {url}
    model: embed-1
    timeout_s: 5
    price: {{input: 2.0}}
  broken:
    base_url: {url}
    model: broken-embed
    timeout_s: 5
  garbled:
    base_url: {url}
    model: garbled-embed
    timeout_s: 5
"""

EMBEDDERS = {"embed-1", "broken-embed", "garbled-embed"}


def words(text: str) -> Counter[str]:
    return Counter(re.findall(r"[a-z0-9]+", text.lower()))


def hand_cosine(a: str, b: str) -> float:
    """The cosine of two bag-of-words vectors, from word counts (no hashing)."""
    wa, wb = words(a), words(b)
    dot = sum(wa[w] * wb[w] for w in wa)
    return dot / (math.sqrt(sum(c * c for c in wa.values())) * math.sqrt(sum(c * c for c in wb.values())))


def test_the_words_used_here_do_not_collide_in_the_fake_buckets() -> None:
    # hand_cosine ignores hashing; it equals the server's cosine only when no two words share a bucket
    embedded = [POLITE, RUDE, OTHER, "Returns are accepted within 30 days.", "refunds within 30 days"]
    vocab = set(words(" ".join(embedded)))
    assert len({zlib.crc32(w.encode()) % EMBEDDING_DIM for w in vocab}) == len(vocab)


def respond(body: dict[str, Any]) -> Reply:
    if "input" in body:   # an /embeddings request
        if body["model"] == "broken-embed":
            return Reply(fault="http_400", error_message="input is too long")
        if body["model"] == "garbled-embed":
            return Reply(raw=b'{"data": [{"index": 0, "embedding": "nope"}, {"index": 1, "embedding": [1]}]}')
        return Reply()
    if body["model"] == "shop-2":
        return Reply(content=OTHER)
    return Reply(content=POLITE if "polite" in body["messages"][-1]["content"] else RUDE)


@pytest.fixture
def project(tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, Any]:
    fake_openai.responder = respond
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "shop.yaml").write_text(SUITE)
    models = tmp_path / "models.yaml"
    models.write_text(MODELS.format(url=fake_openai.base_url))
    env = {"ENGINE_JUDGE_CACHE": str(tmp_path / "cache" / "judge.sqlite")}
    return {"suites": suites, "models": models, "env": env, "tmp": tmp_path, "server": fake_openai}


def embedding_requests(server: FakeOpenAI) -> list[dict[str, Any]]:
    return [b for b in server.requests if b["model"] in EMBEDDERS]


def run(project: dict[str, Any], out: str, model: str = "shop") -> pd.DataFrame:
    done = engine("run", str(project["suites"]), "--models", str(project["models"]), "--model", model,
                  "--out", str(project["tmp"] / out), env=project["env"])
    assert done.returncode == 0, done.stderr
    return pd.read_parquet(project["tmp"] / out / "latest").set_index("test_id")


def test_verdicts_match_hand_computed_cosines(project: dict[str, Any]) -> None:
    df = run(project, "r1")
    golden = "Returns are accepted within 30 days."
    close = hand_cosine(POLITE, golden)        # within, 30, days shared: 3 / sqrt(7 * 6)
    assert close == pytest.approx(3 / math.sqrt(42))
    assert df.loc["close", "score"] == pytest.approx(close) and bool(df.loc["close", "passed"])   # 0.463 >= 0.4
    assert df.loc["close", "evaluators"][0]["reason"] == f"cosine similarity {close:.3f} to the reference"
    assert df.loc["far", "score"] == 0.0 and not df.loc["far", "passed"]     # no word shared: cosine 0
    # no threshold: a leaf passes only with a full score; the same words as the answer: cosine 1 (rounded)
    assert df.loc["same-words", "score"] == 1.0 and bool(df.loc["same-words", "passed"])
    # all: contains (1, weight 1) and similar (weight 3): (1 + 3 c) / 4
    c = hand_cosine(POLITE, "refunds within 30 days")
    assert df.loc["composed", "score"] == pytest.approx((1 + 3 * c) / 4)

    # every embedding request: the model id, the texts as a list, floats; answer and reference in one request
    server = project["server"]
    reqs = embedding_requests(server)
    assert all(r["encoding_format"] == "float" and isinstance(r["input"], list) for r in reqs)
    first = next(r for r in reqs if golden in r["input"])
    assert first["model"] == "embed-1" and POLITE in first["input"]
    # the calls and tokens land in the judge columns; the answering model's columns stay its own
    tokens = len(words(POLITE)) + len(words(golden))
    assert df.loc["close", "judge_calls"] == 1 and df.loc["close", "judge_prompt_tokens"] == tokens
    assert df.loc["close", "judge_cost"] == pytest.approx(tokens * 2.0 / 1e6)
    assert pd.isna(df.loc["close", "judge_completion_tokens"]) and df.loc["close", "prompt_tokens"] == 10


def test_a_server_error_or_a_malformed_reply_is_an_error_row(project: dict[str, Any]) -> None:
    df = run(project, "r1")
    broken = df.loc["broken"]
    assert broken["error_kind"] == "evaluator" and pd.isna(broken["passed"])
    assert broken["error_message"].startswith("similar: embedding call failed: broken: HTTP 400 from the server")
    assert broken["answer"] == POLITE and broken["judge_calls"] == 1
    broken_calls = [r for r in embedding_requests(project["server"]) if r["model"] == "broken-embed"]
    assert len(broken_calls) == 1   # a 400 is not retried
    garbled = df.loc["garbled"]
    assert garbled["error_kind"] == "evaluator"
    assert "data[0].embedding is not a list of numbers" in garbled["error_message"]


def test_a_rerun_and_a_rescore_make_zero_embedding_calls(project: dict[str, Any]) -> None:
    server = project["server"]
    first = run(project, "r1")
    assert len(embedding_requests(server)) == 6
    server.requests.clear()
    again = run(project, "r2")
    # only the failed ones are asked again (a failure is never cached)
    assert {r["model"] for r in embedding_requests(server)} == {"broken-embed", "garbled-embed"}
    assert len(embedding_requests(server)) == 2
    cols = ["score", "passed", "error_kind"]
    pd.testing.assert_frame_equal(again[cols], first[cols])
    assert (again.drop(index=["broken", "garbled"])["judge_calls"] == 0).all()

    server.requests.clear()
    done = engine("rescore", str(project["tmp"] / "r1" / "latest"), "--suites", str(project["suites"]),
                  "--models", str(project["models"]), "--out", str(project["tmp"] / "re"), env=project["env"])
    assert done.returncode == 0, done.stderr
    assert server.requests == []                                       # rescore called nothing at all
    (folder,) = (project["tmp"] / "re").iterdir()
    rescored = pd.read_parquet(folder).set_index("test_id")
    ok = ["close", "far", "same-words", "composed"]
    pd.testing.assert_frame_equal(rescored.loc[ok, cols], first.loc[ok, cols])


def test_a_reference_is_embedded_once_for_every_answering_model(project: dict[str, Any]) -> None:
    (project["suites"] / "shop.yaml").write_text(SUITE.split("  - id: far")[0])   # only `close`
    run(project, "r1")
    df = run(project, "r2", model="shop2")    # another answer to the same test: the reference is in the cache
    first, second = embedding_requests(project["server"])
    assert sorted(first["input"]) == sorted([POLITE, "Returns are accepted within 30 days."])
    assert second["input"] == [OTHER]
    assert df.loc["close", "score"] == pytest.approx(hand_cosine(OTHER, "Returns are accepted within 30 days."))
    assert df.loc["close", "judge_prompt_tokens"] == len(words(OTHER))


def test_validate_calls_nothing_and_a_bad_spec_is_reported_at_its_place(project: dict[str, Any]) -> None:
    done = engine("validate", str(project["suites"]), "--models", str(project["models"]), env=project["env"])
    assert done.returncode == 0, done.stderr
    assert project["server"].requests == []
    bad = project["suites"] / "shop.yaml"
    bad.write_text("suite: bad\ntests:\n  - id: t\n    prompt: p\n    eval:\n      similar: {refrence: x}\n")
    done = engine("validate", str(bad), env=project["env"])
    assert done.returncode != 0
    assert re.search(r"shop\.yaml:6:\d+: error: .*reference", done.stdout + done.stderr), done.stdout + done.stderr
    bad.write_text("suite: bad\ntests:\n  - id: t\n    prompt: p\n    eval:\n      similar: {reference: x, model: 3}\n")
    done = engine("validate", str(bad), env=project["env"])
    assert done.returncode != 0 and re.search(r"shop\.yaml:6:\d+: error: ", done.stdout + done.stderr)


def test_an_unknown_embedding_model_stops_the_run_before_any_call(project: dict[str, Any]) -> None:
    (project["suites"] / "shop.yaml").write_text(SUITE.replace("model: embedder}", "model: embeder}"))
    done = engine("run", str(project["suites"]), "--models", str(project["models"]), "--model", "shop",
                  "--out", str(project["tmp"] / "r"), env=project["env"])
    assert done.returncode == 2 and "names model 'embeder', which is not in" in done.stderr
    assert project["server"].requests == []


def test_a_similar_under_final_answer_embeds_the_conversations_final_answer(project: dict[str, Any]) -> None:
    golden = "Returns are accepted within 30 days."
    (project["suites"] / "shop.yaml").write_text(
        "suite: shop\ntests:\n  - id: agent\n    prompt: \"Refund policy? (polite)\"\n    agent: {max_turns: 2}\n"
        f"    golden: \"{golden}\"\n    eval:\n"
        "      final_answer: {similar: {reference: \"{{ golden }}\", model: embedder}}\n      threshold: 0.4\n")
    row = run(project, "r1").loc["agent"]
    assert pd.isna(row["error_kind"]), row["error_message"]
    assert row["score"] == pytest.approx(hand_cosine(POLITE, golden)) and bool(row["passed"])   # 0.463 >= 0.4
    assert row["judge_calls"] == 1
    (request,) = embedding_requests(project["server"])
    assert sorted(request["input"]) == sorted([POLITE, golden])


def test_identical_requests_in_flight_are_paid_once(project: dict[str, Any]) -> None:
    """Two answering models give the same answer, graded at the same moment: one embedding request and one
    judge request reach the server; the other grading waits for it (it counts as a cache hit, no cost)."""
    server = project["server"]

    def respond_slowly(body: dict[str, Any]) -> Reply:
        if "input" in body:
            return Reply(delay_s=0.5)
        if body["model"] == "judge-1":
            return Reply(content='{"reasoning": "ok", "grade": "pass"}', delay_s=0.5)
        return Reply(content=POLITE)     # shop-1 and twin-1 alike

    server.responder = respond_slowly
    (project["suites"] / "shop.yaml").write_text(
        "suite: twins\ntests:\n  - id: t\n    prompt: p\n    eval:\n      all:\n"
        "        - {similar: \"refunds within 30 days\", threshold: 0.1}\n"
        "        - {judge: {rubric: \"mentions 30 days\", model: judge}}\n")
    models = project["models"]
    models.write_text(models.read_text() + f"  judge:\n    base_url: {server.base_url}\n    model: judge-1\n")
    done = engine("run", str(project["suites"]), "--models", str(models), "--model", "shop", "--model", "twin",
                  "--out", str(project["tmp"] / "r"), env=project["env"])
    assert done.returncode == 0, done.stderr
    assert len(embedding_requests(server)) == 1
    assert len([b for b in server.requests if b["model"] == "judge-1"]) == 1
    df = pd.read_parquet(project["tmp"] / "r" / "latest")
    assert sorted(df["judge_calls"]) == [0, 2]        # one row paid both calls, the other none
    c = hand_cosine(POLITE, "refunds within 30 days")
    assert df["score"].tolist() == pytest.approx([(c + 1) / 2] * 2)     # both rows graded all the same


# -- in process ---------------------------------------------------------------------------------------------

def test_cosine_by_hand() -> None:
    assert cosine([1, 0], [0, 1]) == 0.0
    assert cosine([1, 2, 2], [2, 4, 4]) == pytest.approx(1.0)
    assert cosine([1, 0], [-1, 0]) == -1.0
    assert cosine([1, 1], [1, 0]) == pytest.approx(1 / math.sqrt(2))
    assert cosine([0, 0], [1, 0]) is None and cosine([1], [1, 0]) is None


class Vectors:
    """An in-process Embedder returning fixed vectors."""

    def __init__(self, *vectors: tuple[float, ...]) -> None:
        self.vectors = vectors

    async def embed(self, model: str | None, texts: list[str]) -> Any:
        from engine.model.scoring import EmbeddingReply
        return EmbeddingReply(self.vectors, calls=1)


def score(spec: dict[str, Any], caller: Any, answer: str = "Paris") -> Any:
    test = make_test(suite="s", id="t", file="s.yaml", line=1, prompt="Capital?", eval=spec)
    node = compile_spec(spec, {"golden": "Paris"})
    return asyncio.run(score_node_async(node, Answer(text=answer), context(test, caller=caller), 1.0))


def test_a_negative_cosine_scores_zero_and_an_empty_answer_calls_nothing() -> None:
    verdict = score({"similar": "{{ golden }}"}, Vectors((1.0, 0.0), (-1.0, 0.0)))
    assert verdict.score == 0.0 and not verdict.passed and verdict.details["cosine"] == -1.0
    verdict = score({"similar": "{{ golden }}"}, None, answer="  ")
    assert verdict.score == 0.0 and not verdict.error and "empty" in verdict.reason
    verdict = score({"similar": "{{ golden }}"}, None)
    assert verdict.error and "no model caller" in verdict.reason
    # no threshold: a leaf passes with a full score only; 0.6 passes a threshold of 0.5
    assert not score({"similar": "x"}, Vectors((0.6, 0.8), (1.0, 0.0))).passed
    assert score({"similar": "x", "threshold": 0.5}, Vectors((0.6, 0.8), (1.0, 0.0))).passed


@pytest.mark.parametrize(("body", "problem"), [
    (b"[1]", "no `data` list"),
    (b'{"data": [{"embedding": [1.0]}]}', "1 vectors for 2 inputs"),
    (b'{"data": [{"embedding": [1.0]}, {"embedding": [1.0, 2.0]}]}', "differ in length"),
    (b'{"data": [{"embedding": [1.0]}, {"embedding": [true]}]}', "not a finite number"),
    (b"not json", "not JSON"),
])
def test_the_reader_refuses_replies_off_the_protocol(body: bytes, problem: str) -> None:
    with pytest.raises(Exception, match=re.escape(problem)):
        VectorReader(2).read(body, CallResult(), Redactor([]))


def test_the_reader_orders_vectors_by_index() -> None:
    reader = VectorReader(2)
    result = CallResult()
    reader.read(b'{"data": [{"index": 1, "embedding": [2]}, {"index": 0, "embedding": [1]}], '
                b'"usage": {"prompt_tokens": 4}}', result, Redactor([]))
    assert reader.vectors == [(1.0,), (2.0,)] and result.prompt_tokens == 4
