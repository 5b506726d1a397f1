"""Suite files: YAML loading with positions, schema validation, meaning checks, expansion into Tests.

Public API: `load_suites(paths, golden_check=False)` and `load_models(path)`; both return their
results with a list of `Diagnostic` (FILE:LINE:COL: error: ...) instead of raising.
"""

from __future__ import annotations

from engine.suite.loader import load_suites
from engine.suite.models_file import load_models

__all__ = ["load_models", "load_suites"]
