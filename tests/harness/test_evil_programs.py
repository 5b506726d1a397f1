"""Programs that try to escape, hang, flood or snoop (MultiPL-E safe_subprocess style).

After each: the verdict is a fail (or error) with a reason, nothing of it still runs (checked in the
process table by a token on its command line and by its private uid), the canary key did not leak,
and the work folder is gone.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from harness_helpers import live_processes, run_exec

from engine.harness import oneshot
from engine.harness.isolation import Limits, isolation

CANARY_VAR = "ENGINE_TEST_CANARY_API_KEY"

EVIL = {
    "fork_once_and_exit": (
        ("import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    time.sleep(3); print('child'); sys.exit(0)\n"
        "print('parent')\n"),
        {"expect_stdout": "parent\nchild"},
    ),
    "fork_bomb": (
        ("import os\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"),
        {},
    ),
    "sleep_forever": ("import time\nwhile True:\n    time.sleep(60)\n", {}),
    "setsid_then_sleep": (
        ("import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    while True: time.sleep(60)\n"
        "while True: time.sleep(60)\n"),
        {},
    ),
    "setsid_child_outlives_parent": (
        ("import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid(); time.sleep(3); print('escaped')\n"
        "else:\n"
        "    print('parent')\n"),
        {"expect_stdout": "parent\nescaped"},
    ),
    "unbounded_output": ("while True:\n    print('x' * 1000)\n", {}),
    "close_stdout_then_loop": ("import os\nos.close(1)\nwhile True:\n    pass\n", {}),
    "block_on_stdin": ("line = input()\nprint(line)\n", {}),
    "allocate_10_gb": ("block = bytearray(10 * 1024 ** 3)\nprint(len(block))\n", {}),
    "write_10_gb_file": (
        ("chunk = b'x' * (1 << 20)\n"
        "with open('big.bin', 'wb') as f:\n"
        "    for _ in range(10 * 1024):\n"
        "        f.write(chunk)\n"),
        {},
    ),
    "read_canary_key": (
        ("import os, glob, sys\n"
        f"found = [k for k, v in os.environ.items() if k == {CANARY_VAR!r} or v.startswith('canary-')]\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        if b'canary-' in open(path, 'rb').read(): found.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(found, dict(os.environ))\n"
        "sys.exit(0 if found else 1)\n"),
        {},
    ),
}

EXPECTED_REASON = {
    "fork_once_and_exit": "stdout was 'parent\\n'",
    "fork_bomb": "timed out",
    "sleep_forever": "timed out",
    "setsid_then_sleep": "timed out",
    "setsid_child_outlives_parent": "stdout was 'parent\\n'",
    "unbounded_output": "too much output",
    "close_stdout_then_loop": "timed out",
    "block_on_stdin": "EOFError",
    "allocate_10_gb": "(out of memory: it used more than 256 MiB; `memory_mb` raises the limit)",
    "write_10_gb_file": "File too large",
    "read_canary_key": "exit code 1, expected 0",
}

# The programs that never end: their check is that the deadline kills them (and all they started), which any
# deadline shows, so theirs is 1 s. The others end by themselves (or at a limit that is not time), so theirs is
# only a hang guard: with 2 s, a loaded machine (load 12-16 on 2 cores) could reach it before a program's own end
# and fail with "timed out"; and a child sleeping 3 s is then seen killed when its parent ends, not at the deadline.
NEVER_ENDS = frozenset(name for name, reason in EXPECTED_REASON.items() if reason == "timed out")
NEVER_ENDS_TIMEOUT_S = 1
HANG_GUARD_S = 60


def timeout_for(name: str) -> float:
    return NEVER_ENDS_TIMEOUT_S if name in NEVER_ENDS else HANG_GUARD_S


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    value = f"canary-{secrets.token_hex(12)}"
    monkeypatch.setenv(CANARY_VAR, value)
    return value


@pytest.fixture
def tokened_suite(tmp_path: Path) -> Path:
    """A suite folder with a harness that puts a token on the program's command line (for ps)."""
    (tmp_path / "tokened.yaml").write_text(
        "language: python\nrun: [python, main.py, '{{ token }}']\nscore: exit_code\nfiles:\n  main.py: '{{ code }}'\n")
    return tmp_path


def assert_nothing_left(result: oneshot.RunResult, token: str, canary: str, reason: str) -> None:
    assert live_processes(token=token) == []
    if result.uid is not None:
        assert live_processes(uid=result.uid) == []
    assert canary not in reason and canary not in result.stdout and canary not in result.stderr
    assert result.workdir and not Path(result.workdir).exists()


