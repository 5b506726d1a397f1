"""The demo's judged suite (suites/judged.yaml) without the embedded model: it loads, its
judge resolves against the default models, every test sets a deterministic check beside the judge, the
embedded judge gets its reply schema in llama-cpp-python's form, and `engine validate suites/` calls nothing.
The suite's run on the real model is `make run` (and `make test-local`)."""

from __future__ import annotations

from pathlib import Path

from engine.judge.caller import request_body, resolve_judges
from engine.local import default_models, helper_models
from engine.suite import load_suites
from tests.fake_openai import FakeOpenAI
from tests.run.e2e import engine

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"type": "object", "properties": {"grade": {"enum": ["pass", "fail"]}}}


def test_the_judged_suite_resolves_its_judge_against_the_default_models() -> None:
    (suite,), diagnostics = load_suites([ROOT / "suites" / "judged.yaml"])
    assert diagnostics == []
    assert len(suite.tests) == 2
    judges = resolve_judges(suite.tests, {**default_models(), **helper_models()}, None, "the default models")
    # two judges and the `similar` embedding model, all embedded defaults
    assert judges is not None and set(judges.models) == {"smollm2-tools", "gemma-chat", "smollm2-embed"}
    for test in suite.tests:
        assert test.evaluator is not None
        nodes = [node for _, node in test.evaluator.walk() if node.kind != "all"]
        # the first judge counts; the second judge, the keyword check and the similarity are reported (weight 0)
        assert [n.kind for n in nodes] == ["judge", "judge", "regex", "similar"]
        assert nodes[0].weight != 0 and all(n.weight == 0 for n in nodes[1:])


def test_the_embedded_judge_gets_its_schema_in_llama_cpp_pythons_form() -> None:
    chat = default_models()["gemma-chat"]
    assert chat.structured_output and chat.builtin
    body = request_body(chat, [{"role": "user", "content": "x"}], SCHEMA, 0.0, 48)
    assert body["response_format"] == {"type": "json_object", "schema": SCHEMA}   # its server refuses json_schema
    assert body["stop"] == ["\n"] and body["max_tokens"] == 48 and body["temperature"] == 0.0
    remote = chat.__class__(name="r", model="m", base_url="http://127.0.0.1:1/v1", structured_output=True)
    assert request_body(remote, [], SCHEMA, 0.0, 48)["response_format"]["type"] == "json_schema"
    assert not default_models()["gemma-complete"].structured_output


def test_validate_of_the_example_suites_calls_no_model(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    models = tmp_path / "models.yaml"
    models.write_text("models:\n" + "".join(
        f"  {name}:\n    base_url: {fake_openai.base_url}\n    model: {name}\n    api: {api}\n"
        for name, api in (("gemma-complete", "completions"), ("gemma-chat", "chat"),
                          ("gemma-complete-warm", "completions"))))
    done = engine("validate", str(ROOT / "suites"), "--models", str(models),
                  env={"ENGINE_JUDGE_CACHE": str(tmp_path / "judge.sqlite")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert fake_openai.requests == []
