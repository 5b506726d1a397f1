"""Helpers every layer may import and that import nothing of the engine: the one Jinja2 environment
(`render`) and JSON text as `json.dumps` writes it (`jsontext`). See docs/architecture.md."""
