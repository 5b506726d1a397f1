"""load_models: models.yaml into ModelConfig, exactly one of base_url / builtin, secrets never echoed."""

from __future__ import annotations

from pathlib import Path

from engine.suite import load_models


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_full_model_entry(tmp_path: Path) -> None:
    models, diagnostics = load_models(write(tmp_path, """\
models:
  mini:
    base_url: http://127.0.0.1:8000/v1
    model: gpt-4o-mini
    api_key_env: OPENAI_API_KEY
    concurrency: 4
    timeout_s: 30
    max_retries: 1
    api: completions
    stream: false
    params: {seed: 1, top_p: 0.9}
    price: {input: 0.15, output: 0.6}
  local:
    builtin: gemma-3-270m
"""))
    assert diagnostics == []
    mini = models["mini"]
    assert (mini.model, mini.base_url, mini.api, mini.stream) == ("gpt-4o-mini", "http://127.0.0.1:8000/v1",
                                                                   "completions", False)
    assert (mini.concurrency, mini.timeout_s, mini.max_retries) == (4, 30.0, 1)
    assert mini.params == {"seed": 1, "top_p": 0.9}
    assert (mini.price_in, mini.price_out) == (0.15, 0.6)
    assert mini.api_key_env == "OPENAI_API_KEY"
    local = models["local"]
    assert (local.builtin, local.model, local.base_url, local.api) == ("gemma-3-270m", "gemma-3-270m", None, "chat")


def test_exactly_one_of_base_url_and_builtin(tmp_path: Path) -> None:
    models, diagnostics = load_models(write(tmp_path, "models:\n  a: {model: x}\n"
                                          "  b: {builtin: gemma-3-270m, base_url: 'http://127.0.0.1:1/v1'}\n"))
    assert models == {}
    assert [d.message for d in diagnostics] == [
        "a model needs 'base_url', 'base_urls' or 'builtin' (only one of them)",
        "a model takes only one of 'base_url' or 'builtin'; keep one"]
    assert [d.line for d in diagnostics] == [2, 3]


def test_unknown_key_and_bad_api(tmp_path: Path) -> None:
    _, diagnostics = load_models(write(tmp_path, "models:\n  a:\n    base_url: http://127.0.0.1:1/v1\n"
                                                 "    timout_s: 3\n    api: chats\n"))
    assert [str(d).split("models.yaml:")[1] for d in diagnostics] == [
        "4:5: error: unknown key 'timout_s' in a model — did you mean 'timeout_s'?",
        "5:10: error: 'api' must be one of chat, completions, anthropic, gemini, but it is the text 'chats' — "
        "did you mean 'chat'?"]


def test_a_pasted_key_is_not_repeated(tmp_path: Path) -> None:
    _, [diag] = load_models(write(tmp_path, "models:\n  a:\n    base_url: http://127.0.0.1:1/v1\n"
                                            "    api_key_env: sk-proj-SECRET-123\n"))
    assert "SECRET" not in str(diag)


def test_missing_models_file(tmp_path: Path) -> None:
    models, [diag] = load_models(tmp_path / "nope.yaml")
    assert models == {} and "no such" in diag.message


def test_an_empty_or_tagged_models_file_is_named_as_a_models_file(tmp_path: Path) -> None:
    _, [empty] = load_models(write(tmp_path, "# nothing yet\n"))
    assert str(empty) == (f"{tmp_path / 'models.yaml'}:1:1: error: the file is empty; a models file needs `models:` "
                          "with one entry per model (see models.example.yaml)")
    _, [tagged] = load_models(write(tmp_path, "models: !include more.yaml\n"))
    assert str(tagged) == (f"{tmp_path / 'models.yaml'}:1:9: error: the tag '!include' is not allowed in models files "
                           "(only plain YAML values are); remove it")


def test_concurrency_is_left_to_the_engine_unless_an_entry_sets_it(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        "  hosted: {base_url: 'https://api.example.com/v1', model: m}\n"
        "  local: {base_url: 'http://127.0.0.1:8080/v1', model: m}\n"
        "  named-local: {base_url: 'http://localhost:8080/v1', model: m}\n"
        "  ipv6-local: {base_url: 'http://[::1]:8080/v1', model: m}\n"
        "  replicas: {base_urls: ['http://127.0.0.2:1/v1', 'http://127.0.0.3:1/v1'], model: m}\n"
        "  set: {base_url: 'https://api.example.com/v1', model: m, concurrency: 3}\n", encoding="utf-8")
    models, problems = load_models(path)
    assert problems == []
    assert {name: m.concurrency for name, m in models.items()} == {
        "hosted": None, "local": None, "named-local": None, "ipv6-local": None, "replicas": None, "set": 3}


def test_an_embedded_entry_gets_a_floor_timeout_and_concurrency_fit_for_a_cpu(tmp_path: Path) -> None:
    """A `builtin:` entry's keys left out come from the registry (64 tokens, 60 s, one call at a time: the
    server computes one request at a time); keys it sets win, and params it sets join the floor."""
    models, problems = load_models(write(tmp_path, """\
models:
  plain: {builtin: gemma-3-270m}
  tuned: {builtin: smollm2-135m, timeout_s: 5, concurrency: 2, params: {temperature: 0}}
  own-floor: {builtin: smollm2-135m, params: {max_tokens: 16}}
  served: {base_url: 'http://127.0.0.1:8080/v1', model: m}
"""))
    assert problems == []
    settings = {name: (m.params, m.timeout_s, m.concurrency) for name, m in models.items()}
    assert settings == {"plain": ({"max_tokens": 64}, 60.0, 1),
                        "tuned": ({"max_tokens": 64, "temperature": 0}, 5.0, 2),
                        "own-floor": ({"max_tokens": 16}, 60.0, 1),
                        "served": ({}, 120.0, None)}
