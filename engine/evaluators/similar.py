"""`similar`: semantic similarity of the answer to a reference, by the cosine of two embedding vectors.

    eval:
      similar:
        reference: "{{ golden }}"   # or any text; a template over the test's variables
        model: embedder             # a models.yaml entry with an OpenAI /embeddings endpoint;
                                    # default: the models file's `defaults.embedding`
      threshold: 0.8                # the common option: passes when the cosine >= 0.8

Score: the cosine similarity of the answer's and the reference's embeddings, clipped to [0, 1] (a negative
cosine - "opposite" - scores 0 like an unrelated answer; the raw cosine is in the verdict's details and
reason) and rounded to 9 decimals (identical texts score exactly 1, not 0.9999999999999999). Passing: as
every leaf, the node's `threshold` (compose.py: score >= threshold, i.e. cosine >= threshold for any
threshold above 0), else a full score - only the same text, or the test's `threshold` at the root. So a
`similar` nearly always carries a `threshold:`; there is no hidden default pass mark.

The reference is rendered when the suite loads (like every evaluator value). The scorer awaits
`ctx.caller.embed` (an `Embedder`: the run layer's caller over the run's client, the model's cap, retries,
budget and the judge cache's `embedding` table); it never imports the client. An empty answer scores 0
without a call (an /embeddings endpoint refuses empty input); a failed call is an *error* verdict.
The calls and tokens go to the verdict's details under the judge's names (`judge_calls`, ...), so the
row's judge columns count every model-graded call (engine.results.rows.judge_columns).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import EvaluatorConfigError
from engine.evaluators.base import Kind
from engine.model.answer import Answer
from engine.model.scoring import EmbeddingReply, ScoringContext
from engine.model.verdict import Verdict

__all__ = ["SIMILAR", "SimilarScorer", "cosine"]

KIND = "similar"


@dataclass(frozen=True, slots=True)
class SimilarScorer:
    """A built `similar` scorer, awaited with (answer, ctx) like any async scorer.

    Args:
        model: The embedding model entry, or None for the models file's `defaults.embedding` (the run layer
            resolves it before any call is paid).
        reference_text: The rendered reference the answer is compared with.
    """

    model: str | None
    reference_text: str

    async def __call__(self, answer: Answer, ctx: ScoringContext) -> Verdict:
        model = self.model
        details: dict[str, Any] = {"embedding_model": model}
        if not answer.text.strip():
            return Verdict(score=0.0, passed=False, reason="similar: the answer is empty (nothing to embed)",
                           kind=KIND, details=details)
        if ctx.caller is None:
            return _error("similar: no model caller here (this context calls no model: validate's golden check "
                          "does not embed)", details)
        reply: EmbeddingReply = await ctx.caller.embed(model, [answer.text, self.reference_text])
        details.update(judge_calls=reply.calls, judge_cached=reply.cached, judge_prompt_tokens=reply.prompt_tokens,
                       judge_completion_tokens=None, judge_cost=reply.cost)
        if reply.error is not None:
            return _error(f"similar: embedding call failed: {reply.error}", details)
        value = cosine(*reply.vectors) if len(reply.vectors) == 2 else None
        if value is None:
            return _error("similar: the embeddings cannot be compared (different lengths, or a zero vector)",
                          details)
        details["cosine"] = value
        score = min(1.0, max(0.0, round(value, 9)))
        return Verdict(score=score, passed=score >= 1.0, kind=KIND, details=details,
                       reason=f"cosine similarity {value:.3f} to the reference")


def cosine(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The cosine similarity of two vectors; None when they differ in length or one is all zeros."""
    if len(a) != len(b):
        return None
    norm = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    if norm == 0.0 or not math.isfinite(norm):
        return None
    return max(-1.0, min(1.0, math.fsum(x * y for x, y in zip(a, b, strict=True)) / norm))


def _build(value: Any, options: Mapping[str, Any]) -> SimilarScorer:
    if isinstance(value, str):
        value = {"reference": value}
    if not isinstance(value, Mapping) or value.get("reference") in (None, ""):
        raise EvaluatorConfigError('similar: needs a `reference:` (the text to compare with, e.g. "{{ golden }}")',
                                   kind=KIND, option="reference")
    reference = value["reference"]
    reference_text = reference if isinstance(reference, str) else json.dumps(reference, ensure_ascii=False,
                                                                             default=str)
    if not reference_text.strip():
        raise EvaluatorConfigError("similar: the reference is empty after rendering; give a text, or a golden for "
                                   '"{{ golden }}"', kind=KIND, option="reference")
    model = value.get("model")
    if model is not None and not isinstance(model, str):
        raise EvaluatorConfigError("similar: model must be the name of a models.yaml entry", kind=KIND,
                                   option="model")

    return SimilarScorer(model, reference_text)


def _error(reason: str, details: dict[str, Any]) -> Verdict:
    return Verdict(score=0.0, passed=False, reason=reason, kind=KIND, error=True, details=details)


SIMILAR = Kind(
    description="Cosine similarity of the answer's and a reference's embeddings (a models file entry's "
                "/embeddings endpoint); score = the cosine clipped to [0, 1].",
    # One schema for both forms (text, or a mapping): `minLength` binds only text, the rest only a mapping, so
    # a misspelt key is reported as such rather than as "neither text nor a mapping".
    value={"type": ["string", "object"], "minLength": 1,
           "description": "The reference text (embedded by the default model), or {reference, model}.",
           "additionalProperties": False, "required": ["reference"], "properties": {
               "reference": {"description": "The text to compare with (a template, e.g. \"{{ golden }}\").",
                             "minLength": 1},
               "model": {"type": "string", "minLength": 1,
                         "description": "A models file entry (default: its `defaults.embedding`)."}}},
    examples=({"similar": {"reference": "{{ golden }}", "model": "embedder"}, "threshold": 0.8},),
    build=_build,
    calls_model=True,
)
