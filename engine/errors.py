"""The engine's error hierarchy.

Errors the engine raises on purpose, drawn as a tree (httpx `_exceptions.py` style)::

    EngineError                    anything the engine reports to a person instead of a traceback
     ├── SuiteError                one or more problems in suite / models / harness files
     │                             (carries a list of Diagnostic, each FILE:LINE:COL: error: ...)
     ├── ConfigError               an input the engine cannot use that is not a suite file (a HumanEval file ...)
     │    └── UsageError           a bad command-line option, an unknown model, a missing API key (exit 2)
     ├── EvaluatorConfigError      an evaluator option that cannot work (names the kind, the option and the fix)
     ├── ResultsError              results that cannot be read (no Parquet, unreadable files, clashing columns)
     ├── ClientError               a model call that failed (kind, retryable, status)
     │    ├── HTTPStatusError      the server answered with a non-2xx status
     │    ├── TransportError       connection refused / reset, DNS, TLS
     │    ├── CallTimeout          the per-call deadline passed
     │    ├── StreamError          malformed SSE, a stream that ended without [DONE] or a finish reason
     │    └── BadResponse          a reply that is not the documented OpenAI shape, nested too deep,
     │                             or over the size cap (kinds `bad_response`, `response_too_large`)
     ├── HarnessError              an exec harness could not be prepared or run (not a failing program)
 ├── McpServerError            an MCP server did not start, hung, died or answered out of protocol
     ├── LocalModelError           the embedded model server could not be started
     ├── StorageError              the run folder could not be written (disk full, I/O error): spending stops
     ├── RunFolderInUse            another `engine run` holds the run folder's lock
     └── CallStopped               the run stopped while a call waited to be sent (nothing sent: no row)

Evaluators never raise to signal a failing answer: they return a Verdict (see `engine.model.verdict`).
A crash inside an evaluator becomes an *error* verdict, never a stopped run.
"""

from __future__ import annotations

# Diagnostic's home is engine.base (the YAML loader there makes them); every layer above imports it from here.
from engine.base.diagnostic import Diagnostic as Diagnostic


class EngineError(Exception):
    """Base class: an error the CLI prints as a message, not a traceback."""


class SuiteError(EngineError):
    """Problems found in suite, models or harness files."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        super().__init__("\n".join(str(d) for d in diagnostics))


class ConfigError(EngineError):
    """An input the engine cannot use that is not a suite file (a HumanEval file, a setting)."""


class UsageError(ConfigError):
    """A bad command-line option, an unknown model or a missing API key: `engine run` exits with 2."""


class EvaluatorConfigError(EngineError):
    """An evaluator option that cannot work, found when the evaluator is compiled (or rendered).

    The message names the kind, the option and the fix ("contains: mode must be 'all' or 'any', got
    'most'"). At load time it becomes a FILE:LINE:COL diagnostic; for a tree built by hand it becomes
    an *error* verdict, never a "could not judge: ValueError".

    Args:
        message: What is wrong and how to fix it.
        kind: The evaluator kind (`contains`), or "" when the kind itself is the problem.
        option: The option at fault (`mode`), or None for the value under the kind's key.
    """

    def __init__(self, message: str, *, kind: str = "", option: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.option = option


class ResultsError(EngineError):
    """Results that cannot be read: a missing path, no Parquet file, or files whose columns disagree."""


class ClientError(EngineError):
    """A model call that failed.

    Args:
        message: What happened, never containing secrets.
        kind: A short classification stored in results (`http_429`, `timeout`, `connection`, ...).
        retryable: Whether the retry policy may try again.
        status: The HTTP status, when there was one.

    `retry_after_s` is the wait the server asked for before another try (its `retry-after`, or a delay its error
    body names, as Gemini's RetryInfo), None when it named none: a batch call's pause honours it (a live try's
    delay is read from its reply's headers, `engine.client.transport.Failed`).
    """

    retry_after_s: float | None = None

    def __init__(self, message: str, *, kind: str, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.status = status


class HTTPStatusError(ClientError):
    """The server answered with a non-2xx status."""


class TransportError(ClientError):
    """The connection failed: refused, reset, closed early."""


class CallTimeout(ClientError):
    """The per-call deadline passed."""


class StreamError(ClientError):
    """A malformed or truncated server-sent event stream."""


class BadResponse(ClientError):
    """A reply the client will not read: the wrong shape, nested too deep, or too large.

    Never retried: the server answered (and was paid), and the same server answers the same request
    the same way; `engine run --resume RUN --retry-errors` re-runs such rows on purpose.
    """


class HarnessError(EngineError):
    """An exec harness could not be prepared or run."""


class McpServerError(EngineError):
    """An MCP server an agent test offers tools from failed: it did not start, did not answer a call within
    its `timeout_s`, died, or answered something that is not MCP. The conversation ends as an error row (kind
    `mcp`) whose message ends with the server's stderr tail; the run goes on."""

    kind = "mcp"


class LocalModelError(EngineError):
    """The embedded model server could not be started or reached."""


class StorageError(EngineError):
    """A write to the run folder failed (journal commit, Parquet part, manifest).

    The run stops spending at once: no new calls, calls in flight cancelled; committed rows stay.

    Args:
        message: What failed, with the underlying error.
        disk_full: True when the cause is a full disk (ENOSPC, SQLITE_FULL) or quota (EDQUOT).
    """

    def __init__(self, message: str, *, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full


class RunFolderInUse(EngineError):
    """Another `engine run` writes to this run folder (it holds `_lock`)."""


class CallStopped(EngineError):
    """The run stopped (Ctrl-C, `--max-cost`) while a call waited to be sent - for the rate limit, a slot or a
    retry's delay - so it was never sent: it leaves no row, and `--resume` sends it."""


class SendLive(EngineError):
    """A call a recorded batch failed, sent again by `--retry-errors` for a model (tested or judge) whose entry no
    longer says `batch:`: the batcher hands it back, and it goes live, as the entry says now."""
