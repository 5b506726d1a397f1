"""Bounds on the numbers a suite, a models file or the command line may give.

Each value must fit its results column (max_tokens int32, seed int64) and stay a sane amount of work.
The schemas (engine.suite.schema_source, models_schema) and the `engine run` options (engine.cli.run_cmd) use these same
constants, so `engine validate` and the command line refuse the same values.

Their own module, importing nothing, so the CLI can build its options without importing the suite package
(its loader, the evaluators, jsonschema): every `engine` command starts that much faster (see run_cmd.py).
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_REPEAT = 1000
MAX_CONCURRENCY = 4096          # calls in flight from one process; each holds a socket
MAX_RETRIES = 100
MAX_TIMEOUT_S = 86_400.0
MAX_RESPONSE_MB = 4096.0
DEFAULT_RESPONSE_MB = 32.0
MAX_BATCH_SIZE = 50_000         # requests in one batch: the most OpenAI's Batch API takes (Anthropic's 100,000)

#: Suite files over this size are refused unless the setting below raises the limit: a suite's values, with the
#: position of each, are held while the file is checked (from ~5x the file's size for long prompts to ~90x for
#: short case rows written in the file).
DEFAULT_SUITE_MB = 5.0
#: The environment variable that sets the suite file limit, in MB (a suite's case rows in a `cases_from:` file
#: are read a row at a time and need no limit).
SUITE_MB_SETTING = "ENGINE_MAX_SUITE_MB"
