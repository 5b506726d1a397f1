"""A suite's `judge_prompt:` replaces the shipped judge prompt: load-time errors at its place, the messages the
judge receives (through `engine validate --judges` against the loopback fake server), and the judge cache
keyed by the prompt (a changed prompt is a new judgement; the same prompt is not paid twice)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.suite import load_suites
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

SUITE = """\
suite: shop
judge_prompt: {prompt}
tests:
  - id: refund
    prompt: "What is the refund policy?"
    golden: "30 days"
    eval:
      any:
        - {{contains: never-there}}
        - judge:
            rubric: "Mentions {{{{ golden }}}}."
            reference: "{{{{ golden }}}}"
            calibration: [{{answer: "Within 30 days.", expect: pass}}, {{answer: "No.", expect: fail}}]
"""

INLINE = ('{system: "You grade refunds strictly.", user: "Q={{ prompt }} A={{ answer }} R={{ reference }} '
          'RUBRIC={{ rubric }} {{ scale_text }}"}')


def diagnostics(tmp_path: Path, prompt: str) -> list[str]:
    (tmp_path / "s.yaml").write_text(SUITE.format(prompt=prompt))
    _, found = load_suites([tmp_path / "s.yaml"])
    return [str(d).replace(str(tmp_path) + "/", "") for d in found]


def test_judge_prompt_problems_are_errors_at_the_key(tmp_path: Path) -> None:
    assert diagnostics(tmp_path, INLINE) == []
    (got,) = diagnostics(tmp_path, '{user: "{{ answer }} {{ golden }}"}')
    assert got.startswith("s.yaml:2:15: error: judge_prompt: the user template uses golden; a judge prompt knows "
                          "only answer, prompt, reference, rubric, scale_text")
    (got,) = diagnostics(tmp_path, '{user: "{{ rubric }}"}')
    assert "never shows the answer" in got
    (got,) = diagnostics(tmp_path, "judge.txt")
    assert got.startswith("s.yaml:2:15: error: judge_prompt file 'judge.txt' not found")
    (got,) = diagnostics(tmp_path, '{user: "{{ answer }"}')
    assert "does not compile" in got


def respond(body: dict[str, Any]) -> Reply:
    text = body["messages"][-1]["content"]
    return Reply(content=json.dumps({"reasoning": "r", "grade": "pass" if "30 days" in text else "fail"}))


def test_the_suite_prompt_is_sent_and_keys_the_cache(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = respond
    (tmp_path / "models.yaml").write_text(f"models:\n  grader: {{base_url: \"{fake_openai.base_url}\", "
                                          "model: grader-1, timeout_s: 5}\ndefaults: {judge: grader}\n")
    (tmp_path / "s.yaml").write_text(SUITE.format(prompt=INLINE))
    env = {"ENGINE_JUDGE_CACHE": str(tmp_path / "cache.sqlite")}

    def validate() -> Any:
        return engine("validate", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"), "--judges",
                      env=env)

    done = validate()
    assert done.returncode == 0, done.stdout + done.stderr
    first = sorted(fake_openai.requests, key=lambda b: b["messages"][1]["content"])
    assert [b["messages"][0] for b in first] == [{"role": "system", "content": "You grade refunds strictly."}] * 2
    assert first[1]["messages"][1]["content"] == (
        'Q=What is the refund policy? A=Within 30 days. R=30 days RUBRIC=Mentions 30 days. The grade is "pass" '
        'when the answer meets the rubric, else "fail".')
    fake_openai.reset()
    fake_openai.responder = respond
    assert validate().returncode == 0 and fake_openai.requests == []        # the same prompt: from the cache
    (tmp_path / "s.yaml").write_text(SUITE.format(prompt=INLINE.replace("strictly", "kindly")))
    assert validate().returncode == 0 and len(fake_openai.requests) == 2    # another prompt: new judgements
    # a file holding the prompt (YAML with system and user) works the same way
    (tmp_path / "prompt.yaml").write_text("user: 'Grade {{ answer }} against {{ rubric }} {{ scale_text }}'\n")
    (tmp_path / "s.yaml").write_text(SUITE.format(prompt="prompt.yaml"))
    fake_openai.reset()
    fake_openai.responder = respond
    assert validate().returncode == 0
    assert {b["messages"][0]["content"] for b in fake_openai.requests} == {
        'Grade Within 30 days. against Mentions 30 days. The grade is "pass" when the answer meets the rubric, '
        'else "fail".', 'Grade No. against Mentions 30 days. The grade is "pass" when the answer meets the '
        'rubric, else "fail".'}


def test_the_judge_prompt_is_part_of_the_hash_of_tests_with_a_judge(tmp_path: Path) -> None:
    plain = "  - id: plain\n    prompt: q\n    eval: {contains: x}\n"

    def hashes(prompt: str) -> dict[str, str]:
        (tmp_path / "s.yaml").write_text(SUITE.format(prompt=prompt) + plain)
        suites, found = load_suites([tmp_path / "s.yaml"])
        assert found == []
        return {t.id: t.hash for t in suites[0].tests}

    first, second = hashes(INLINE), hashes(INLINE.replace("strictly", "kindly"))
    assert first["refund"] != second["refund"]       # resume and calibration records see the change
    assert first["plain"] == second["plain"]         # a test without a judge keeps its hash
