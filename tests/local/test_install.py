"""engine/local/install.py: the `[local]` install that shows llama.cpp's compile instead of hiding it.

A real subprocess stands in for pip: it prints what `pip install -v` prints while building a wheel
(ninja's `[k/n]` steps among compiler command lines), goes silent until the wrapper's heartbeat shows up
in the output file, and records the environment it was given.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path

from engine.local import install

FAKE_PIP = r'''
import json, os, sys, time
out, env_file, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
json.dump({k: os.environ.get(k) for k in ("CMAKE_ARGS", "CMAKE_BUILD_PARALLEL_LEVEL")}
          | {"argv": sys.argv[4:]}, open(env_file, "w"))
def say(line):
    print(line, flush=True)
say("Using pip 25.0 from /venv/lib/python3.11/site-packages/pip (python 3.11)")
say("Collecting pandas")
say("  Obtaining dependency information for pandas")
say("Building wheel for llama-cpp-python (pyproject.toml): started")
say("  Running command Building wheel for llama-cpp-python (pyproject.toml)")
for k in range(1, 4):
    say(f"  [{k}/3] /usr/bin/cc -O3 -c ggml.c -o ggml.c.o")
    say("  /usr/lib/gcc/x86_64-linux-gnu/12/include/avxintrin.h:1210:11: note: declared here")
# Silent now, as during one long compile, until the wrapper's heartbeat reaches the output file.
deadline = time.monotonic() + 60
while "... building llama-cpp-python" not in open(out).read() and time.monotonic() < deadline:
    time.sleep(0.02)
say("Building wheel for llama-cpp-python (pyproject.toml): finished with status 'done'")
say("Created wheel for llama-cpp-python: filename=llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl size=1")
say("Installing collected packages: pandas, llama-cpp-python")
if code:
    say("ERROR: could not install llama-cpp-python")
else:
    say("Successfully installed llama-cpp-python-0.3.36 pandas-2.2.0")
sys.exit(code)
'''


def _run(tmp_path: Path, *, code: int = 0, env: dict[str, str] | None = None) -> tuple[int, str, dict, Path]:
    fake = tmp_path / "fake_pip.py"
    fake.write_text(FAKE_PIP)
    out_path, env_file, log = tmp_path / "out.txt", tmp_path / "env.json", tmp_path / "logs" / "install.log"
    with open(out_path, "w", buffering=1) as out:
        rc = install.run([sys.executable, str(fake), str(out_path), str(env_file), str(code), "install", "-e", "."],
                         log_path=log, out=out, env=env if env is not None else {"PATH": "/usr/bin"},
                         heartbeat_s=0.05)
    return rc, out_path.read_text(), json.loads(env_file.read_text()), log


def test_a_build_is_announced_shown_as_progress_and_never_silent(tmp_path: Path) -> None:
    rc, shown, env, log = _run(tmp_path)
    assert rc == 0
    lines = shown.splitlines()
    banners = [i for i, line in enumerate(lines) if "building llama.cpp for this machine" in line]
    assert len(banners) == 1, shown                            # said once, not again when pip says "finished"
    banner = banners[0]
    assert "minutes on" in lines[banner] and "once; pip caches it" in lines[banner]
    progress = [line for line in lines if "compiled" in line]
    assert progress[0].endswith("llama-cpp-python: compiled 1/3 (33%)")
    assert progress[-1].endswith("compiled 3/3 (100%)")       # the last step always shows
    assert all(lines.index(p) > banner for p in progress)
    assert any(line.split("] ", 1)[1].startswith("  ... building llama-cpp-python") for line in lines)
    said = [line for line in lines if not line.split("] ", 1)[1].startswith("  ... ")]   # heartbeats left out
    assert said[-2].endswith("Successfully installed llama-cpp-python-0.3.36 pandas-2.2.0")
    # Compiler command lines and warnings stay in the log, not on the screen.
    assert "avxintrin" not in shown and "/usr/bin/cc" not in shown
    assert "avxintrin" in log.read_text() and str(log) in lines[0]
    assert env["argv"][-1] == "-v"


def test_the_build_settings_are_defaults_the_environment_overrides(tmp_path: Path) -> None:
    _, _, env, _ = _run(tmp_path)
    args = shlex.split(env["CMAKE_ARGS"])              # as scikit-build-core reads it
    assert {"-DLLAVA_BUILD=OFF", "-DGGML_NATIVE=ON", f"-DCMAKE_PROJECT_INCLUDE={install.TEXT_ONLY_CMAKE}"} <= set(args)
    assert install.TEXT_ONLY_CMAKE.is_file()
    assert env["CMAKE_BUILD_PARALLEL_LEVEL"] == str(install.cores())

    _, _, env, _ = _run(tmp_path, env={"PATH": "/usr/bin", "CMAKE_ARGS": "-DGGML_CUDA=ON"})
    assert env["CMAKE_ARGS"] == "-DGGML_CUDA=ON"


def test_a_failed_install_returns_pips_code_and_shows_the_end_of_its_log(tmp_path: Path) -> None:
    rc, shown, _, log = _run(tmp_path, code=3)
    assert rc == 3
    assert f"pip failed (exit code 3); the end of its log ({log})" in shown
    assert "avxintrin" in shown.split("pip failed", 1)[1]      # the tail is the raw log, warnings included


def test_progress_lines_are_throttled_and_the_heartbeat_waits_for_silence() -> None:
    now = [100.0]
    out = io.StringIO()
    reporter = install.Reporter(out, ncores=2, clock=lambda: now[0], heartbeat_s=10.0)
    reporter.line("Building wheel for llama_cpp_python (pyproject.toml): started")
    assert "about 3 minutes on 2 cores" in out.getvalue()
    for step in range(1, 101):
        now[0] += 0.5
        reporter.line(f"  [{step}/100] c++ -c x.cpp")
    shown = [line for line in out.getvalue().splitlines() if "compiled" in line]
    # 50 s of steps every 0.5 s, at most one line per PROGRESS_S (5 s) -- the first, then every tenth --
    # and the last step.
    assert len(shown) == 11 and shown[-1] == "[0:50]   llama_cpp_python: compiled 100/100 (100%)"
    before = out.getvalue()
    now[0] += 9.0
    reporter.beat()
    assert out.getvalue() == before                            # 9 s of silence: not yet
    now[0] += 1.0
    reporter.beat()
    assert out.getvalue().splitlines()[-1] == "[1:00]   ... building llama_cpp_python"


def test_the_estimate_spreads_the_measured_work_over_the_cores() -> None:
    assert install.estimate(1) == f"about {-(-int(install.BUILD_CORE_SECONDS) // 60)} minutes on 1 core"
    assert install.estimate(64) == "about 1 minute on 64 cores"


SILENT_STEP = r'''
import sys, time
out = sys.argv[1]
print("creating the environment", flush=True)
deadline = time.monotonic() + 60
while "... " not in open(out).read() and time.monotonic() < deadline:   # silent until the heartbeat shows
    time.sleep(0.02)
print("created", flush=True)
sys.exit(int(sys.argv[2]))
'''


def test_main_runs_any_other_step_with_its_own_output_and_the_heartbeat(tmp_path: Path) -> None:
    """`install.py --run COMMAND...` (the venv step of `make run`): output as it comes, a heartbeat naming the
    command through a silence, nothing appended to the command, its exit code returned."""
    step = tmp_path / "step.py"
    step.write_text(SILENT_STEP)
    out_path, log = tmp_path / "out.txt", tmp_path / "setup.log"
    for code in (0, 4):
        with open(out_path, "w", buffering=1) as out:
            rc = install.run([sys.executable, str(step), str(out_path), str(code)], log_path=log, out=out,
                             heartbeat_s=0.05, pip=False)
        assert rc == code
        lines = [line.split("] ", 1)[1] for line in out_path.read_text().splitlines() if "] " in line]
        assert "creating the environment" in lines
        assert any(line == f"  ... {sys.executable} {step} {out_path} {code}" for line in lines)
        assert "created" in lines
        assert "created" in log.read_text()
        ended = lines[-1] if code == 0 else next(line for line in lines if "failed" in line)
        assert ended == ("done" if code == 0 else f"{sys.executable} failed (exit code 4); the end of its log ({log}):")
    assert install.main(["--log", str(log), "--run"]) == 2          # no command
