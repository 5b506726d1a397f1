"""What a scorer may know besides the answer: the scoring context, with the run's record and the model callers.

A scorer is `scorer(answer, ctx) -> Verdict`, or an `async def` returning one (a judge awaiting a model call);
`ctx` is a `ScoringContext`. A leaf whose value is itself an evaluator (`final_answer`) scores its child tree
through `ctx.descend`, as a jsonschema keyword descends into a subschema: engine.evaluators.scoring, the one
walker, fills the context's `walker` in, so no family module imports scoring.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from engine.model.answer import Answer
from engine.model.test import Test
from engine.model.transcript import Transcript
from engine.model.tree import Node
from engine.model.verdict import Verdict

__all__ = ["Embedder", "EmbeddingReply", "GradingCaller", "JudgeCaller", "JudgeReply", "Record", "Scorer",
           "ScoringContext", "Walker"]


@dataclass(frozen=True, slots=True)
class Record:
    """What the run recorded of a test's model call(s): the facts no answer text holds, for the record kinds.

    Built from the results row (`engine.results.rows.record_of`), by the run and by `engine rescore` alike,
    so both score the same facts. An agent test's row sums its calls (tokens, cost), times the whole
    conversation (`latency_s`) and keeps the first call's TTFTs. None means the run did not measure it.

    Args:
        asked_model: The model id sent in the request.
        served_model: The model the server said answered (the last call's), or None.
        fallback: Another model answered (any call); None when the server named no model.
        finish_reason: The (last) reply's finish reason.
        truncated: A reply was cut short (finish reason `length`, or a stream that ended early).
        prompt_tokens: Input tokens over every call.
        completion_tokens: Output tokens over every call.
        latency_s: Seconds the call (or conversation) took.
        ttft_provider_s: Seconds to the reply's first byte.
        ttft_visible_s: Seconds to the first visible token or tool call (streamed replies only).
        cost: The priced cost in dollars (0 when the response cache answered).
        cached: The response cache answered: nothing was timed or paid.
    """

    asked_model: str | None = None
    served_model: str | None = None
    fallback: bool | None = None
    finish_reason: str | None = None
    truncated: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    ttft_provider_s: float | None = None
    ttft_visible_s: float | None = None
    cost: float | None = None
    cached: bool = False


class JudgeReply(NamedTuple):
    """One judge model reply, as the caller hands it to a judge scorer.

    Args:
        text: The reply's text ("" when the call failed).
        error: Why the call failed for good (after retries), or None.
        prompt_tokens: Prompt tokens the server reported (None: unknown).
        completion_tokens: Completion tokens the server reported (None: unknown).
        cost: The call's priced cost (None: unpriced or tokens unknown); 0 is never a stand-in.
        cached: The reply came from the judge cache: nothing was paid for it now.
    """

    text: str
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None
    cached: bool = False


class JudgeCaller(Protocol):
    """What a judge scorer awaits (the run layer implements it over the client; evaluators never import it)."""

    async def judge(self, model: str | None, messages: list[dict[str, Any]], *, schema: Mapping[str, Any],
                    temperature: float, max_tokens: int, sample: int) -> JudgeReply:
        """Ask judge `model` (None: the models file's `defaults.judge`); never raises for a failed call.

        Args:
            model: The models file entry, or None for the default judge.
            messages: The chat messages to send.
            schema: The reply's JSON Schema (sent as `response_format` when the model allows it).
            temperature: The judge's temperature.
            max_tokens: The reply's max tokens.
            sample: The sample index (0..n-1): part of the cache key, so n samples are n judgements.
        """
        ...


class EmbeddingReply(NamedTuple):
    """The vectors of some texts, as the caller hands them to a `similar` scorer.

    Args:
        vectors: One vector per text asked, in order (empty when the call failed).
        error: Why the call failed for good (after retries), or None.
        calls: Requests paid for now (0 when every text came from the cache).
        cached: Texts answered from the cache.
        prompt_tokens: Tokens the server reported for the paid requests (None: unknown).
        cost: The paid requests' priced cost (None: unpriced or tokens unknown).
    """

    vectors: tuple[tuple[float, ...], ...] = ()
    error: str | None = None
    calls: int = 0
    cached: int = 0
    prompt_tokens: int | None = None
    cost: float | None = None


class Embedder(Protocol):
    """What a `similar` scorer awaits (the run layer implements it over the client; evaluators never import it)."""

    async def embed(self, model: str | None, texts: Sequence[str]) -> EmbeddingReply:
        """Embed `texts` with `model` (None: the models file's `defaults.embedding`); never raises for a failed
        call."""
        ...


class GradingCaller(JudgeCaller, Embedder, Protocol):
    """The model-graded scorers' one caller: judges and embeddings through the run's client, caps, retries,
    budget and judge cache."""


class Walker(NamedTuple):
    """How a scorer scores a child tree it holds (engine.evaluators.scoring's `score_node` and `score_node_async`).

    Args:
        score: (node, answer, ctx) -> the subtree's verdict, synchronously.
        score_async: The same, awaiting async scorers and sending blocking ones off the event loop.
    """

    score: Callable[[Node, Answer, ScoringContext], Verdict]
    score_async: Callable[[Node, Answer, ScoringContext], Awaitable[Verdict]]


class ScoringContext(NamedTuple):
    """What a scorer may know besides the answer (immutable; a named tuple because one is built per answer).

    Args:
        test: The test being scored (tools, golden, prompt, suite_dir for harness files).
        variables: The test's template variables (case values, golden, test_id, suite); the tree's
            templates were rendered with them when it was compiled.
        transcript: An agent test's conversation, for the trajectory kinds; None for a single-turn answer.
        caller: For model-graded evaluators (`judge`, `similar`): awaits a model call through the run's
            client, caps, retries, budget and judge cache (None where no model may be called: the golden check).
        workspace: A workspace test's final workspace, an `engine.workspace.Workspace` (that layer sits above
            this package: `workspace_check` checks the type where it uses it), or None.
        record: What the run recorded of the call(s), for the record kinds (`latency_s`, `cost`, ...);
            None where nothing ran (the golden self-check): those kinds then say they need a run.
        walker: How `descend` scores a child tree; engine.evaluators.scoring fills it in when it scores.
    """

    test: Test
    variables: Mapping[str, Any]
    transcript: Transcript | None = None
    caller: GradingCaller | None = None
    workspace: object | None = None
    record: Record | None = None
    walker: Walker | None = None

    def descend(self, node: Node, answer: Answer) -> Verdict:
        """The verdict of the child tree `node` on `answer`, in this context."""
        return self._walker().score(node, answer, self)

    def descend_async(self, node: Node, answer: Answer) -> Awaitable[Verdict]:
        """`descend`, awaiting async scorers and sending blocking ones off the event loop."""
        return self._walker().score_async(node, answer, self)

    def _walker(self) -> Walker:
        if self.walker is None:
            raise RuntimeError("this scoring context has no walker: score through engine.evaluators.score, "
                               "which fills it in")
        return self.walker


Scorer = Callable[[Answer, ScoringContext], "Verdict | Awaitable[Verdict]"]
