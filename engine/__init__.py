"""A declarative, data-driven LLM evaluation engine.

Suites are YAML (validated against schemas/), calls go to any OpenAI-compatible endpoint, results
land in Parquet, and `engine.analysis` tells which tests discriminate between models.
"""

from __future__ import annotations

from engine.errors import Diagnostic, EngineError, SuiteError
from engine.model.answer import Answer, ToolCall
from engine.model.model_config import ModelConfig
from engine.model.test import Suite, Test
from engine.model.verdict import Verdict

__version__ = "0.1.0"

__all__ = [
    "Answer", "Diagnostic", "EngineError", "ModelConfig", "Suite", "SuiteError", "Test", "ToolCall",
    "Verdict", "__version__",
]
