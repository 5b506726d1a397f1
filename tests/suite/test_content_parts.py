"""Images in messages at load time: references (never bytes) in the test, and every refusal at FILE:LINE:COL."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from engine.model.model_config import ModelConfig
from engine.suite import content_parts, load_suites
from engine.suite.content_parts import ImageUnavailable, completions_conflicts, wire_messages
from tests.images_util import write_png
from tests.run.e2e import engine

SUITE = """\
suite: vision
tests:
  - id: "dot-{{ n }}"
    cases: [{n: 1, file: green.png}, {n: 2, file: green.png}]
    messages:
      - role: user
        content:
          - text: "What colour is dot {{ n }}?"
          - image: "scans/{{ file }}"
            detail: low
          - image: https://example.invalid/cat.jpg
    eval: {contains: green}
"""


def load(folder: Path, text: str):
    (folder / "s.yaml").write_text(text, encoding="utf-8")
    return load_suites([folder / "s.yaml"])


def test_image_parts_become_references_with_path_and_sha256_never_bytes(tmp_path: Path) -> None:
    data = write_png(tmp_path / "scans" / "green.png")
    suites, diagnostics = load(tmp_path, SUITE)
    assert diagnostics == []
    first, second = suites[0].tests
    parts = first.messages[-1]["content"]
    assert parts[0] == {"type": "text", "text": "What colour is dot 1?"}   # a template rendered inside a part
    assert parts[1] == {"type": "image_file", "image_file": {
        "path": "scans/green.png", "sha256": hashlib.sha256(data).hexdigest(), "mime": "image/png",
        "bytes": len(data), "detail": "low"}}
    assert parts[2] == {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.jpg"}}
    assert first.prompt == "What colour is dot 1?"
    assert [(w, line) for w, line, _ in first.images] == [("scans/green.png", 9),
                                                           ("https://example.invalid/cat.jpg", 11)]
    assert base64.b64encode(data).decode() not in first.messages_json
    assert first.hash != second.hash


def test_wire_messages_sends_a_data_url_of_the_file_and_refuses_a_changed_file(tmp_path: Path) -> None:
    data = write_png(tmp_path / "scans" / "green.png")
    suites, _ = load(tmp_path, SUITE)
    test = suites[0].tests[0]
    sent = wire_messages(test.messages, test.suite_dir)
    image = sent[-1]["content"][1]
    assert image["type"] == "image_url" and image["image_url"]["detail"] == "low"
    prefix, encoded = image["image_url"]["url"].split(",", 1)
    assert prefix == "data:image/png;base64" and base64.b64decode(encoded) == data
    assert test.messages[-1]["content"][1]["type"] == "image_file"   # the test itself is untouched
    placeholder = wire_messages(test.messages, test.suite_dir, inline=False)[-1]["content"][1]["image_url"]["url"]
    assert placeholder.startswith("data:image/png;base64,<") and encoded not in placeholder
    write_png(tmp_path / "scans" / "green.png", (255, 0, 0))   # edited after the suite loaded
    assert wire_messages(test.messages, test.suite_dir)[-1]["content"][1] == image   # read once: the bytes hashed
    content_parts._data_url.cache_clear()                      # a new process would read the file again
    with pytest.raises(ImageUnavailable, match="changed since the suite was loaded"):
        wire_messages(test.messages, test.suite_dir)


@pytest.mark.parametrize("content,message,line_col", [
    ("[{text: hi}, {image: scans/missing.png}]", "image file 'scans/missing.png' not found", "6:39"),
    ("[{image: scans/notes.txt}]", "is not a PNG, JPEG, GIF or WEBP image", "6:27"),
    ("[{image: scans}]", "is not a file", "6:27"),
    ("[{image: 'data:image/png;base64,AAAA'}]", "save it as a file next to the suite", "6:27"),
])
def test_bad_images_are_errors_at_the_image(tmp_path: Path, content: str, message: str, line_col: str) -> None:
    write_png(tmp_path / "scans" / "green.png")
    (tmp_path / "scans" / "notes.txt").write_text("not an image")
    suites, diagnostics = load(tmp_path, f"suite: v\ntests:\n  - id: a\n    messages:\n      - role: user\n"
                                         f"        content: {content}\n    eval: {{none: true}}\n")
    assert suites == []
    [diag] = [d for d in diagnostics if d.severity == "error"]
    assert message in diag.message and f"{diag.line}:{diag.col}" == line_col


def test_an_image_over_the_size_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(content_parts, "MAX_IMAGE_BYTES", 50)
    write_png(tmp_path / "big.png")   # 69 bytes
    _, diagnostics = load(tmp_path, "suite: v\ntests:\n  - id: a\n    messages:\n      - role: user\n"
                                    "        content: [{image: big.png}]\n    eval: {none: true}\n")
    assert "over the 0 MB limit" in diagnostics[0].message or "limit per image" in diagnostics[0].message


def test_images_only_in_user_messages_and_not_in_agent_tests(tmp_path: Path) -> None:
    write_png(tmp_path / "g.png")
    _, diagnostics = load(tmp_path, """\
