"""Import Terminal-Bench tasks (a task folder, or a folder of them) as a workspace suite.

A Terminal-Bench task folder holds task.yaml (the instruction, difficulty, time limits), a Dockerfile (and
docker-compose.yaml) building the container the agent works in, solution.sh (the reference solution),
tests/test_outputs.py (pytest, run in the container after the agent) and run-tests.sh. Each importable
task becomes one workspace test:

    workspace   the files the Dockerfile copies into its WORKDIR, seen at that path (`root: /app`), with
                the task's agent time limit as `time_limit_s`
    golden      one `run_command` of solution.sh's text, then `finish`
    eval        a `pytest:` workspace check of the task's tests (`files:` copies tests/ in after the model is
                done; TEST_DIR points at them), run with the engine's pytest and configuration only

What a workspace cannot be, the importer refuses, naming the task and the reason, never silently: a
Dockerfile that does more than pick a plain base image, set WORKDIR and COPY files (`RUN apt-get install`,
a custom image), several containers, tests that install packages, a solution that fetches from the network,
a solution given as keystrokes (solution.yaml), and a symbolic link anywhere in the task that is absolute
or leads out of the task folder (its target would be copied in from outside the task).
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from engine.errors import ConfigError

__all__ = ["Imported", "import_terminal_bench", "read_task"]

# Base images that are a plain OS or Python: nothing installed beyond what this machine's sandbox shows.
PLAIN_BASES = re.compile(r"^(ghcr\.io/laude-institute/t-bench/(python-3-13|ubuntu-24-04)|python|ubuntu|debian)"
                         r"(:[\w.-]+)?$")
# A solution line that fetches from the network (the sandbox has none).
NETWORK = re.compile(r"\b(curl|wget|git\s+clone|pip3?\s+install|uv\s+(add|pip|sync)|apt(-get)?\s+install|"
                     r"npm\s+(install|i)|cargo\s+install|go\s+get)\b")
TESTS_AT = "tests"            # where the check's copy of tests/ goes in the workspace
DEFAULT_AGENT_S = 360.0
DEFAULT_TEST_S = 60.0
MAX_COMMAND_S = 3600.0

HEADER = """\
Terminal-Bench tasks, imported by `engine import terminal-bench` from {source}.
Source format: Terminal-Bench (https://github.com/laude-institute/terminal-bench), Apache-2.0. Golden =
the task's solution.sh; the check runs the task's tests/ with pytest. docs/agents.md, "Terminal-Bench tasks".
"""


@dataclass(frozen=True, slots=True)
class Task:
    """One readable Terminal-Bench task folder."""

    name: str
    folder: Path
    instruction: str
    difficulty: str | None
    agent_s: float
    test_s: float
    workdir: str
    copies: tuple[tuple[str, str], ...]   # (source in the task folder, destination relative to workdir)
    solution: str


@dataclass(slots=True)
class Imported:
    """What an import wrote and what it refused."""

    suite: Path | None = None
    tests: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (task, why it cannot be a workspace test)


def read_task(folder: Path) -> Task:
    """Read one task folder.

    Raises:
        ConfigError: Why the task cannot be a workspace test (the message names the file and the reason).
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    name = folder.name
    _refuse_links_out(folder)
    try:
        meta = YAML(typ="safe").load((folder / "task.yaml").read_text(encoding="utf-8"))
    except (OSError, YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{folder / 'task.yaml'}: cannot read it: {exc}") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{folder / 'task.yaml'}: not a mapping; a Terminal-Bench task.yaml has `instruction`")
    instruction = meta.get("instruction")
    if not isinstance(instruction, str):
        bases = [d.get("description") for d in meta.get("descriptions") or () if isinstance(d, dict)
                 and d.get("key", "base") == "base"]
        instruction = bases[0] if bases and isinstance(bases[0], str) else None
    if not instruction or not instruction.strip():
        raise ConfigError(f"{folder / 'task.yaml'}: no `instruction` (nor a `descriptions` entry with key base)")
    if not (folder / "solution.sh").is_file():
        why = ("its solution is solution.yaml (terminal keystrokes), which is not imported; give solution.sh"
               if (folder / "solution.yaml").is_file() else "it has no solution.sh")
        raise ConfigError(f"{folder}: {why}")
    if not (folder / "tests" / "test_outputs.py").is_file():
        raise ConfigError(f"{folder}: it has no tests/test_outputs.py")
    solution = (folder / "solution.sh").read_text(encoding="utf-8")
    for number, line in enumerate(solution.splitlines(), start=1):
        code = line.split("#", 1)[0]
        if NETWORK.search(code):
            raise ConfigError(f"{folder / 'solution.sh'}:{number}: it needs the network ({line.strip()[:80]!r}); "
                              "the sandbox has none")
    _check_compose(folder)
    _check_run_tests(folder)
    workdir, copies = _read_dockerfile(folder)
    return Task(name=name, folder=folder, instruction=instruction.strip(),
                difficulty=str(meta["difficulty"]) if meta.get("difficulty") else None,
                agent_s=_seconds(meta.get("max_agent_timeout_sec"), DEFAULT_AGENT_S),
                test_s=_seconds(meta.get("max_test_timeout_sec"), DEFAULT_TEST_S), workdir=workdir,
                copies=tuple(copies), solution=solution)


def _refuse_links_out(folder: Path) -> None:
    """Raise for the first symbolic link in the task that is absolute or resolves outside the task folder.

    Raises:
        ConfigError: Naming the file, the link's text and where it leads.
    """
    top = os.path.realpath(folder)
    for here, dirs, names in os.walk(folder):
        for name in sorted(dirs + names):
            _refuse_link_out(Path(here, name), top, "the task folder")


def _refuse_link_out(path: Path, top: str, where: str) -> None:
    if not path.is_symlink():
        return
    link = os.readlink(path)
    target = os.path.realpath(path)
    if os.path.isabs(link) or not (target == top or target.startswith(top + os.sep)):
        raise ConfigError(f"{path}: a symbolic link to {link!r} (which is {target}), "
                          f"{'an absolute path' if os.path.isabs(link) else f'outside {where}'}; a task's links "
                          "must stay inside its folder (the importer never copies files from outside the task)")


def _seconds(value: Any, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(min(value, MAX_COMMAND_S))
    return default


def _read_dockerfile(folder: Path) -> tuple[str, list[tuple[str, str]]]:
    """(WORKDIR, COPY pairs) of a Dockerfile that only picks a plain base, sets WORKDIR and copies files."""
    path = folder / "Dockerfile"
    if not path.is_file():
        raise ConfigError(f"{folder}: it has no Dockerfile (a task with only docker-compose.yaml needs its own "
                          "images)")
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    workdir: str | None = None
    base: str | None = None
    copies: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        rest = rest.strip()
        if word == "FROM":
            base = rest.split()[0]
            if not PLAIN_BASES.match(base):
                raise ConfigError(f"{path}:{number}: it needs the Docker image {base!r}, beyond a plain base")
        elif word == "WORKDIR":
            workdir = rest
        elif word in ("COPY", "ADD"):
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            if len(parts) < 2 or any(re.match(r"^[a-z]+://", p) for p in parts):
                raise ConfigError(f"{path}:{number}: `{line[:80]}` fetches or copies what a workspace cannot hold")
            *sources, dest = parts
            for source in sources:
                copies.append((source, _relative_dest(path, number, dest, source, workdir)))
        elif word in ("CMD", "ENTRYPOINT", "LABEL", "MAINTAINER"):
            continue
        else:
            raise ConfigError(f"{path}:{number}: `{line[:80]}` builds a Docker image beyond a plain base "
                              f"({word} is not imported)")
    if base is None:
        raise ConfigError(f"{path}: no FROM line")
    if workdir is None or not PurePosixPath(workdir).is_absolute():
        raise ConfigError(f"{path}: no absolute WORKDIR (the folder the task works in, e.g. /app)")
    for source, _ in copies:
        target = (folder / source).resolve()
        if not target.is_relative_to(folder.resolve()) or not target.exists():
            raise ConfigError(f"{path}: COPY source {source!r} is not a file or folder of the task")
        if target == folder.resolve() or target.name in ("solution.sh", "tests", "run-tests.sh"):
            raise ConfigError(f"{path}: COPY {source!r} would show the solution or the tests to the model")
    return workdir, copies


def _relative_dest(path: Path, number: int, dest: str, source: str, workdir: str | None) -> str:
    if workdir is None:
        raise ConfigError(f"{path}:{number}: COPY before WORKDIR")
    where = PurePosixPath(dest if PurePosixPath(dest).is_absolute() else f"{workdir}/{dest}")
    if dest.endswith("/") or dest in (".", "./"):
        where = where / PurePosixPath(source).name
    try:
        relative = where.relative_to(workdir)
    except ValueError:
        raise ConfigError(f"{path}:{number}: COPY to {dest!r}, outside WORKDIR {workdir}") from None
    if ".." in relative.parts or str(relative) == ".":
        raise ConfigError(f"{path}:{number}: COPY to {dest!r}: name the file or folder it makes")
    return relative.as_posix()


def _check_compose(folder: Path) -> None:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    path = folder / "docker-compose.yaml"
    if not path.is_file():
        return
    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except (YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from None
    services = data.get("services") if isinstance(data, dict) else None
    if isinstance(services, dict) and len(services) > 1:
        raise ConfigError(f"{path}: it runs {len(services)} containers ({', '.join(map(str, services))}); a "
                          "workspace is one sandbox")


def _check_run_tests(folder: Path) -> None:
    """run-tests.sh may install pytest (the check has the engine's); anything more needs the network."""
    path = folder / "run-tests.sh"
    if not path.is_file():
        return
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        code = line.split("#", 1)[0]
        match = re.search(r"\b(?:uv\s+add|uv\s+pip\s+install|pip3?\s+install|apt(?:-get)?\s+install)\s+(.*)", code)
        if match is None:
            continue
        wanted = [p for p in match.group(1).split() if not p.startswith("-")]
        extra = [p for p in wanted if not re.match(r"^(pytest|curl)([=<>~!].*)?$", p)]
        if extra:
            raise ConfigError(f"{path}:{number}: the tests need {' '.join(extra)} installed from the network")


def _literal(text: str) -> Any:
    from ruamel.yaml.scalarstring import LiteralScalarString

    return LiteralScalarString(text) if "\n" in text else text


def _test(task: Task, seed: str | None) -> dict[str, Any]:
    workspace: dict[str, Any] = {"folder": seed} if seed else {"files": {}}
    workspace.update({"root": task.workdir, "time_limit_s": task.agent_s, "timeout_s": task.agent_s})
    prompt = task.instruction
    if "{{" in prompt or "{%" in prompt or "{#" in prompt:
        prompt = "{% raw %}" + prompt + "{% endraw %}"
    test: dict[str, Any] = {
        "id": task.name,
        "prompt": _literal(prompt),
        "tags": ["terminal-bench", *([task.difficulty] if task.difficulty else [])],
        "workspace": workspace,
        "tools": ["run_command", "read_file", "write_file", "list_files", "finish"],
        "agent": {"max_turns": 50, "max_repeats": 5},
        "eval": {"workspace_check": {"pytest": f"{TESTS_AT}/test_outputs.py",
                                     "env": {"TEST_DIR": f"{task.workdir}/{TESTS_AT}"},
                                     "files": {TESTS_AT: f"checks/{task.name}/tests"}, "timeout_s": task.test_s}},
        "golden": [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": _literal(task.solution)}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"summary": "Ran the reference solution."}}]},
        ],
    }
    return test


def _task_folders(src: Path) -> list[Path]:
    if (src / "task.yaml").is_file():
        return [src]
    found = sorted(p.parent for p in src.glob("*/task.yaml"))
    if not found:
        raise ConfigError(f"{src}: neither a Terminal-Bench task folder (task.yaml) nor a folder of them")
    return found


def import_terminal_bench(src: Path, out: Path) -> Imported:
    """Write a workspace suite of the importable tasks under `src` into `out`.

    Writes out/terminal_bench.yaml, each task's seed under out/workspaces/<task>/ and its tests under
    out/checks/<task>/tests/. Tasks that cannot be workspace tests are listed in `skipped` with the reason.

    Raises:
        ConfigError: `src` holds no task at all.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    src, out = Path(src), Path(out)
    imported = Imported()
    tests = []
    for folder in _task_folders(src):
        try:
            if folder != src:
                _refuse_link_out(folder, os.path.realpath(src), "the folder of tasks")
            task = read_task(folder)
        except (ConfigError, OSError, UnicodeDecodeError) as exc:
            imported.skipped.append((folder.name, str(exc)))
            continue
        seed = out / "workspaces" / task.name
        checks = out / "checks" / task.name
        for old in (seed, checks):
            shutil.rmtree(old, ignore_errors=True)
        for source, dest in task.copies:
            target = seed / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if (folder / source).is_dir():   # links inside the task stay links (read_task refused the others)
                shutil.copytree(folder / source, target, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copyfile(folder / source, target)
        shutil.copytree(folder / "tests", checks / "tests", symlinks=True)
        tests.append(_test(task, f"workspaces/{task.name}" if task.copies else None))
        imported.tests.append(task.name)
    if not tests:
        return imported
    suite = CommentedMap()
    suite["suite"] = "terminal-bench"
    suite["description"] = "Terminal-Bench tasks: work in a shell; the task's own tests judge the result."
    suite["tags"] = ["agent", "terminal-bench"]
    suite["tests"] = tests
    suite.yaml_set_start_comment(HEADER.format(source=src.name))
    yaml = YAML()
    yaml.width = 4096
    buffer = io.StringIO()
    yaml.dump(suite, buffer)
    out.mkdir(parents=True, exist_ok=True)
    imported.suite = out / "terminal_bench.yaml"
    imported.suite.write_text(buffer.getvalue(), encoding="utf-8")
    return imported
