"""`engine run --ray` without a cluster: the missing extra and bad options are clear errors before anything runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.run.ray_dispatch import run_on_ray
from engine.run.run_config import Invocation
from tests.engine_proc import run_engine
from tests.fake_openai import FakeOpenAI
from tests.run.e2e import write_project


def test_without_ray_the_error_names_the_extra(tmp_path: Path, fake_openai: FakeOpenAI,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)     # `import ray` fails as where the extra is not installed
    suites, models = write_project(tmp_path, fake_openai.base_url)
    invocation = Invocation(paths=[str(suites)], models_file=str(models), out=str(tmp_path / "out"))
    assert run_on_ray(invocation, None, 2) == 2
    assert "pip install '.[ray]'" in capsys.readouterr().err
    assert fake_openai.requests == [] and not (tmp_path / "out").exists()


def test_ray_with_shard_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    invocation = Invocation(paths=[str(tmp_path)], shard="1/2", run_id="r")
    assert run_on_ray(invocation, None, None) == 2
    assert "drop --shard" in capsys.readouterr().err


def test_ray_without_an_address_runs_on_this_machine(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """`engine run SUITES --ray` (no ADDRESS, as docs/running.md writes it) parses as `--ray local`."""

    from engine.cli import fill_optional_values

    suites, models = write_project(tmp_path, fake_openai.base_url)
    assert fill_optional_values(["run", "s", "--ray"]) == ["run", "s", "--ray", "local"]
    assert fill_optional_values(["run", "--ray", "--shards", "2", "s"]) == \
        ["run", "--ray", "local", "--shards", "2", "s"]
    assert fill_optional_values(["run", "--ray", str(suites)]) == ["run", "--ray", "local", str(suites)]
    assert fill_optional_values(["run", "--ray", "head:6379", "s"]) == ["run", "--ray", "head:6379", "s"]
    # Through the real entry point: a dry run parses the bare option and plans the run without calling anyone.
    import os

    done = run_engine("run", suites, "--models", models, "--dry-run", "--ray",
                      env={**os.environ, "ENGINE_TEST_KEY": "k"})
    assert done.returncode == 0, done.stderr
    assert "requires an argument" not in done.stderr and fake_openai.requests == []
