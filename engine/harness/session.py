"""Workspace sessions: one long-lived sandbox per workspace, so what a command starts in the background outlives it.

engine/harness/supervisor.py runs inside the sandbox and runs each command there, with the same isolation, uid,
limits and output caps as a one-shot run (engine/harness/oneshot.py).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from engine.errors import HarnessError
from engine.harness.interrupt import interruptible
from engine.harness.isolation import Isolation, Limits, base_env, command, isolation_report, resolve_program
from engine.harness.oneshot import RunResult
from engine.harness.uids import give_tree, sweep_uid

SESSION_MARGIN_S = 10.0          # a command's answer may come this long after its own time limit
SESSION_STOP_S = 5.0             # after a stop, the supervisor has this long to answer
SESSION_LINE_MAX = 4 * 1024 * 1024


@dataclass(eq=False)   # a live sandbox: equal only to itself
class Session:
    """A workspace's sandbox that lives across commands: engine/harness/supervisor.py runs inside it and runs
    each command (`bash -c`) there, so a server a command starts in the background (`python3 server.py &`)
    is still running for the next command and for the hidden check (which joins its network namespace).

    The same isolation, uid, limits and output caps as `run_in`, per command; the number of processes is
    bounded by the uid's process limit, and their lifetime by `close` (at the latest, `lifetime_s`). A
    command that ends the sandbox itself (`kill -9 -1`) gets a result saying so; the next command starts a
    fresh one.

    Args:
        workdir: The workspace folder.
        memory_mb: The memory limit of every process.
        lifetime_s: The sandbox ends by itself past this many seconds.
        network: Keep the host's network.
        uid: The workspace's leased uid (None: privileges are not dropped here).
        group: The name `interrupt(group)` stops the running command by.
        root: Where the folder is shown (bubblewrap only).
    """

    workdir: Path
    _: KW_ONLY
    memory_mb: int
    lifetime_s: float
    network: bool
    uid: int | None
    group: str | None
    root: str | None
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _netns: int | None = field(default=None, init=False, repr=False)
    _buffer: bytes = field(default=b"", init=False, repr=False)

    def run(self, command: str, limits: Limits) -> RunResult:
        """Run `command` in the session (starting it when needed); a failing command is a result.

        Raises:
            HarnessError: The sandbox could not be started or the folder handed over.
        """
        found = isolation_report()
        if self.uid is not None:
            give_tree(self.workdir, self.uid)   # files the engine's file tools wrote belong to the engine
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start(found)
        assert proc.stdin is not None and proc.stdout is not None
        request = {"command": command, "timeout_s": limits.timeout_s, "output_bytes": limits.output_bytes,
                   "cpu_s": int(limits.timeout_s) + 1}
        start = time.monotonic()
        with interruptible(self.group) as wake_read, selectors.DefaultSelector() as selector:
            try:
                proc.stdin.write(json.dumps(request).encode() + b"\n")
                proc.stdin.flush()
            except OSError:
                return self._lost(found, start, "the workspace's sandbox had ended")
            selector.register(proc.stdout, selectors.EVENT_READ, "out")
            selector.register(wake_read, selectors.EVENT_READ, "stop")
            deadline = start + limits.timeout_s + SESSION_MARGIN_S
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.close()
                    return self._lost(found, start, "the workspace's sandbox stopped answering; it was restarted "
                                      "(everything running in the background is gone)", timed_out=True)
                for key, _ in selector.select(timeout=remaining):
                    if key.data == "stop":
                        selector.unregister(wake_read)
                        deadline = min(deadline, time.monotonic() + SESSION_STOP_S)
                        try:
                            proc.stdin.write(b'{"stop": true}\n')
                            proc.stdin.flush()
                        except OSError:
                            pass
                        continue
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        self.close()
                        return self._lost(found, start, "the command ended the workspace's sandbox (everything "
                                          "running in the background is gone); the next command starts a fresh "
                                          "one")
                    self._buffer += chunk
                    if len(self._buffer) > SESSION_LINE_MAX:
                        self.close()
                        return self._lost(found, start, "the workspace's sandbox answered too much; it was restarted")
            line, _, self._buffer = self._buffer.partition(b"\n")
        data = json.loads(line)
        return RunResult(exit_code=data["exit_code"], signal=data["signal"], stdout=data["stdout"],
                         stderr=data["stderr"], truncated=data["truncated"], timed_out=data["timed_out"],
                         output_exceeded=data["output_exceeded"], duration_s=data["duration_s"],
                         isolation=found.level, workdir=str(self.workdir), uid=self.uid,
                         interrupted=data["stopped"], memory_mb=self.memory_mb)

    def netns(self) -> int | None:
        """An open fd of the session's network namespace (for a hidden check to join), or None when no session
        runs or it shares the host's network."""
        if self._proc is None or self._proc.poll() is not None or self.network:
            return None
        if self._netns is None:
            self._netns = _inner_netns(self._proc.pid)
        return self._netns

    def close(self) -> None:
        """End the session: every process in it is killed."""
        proc, self._proc = self._proc, None
        self._buffer = b""
        if self._netns is not None:
            os.close(self._netns)
            self._netns = None
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.close()
            proc.wait(timeout=SESSION_STOP_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.uid is not None:
            sweep_uid(self.uid)
        proc.stdout.close()
        proc.wait()

    def _start(self, found: Isolation) -> subprocess.Popen[bytes]:
        self.close()
        program = resolve_program("python")
        if program is None:
            raise HarnessError("the workspace sandbox needs Python (python3), which is not installed on this machine")
        source = Path(__file__).with_name("supervisor.py").read_text(encoding="utf-8")
        limits = Limits(timeout_s=self.lifetime_s, memory_mb=self.memory_mb)
        argv = command(found, self.uid, self.workdir, limits, [*program, "-c", source, f"{self.lifetime_s:g}"],
                       self.network, (), self.root, session=True)
        try:
            self._proc = subprocess.Popen(argv, cwd=self.workdir, env=base_env(self.root or str(self.workdir)),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          start_new_session=True, close_fds=True)
        except OSError as exc:
            raise HarnessError(f"could not start the workspace's sandbox: {exc}") from exc
        return self._proc

    def _lost(self, found: Isolation, start: float, message: str, timed_out: bool = False) -> RunResult:
        return RunResult(exit_code=None, signal=signal.SIGKILL, stdout="", stderr=message, truncated=False,
                         timed_out=timed_out, output_exceeded=False, duration_s=time.monotonic() - start,
                         isolation=found.level, workdir=str(self.workdir), uid=self.uid, memory_mb=self.memory_mb)


def _inner_netns(pid: int) -> int | None:
    """An fd of the first network namespace other than the engine's among `pid` and its descendants."""
    own = os.stat("/proc/self/ns/net").st_ino
    level = [pid]
    for _ in range(6):
        following: list[int] = []
        for here in level:
            path = f"/proc/{here}/ns/net"
            try:
                if os.stat(path).st_ino != own:
                    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                with open(f"/proc/{here}/task/{here}/children", encoding="ascii") as handle:
                    following += [int(child) for child in handle.read().split()]
            except (OSError, ValueError):
                continue
        level = following
    return None
