"""The declared tools, as the agent loop uses them; their one home is `engine.suite.tools`.

The suite loader compiles a suite's tools once at load, and the suite layer sits below this one, so
the code lives there; this module keeps the names where the agent package offers them.
"""

from __future__ import annotations

from engine.suite.tools import (
    MAX_DELAY_S,
    Path,
    Problem,
    Rule,
    Tool,
    ToolAnswer,
    compile_tool,
    compile_tools,
    error_text,
    result_text,
)

__all__ = ["MAX_DELAY_S", "Path", "Problem", "Rule", "Tool", "ToolAnswer", "compile_tool", "compile_tools",
           "error_text", "result_text"]
