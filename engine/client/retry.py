"""Error classification and the retry delay - the only place either decision is made.

The policy copies openai-python (`_base_client.py`, `_should_retry` / `_calculate_retry_timeout`):

- an `x-should-retry: true|false` header overrides everything;
- retry connection errors, timeouts (each try is bounded by the model's `timeout_s`, its connect by
  `connect_timeout_s`), 408, 409, 429 and every status >= 500; never any other 4xx;
- never retry a reply that arrived but cannot be read (`stream`, `bad_response`, `response_too_large`):
  the call was served and paid for, and the same server gives the same reply again;
- never retry a try whose reply had started (a 2xx status and its first body bytes) and then broke - the
  connection closed, `timeout_s` ran out while tokens still came, the body was cut (`after_reply_started`):
  the server did the work and bills it; the row keeps the partial answer and names `--retry-errors`;
- a try that failed at the server itself (connection error, timeout, any 5xx) is the replica's fault:
  `replica_at_fault` puts it in a cool-down when the model has several (`engine.client.replicas`); a
  4xx (408, 409 and 429 included) is the request's or the account's, and is retried on any replica;
- the delay comes from the *current* response: `retry-after-ms`, else `retry-after` (seconds or an
  HTTP date) when 0 < delay <= 120 s, else `min(0.5 * 2**n, 8) * (1 - 0.25 * U)` with n the
  retries already taken and U uniform in [0, 1);
- a rate limit or an overload (429, 529, 503: `rate_limited`) is a wait, not an error: it is retried for
  as long as the call's `rate_limit_deadline_s` allows, not `max_retries` times, and a server's delay is
  honoured however long (`rate_limit_delay`) unless it ends past that deadline, when waiting is pointless.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Iterator, Mapping
from typing import Any

from engine.errors import BadResponse, CallTimeout, ClientError, HTTPStatusError, StreamError, TransportError

INITIAL_DELAY_S = 0.5
MAX_DELAY_S = 8.0
MAX_RETRY_AFTER_S = 120.0
RETRYABLE_STATUSES = frozenset({408, 409, 429})
RATE_LIMIT_STATUSES = frozenset({429, 503, 529})
# The most of a server's own error text an error message keeps (masked before it is cut): enough for a validation
# error that lists every field it refused, short enough for a row and a terminal line.
SERVER_TEXT_CHARS = 1000


def should_retry_status(status: int, headers: Mapping[str, str]) -> bool:
    """Whether a non-2xx response may be retried.

    Args:
        status: The HTTP status code.
        headers: The response headers (case-insensitive, as aiohttp gives them).
    """
    override = headers.get("x-should-retry")
    if override == "true":
        return True
    if override == "false":
        return False
    return status in RETRYABLE_STATUSES or status >= 500


def status_error(status: int, headers: Mapping[str, str], body: str) -> HTTPStatusError:
    """The classified error for a non-2xx response.

    Args:
        status: The HTTP status code.
        headers: The response headers.
        body: The server's own message (its error body's `error.message`, else the start of the body), masked.
    """
    detail = server_text(body)
    message = f"HTTP {status} from the server" + (f": {detail}" if detail else "")
    location = headers.get("location") if 300 <= status < 400 else None
    if location:   # redirects are not followed (engine/client/transport.py): say where to point base_url instead
        # Any userinfo in it is masked by the client, with the rest of the error text (`mask_urls`).
        message += f" (the endpoint moved to {location[:300]}: point base_url there)"
    return HTTPStatusError(message, kind=f"http_{status}", retryable=should_retry_status(status, headers),
                           status=status)


def server_text(text: str) -> str:
    """A server's error text on one line, cut at SERVER_TEXT_CHARS with a mark saying so."""
    line = " ".join(text.split())
    return line if len(line) <= SERVER_TEXT_CHARS else line[:SERVER_TEXT_CHARS] + " ... (cut)"


def transport_error(exc: BaseException, *, during: str) -> TransportError:
    """A failed connection (refused, reset, closed early), which is always retryable.

    Args:
        exc: aiohttp's exception (`engine.client.transport._failure` maps them).
        during: What the client was doing ("connecting", "reading the stream").
    """
    name = type(exc).__name__
    text = str(exc).split("\n")[0][:200]
    return TransportError(f"connection failed while {during}: {name}" + (f": {text}" if text else ""),
                          kind="connection", retryable=True)


def replica_at_fault(error: ClientError) -> bool:
    """Whether a failed try says its server is unwell (connection, timeout, 5xx): skip it for a while."""
    return error.kind in ("connection", "timeout") or (error.status is not None and error.status >= 500)


def timeout_error(timeout_s: float) -> CallTimeout:
    """A try got no complete answer within `timeout_s`; retried, as openai-python retries timeouts."""
    return CallTimeout(f"no complete answer within {timeout_s:g} s (timeout_s in models.yaml, per try)",
                       kind="timeout", retryable=True)


def connect_timeout_error(connect_timeout_s: float) -> CallTimeout:
    """No connection within `connect_timeout_s` (the host does not answer); retried like any timeout."""
    return CallTimeout(f"no connection within {connect_timeout_s:g} s (connect_timeout_s in models.yaml, per try)",
                       kind="timeout", retryable=True)


