"""`engine doctor` on this machine: the isolation level the sandbox really gets, the embedded models as installed,
proxies with credentials masked, API-key variables by name only, and exit 1 exactly when something needs fixing.
(Which bwrap it names, and the reasons for a weaker level: tests/harness/test_bwrap_lookup.py.)"""

from __future__ import annotations

import importlib.util
import os
import platform

from engine.harness.isolation import LEVELS, isolation
from tests.engine_proc import run_engine

SECRET = "s3cret-Pw-7781"


def _env(**settings: str) -> dict[str, str]:
    """This machine's environment without proxy, key and sandbox settings, plus `settings`."""
    kept = {k: v for k, v in os.environ.items() if not (k.lower().endswith("_proxy") or k.endswith("_API_KEY")
                                                        or k.startswith("ENGINE_"))}
    return {**kept, **settings}


def test_doctor_reports_this_machine() -> None:
    done = run_engine("doctor", env=_env())
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert f"isolation: {isolation()}" in " ".join(lines)
    assert f"Python {platform.python_version()}" in lines[0]
    llama = importlib.util.find_spec("llama_cpp") is not None
    assert any(line.startswith("llama-cpp-python: ") and (line.endswith("not installed") != llama) for line in lines)
    assert "none set: every call goes direct" in lines
    if isolation() == LEVELS[0]:
        assert done.returncode == 0, done.stdout
        assert lines[-1] == "all fine"
    else:
        assert done.returncode == 1
        assert f"the sandbox runs at {isolation()}, not {LEVELS[0]}" in done.stdout


def test_proxies_are_shown_masked_and_keys_by_name_only() -> None:
    done = run_engine("doctor", env=_env(HTTPS_PROXY=f"http://alice:{SECRET}@proxy.corp:3128", NO_PROXY="internal",
                                         OPENAI_API_KEY=f"sk-{SECRET}"))
    assert SECRET not in done.stdout + done.stderr
    assert "HTTPS_PROXY=http://***@proxy.corp:3128" in done.stdout
    assert "NO_PROXY=internal" in done.stdout
    assert "OPENAI_API_KEY" in done.stdout
    assert "proxy" not in done.stdout.partition("to fix:")[2]      # a proxy written as the engine reads it


def test_a_proxy_the_engine_would_not_use_is_a_thing_to_fix() -> None:
    only_all = run_engine("doctor", env=_env(ALL_PROXY=f"http://bob:{SECRET}@proxy.corp:3128"))
    assert only_all.returncode == 1
    assert "ALL_PROXY is set, but the engine reads HTTPS_PROXY, HTTP_PROXY and NO_PROXY" in only_all.stdout
    assert SECRET not in only_all.stdout
    tls = run_engine("doctor", env=_env(https_proxy="https://proxy.corp:3129"))
    assert tls.returncode == 1
    assert "https_proxy=https://proxy.corp:3129: the engine reaches a proxy over http:// only" in tls.stdout
