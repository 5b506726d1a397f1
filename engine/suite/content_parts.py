"""Message content parts: text and images in a test's `messages` (docs/suite-format.md, "Images").

A message's `content` is text, or a list of parts::

    - role: user
      content:
        - text: "What is the total of this invoice?"     # a template, like any content
        - image: scans/invoice-17.png                    # a file next to the suite, or an http(s) URL
          detail: high                                   # optional: low | high | auto

Three steps, each in one place:

    load (`render_parts`)   text rendered; an image path rendered, resolved against the suite folder and
                            checked: a regular file, at most MAX_IMAGE_BYTES, PNG/JPEG/GIF/WEBP by its first
                            bytes. The test keeps a *reference* part (path, sha256, MIME type, size), never
                            the bytes: `Test.messages`, hence the results' `prompt` column, hold only that.
    run (`wire_messages`)   a reference becomes an OpenAI `image_url` part with a base64 data URL, read from
                            the file when the request is built (sha256 checked against the load-time one); the
                            last few data URLs are kept, so N tests x M models on one image read it once.
    models (`completions_conflicts`)  a test with an image cannot go to an `api: completions` model: an
                            error at the image's FILE:LINE:COL (`engine validate --models`, `engine run`).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.errors import Diagnostic
from engine.model.model_config import ModelConfig
from engine.model.test import Test

__all__ = ["MAX_IMAGE_BYTES", "ImageUnavailable", "completions_conflicts", "content_text", "part_sources",
           "render_parts", "wire_messages"]

#: The largest image file a test may send: OpenAI's documented per-image limit (20 MB).
MAX_IMAGE_BYTES = 20 * 1024 * 1024
_URL_SCHEMES = ("http://", "https://")
# What chat endpoints accept, known by the file's first bytes (never by its name).
_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),   # after "RIFF" and the 4-byte size
)
# Where a part's fields live, for positions: ("messages", i, "content", j, <field>).
Problem = tuple[tuple[Any, ...], str]


class ImageUnavailable(Exception):
    """An image file checked at load cannot be sent now (deleted, unreadable or changed since the suite loaded)."""


def sniff_mime(head: bytes) -> str | None:
    """The image MIME type from a file's first 12 bytes, or None when it is not PNG, JPEG, GIF or WEBP."""
    for magic, offset, mime in _MAGIC:
        if head[offset:offset + len(magic)] == magic and (mime != "image/webp" or head[:4] == b"RIFF"):
            return mime
    return None


@lru_cache(maxsize=1024)
def _inspect(path: str, mtime_ns: int, size: int) -> tuple[str, str] | str:
    """(sha256, MIME) of an image file, or the problem in words; once per file version (mtime and size key it)."""
    if size > MAX_IMAGE_BYTES:
        return (f"is {size / 1e6:.1f} MB, over the {MAX_IMAGE_BYTES // (1024 * 1024)} MB limit per image; "
                "shrink or recompress it")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc}); check its permissions"
    mime = sniff_mime(data[:12])
    if mime is None:
        return "is not a PNG, JPEG, GIF or WEBP image (judged by its first bytes); convert it to one of those"
    return hashlib.sha256(data).hexdigest(), mime


def _check_file(written: str, suite_dir: Path) -> dict[str, Any] | str:
    """The reference of a local image, or the problem in words."""
    path = suite_dir / written
    try:
        stat = path.stat()
    except OSError:
        return f"image file '{written}' not found (looked for {path}); the path is relative to the suite file"
    if not path.is_file():
        return f"image '{written}' is not a file ({path}); name an image file"
    found = _inspect(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if isinstance(found, str):
        return f"image file '{written}' {found}"
    sha256, mime = found
    return {"path": written, "sha256": sha256, "mime": mime, "bytes": stat.st_size}


def part_sources(content: Sequence[Any], path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], Any]]:
    """(where, template) of every text and image string in a list of parts (for the loader's variable checks)."""
    out: list[tuple[tuple[Any, ...], Any]] = []
    for j, part in enumerate(content):
        if isinstance(part, Mapping):
            for key in ("text", "image"):
                if key in part:
                    out.append((path + (j, key), part[key]))
    return out