RESEND_HINT = "`engine run --resume RUN --retry-errors` re-sends it"


def after_reply_started(error: ClientError, *, cut: bool, received: int | None) -> ClientError:
    """A try that failed after its reply began: the same error, never retried, saying how to re-send it.

    Args:
        error: The classified failure (a closed connection, the try's timeout, a malformed or cut body).
        cut: The reply broke off (closed, timed out, a stream cut short), rather than arriving unreadable.
        received: Characters of the answer read so far (text, reasoning and tool-call arguments) from a
            stream; None for a whole (non-streamed) body, which is only read once complete.
    """
    if cut:
        got = "while its body was read" if received is None else f"after {received} characters"
        note = f"the reply was cut {got}; not sent again, as it was served and may be billed: {RESEND_HINT}"
    else:
        note = f"not sent again, as the reply was served and may be billed: {RESEND_HINT}"
    return type(error)(f"{error}; {note}", kind=error.kind, retryable=False, status=error.status)


def stream_error(message: str) -> StreamError:
    """A malformed or truncated stream: a server bug, not retried."""
    return StreamError(message, kind="stream", retryable=False)


def type_name(value: Any) -> str:
    """A JSON value's type in words: "a string", "a number", "a list", ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def wrong_type(where: str, value: Any, expected: str) -> BadResponse:
    """A reply with a value of the wrong type on a documented path: "`choices` is a string, expected a list"."""
    return bad_response(f"`{where}` is {type_name(value)}, expected {expected}")


def objects(items: list[Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each item of a reply's list with its place (`where[i]`); a `BadResponse` at the first that is not an object."""
    for i, item in enumerate(items):
        place = f"{where}[{i}]"
        if type(item) is not dict:
            raise wrong_type(place, item, "an object")
        yield place, item


def bad_response(message: str) -> BadResponse:
    """A reply that is not the documented OpenAI shape (or nested too deep to read): not retried."""
    return BadResponse(f"bad response: {message}", kind="bad_response", retryable=False)


def too_large(limit_bytes: int) -> BadResponse:
    """A reply over the model's size cap: not retried (the same request runs away the same way)."""
    return BadResponse(f"the response is over {limit_bytes / 2**20:g} MB, the limit per response "
                       "(max_response_mb in models.yaml, or --max-response-mb)", kind="response_too_large",
                       retryable=False)


def retry_delay(headers: Mapping[str, str] | None, retries_taken: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before the next try.

    Args:
        headers: Headers of the response that failed, or None for a connection error.
        retries_taken: How many retries this call has already made (0 before the first retry).
        rng: Random source for the jitter (tests pass a seeded one).
    """
    if headers is not None:
        asked = server_delay(headers)
        if asked is not None and 0 < asked <= MAX_RETRY_AFTER_S:
            return asked
    jitter = 1 - 0.25 * (rng or random).random()
    return min(INITIAL_DELAY_S * 2.0 ** retries_taken, MAX_DELAY_S) * jitter


def rate_limited(error: ClientError) -> bool:
    """Whether a failed try was told to wait (a rate limit, an overload), which its deadline bounds, not a count."""
    return error.retryable and error.status in RATE_LIMIT_STATUSES


def rate_limit_delay(headers: Mapping[str, str] | None, waits_taken: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before retrying a rate-limited try: the server's delay, however long, else the backoff.

    The caller compares it with what is left of the call's deadline (`past_deadline`).

    Args:
        headers: Headers of the response that failed.
        waits_taken: How many rate-limit waits this call has already made.
        rng: Random source for the jitter (tests pass a seeded one).
    """
    asked = server_delay(headers) if headers is not None else None
    if asked is not None and asked > 0:
        return asked
    return min(INITIAL_DELAY_S * 2.0 ** min(waits_taken, 16), MAX_DELAY_S) * (1 - 0.25 * (rng or random).random())


def past_deadline(error: ClientError, deadline_s: float, delay_s: float) -> ClientError:
    """A rate-limited try whose next wait would pass the call's deadline: the row's error, saying so."""
    return type(error)(f"{error}; still rate limited: the next wait ({delay_s:.0f} s) would pass "
                       f"rate_limit_deadline_s ({deadline_s:g} s, models.yaml), the most one call waits for a "
                       "rate limit: raise it, or lower the run's demand (fewer models on one key, a lower max_tokens)",
                       kind=error.kind, retryable=False, status=error.status)


def pacing_past_deadline(wait_s: float, deadline_s: float) -> ClientError:
    """The rate limit would let a call go only after its deadline: an error row, nothing sent."""
    return ClientError(f"the rate limit lets this call go only in {wait_s:.0f} s, past rate_limit_deadline_s "
                       f"({deadline_s:g} s, models.yaml), the most one call waits for a rate limit: raise it, "
                       "or lower the run's demand (fewer models on one key, a lower max_tokens)",
                       kind="rate_limit", retryable=False)


def server_delay(headers: Mapping[str, str]) -> float | None:
    """The delay a failed reply's headers ask for (`retry-after-ms`, else `retry-after`), in seconds, or None."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return float(email.utils.mktime_tz(parsed)) - time.time()
