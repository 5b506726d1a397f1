"""The engine's wrapper around a hidden check: the program a workspace check's sandbox starts.

    python3 check_runner.py RESULT_FD command 'python3 -m unittest discover -s tests'
    python3 check_runner.py RESULT_FD pytest -c ... --junitxml=... -- tests/

RESULT_FD is a file of the engine's, opened for writing and passed in; nothing this program starts inherits
it, and this program cannot be traced or have its descriptors reopened by the processes it starts (it is
not dumpable). Once the check is over, it writes one JSON line there and exits:

    {"end": true, "exit_code": 0, "signal": null, "early": []}

A check that never wrote that line did not reach its end (its process was ended early: `os._exit`, an exec,
a kill in the code it ran) and never passes.

- `command`: `bash -c COMMAND` in a child process. Then `early` lists the Python processes whose exit status
  the command returned that ended without reaching their end, from the ledger check_startup.py keeps: any
  that said so as it ended, and the command's own process when it was one Python program that started and
  exited 0 without writing its end.
- `pytest`: pytest.main(ARGS) in this process (the tests import the model's code here: a module that ends
  the process ends it before the line is written). The engine reads the JUnit report pytest wrote.

Standard library only (and pytest, from the engine's site-packages); run by the sandbox's python3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

LEDGER_MAX = 1 << 20     # bytes of the ledger read at most
EARLY_SHOWN = 5          # early ends reported at most


def _not_dumpable() -> None:
    """PR_SET_DUMPABLE 0: processes of the same uid can neither trace this one nor open its descriptors."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _ledger(path: str) -> list[list[str]]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        data = os.read(fd, LEDGER_MAX)
    finally:
        os.close(fd)
    return [line.split(" ", 2) for line in data.decode("utf-8", "replace").splitlines() if line.strip()]


def _early(ledger: list[list[str]], child: int, status: int) -> list[str]:
    """The ends that say the exit status is not the program's own (see the module docstring)."""
    found = [f"pid {entry[1]}: {entry[2]}" for entry in ledger if entry[0] == "early" and len(entry) == 3]
    started = any(entry[:2] == ["start", str(child)] for entry in ledger)
    ended = any(entry[:2] == ["end", str(child)] for entry in ledger)
    if status == 0 and started and not ended and not found:
        found.append(f"pid {child}: exited 0 without reaching its end")
    return found[:EARLY_SHOWN]


def run_command(command: str) -> dict[str, object]:
    _not_dumpable()
    env = {**os.environ, "ENGINE_CHECK_WRAPPER": str(os.getpid())}
    proc = subprocess.Popen(["bash", "-c", command], env=env, stdin=subprocess.DEVNULL, close_fds=True)
    status = proc.wait()
    early = _early(_ledger(os.environ.get("ENGINE_CHECK_LEDGER", "")), proc.pid, status)
    return {"exit_code": status if status >= 0 else None, "signal": -status if status < 0 else None,
            "early": early}


def run_pytest(args: list[str]) -> dict[str, object]:
    import pytest

    return {"exit_code": int(pytest.main(args)), "signal": None, "early": []}


def main() -> None:
    result_fd, mode, rest = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    os.set_inheritable(result_fd, False)
    record = run_command(rest[0]) if mode == "command" else run_pytest(rest)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.write(result_fd, json.dumps({"end": True, **record}).encode() + b"\n")
    code, signal = record["exit_code"], record["signal"]
    os._exit(code if isinstance(code, int) else 128 + (signal if isinstance(signal, int) else 0))


if __name__ == "__main__":
    main()
