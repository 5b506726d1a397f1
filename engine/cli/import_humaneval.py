"""Placeholder: commands are added here."""

from __future__ import annotations

from engine.cli.app import app, import_app  # noqa: F401
