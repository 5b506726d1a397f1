"""The fork-server runner gives what a real `python -m engine` gives (tests/engine_proc.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.engine_proc import run_engine
from tests.run.e2e import engine as e2e_engine


@pytest.mark.parametrize("args", [("--help",), ("run", "--no-such-option"), ("validate", "/no/such/suite")])
def test_same_output_and_exit_code_as_real_interpreter(args: tuple[str, ...]) -> None:
    forked = run_engine(*args)
    real = run_engine(*args, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_usage_error_exits_2() -> None:
    assert run_engine("run", "--no-such-option").returncode == 2


def test_env_and_cwd_are_the_childs(tmp_path: Path) -> None:
    # The cache path comes from the call's env; the suite path is relative to the call's cwd.
    env = dict(os.environ, ENGINE_RESPONSE_CACHE=str(tmp_path / "probe.sqlite"))
    info = run_engine("cache", "info", env=env)
    assert info.returncode == 0 and f"path: {tmp_path / 'probe.sqlite'}" in info.stdout
    (tmp_path / "s.yaml").write_text("suite: s\ntests:\n  - id: t\n    prompt: hi\n    eval: {contains: hi}\n")
    here = run_engine("validate", "s.yaml", cwd=tmp_path)
    assert here.returncode == 0, here.stderr
    real = run_engine("validate", "s.yaml", cwd=tmp_path, fresh=True)
    assert (here.stdout, here.stderr) == (real.stdout, real.stderr)


def _forked(result: subprocess.CompletedProcess[str]) -> bool:
    return result.args[0] == "engine"  # a real subprocess's args start with the interpreter


@pytest.mark.skipif(os.environ.get("ENGINE_TEST_FRESH") == "1", reason="every call is real under ENGINE_TEST_FRESH")
def test_calls_with_a_test_s_own_env_are_forked_and_start_up_changes_are_real() -> None:
    # What the e2e tests pass (an API key, their caches) leaves the zygote usable ...
    assert _forked(e2e_engine("--help", env={"ENGINE_TEST_KEY": "k"}))
    assert _forked(run_engine("--help", env=dict(os.environ, ENGINE_TEST_KEY="k")))
    # ... what the interpreter or a pre-imported module reads at start-up does not.
    for name, value in (("PYTHONHASHSEED", "12345"), ("TERMINAL_WIDTH", "50"), ("AIOHTTP_NO_EXTENSIONS", "1")):
        assert not _forked(run_engine("--help", env=dict(os.environ, **{name: value}))), name
    assert not _forked(run_engine("--help", fresh=True))


def test_zygote_is_used_and_survives_a_timeout() -> None:
    import warnings

    from tests import engine_proc

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(subprocess.TimeoutExpired):
            run_engine("schema", timeout=0.0001)
        after = run_engine("--help")
    assert after.returncode == 0
    assert os.environ.get("ENGINE_TEST_FRESH") == "1" or ("sock" in engine_proc._zygote and _forked(after))
