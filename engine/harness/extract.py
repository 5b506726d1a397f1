"""Take the code out of a model's answer.

The rule: the first fenced block tagged with the language asked for; else the first fenced block of any
tag; else the whole answer. A block the model never closed (it ran out of tokens) runs to the end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LANGUAGE_TAGS", "Extracted", "extract_code"]

# Fence tags accepted for each harness language (lower case).
LANGUAGE_TAGS: dict[str, frozenset[str]] = {
    "python": frozenset({"python", "py", "python3", "py3"}),
    "javascript": frozenset({"javascript", "js", "node", "nodejs", "mjs", "cjs"}),
    "bash": frozenset({"bash", "sh", "shell", "zsh"}),
}

_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")


@dataclass(frozen=True)
class Extracted:
    """The code to run and how it was found.

    Args:
        code: The code.
        source: "tagged" (a block in the language asked for), "fenced" (another fenced block) or "whole".
        note: A sentence for the verdict when the code was not in a block of the language asked for.
    """

    code: str
    source: str
    note: str = ""


def _blocks(text: str) -> list[tuple[str, str]]:
    """Fenced blocks as (tag, body), in order."""
    blocks: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence = opening.group("fence")
        tag = opening.group("info").strip().split(" ")[0].lower() if opening.group("info").strip() else ""
        body: list[str] = []
        i += 1
        while i < len(lines):
            closing = _FENCE.match(lines[i])
            if closing and closing.group("fence")[0] == fence[0] and len(closing.group("fence")) >= len(fence) \
                    and not closing.group("info").strip():
                break
            body.append(lines[i])
            i += 1
        blocks.append((tag, "\n".join(body) + "\n"))
        i += 1
    return blocks


def extract_code(text: str, language: str) -> Extracted:
    """The code to run from an answer.

    Args:
        text: The answer text.
        language: The harness language (`python`, `javascript`, `bash`, or any fence tag).

    Returns:
        The code, with a note when no block in `language` was found.
    """
    tags = LANGUAGE_TAGS.get(language.lower(), frozenset({language.lower()}))
    blocks = _blocks(text)
    for tag, body in blocks:
        if tag in tags:
            return Extracted(body, "tagged")
    if blocks:
        tag = blocks[0][0] or "untagged"
        return Extracted(blocks[0][1], "fenced",
                         f"no ```{language} block found; ran the first fenced block ({tag})")
    return Extracted(text, "whole", "no fenced code block found; ran the whole answer")