@pytest.mark.parametrize("name", sorted(EVIL))
def test_evil_program_is_failed_and_cleaned_up(name: str, tokened_suite: Path, canary: str,
                                               sandbox_results: list[oneshot.RunResult]) -> None:
    code, options = EVIL[name]
    token = f"evil-{name}-{secrets.token_hex(6)}"
    spec = {"harness": "./tokened.yaml", "timeout_s": timeout_for(name), "memory_mb": 256, "vars": {"token": token},
            **options}
    verdict = run_exec(spec, f"```python\n{code}```", suite_dir=tokened_suite)
    assert not verdict.passed
    assert verdict.reason
    assert EXPECTED_REASON[name] in verdict.reason, verdict.reason
    assert verdict.details["isolation"] == isolation()
    [result] = sandbox_results
    assert_nothing_left(result, token, canary, verdict.reason)


def test_output_is_capped_but_the_start_is_kept(sandbox_results: list[oneshot.RunResult]) -> None:
    verdict = run_exec({"harness": "python-script", "timeout_s": 2}, "while True:\n    print('y' * 99)\n")
    [result] = sandbox_results
    assert not verdict.passed and result.output_exceeded and result.truncated
    assert len(result.stdout.encode()) == Limits().output_bytes
    assert result.stdout.startswith("y" * 99 + "\n")


def test_the_network_is_unreachable(canary: str, sandbox_results: list[oneshot.RunResult]) -> None:
    if "netns" not in isolation():
        pytest.skip(f"no network namespace on this machine (isolation {isolation()!r})")
    accepted: list[object] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]

        def accept() -> None:
            try:
                accepted.append(server.accept())
            except OSError:
                pass

        waiter = threading.Thread(target=accept)
        waiter.start()
        code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
                "s.sendall(b'hello')\n")
        verdict = run_exec({"harness": "python-script", "timeout_s": 2}, code)
        waiter.join()
    assert not verdict.passed
    assert "Network is unreachable" in verdict.reason or "Connection refused" in verdict.reason
    assert accepted == []
    [result] = sandbox_results
    assert not Path(result.workdir).exists()


def test_the_environment_is_an_allowlist(canary: str, sandbox_results: list[oneshot.RunResult]) -> None:
    verdict = run_exec({"harness": "python-script", "expect_stdout": "PATH LANG LC_ALL HOME TMPDIR PWD "
                        "PYTHONDONTWRITEBYTECODE PYTHONHASHSEED"},
                       "import os\nprint(' '.join(k for k in os.environ if k != 'LC_CTYPE'))\n")
    assert verdict.passed, verdict.reason
    [result] = sandbox_results
    assert canary not in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="privileges are dropped only when the engine runs as root")
def test_as_root_the_child_runs_as_a_private_uid_in_namespaces() -> None:
    assert isolation() in ("bwrap+pidns+netns+uid", "pidns+netns+uid", "uid")
    result = oneshot.run(["python", "main.py"], {"main.py": "import os\nprint(os.getuid(), os.getpid())\n"},
                         Limits(timeout_s=5))
    uid, pid = map(int, result.stdout.split())
    assert uid == result.uid and uid != 0
    if isolation() == "pidns+netns+uid":
        assert pid == 1  # the program is the init of its own PID namespace
    elif isolation() == "bwrap+pidns+netns+uid":
        assert pid == 2  # bwrap's reaper is PID 1 of the namespace; it ends the namespace with the program


