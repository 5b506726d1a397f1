"""`engine import promptfoo` carries a provider's `config.mcp` into its models.yaml entry's `mcp:`; a header's value
is never copied (an environment variable is named instead), and the suites' tests run as conversations."""

from __future__ import annotations

from pathlib import Path

from engine.importers.promptfoo import import_promptfoo
from engine.suite import load_models, load_suites

CONFIG = """\
prompts: ["What time is it in {{ city }}?"]
providers:
  - id: openai:chat:gpt-4o-mini
    config:
      mcp:
        enabled: true
        timeout: 20000
        server: {command: mcp-server-time, args: [--local-timezone, UTC], name: clock}
  - id: openai:chat:gpt-4o
    config:
      mcp:
        enabled: true
        servers:
          - {url: "https://crm.example/mcp", name: crm, headers: {Authorization: "Bearer sk-crm-secret-123"}}
          - {command: npx, args: [-y, "@modelcontextprotocol/server-memory"], env: {MEMORY_API_KEY: s3cret, MODE: fast}}
  - id: openai:chat:gpt-4.1
    config: {mcp: {enabled: false, server: {command: never}}}
tests:
  - vars: {city: Tokyo}
    assert: [{type: contains, value: ":"}]
"""


def test_mcp_blocks_become_the_models_mcp_and_no_secret_is_written(tmp_path: Path) -> None:
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    imported = import_promptfoo(config, tmp_path / "out")
    assert imported.models is not None
    models, problems = load_models(imported.models)
    assert [str(p) for p in problems] == []
    (clock,) = models["openai-chat-gpt-4o-mini"].mcp
    assert (clock.name, clock.command, clock.timeout_s) == ("clock", ("mcp-server-time", "--local-timezone", "UTC"),
                                                            20.0)
    crm, memory = models["openai-chat-gpt-4o"].mcp
    assert crm.url == "https://crm.example/mcp" and crm.headers_env == {"Authorization": "CRM_AUTHORIZATION"}
    assert memory.command[0] == "npx" and memory.env == {"MODE": "fast"}
    assert models["openai-chat-gpt-4.1"].mcp == ()
    notes = "\n".join(str(n) for n in imported.notes)
    assert "export CRM_AUTHORIZATION=" in notes and "env MEMORY_API_KEY not copied" in notes
    assert "`mcp` is not enabled" in notes
    written = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "out").iterdir() if p.is_file())
    assert "sk-crm-secret" not in written and "s3cret" not in written
    suites, diagnostics = load_suites(imported.suites)
    assert [str(d) for d in diagnostics if d.severity == "error"] == []
    assert all(test.agent is not None for suite in suites for test in suite.tests)
