"""`python engine/local/install.py PIP_ARGS...`: pip, with the llama.cpp build shown instead of hidden.

`make run` installs the `[local]` extra, whose llama-cpp-python comes as source and compiles llama.cpp.
Behind `pip -q` that is minutes of silence; this wrapper runs `pip -v` instead, keeps the whole log in a
file, and prints only what a person wants to see:

- one line before the long step: "building llama.cpp for this machine, about N minutes on K cores — once";
- the compile's progress (ninja's `[k/n]` steps, at most one line every few seconds);
- a heartbeat whenever nothing else was printed for a while (pip's downloads, a long single compile);
- on failure, the end of pip's log and the log's path.

It also chooses the build: only the libraries llama-cpp-python loads for a text model (see CMAKE_ARGS), for
this machine's CPU, one compile job per core. Each setting is a default: a variable already in the
environment (say `CMAKE_ARGS` for a GPU build) wins.

`install.py --run COMMAND...` runs any other set-up step the same way (creating the virtualenv, which takes
seconds with nothing printed): its own output shown as it comes, the heartbeat kept, the whole log in the file.

It runs as a plain script (stdlib only, nothing imported from `engine`), since it runs before the engine's
dependencies are installed.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

# llama-cpp-python's CMake options for the embedded model's server. Each removes compile work whose output
# the server never loads:
# - LLAVA_BUILD=OFF: no libmtmd (multimodal projectors); llama_cpp imports it only for image chat handlers.
# - CMAKE_PROJECT_INCLUDE: llama_cpp_text_only.cmake turns off llama.cpp's `common` library (and the
#   cpp-httplib it needs), which llama-cpp-python forces on but neither ships nor loads.
# - GGML_NATIVE=ON: one CPU variant, for this machine (-march=native), not every x86 variant.
# - llama.cpp's tests, examples, tools and server: off (already the default in a sub-project; said anyway).
# What each saved, measured on this project's 2-core machine: README.md, "How long `make run` takes".
TEXT_ONLY_CMAKE = Path(__file__).resolve().with_name("llama_cpp_text_only.cmake")
CMAKE_ARGS = " ".join([
    "-DLLAVA_BUILD=OFF",
    f"-DCMAKE_PROJECT_INCLUDE={shlex.quote(str(TEXT_ONLY_CMAKE))}",  # scikit-build-core shlex-splits CMAKE_ARGS
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_CURL=OFF",
])

# Core-seconds the trimmed build took here (wall seconds x cores), for the "about N minutes" estimate.
BUILD_CORE_SECONDS = 360.0

HEARTBEAT_S = 8.0    # print something at least this often (the promise to a user: every 15 s, on a loaded machine)
PROGRESS_S = 5.0     # at most one compile-progress line this often

_NINJA_STEP = re.compile(r"^\s*\[(\d+)/(\d+)\]")
_BUILDING = re.compile(r"^\s*Building wheel for (\S+)")
_SHOWN = re.compile(r"^(Successfully installed|Successfully built|ERROR|error:|Created wheel for)")


def cores() -> int:
    """CPU cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def build_env(base: Mapping[str, str], ncores: int) -> dict[str, str]:
    """`base` plus the build settings, each only where `base` does not set it already.

    Args:
        base: The environment pip would otherwise get.
        ncores: Compile jobs to run at once.
    """
    env = dict(base)
    env.setdefault("CMAKE_ARGS", CMAKE_ARGS)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(ncores))
    return env