def test_concurrent_runs_do_not_mix(sandbox_results: list[oneshot.RunResult]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> str:
        return run_exec({"harness": "python-script", "expect_stdout": str(i * i)}, f"print({i} * {i})").reason

    with ThreadPoolExecutor(4) as pool:
        reasons = list(pool.map(one, range(12)))
    assert all(r.startswith("exit code 0 and stdout as expected") for r in reasons), reasons
    assert len({r.workdir for r in sandbox_results}) == 12


# -- the file system: bubblewrap's private mounts ------------------------------------------------------

needs_private_mounts = pytest.mark.skipif(
    not isolation().startswith("bwrap"),
    reason=f"isolation {isolation()!r} shares the host's file system (bubblewrap missing or refused; "
           f"see docs/harnesses.md)")


@needs_private_mounts
@pytest.mark.parametrize("where", ["/run", "/tmp", "abstract"])
def test_host_unix_sockets_are_out_of_reach(where: str, sandbox_results: list[oneshot.RunResult]) -> None:
    """A socket in a world-readable, world-writable folder (as /run/user/..., /tmp/.X11-unix are)."""
    token = secrets.token_hex(6)
    folder = Path(where) / f"engine-test-sockets-{token}"
    path = "\0engine-test-" + token if where == "abstract" else str(folder / "s.sock")
    accepted: list[object] = []
    with socket.socket(socket.AF_UNIX) as server:
        if where != "abstract":
            folder.mkdir(mode=0o777)
            folder.chmod(0o777)
        try:
            server.bind(path)
            if where != "abstract":
                os.chmod(path, 0o777)
            server.listen()
            server.settimeout(0.5)

            def accept() -> None:
                try:
                    accepted.append(server.accept())
                except OSError:
                    pass

            waiter = threading.Thread(target=accept)
            waiter.start()
            code = ("import socket\ns = socket.socket(socket.AF_UNIX)\n"
                    f"s.settimeout(1)\ns.connect({path!r})\ns.sendall(b'hello')\nprint('connected')\n")
            verdict = run_exec({"harness": "python-script", "timeout_s": 2}, code)
            waiter.join()
        finally:
            if where != "abstract":
                shutil.rmtree(folder, ignore_errors=True)
    assert accepted == []
    assert not verdict.passed
    assert "FileNotFoundError" in verdict.reason or "ConnectionRefusedError" in verdict.reason, verdict.reason
    [result] = sandbox_results
    assert "connected" not in result.stdout


@needs_private_mounts
def test_files_written_to_temp_folders_do_not_stay_behind(sandbox_results: list[oneshot.RunResult]) -> None:
    token = f"engine-test-left-{secrets.token_hex(6)}"
    folders = ["/tmp", "/var/tmp", "/dev/shm", "/run"]
    code = ("import os\n"
            f"for folder in {folders!r}:\n"
            f"    path = os.path.join(folder, {token!r})\n"
            "    with open(path, 'w') as fh:\n"
            "        fh.write('left behind')\n"
            "    assert open(path).read() == 'left behind'\n"
            "print('wrote', len(os.listdir('/tmp')))\n")
    verdict = run_exec({"harness": "python-script", "timeout_s": 5, "expect_stdout": "wrote 2"}, code)
    assert verdict.passed, verdict.reason          # the writes worked (and /tmp held only the work folder)
    for folder in folders:
        assert not (Path(folder) / token).exists(), folder
    second = run_exec({"harness": "python-script", "expect_stdout": "[]"},
                      f"import os\nprint([f for f in {folders!r} if os.path.exists(os.path.join(f, {token!r}))])\n")
    assert second.passed, second.reason            # nor does the next run see them
    assert all(not Path(r.workdir).exists() for r in sandbox_results)


@needs_private_mounts
def test_results_suites_and_homes_are_out_of_reach(tmp_path: Path, tokened_suite: Path) -> None:
    results = tmp_path / "results" / "run-1"
    results.mkdir(parents=True)
    (results / "_manifest.json").write_text("{}")
    repo = Path(__file__).resolve().parents[2]
    targets = [str(results / "_manifest.json"), str(tokened_suite / "tokened.yaml"), str(repo / "pyproject.toml"),
               str(Path.home()), "/root", "/home", "/work"]
    code = ("import os\nseen = []\n"
            f"for path in {targets!r}:\n"
            "    if os.path.exists(path):\n"
            "        seen.append(path)\n"
            "print(seen)\n")
    verdict = run_exec({"harness": "python-script", "expect_stdout": "[]"}, code)
    assert verdict.passed, verdict.reason


def test_without_prlimit_the_sandbox_still_limits_memory() -> None:
    """The `session` level (util-linux prlimit missing) sets the same limits with the sandbox's Python: a program
    taking 2 GiB under a 256 MiB limit gets a MemoryError, which the result names. In a subprocess, since the level
    is detected once per process; its timeout is only a hang guard."""
    program = ("from engine.harness import oneshot\nfrom engine.harness.isolation import Limits\n"
               "done = oneshot.run(['python', 'm.py'], {'m.py': 'bytearray(2 * 1024 ** 3)'}, "
               "Limits(timeout_s=60, memory_mb=256))\n"
               "print(done.isolation, '|', done.describe())\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=Path(__file__).resolve().parents[2], timeout=600,
                          env={**os.environ, "ENGINE_SANDBOX_LEVEL": "session"}, capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ("session | exit code 1 (out of memory: it used more than 256 MiB; `memory_mb` "
                                   "raises the limit)")
