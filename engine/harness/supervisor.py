"""The program inside a workspace's long-lived sandbox: it runs the engine's commands one at a time.

Run by the sandbox's interpreter with the standard library only (`session.Session` passes this file's text
to `python -I -c`), it reads one JSON request a line on stdin and writes one JSON result a line on stdout:

    {"command": "python3 server.py &", "timeout_s": 30, "output_bytes": 65536, "cpu_s": 31}
    {"stop": true}                 # while a command runs: kill it now (its tool call was cancelled)

Each command is `bash -c` in a session of its own. A command that ends by itself leaves what it started in
the background running (a server the task's tests call); their output is read and thrown away, so they
never block on a full pipe. A command past its time limit, writing too much, or stopped takes everything
in the sandbox with it (what it started may have left its process group: `setsid`, a fork bomb), so the
sandbox is clean again for the next command. Everything still running is killed when stdin closes (the
workspace is closed) or when the sandbox's lifetime, argv[1] seconds, passes.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import time

DRAIN_S = 0.3          # after a command exits, wait this long at most for its pipes to close
HARD_FACTOR = 16       # kill a command once it wrote this many times the kept output
LINE_MAX = 1 << 20     # a request line longer than this is a broken engine: stop


def _reap(keep: int | None) -> None:
    """Collect orphans that ended (as PID 1 of the namespace, they are ours), leaving `keep` to its Popen."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == keep:
            return
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            return


class _Lines:
    """Request lines from stdin, read unbuffered (a selector sees every byte that is waiting)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.closed = False

    def read(self) -> list[bytes]:
        chunk = os.read(0, 65536)
        if not chunk:
            self.closed = True
        self.buffer += chunk
        if len(self.buffer) > LINE_MAX:
            raise SystemExit("request line too long")
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line for line in lines if line.strip()]


def _kill_everything(keep: int | None = None) -> None:
    """SIGKILL every process of this uid in the namespace but this one, until none is left (a fork bomb races)."""
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            return   # nothing left to signal
        _reap(keep)
        time.sleep(0.005)


def _run(request: dict, control: selectors.BaseSelector, leftovers: list[int], stdin: _Lines) -> dict:
    timeout_s = float(request.get("timeout_s", 30))
    keep = int(request.get("output_bytes", 65536))
    cpu = int(request.get("cpu_s", int(timeout_s) + 1))

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))

    start = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", str(request["command"])], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=limits)  # noqa: PLW1509 - this program has one thread
    assert proc.stdout is not None and proc.stderr is not None
    pipes = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    total = {"stdout": 0, "stderr": 0}
    pidfd = os.pidfd_open(proc.pid)
    for fd in pipes:
        control.register(fd, selectors.EVENT_READ, "pipe")
    control.register(pidfd, selectors.EVENT_READ, "exit")
    timed_out = exceeded = stopped = False
    exited_at: float | None = None
    deadline = start + timeout_s
    while True:
        now = time.monotonic()
        if exited_at is not None and (not pipes or now >= exited_at + DRAIN_S):
            break
        if exited_at is None and now >= deadline:
            timed_out = True
            break
        limit = (exited_at + DRAIN_S if exited_at is not None else deadline) - now
        for key, _ in control.select(timeout=max(0.0, min(limit, 1.0))):
            if key.data == "exit":
                control.unregister(pidfd)
                exited_at = time.monotonic()
            elif key.data == "control":
                lines = stdin.read()
                if stdin.closed or any(json.loads(line).get("stop") for line in lines):
                    stopped = True
            elif key.data == "pipe":
                chunk = os.read(key.fd, 65536)
                name = pipes.get(key.fd)
                if not chunk:
                    control.unregister(key.fd)
                    pipes.pop(key.fd, None)
                elif name is not None:
                    total[name] += len(chunk)
                    kept[name] += chunk[:max(0, keep - len(kept[name]))]
                    exceeded = exceeded or total[name] > keep * HARD_FACTOR
            else:   # an earlier command's pipe, still held by something it left running
                if not os.read(key.fd, 65536):
                    control.unregister(key.fd)
                    os.close(key.fd)
                    leftovers.remove(key.fd)
        _reap(proc.pid)
        if stopped or exceeded:
            break
    if exited_at is None or timed_out or exceeded or stopped:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if pidfd in control.get_map():
            control.unregister(pidfd)
        _kill_everything(proc.pid)
    os.close(pidfd)
    returncode = proc.wait()
    for fd in list(pipes):   # still open: held by background processes; read and thrown away from now on
        leftovers.append(os.dup(fd))
        control.unregister(fd)
        control.register(leftovers[-1], selectors.EVENT_READ, "leftover")
    proc.stdout.close()
    proc.stderr.close()
    return {"exit_code": returncode if returncode >= 0 else None, "signal": -returncode if returncode < 0 else None,
            "stdout": kept["stdout"].decode("utf-8", "replace"), "stderr": kept["stderr"].decode("utf-8", "replace"),
            "truncated": any(total[k] > keep for k in total), "timed_out": timed_out,
            "output_exceeded": exceeded and not timed_out, "stopped": stopped,
            "duration_s": (exited_at or time.monotonic()) - start}


def main() -> None:
    lifetime_end = time.monotonic() + float(sys.argv[1])
    control = selectors.DefaultSelector()
    control.register(0, selectors.EVENT_READ, "control")
    leftovers: list[int] = []
    stdin = _Lines()
    out = sys.stdout.buffer
    try:
        while time.monotonic() < lifetime_end:
            events = control.select(timeout=min(1.0, lifetime_end - time.monotonic()))
            _reap(None)
            for key, _ in events:
                if key.data == "leftover":
                    if not os.read(key.fd, 65536):
                        control.unregister(key.fd)
                        os.close(key.fd)
                        leftovers.remove(key.fd)
                    continue
                for line in stdin.read():
                    request = json.loads(line)
                    if "command" in request:   # else a stop for a command that already ended
                        out.write(json.dumps(_run(request, control, leftovers, stdin)).encode() + b"\n")
                        out.flush()
                if stdin.closed:
                    return
    finally:
        _kill_everything()


if __name__ == "__main__":
    main()
