"""Workspace tasks: an agent with a shell and files in the sandbox, judged by a hidden check.

    spec.py       the `workspace:` block and the `tools:` entries naming built-in tools, compiled at load
                  (the built-in tools' definitions: schemas/workspace-tools.json)
    workspace.py  Workspace: one attempt's fresh copy of the seed, `setup`, commands in the exec sandbox
                  (engine.harness.oneshot.run_in), paths kept inside, the final file list and diff
    check.py      HiddenCheck and run_check: a hidden check under the engine's wrapper (check_runner.py) and
                  start-up (check_startup.py), its verdict read from the wrapper's end and pytest's JUnit report
    tools.py      BuiltinTool: run_command, read_file, write_file, list_files, ask_human, finish, bound to
                  a Workspace, with the face of a declared tool so engine.agent's loop answers them

Layering: below engine.evaluators (the `workspace_check` evaluator runs its check through a Workspace)
and engine.suite (the loader compiles the block), above engine.harness.
"""
