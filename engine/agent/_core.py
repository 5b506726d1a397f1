"""The helpers this package borrows from modules the evaluator-core rewrite may move.

Every import of `engine.base.render` and `engine.evaluators.tool_match` by `engine.agent` goes
through here, so when those modules move, the fix is one line in this file.
"""

from __future__ import annotations

from engine.base.render import ENV, TemplateSyntaxError, UndefinedError, is_template, render_value
from engine.evaluators.tool_match import plain, strict_equal

__all__ = ["ENV", "TemplateSyntaxError", "UndefinedError", "is_template", "plain", "render_value", "strict_equal"]
