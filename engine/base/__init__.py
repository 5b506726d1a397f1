"""Helpers every layer may import and that import nothing of the engine outside this package: the one YAML
loader (`yaml`) and the `Diagnostic` it reports, the one Jinja2 environment (`render`), JSON text as
`json.dumps` writes it (`jsontext`), message words (`words`), the bounds on numbers a
suite or the command line may give (`limits`). See docs/architecture.md."""
