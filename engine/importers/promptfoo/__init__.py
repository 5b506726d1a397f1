"""A promptfoo config -> YAML suites, a models file, and the python scorers its python asserts need.

promptfoo runs every prompt against every test (a test is `vars` + `assert`s) on every provider. Here each
prompt becomes one suite whose tests are the config's tests, each asking what promptfoo would send for it, each
provider an OpenAI-compatible models file entry, and each assert the evaluator whose verdict is promptfoo's.

Nothing passes by omission: an assert that is not carried over leaves a `not_carried` placeholder in its test
(an error verdict until the user replaces it), a test without asserts is written `eval: {none: true}`
(recorded, unscored), and a test whose prompt cannot be rendered as promptfoo would is left out. Each is a
`Note` at its file and line, printed by the CLI and listed at the top of the suite. Every failure is a
`ConfigError` naming the place and the fix. A literal `apiKey` is never copied.

The modules, in the order the import uses them:

- `files`: every file the config names, read inside its folder (unless allowed), capped, YAML bounded.
- `config`: the config itself ($refs followed), its prompts and providers, and the notes.
- `testcases`: its tests, from the config, files, globs and scenarios, with defaultTest and vars files.
- `render`: each prompt rendered as promptfoo's renderPrompt renders it (Nunjucks, chat JSON, images).
- `asserts`: the assertion table, each assert the evaluator whose verdict is promptfoo's; `python`: python
  asserts as python scorer modules; `js`: JavaScript's values as promptfoo prints them.
- `suites`: the suites, models file, scorers and images written.
"""

from __future__ import annotations

from engine.importers.promptfoo.config import Note
from engine.importers.promptfoo.suites import Imported, import_promptfoo

__all__ = ["Imported", "Note", "import_promptfoo"]
