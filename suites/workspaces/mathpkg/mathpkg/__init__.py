"""A tiny statistics package."""

from mathpkg.stats import mean, median

__all__ = ["mean", "median"]
