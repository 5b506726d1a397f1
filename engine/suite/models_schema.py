"""The schema of a models file (schemas/models.schema.json): how to reach each named model, and the file's defaults.

A model's `params` and a test's own settings bound max_tokens, seed and temperature alike, and both files name
things with NAME_PATTERN: the suite schema (engine.suite.schema_source) takes those from here.
"""

from __future__ import annotations

from typing import Any

from engine.base.limits import (  # the bounds, shared with the `engine run` options (engine/base/limits.py)
    DEFAULT_RESPONSE_MB,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_BATCH_SIZE,
    MAX_CONCURRENCY,
    MAX_RESPONSE_MB,
    MAX_RETRIES,
    MAX_TIMEOUT_S,
)
from engine.suite.mcp_schema import MCP_MODEL, MCP_SERVER

DIALECT = "https://json-schema.org/draft/2020-12/schema"   # both files' JSON Schema dialect
NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_.-]*$"

MAX_TOKENS = {"type": "integer", "minimum": 1, "maximum": INT32_MAX, "description": "Most tokens the model may "
              "write.", "examples": [32]}
SEED = {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX,
        "description": "Sent as `seed` (a 64-bit integer), plus the attempt index: each attempt its own sample."}
TEMPERATURE = {"type": "number", "minimum": 0, "maximum": 2, "description": "Sampling temperature (0..2)."}

