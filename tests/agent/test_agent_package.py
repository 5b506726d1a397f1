"""The package's public names resolve, and importing the transcript alone stays light (no import cycle)."""

from __future__ import annotations

import subprocess
import sys

import engine.agent as agent


def test_every_public_name_resolves_to_its_home_module() -> None:
    assert sorted(agent.__all__) == sorted(agent._HOMES)
    for name in agent.__all__:
        assert getattr(agent, name) is getattr(sys.modules[f"engine.agent.{agent._HOMES[name]}"], name)


def test_the_transcript_imports_without_the_evaluators_or_the_client() -> None:
    # a fresh interpreter: what this process already imported must not hide a heavy import
    code = ("import sys, engine.agent.transcript; "
            "print(sorted(m for m in sys.modules if m.startswith(('engine.evaluators', 'engine.client', "
            "'engine.agent.tools'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
