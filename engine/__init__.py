"""A declarative, data-driven LLM evaluation engine.

Suites are YAML (validated against schemas/), calls go to any OpenAI-compatible endpoint, results
land in Parquet, and `engine.analysis` tells which tests discriminate between models.
"""

from __future__ import annotations

from engine.errors import Diagnostic, EngineError, SuiteError
from engine.model import Answer, ModelConfig, Suite, Test, ToolCall, Verdict

__version__ = "0.1.0"

__all__ = [
    "Answer", "Diagnostic", "EngineError", "ModelConfig", "Suite", "SuiteError", "Test", "ToolCall",
    "Verdict", "__version__",
]