suite: v
defaults: {eval: {none: true}}
tools:
  f: {parameters: {type: object}, returns: [{result: 1}]}
tests:
  - id: sys
    messages:
      - {role: system, content: [{image: g.png}]}
      - {role: user, content: hi}
  - id: ag
    tools: [f]
    agent: {max_turns: 2}
    messages:
      - {role: user, content: [{text: hi}, {image: g.png}]}
""")
    found = {(d.line, d.message.split(";")[0]) for d in diagnostics if d.severity == "error"}
    assert (8, "an image can only be in a user message, not a system one") in found
    assert any(line == 14 and "not supported in `agent:` tests" in text for line, text in found)


def test_undefined_variable_in_a_part_is_reported(tmp_path: Path) -> None:
    _, diagnostics = load(tmp_path, "suite: v\ntests:\n  - id: a\n    messages:\n      - role: user\n"
                                    "        content: [{text: '{{ nme }}'}]\n")
    assert any("'nme'" in d.message for d in diagnostics)


def test_completions_models_get_an_error_at_each_image(tmp_path: Path) -> None:
    write_png(tmp_path / "scans" / "green.png")
    suites, _ = load(tmp_path, SUITE)
    tests = suites[0].tests
    chat = ModelConfig(name="chat", model="c", base_url="http://127.0.0.1:9/v1")
    old = ModelConfig(name="old", model="o", base_url="http://127.0.0.1:9/v1", api="completions")
    assert completions_conflicts(tests, [chat]) == []
    problems = completions_conflicts(tests, [chat, old])
    # one per image line (the two case rows share them), each naming the model
    assert [(p.line, p.col) for p in problems] == [(9, 20), (11, 20)]
    assert all("old" in p.message and "api: chat" in p.message for p in problems)


def test_validate_and_run_refuse_images_for_a_completions_model(tmp_path: Path) -> None:
    write_png(tmp_path / "scans" / "green.png")
    (tmp_path / "s.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(
        "models:\n  old: {base_url: 'http://127.0.0.1:9/v1', model: o, api: completions}\n")
    checked = engine("validate", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"))
    assert checked.returncode == 1
    assert f"{tmp_path / 's.yaml'}:9:20: error: test 'dot-1' sends the image 'scans/green.png'" in checked.stderr
    ran = engine("run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"),
                 "--out", str(tmp_path / "out"))
    assert ran.returncode == 1 and "cannot go to a completions-API model" in ran.stderr
    assert not (tmp_path / "out").exists()


def test_the_schema_describes_parts(tmp_path: Path) -> None:
    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "suite.schema.json").read_text())
    assert "content_parts" in schema["$defs"] and "variant" in schema["$defs"]
    _, diagnostics = load(tmp_path, "suite: v\ntests:\n  - id: a\n    messages:\n      - role: user\n"
                                    "        content: [{picture: x.png}]\n")
    assert diagnostics and diagnostics[0].line == 6