def minutes(seconds: float) -> str:
    """`seconds` as m:ss."""
    whole = int(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def estimate(ncores: int) -> str:
    """The banner's "about N minutes": the measured core-seconds spread over `ncores`, rounded up."""
    n = max(1, math.ceil(BUILD_CORE_SECONDS / ncores / 60))
    return f"about {n} minute{'s' * (n != 1)} on {ncores} core{'s' * (ncores != 1)}"


class Reporter:
    """Turns pip's verbose output into the few lines a person reads, and keeps the heartbeat.

    Args:
        out: Where the lines go (the terminal, or make's output with no tty).
        ncores: Cores of this machine, for the estimate.
        clock: Seconds since some fixed point (injectable for tests).
        heartbeat_s: Print a heartbeat after this long without any other line.
        step: A command that is not pip, named this way in the heartbeat; its lines are shown as they are.
    """

    def __init__(self, out: TextIO, ncores: int, clock: Callable[[], float] = time.monotonic,
                 heartbeat_s: float = HEARTBEAT_S, step: str | None = None) -> None:
        self.out = out
        self.step = step
        self.heartbeat_s = heartbeat_s
        self.ncores = ncores
        self.clock = clock
        self.start = clock()
        self.last_print = self.start
        self.last_progress = -math.inf
        self.phase = step or "resolving and downloading packages"
        self.building: str | None = None
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        """Print one line now (with the elapsed time) and reset the heartbeat."""
        with self.lock:
            now = self.clock()
            self.out.write(f"[{minutes(now - self.start)}] {text}\n")
            self.out.flush()
            self.last_print = now

    def line(self, raw: str) -> None:
        """Read one line of pip's output; print what matters (every line of a `step` that is not pip)."""
        text = raw.rstrip()
        if self.step is not None:
            if text:
                self.say(text)
            return
        step = _NINJA_STEP.match(text)
        if step and self.building:
            done, total = int(step.group(1)), int(step.group(2))
            if done == total or self.clock() - self.last_progress >= PROGRESS_S:
                self.last_progress = self.clock()
                self.say(f"  {self.building}: compiled {done}/{total} ({100 * done // total}%)")
            return
        building = _BUILDING.match(text)
        if building and ": finished" not in text:   # pip -v says both "...: started" and "...: finished"
            self.building = building.group(1)
            self.phase = f"building {self.building}"
            if self.building.lower().replace("_", "-") == "llama-cpp-python":
                self.say(f"building llama.cpp for this machine, {estimate(self.ncores)} — once; pip caches it")
            else:
                self.say(f"building {self.building}")
            return
        if text.startswith("Collecting "):
            self.phase = f"collecting {text.split()[1]}"
        elif text.startswith("Installing collected packages"):
            self.building = None
            self.phase = "installing packages"
            self.say("installing packages")
        elif _SHOWN.match(text):
            if text.startswith("Created wheel for"):
                self.building = None
                self.phase = "installing packages"
            self.say(text if len(text) <= 200 else text[:197] + "...")

    def beat(self) -> None:
        """Print a heartbeat when nothing was printed for `heartbeat_s`."""
        if self.clock() - self.last_print >= self.heartbeat_s:
            self.say(f"  ... {self.phase}")


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def run(pip_args: Sequence[str], *, log_path: Path, out: TextIO = sys.stdout,
        env: Mapping[str, str] | None = None, heartbeat_s: float = HEARTBEAT_S, pip: bool = True) -> int:
    """Run `pip_args` (a whole command: `.venv/bin/pip install ...`), reporting as it goes.

    Args:
        pip_args: The command line; `-v` is appended to a pip command (pip then streams the build's own output).
        log_path: File that receives the command's whole output.
        out: Where progress lines go.
        env: The environment (default: this process's), before the build settings are added.
        heartbeat_s: Print a heartbeat after this long without any other line.
        pip: False for any other command (`--run`): its output shown as is, nothing appended.

    Returns:
        The command's exit code.
    """
    ncores = cores()
    argv = [*pip_args, "-v"] if pip else list(pip_args)
    reporter = Reporter(out, ncores, heartbeat_s=heartbeat_s, step=None if pip else " ".join(pip_args))
    reporter.say(f"{' '.join(pip_args)}   (full log: {log_path})")
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(heartbeat_s / 4):
            reporter.beat()

    log_path.parent.mkdir(parents=True, exist_ok=True)
    beater = threading.Thread(target=heartbeat, daemon=True)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=build_env(os.environ if env is None else env, ncores),
                                text=True, errors="replace", bufsize=1)
        beater.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                log.write(raw)
                reporter.line(raw)
            code = proc.wait()
        finally:
            stop.set()
            beater.join()
    if code != 0:
        what = "pip" if pip else pip_args[0]
        reporter.say(f"{what} failed (exit code {code}); the end of its log ({log_path}):\n{_tail(log_path)}")
    else:
        reporter.say("done")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: `install.py [--log FILE] PIP install ARGS...` or `install.py [--log FILE] --run COMMAND...`."""
    args = list(sys.argv[1:] if argv is None else argv)
    log_path = Path(".venv/install.log")
    if args[:1] == ["--log"]:
        log_path, args = Path(args[1]), args[2:]
    pip = args[:1] != ["--run"]
    args = args if pip else args[1:]
    if len(args) < (2 if pip else 1):
        print("usage: install.py [--log FILE] PIP install ARGS...  |  install.py [--log FILE] --run COMMAND...",
              file=sys.stderr)
        return 2
    return run(args, log_path=log_path, pip=pip)


if __name__ == "__main__":
    sys.exit(main())
