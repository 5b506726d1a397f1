"""The fork-server runner gives what a real `python -m engine` gives (tests/engine_proc.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.engine_proc import run_engine


@pytest.mark.parametrize("args", [("--help",), ("run", "--no-such-option"), ("validate", "/no/such/suite")])
def test_same_output_and_exit_code_as_real_interpreter(args: tuple[str, ...]) -> None:
    forked = run_engine(*args)
    real = run_engine(*args, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_usage_error_exits_2() -> None:
    assert run_engine("run", "--no-such-option").returncode == 2


def test_env_and_cwd_are_the_childs(tmp_path: Path) -> None:
    env = dict(os.environ, ENGINE_PROC_PROBE="x")
    result = run_engine("validate", "missing-here", env=env, cwd=tmp_path)
    real = run_engine("validate", "missing-here", env=env, cwd=tmp_path, fresh=True)
    assert (result.returncode, result.stderr) == (real.returncode, real.stderr)


def test_timeout_raises_and_zygote_survives() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run_engine("schema", timeout=0.0001)
    assert run_engine("--help").returncode == 0


def test_zygote_is_used_and_survives_a_timeout() -> None:
    import warnings

    from tests import engine_proc

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(subprocess.TimeoutExpired):
            run_engine("schema", timeout=0.0001)
        assert run_engine("--help").returncode == 0
    assert "sock" in engine_proc._zygote or os.environ.get("ENGINE_TEST_FRESH") == "1"