_MODEL = {
    "title": "model", "type": "object", "additionalProperties": False,
    "description": "How to reach one model.",
    "oneOf": [{"required": ["base_url"]}, {"required": ["base_urls"]}, {"required": ["builtin"]}],
    "properties": {
        "base_url": {"type": "string", "pattern": "^https?://", "description": "The API's base URL, usually "
                     "ending in /v1 (the engine adds the method's path).",
                     "examples": ["http://127.0.0.1:8000/v1"]},
        "builtin": {"type": "string", "description": "An embedded model the engine starts itself (instead of "
                    "base_url), with a max_tokens floor, timeout and concurrency that fit a CPU for the keys left "
                    "out; `golden` answers every test with its golden, with no model at all.",
                    "examples": ["gemma-3-270m", "golden"]},
        "model": {"type": "string", "description": "The model id sent to the server (default: the builtin name).",
                  "examples": ["gpt-4o-mini"]},
        "api_key_env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "description": "Name of the "
                        "environment variable that holds the API key (never the key itself).",
                        "examples": ["OPENAI_API_KEY"]},
        "api_key_header": {"type": "string", "pattern": "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$",
                           "description": "Send the key from api_key_env in this header (e.g. `api-key`, Azure "
                                          "OpenAI) instead of `Authorization: Bearer`.", "examples": ["api-key"]},
        "api_key_query": {"type": "string", "pattern": "^[A-Za-z0-9._~-]+$",
                          "description": "Send the key from api_key_env as this query parameter of every request "
                                         "(e.g. `key`) instead of a header; never write the key into base_url.",
                          "examples": ["key"]},
        "concurrency": {"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY,
                        "description": "Calls in flight at most: a hard ceiling under which the engine finds "
                                       "the number itself (it grows while the throughput does and shrinks on "
                                       "overloads); the rate limit paces the calls. Default: no ceiling but the "
                                       "engine's own; 1 for an embedded builtin model."},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S,
                      "description": "Time limit of each try, in seconds (default 120; 60 for an embedded builtin "
                                     "model); a try that runs out "
                                     "before its reply started is retried (at most max_retries times), one "
                                     "whose reply was still arriving is an error row keeping the partial answer."},
        "connect_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S,
                              "description": "Time limit of opening a connection (TCP connect and TLS), in seconds "
                                             "(default 10), within timeout_s: an unreachable host fails fast and "
                                             "the try is retried."},
        "max_retries": {"type": "integer", "minimum": 0, "maximum": MAX_RETRIES,
                        "description": "Retries after the first try (default 2)."},
        "max_response_mb": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RESPONSE_MB,
                            "description": f"The most one reply may take, in MiB (default {DEFAULT_RESPONSE_MB:g}); "
                                           "a larger reply is an error row (`response_too_large`).",
                            "examples": [64]},
        "api": {"enum": ["chat", "completions", "anthropic", "gemini"],
                "description": "Which API the endpoint speaks (default chat): OpenAI's chat completions or "
                               "completions, Anthropic's Messages API, or Google's Gemini API; base_url is the API "
                               "root each documents (https://api.anthropic.com/v1, "
                               "https://generativelanguage.googleapis.com/v1beta)."},
        "stream": {"type": "boolean", "description": "Stream the answer with server-sent events (default true)."},
        "structured_output": {"type": "boolean", "description": "The server accepts `response_format` with a "
                              "`json_schema`: judge calls to this model send their reply schema that way "
                              "(default false: a strict parse and one re-ask)."},
        "params": {"type": "object", "description": "Extra request fields passed through (seed, top_p, ...); "
                   "`max_tokens` is the floor of every request's max_tokens (default 1024; 64 for an embedded "
                   "builtin model): a test's larger value wins, a smaller one is raised to it.",
                   # Open on purpose (anything else passes through to the server); the fields the
                   # engine itself reads and stores are bounded.
                   "properties": {"max_tokens": MAX_TOKENS, "seed": SEED, "temperature": TEMPERATURE},
                   "additionalProperties": True,
                   "examples": [{"seed": 1, "top_p": 0.9}]},
        "price": {"type": "object", "title": "price", "additionalProperties": False,
                  "description": "Price per 1M tokens, for cost reports.", "properties": {
                      "input": {"type": "number", "minimum": 0, "description": "Per 1M input tokens."},
                      "output": {"type": "number", "minimum": 0, "description": "Per 1M output tokens."},
                      "cache_read": {"type": "number", "minimum": 0, "description": "Per 1M prompt tokens read "
                                     "from the provider's prompt cache (default: the input price)."},
                      "cache_write": {"type": "number", "minimum": 0, "description": "Per 1M prompt tokens "
                                      "written to the provider's prompt cache (default: the input price)."},
                      "batch_input": {"type": "number", "minimum": 0, "description": "Per 1M input tokens of a call "
                                      "answered through the provider's batch API (default: the input price less "
                                      "batch_discount)."},
                      "batch_output": {"type": "number", "minimum": 0, "description": "Per 1M output tokens of a "
                                       "call answered through the batch API (default: the output price less "
                                       "batch_discount)."},
                      "batch_discount": {"type": "number", "minimum": 0, "maximum": 1, "description": "The share "
                                         "of each price a batched call saves where no batch price is given "
                                         "(default 0.5: the half OpenAI, Anthropic and Google publish)."}},
                  "examples": [{"input": 0.15, "output": 0.6}, {"input": 3, "output": 15, "cache_read": 0.3,
                                                                 "cache_write": 3.75},
                               {"input": 2.5, "output": 10, "batch_input": 1.25, "batch_output": 5}]},
        "batch": {"type": ["boolean", "object"], "title": "batch", "additionalProperties": False,
                  "minProperties": 1,
                  "description": "Send this model's single-turn calls through its provider's batch API, at the "
                                 "batch price, answered within the provider's window (up to 24 hours): true, or "
                                 "{size, max_wait_s}; false keeps it live even under `engine run --batch`. Agent "
                                 "tests stay live; as a judge, its judge calls go in batches too (docs/running.md, "
                                 "Batch runs).",
                  "properties": {
                      "size": {"type": "integer", "minimum": 1, "maximum": MAX_BATCH_SIZE,
                               "description": "The most requests one batch holds (default 1000); a full batch "
                                              "is sent at once."},
                      "max_wait_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400,
                                     "description": "The longest a batch that is not full waits for more "
                                                    "requests before it is sent (default 60)."}},
                  "examples": [True, {"size": 5000, "max_wait_s": 120}]},
        "description": {"type": "string", "description": "Notes for people."},
        "base_urls": {"type": "array", "minItems": 1, "maxItems": 256, "uniqueItems": True,
                      "items": {"type": "string", "pattern": "^https?://"},
                      "description": "Replicas serving the same model (instead of base_url): calls go to the one "
                                     "with the fewest in flight, a failing one is skipped for a cool-down.",
                      "examples": [["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"]]},
        "rate_limit": {"type": "object", "title": "rate limit", "additionalProperties": False, "minProperties": 1,
                       "description": "The provider's limits on this endpoint and key, for providers that publish "
                                      "no rate-limit headers: calls are paced to them, shared by every entry with "
                                      "the same base_url and key (see docs/running.md, Rate limits).",
                       "properties": {
                           "requests_per_minute": {"type": "number", "exclusiveMinimum": 0, "maximum": 10**9,
                                                   "description": "Requests a minute."},
                           "tokens_per_minute": {"type": "number", "exclusiveMinimum": 0, "maximum": 10**12,
                                                 "description": "Tokens a minute (prompt and max_tokens)."}},
                       "examples": [{"requests_per_minute": 500, "tokens_per_minute": 200000}]},
        "rate_limit_deadline_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 7 * 86400,
                                  "description": "How long one call may wait for the rate limit, in seconds "
                                                 "(default 600): paced, or retrying 429, 529 and 503 answers; "
                                                 "past it the row is an error."},
        "context_tokens": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1,
                           "description": "The model's context in tokens, prompt and reply together: agent "
                                          "conversations that outgrow it are trimmed, oldest tool outputs first.",
                           "examples": [32768]},
        "mcp": MCP_MODEL,
    },
}
MODELS_SCHEMA: dict[str, Any] = {
    "$schema": DIALECT,
    "$id": "https://llm-eval-engine.local/schemas/models.schema.json",
    "title": "models file", "description": "Named models the engine can call.",
    "type": "object", "additionalProperties": False, "required": ["models"],
    "properties": {"models": {"type": "object", "minProperties": 1, "description": "Model name -> settings.",
                              "propertyNames": {"pattern": NAME_PATTERN},
                              "additionalProperties": {"$ref": "#/$defs/model"}},
                   "defaults": {"type": "object", "title": "models defaults", "additionalProperties": False,
                                "description": "Defaults for the suites run with this file.",
                                "properties": {"judge": {"type": "string", "pattern": NAME_PATTERN,
                                                         "description": "The model `judge` evaluators use when "
                                                                        "they name none."},
                                               "embedding": {"type": "string", "pattern": NAME_PATTERN,
                                                             "description": "The model (an /embeddings "
                                                             "endpoint) `similar` evaluators use when they "
                                                             "name none."}}}},
    "$defs": {"model": _MODEL, "mcp_server": MCP_SERVER},
}
