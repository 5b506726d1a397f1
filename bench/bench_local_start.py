"""Starting the embedded servers one after another vs together (`engine.local.server.serve_builtins`).

`make run` starts three llama-cpp-python servers (gemma-3-270m, smollm2-135m, smollm2-135m-embed). Started in
turn, each one's Python imports and model load wait for the previous one to be ready; started together,
they overlap. Alternating trials, same machine, same load: the ratio is the figure (bench/README.md).
Needs the `[local]` extra (the real servers start); prints one line per trial and the medians.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

SERVERS = (("gemma-3-270m", "gemma-3-270m"), ("smollm2-135m", "smollm2-135m"),
           ("smollm2-135m-embed", "smollm2-135m-embed"))


def one_after_another(logs: Path) -> float:
    from engine.local import serve_builtin

    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        for name, alias in SERVERS:
            stack.enter_context(serve_builtin(name, log_path=logs / f"{name}.log", alias=alias, notify=None))
        return time.monotonic() - began


def together(logs: Path) -> float:
    from engine.local.server import serve_builtins

    began = time.monotonic()
    with serve_builtins([(name, alias, logs / f"{name}.log") for name, alias in SERVERS], notify=None):
        return time.monotonic() - began


def main(trials: int = 3) -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("bench_local_start: skipped (needs the [local] extra)")
        return
    times: dict[str, list[float]] = {"one after another": [], "together": []}
    with tempfile.TemporaryDirectory() as folder:
        for trial in range(trials):
            for label, start in (("one after another", one_after_another), ("together", together)):
                seconds = start(Path(folder))
                times[label].append(seconds)
                print(f"trial {trial + 1}: {label}: {seconds:.1f} s until all three are ready", flush=True)
    base, new = (statistics.median(times[k]) for k in ("one after another", "together"))
    print(f"median: one after another {base:.1f} s, together {new:.1f} s ({new / base:.2f}x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
