"""models.yaml: `base_urls` (replicas of one model) and `context_tokens` load, and their mistakes are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.suite import load_models


def load(tmp_path: Path, body: str) -> tuple[dict, list[str]]:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  a:\n" + body)
    models, diagnostics = load_models(path)
    return models, [str(d).split("models.yaml:")[1] for d in diagnostics]


def test_replicas_and_context_load(tmp_path: Path) -> None:
    models, problems = load(tmp_path, "    base_urls: [http://gpu1:8000/v1, http://gpu2:8000/v1]\n"
                                      "    context_tokens: 8192\n")
    assert problems == []
    a = models["a"]
    assert a.base_urls == ("http://gpu1:8000/v1", "http://gpu2:8000/v1")
    assert a.base_url == "http://gpu1:8000/v1"          # the first: what single-endpoint code reads
    assert a.context_tokens == 8192


def test_neither_is_required(tmp_path: Path) -> None:
    models, problems = load(tmp_path, "    base_url: http://gpu1:8000/v1\n")
    assert problems == [] and models["a"].base_urls == () and models["a"].context_tokens is None


@pytest.mark.parametrize(("body", "message"), [
    ("    base_url: http://a/v1\n    base_urls: [http://b/v1]\n",
     "3:5: error: a model takes only one of 'base_url' or 'base_urls'; keep one"),
    ("    base_urls: [http://a/v1, ftp://b/v1]\n",
     "3:30: error: 'base_urls[1]' must start with http:// or https://, but it is the text 'ftp://b/v1'"),
    ("    base_urls: []\n", "3:16: error: 'base_urls' must list at least 1 item, but it is empty"),
    ("    base_urls: [http://a/v1]\n    context_tokens: 0\n",
     "4:21: error: 'context_tokens' must be at least 1, but it is 0"),
    ("    base_url: http://a/v1\n    context_tokens: 512\n    params: {max_tokens: 512}\n",
     "4:21: error: context_tokens (512) leaves no room for a prompt beside params.max_tokens (512), the reply's "
     "room; raise context_tokens to the server's context or lower max_tokens"),
])
def test_mistakes_are_named_at_their_place(tmp_path: Path, body: str, message: str) -> None:
    models, problems = load(tmp_path, body)
    assert models == {}
    assert problems == [message]