def render_parts(content: Sequence[Mapping[str, Any]], render: Callable[[str], str], suite_dir: Path,
                 path: tuple[Any, ...], role: str, agent: bool
                 ) -> tuple[list[dict[str, Any]], list[tuple[str, tuple[Any, ...]]], list[Problem]]:
    """One message's parts, rendered and checked (the schema already checked their shape).

    Args:
        content: The parts as written (`{text: ...}` or `{image: ..., detail: ...}`).
        render: Renders one template with the case's variables.
        suite_dir: The suite file's folder (image paths are relative to it).
        path: Where the content is in the file, for problems.
        role: The message's role (images go in user messages only).
        agent: The test is an agent conversation (its transcript stores text: no images there yet).

    Returns:
        (the reference parts, (image as written, its path) of each image, problems as (path, message)).
    """
    parts: list[dict[str, Any]] = []
    images: list[tuple[str, tuple[Any, ...]]] = []
    problems: list[Problem] = []
    for j, part in enumerate(content):
        if "text" in part:
            parts.append({"type": "text", "text": str(render(str(part["text"])))})
            continue
        where = path + (j, "image")
        written = str(render(str(part["image"]))).strip()
        if role != "user":
            problems.append((where, f"an image can only be in a user message, not a {role} one; move it"))
            continue
        if agent:
            problems.append((where, "images are not supported in `agent:` tests yet (their transcript stores "
                                    "text); put the image in a single-turn test"))
            continue
        detail = {"detail": part["detail"]} if "detail" in part else {}
        images.append((written, where))
        if written.startswith(_URL_SCHEMES):
            parts.append({"type": "image_url", "image_url": {"url": written, **detail}})
            continue
        if written.startswith("data:"):
            problems.append((where, "an inline data: URL would store the image's bytes in every results row; "
                                    "save it as a file next to the suite and name the file"))
            continue
        ref = _check_file(written, suite_dir)
        if isinstance(ref, str):
            problems.append((where, ref))
        else:
            parts.append({"type": "image_file", "image_file": {**ref, **detail}})
    return parts, images, problems


def content_text(content: Any) -> str:
    """A message's text: the content itself, or its text parts joined by blank lines (images left out)."""
    if isinstance(content, str):
        return content
    return "\n\n".join(p["text"] for p in content if p.get("type") == "text")


@lru_cache(maxsize=8)
def _data_url(path: str, sha256: str, mime: str) -> str:
    """The file as a base64 data URL, when it still has the load-time sha256."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ImageUnavailable(f"image file {path} cannot be read any more ({exc.strerror or exc})") from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ImageUnavailable(f"image file {path} changed since the suite was loaded; run again to send the "
                               "new image (it gets a new test hash)")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def wire_messages(messages: Iterable[Mapping[str, Any]], suite_dir: str, *, inline: bool = True
                  ) -> list[Mapping[str, Any]]:
    """The messages as sent: every image reference as an OpenAI `image_url` part.

    Args:
        messages: `Test.messages`.
        suite_dir: `Test.suite_dir` (reference paths are relative to it).
        inline: False puts a short placeholder where the data URL goes (`engine run --dry-run` prints it).

    Raises:
        ImageUnavailable: A referenced file is gone, unreadable or changed since load.
    """
    out: list[Mapping[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts: list[Mapping[str, Any]] = []
        for part in content:
            if part.get("type") != "image_file":
                parts.append(part)
                continue
            ref = part["image_file"]
            if inline:
                url = _data_url(os.path.join(suite_dir, ref["path"]), ref["sha256"], ref["mime"])
            else:
                url = f"data:{ref['mime']};base64,<{ref['bytes']} bytes of {ref['path']}, sha256 {ref['sha256']}>"
            image_url = {"url": url, **({"detail": ref["detail"]} if "detail" in ref else {})}
            parts.append({"type": "image_url", "image_url": image_url})
        out.append({**message, "content": parts})
    return out


def completions_conflicts(tests: Iterable[Test], models: Iterable[ModelConfig]) -> list[Diagnostic]:
    """An error at each image of each test for `api: completions` models (a text prompt cannot carry images).

    Args:
        tests: The loaded tests.
        models: The models the tests would run on.
    """
    names = sorted({m.name for m in models if m.api == "completions"})
    if not names:
        return []
    which = ", ".join(names)
    seen: set[tuple[str, int, int]] = set()
    out: list[Diagnostic] = []
    for test in tests:
        for written, line, col in test.images:
            if (test.file, line, col) in seen:
                continue   # one image line serves many case rows or variants: one error
            seen.add((test.file, line, col))
            out.append(Diagnostic(test.file, line, col, f"test '{test.id}' sends the image '{written}', which "
                                  f"the completions-API model(s) {which} cannot receive (a text prompt); give "
                                  "them `api: chat`, leave them out with --model, or remove the image"))
    return out
