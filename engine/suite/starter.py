"""The commented starter suite `engine init` writes, and the schema file it writes beside it.

The starter's first line names `suite.schema.json` in its own folder, so an editor finds the schema wherever the
folder is moved, copied or cloned (a path to the engine's installed schemas would hold on this machine only).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.suite.schema import SCHEMA_DIR

__all__ = ["SCHEMA_FILE", "STARTER_FILE", "starter_suite", "write_schema"]

STARTER_FILE = "my-first-suite.yaml"
SCHEMA_FILE = "suite.schema.json"

_BODY = '''\
# A starter suite. Check it with `engine validate`, then make it your own.
# Every key is explained in docs/suite-format.md; your editor shows hover help through the line above.

suite: my-first-suite            # the suite's id: letters, digits, _ . -
description: A few example tests to copy from.
tags: [example]

defaults:                        # applied to every test that does not say otherwise
  system: Answer briefly.
  max_tokens: 64
  threshold: 1.0                 # the score (0..1) a test needs to pass

tests:
  # The simplest test: a prompt, the answer you expect, and how to check it.
  - id: capital-france
    prompt: What is the capital of France?
    golden: Paris                # the reference answer; `engine validate` checks it passes `eval`
    eval: {contains: "{{ golden }}"}

  # Several checks at once: all must pass; weights say how much each counts.
  - id: one-word-answer
    prompt: Name the largest planet of the solar system, in one word.
    golden: Jupiter
    eval:
      all:
        - equals: "{{ golden }}"
          weight: 3
        - length: {max_words: 1}

  # One test per row: {{ a }} and {{ b }} come from each row of `cases`.
  - id: add-{{ a }}-{{ b }}
    prompt: What is {{ a }} + {{ b }}? Answer with the number only.
    cases:
      - {a: 2, b: 3, golden: 5}
      - {a: 10, b: -4, golden: 6}
    eval: {numeric: "{{ golden }}"}
'''


def starter_suite() -> str:
    """The starter suite's text; its first line names the schema file beside it (`write_schema`)."""
    return f"# yaml-language-server: $schema={SCHEMA_FILE}\n{_BODY}"


def write_schema(directory: Path) -> Path:
    """Copy this engine's suite schema into `directory` (replacing an older copy) and return its path."""
    target = directory / SCHEMA_FILE
    shutil.copyfile(SCHEMA_DIR / SCHEMA_FILE, target)
    return target
