"""A workspace test's `workspace:` block, compiled (engine.workspace.spec compiles it when the suite loads)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class WorkspaceSpec:
    """A compiled `workspace:` block.

    Args:
        folder: The seed folder, absolute (None: inline files only).
        files: Relative path -> text, written after the folder is copied.
        setup: A command run (bash -c) in the sandbox before the model starts; None for none.
        network: Whether commands, setup and checks may use the network.
        timeout_s: The wall-clock limit of each command.
        memory_mb: The memory limit of each command.
        tools: The offered built-in tools: (name the model sees, built-in), in the test's order.
        root: The absolute path the task sees its workspace at (commands and the hidden check), or None: the
            workspace's own temporary path.
        time_limit_s: The wall-clock limit of the whole task (conversation and commands), or None.
    """

    folder: str | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    setup: str | None = None
    network: bool = False
    timeout_s: float = 30.0
    memory_mb: int = 1024
    tools: tuple[tuple[str, str], ...] = ()
    root: str | None = None
    time_limit_s: float | None = None
