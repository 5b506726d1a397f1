"""The source of schemas/suite.schema.json and schemas/models.schema.json, written as Python: the suite schema
here, the models file's in engine.suite.models_schema, the `mcp:` block both declare in engine.suite.mcp_schema.

Why Python: the evaluator catalogue repeats one pattern (a kind key, its options, the common options)
for every kind; each kind's fragment lives in its registry entry (engine.evaluators.registry.KINDS) and is
assembled here, so every kind stays consistent. `python -m engine.suite.schema_source` rewrites the JSON
files; a test fails when the files and this source disagree.

Every evaluator kind is a `$defs/eval_<kind>` branch. `$defs/evaluator` dispatches with
`dependentSchemas: {<kind>: {$ref: ...}}`, so a validator reports what is wrong *inside*
the branch the author picked, never "not valid under any of the given schemas". Each branch has a
`title` ("contains evaluator"), which the error mapper uses to name the evaluator.
"""

from __future__ import annotations

import json
from typing import Any

from engine.base.limits import INT64_MAX, MAX_REPEAT
from engine.evaluators import KINDS
from engine.evaluators.base import COMMON_OPTIONS
from engine.suite.conversation import API_NAME_PATTERN
from engine.suite.mcp_schema import MCP, MCP_SERVER
from engine.suite.models_schema import DIALECT, MAX_TOKENS, MODELS_SCHEMA, NAME_PATTERN, TEMPERATURE
from engine.suite.schema import SCHEMA_DIR
from engine.workspace.spec import BUILTIN_NAMES


def _evaluator_defs() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    for kind, entry in KINDS.items():
        value = dict(entry.value)
        value.setdefault("description", entry.description)
        defs[f"eval_{kind}"] = {
            "title": f"{kind} evaluator", "description": entry.description, "type": "object",
            "additionalProperties": False, "required": [kind],
            "properties": {kind: value, **entry.options, **COMMON_OPTIONS}, "examples": list(entry.examples)}
    defs["evaluator"] = {
        "title": "evaluator",
        "description": "A check on the answer: a one-key mapping whose key is its kind "
                       "(`contains: Paris`), with options beside it (`weight`, `threshold`, `name`, `must`).",
        "type": "object",
        "minProperties": 1,
        # One branch per kind, chosen by the key (dependentSchemas costs one lookup per kind, where
        # if/then costs a subschema evaluation each). "Has a kind" is: not (no key is a kind); the
        # error mapper turns its failure into "unknown evaluator 'x' — did you mean ...".
        "not": {"propertyNames": {"not": {"enum": list(KINDS)}}},
        "dependentSchemas": {kind: {"$ref": f"#/$defs/eval_{kind}"} for kind in KINDS},
        "examples": [{"contains": "Paris"}, {"all": [{"regex": "^\\w+$"}, {"equals": "{{ golden }}"}]}],
    }
    defs["tool_args"] = {
        "type": "object", "description": "Argument name -> list of accepted values; \"\" = may be left out.",
        "additionalProperties": {"type": "array", "description": "Accepted values for this argument; [] accepts "
                                 "none (as BFCL reads it: no call can then match)."},
        "examples": [{"city": ["Paris"], "unit": ["c", ""]}]}
    return defs


_TEMPLATE = "May use {{ variables }} from `cases`."
_MESSAGES = {
    "type": "array", "minItems": 1, "description": "A conversation to send, turn by turn (instead of `prompt`); it "
    "may start mid-way: assistant turns with `tool_calls` and `tool` turns with their results, in OpenAI's shape.",
    "items": {"type": "object", "title": "message", "additionalProperties": False, "required": ["role"],
              "properties": {
                  "role": {"enum": ["system", "user", "assistant", "tool"], "description": "Who speaks this turn."},
                  "content": {"oneOf": [{"type": "string"}, {"$ref": "#/$defs/content_parts"}, {"type": "null"}],
                              "description": "What is said: text, or a list of text and image parts (null: an "
                                             f"assistant turn that only calls tools). {_TEMPLATE}"},
                  "tool_calls": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/message_tool_call"},
                                 "description": "An assistant turn's calls of the test's tools."},
                  "tool_call_id": {"type": "string", "minLength": 1,
                                   "description": "A `tool` turn: the id of the call it answers."}}},
    "examples": [[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "What did I say?"}],
                 [{"role": "user", "content": "Book a table for two"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_1", "type": "function",
                       "function": {"name": "find_slots", "arguments": {"party": 2}}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "{\"slots\": [\"19:00\"]}"}]]}
_MESSAGE_TOOL_CALL = {
    "title": "tool call", "type": "object", "additionalProperties": False, "required": ["id", "function"],
    "description": "One call in an assistant turn, as OpenAI writes it.",
    "properties": {
        "id": {"type": "string", "minLength": 1, "description": "The call's id; a later `tool` turn answers it."},
        "type": {"const": "function", "description": "Always `function` (may be left out)."},
        "function": {"type": "object", "title": "called function", "additionalProperties": False,
                     "description": "The tool called and its arguments.", "required": ["name"], "properties": {
                         "name": {"type": "string", "minLength": 1, "description": "A tool of the test (its key "
                                  "under `tools:`)."},
                         "arguments": {"type": ["string", "object"], "description": "The arguments: a mapping "
                                       "(sent as its JSON text) or the JSON text itself (default {})."}}}},
    "examples": [{"id": "call_1", "type": "function", "function": {"name": "find_slots",
                                                                   "arguments": {"party": 2}}}]}
_TOOL_CHOICE = {
    "type": ["string", "object"], "title": "tool choice", "minLength": 1, "additionalProperties": False,
    "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1,
                                                  "description": "The one tool the model must call."}},
    "description": "Whether the model may call the offered tools: `auto` (it decides), `required` (it must call "
                   "one), `none` (it must not), or one tool it must call, by name (`find_slots` or "
                   "`{name: find_slots}`). Only sent with tools; default: the server's (auto).",
    "examples": ["required", "find_slots", {"name": "find_slots"}]}
_RUN_SETTINGS = {
    "system": {"type": "string", "description": f"System instructions sent before the prompt. {_TEMPLATE}",
               "examples": ["Answer with one word."]},
    "max_tokens": MAX_TOKENS,
    "temperature": TEMPERATURE,
    "threshold": {"type": "number", "minimum": 0, "maximum": 1,
                  "description": "Score (0..1) a test needs to pass (default 1.0).", "examples": [1.0, 0.5]},
    "repeat": {"type": "integer", "minimum": 1, "maximum": MAX_REPEAT,
               "description": "How many times to ask each model (default 1)."},
    "eval": {"$ref": "#/$defs/evaluator", "description": "How the answer is scored."},
    "agent": {"$ref": "#/$defs/agent"},
    "tool_choice": {"$ref": "#/$defs/tool_choice"},
}
MAX_TURNS = 1000
_AGENT = {
    "type": "object", "title": "agent block", "additionalProperties": False,
    "description": "Run this test as a conversation: the model calls tools, reads their declared `returns`, "
                   "and calls again until it answers. In `defaults`, each key is a default for the tests' own.",
    "properties": {
        "max_turns": {"type": "integer", "minimum": 1, "maximum": MAX_TURNS,
                      "description": "Model calls at most (default 8); still calling tools after that is `capped`."},
        "max_repeats": {"type": "integer", "minimum": 0, "maximum": MAX_TURNS,
                        "description": "How often the same call (name and arguments) may repeat (default 2); one "
                                       "more ends the conversation as `stuck`."},
        "max_prose_turns": {"type": "integer", "minimum": 1, "maximum": MAX_TURNS,
                            "description": "With a workspace's `finish` tool offered: replies without a tool call "
                                           "in a row that end the conversation as `stuck` (default 3)."},
        "state": {"type": "object", "description": "The state variables at the start; tools' `set:` changes "
                  "them, the `state` evaluator checks them at the end.", "examples": [{"booked": False}]},
    },
    "examples": [{"max_turns": 4}, {"max_turns": 6, "state": {"booked": False}}],
}
_TAGS = {"type": "array", "items": {"type": "string"}, "description": "Labels for filtering and reports.",
         "examples": [["knowledge", "geography"]]}
_TOOL_NAMES = {"type": "array", "items": {"type": ["string", "object"], "title": "tool name",
                                          "required": ["builtin"], "additionalProperties": False, "properties": {
                                              "builtin": {"enum": list(BUILTIN_NAMES),
                                                          "description": "The built-in tool to offer."},
                                              "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.-]*$",
                                                       "description": "The name the model sees."}},
                                          "description": "A declared tool's name, a built-in tool's name, or a "
                                                         "renamed built-in tool."},
               "description": "Names of tools from the suite's `tools:` section offered to the model; a workspace "
               "test may also name built-in tools (run_command, read_file, write_file, list_files, ask_human, "
               "finish), or rename one: {builtin: run_command, name: shell}.",
               "examples": [["get_weather"], ["run_command", "read_file"]]}
_WORKSPACE = {
    "type": ["string", "object"], "title": "workspace", "additionalProperties": False,
    "description": "A workspace test: this folder (relative to the suite file) or these inline `files` are copied "
                   "into a fresh folder for every attempt; `setup` runs there in the sandbox before the model "
                   "starts. docs/agents.md, section 8.",
    "properties": {
        "folder": {"type": "string", "minLength": 1, "description": "The seed folder, relative to the suite file."},
        "files": {"type": "object", "additionalProperties": {"type": "string"},
                  "description": "Relative path -> text, written over the folder's copy."},
        "setup": {"type": "string", "minLength": 1, "description": "A shell command run before the model starts "
                  "(its failure is an error row)."},
        "network": {"type": "boolean", "description": "Let commands, setup and checks use the network (default "
                    "false)."},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600,
                      "description": "Wall-clock limit of each command (default 30)."},
        "memory_mb": {"type": "integer", "minimum": 16, "description": "Memory limit of each command (default "
                      "1024)."},
        "root": {"type": "string", "pattern": "^/", "description": "The absolute path the task sees its workspace "
                 "at (commands and the hidden check), e.g. /app; needs bubblewrap.", "examples": ["/app"]},
        "time_limit_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400,
                         "description": "Wall-clock limit of the whole task, conversation and commands; past it "
                                        "the conversation ends as capped."},
    },
    "examples": ["workspaces/greet", {"folder": "workspaces/greet", "setup": "python3 -m pip --version"}],
}

# One closed mapping (not a oneOf per form), so a misspelt key is named as such; cases_from.py checks that
# exactly one of `file` and `dataset` is given.
_CASES_FROM = {
    "title": "cases_from", "description": "Table-driven test from data: one test per row of a CSV, TSV, JSON Lines, "
    "JSON or Parquet file (or a folder of them) beside the suite, or of a Hugging Face dataset; columns are "
    "template variables (`golden` sets the row's golden). Text: the file or folder.",
    "type": ["string", "object"], "minLength": 1, "additionalProperties": False,
    "properties": {
        "file": {"type": "string", "minLength": 1, "description": "A file or folder, relative to the suite file."},
        "format": {"enum": ["csv", "tsv", "jsonl", "json", "parquet"],
                   "description": "The format, when the file's suffix does not say it."},
        "dataset": {"type": "string", "minLength": 1, "description": "A Hugging Face dataset (owner/name, from the "
                    "local cache), or a folder written by Dataset.save_to_disk (instead of `file`). Needs `pip "
                    "install '.[datasets]'`."},
        "split": {"type": "string", "description": "The dataset's split (default `test`, or its only one)."},
        "config": {"type": "string", "description": "The dataset's configuration (subset)."},
        "revision": {"type": "string", "description": "A branch, tag or commit of the dataset."},
        "columns": {"type": ["array", "object"], "minItems": 1, "minProperties": 1, "items": {"type": "string"},
                    "additionalProperties": {"type": "string"},
                    "description": "Which columns become variables: a list picks them; a mapping variable: column "
                                   "picks and renames. Default: every column, as named.",
                    "examples": [["question", "golden"], {"question": "Question", "golden": "Answer"}]},
        "json": {"type": "array", "items": {"type": "string"}, "description": "Variables whose cells hold JSON "
                 "text, decoded (CSV/TSV). Default: a `golden` cell that is a JSON object or array is decoded."},
        "filter": {"type": "string", "minLength": 1, "description": "A Jinja expression over the file's columns; "
                   "rows where it is false are left out.", "examples": ["level == 'hard'"]},
        "limit": {"type": "integer", "minimum": 1, "description": "Only the first N rows (after `filter`)."},
        "sample": {"type": "object", "additionalProperties": False, "required": ["n"],
                   "description": "N rows at random (reservoir sampling), kept in file order; after `filter` "
                                  "and `limit`.",
                   "properties": {"n": {"type": "integer", "minimum": 1, "description": "How many rows."},
                                  "seed": {"type": "integer", "minimum": 0, "maximum": INT64_MAX,
                                           "description": "The random seed (default 0): same seed, same rows."}},
                   "examples": [{"n": 50, "seed": 1}]},
    },
    "examples": ["cases.csv", {"file": "cases.jsonl", "filter": "level == 'hard'", "sample": {"n": 20, "seed": 1}},
                 {"dataset": "openai/gsm8k", "config": "main", "split": "test", "limit": 100}],
}

_TEST = {
    "title": "test", "type": "object", "additionalProperties": False, "required": ["id"],
    "description": "One test: what to send and how to score the answer.",
    "oneOf": [{"required": ["prompt"]}, {"required": ["messages"]}],
    "properties": {
        "id": {"type": "string", "minLength": 1, "description": "Unique within the suite. With `cases`, a "
               "template such as `add-{{ a }}-{{ b }}`.", "examples": ["capital-france"]},
        "description": {"type": "string", "description": "What this test is about (for people)."},
        "prompt": {"type": "string", "description": f"The user message. {_TEMPLATE}",
                   "examples": ["What is the capital of France?"]},
        "messages": _MESSAGES,
        "tools": _TOOL_NAMES,
        "workspace": _WORKSPACE,
        "mcp": MCP,
        "golden": {"description": "The reference answer as the model would give it: text, a JSON value, or "
                   "{tool_calls: [{name, arguments}], content} for tool tests; for an `agent:` test, the model's "
                   "turns (a list of {tool_calls: [...]} ending with the answer text). Checked against `eval` by "
                   "`engine validate`.", "examples": ["Paris", {"name": "Alice", "age": 30}]},
        "tags": _TAGS,
        "cases": {"type": "array", "minItems": 1, "description": "Table-driven test: one test per row; a row's "
                  "keys are template variables (`golden` sets that row's golden).",
                  "items": {"type": "object", "title": "case row", "description": "Variable name -> value."},
                  "examples": [[{"a": 2, "b": 3, "golden": 5}]]},
        "cases_from": _CASES_FROM,
        **_RUN_SETTINGS,
    },
}

_TOOL = {
    "title": "tool", "type": "object", "additionalProperties": False, "required": ["parameters"],
    "description": "An OpenAI function definition (the name is the key above).",
    "properties": {
        "name": {"type": "string", "pattern": API_NAME_PATTERN, "description": "The name sent to the API and "
                 "called by the model, when the key above is one the API refuses (it allows letters, digits, _ "
                 "and -, at most 64); the suite names the tool by its key everywhere.",
                 "examples": ["calendar_find"]},
        "description": {"type": "string", "description": "What the function does (the model reads this)."},
        "parameters": {"type": "object", "description": "JSON Schema of the arguments.",
                       "examples": [{"type": "object", "properties": {"city": {"type": "string"}},
                                     "required": ["city"]}]},
        "returns": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/tool_rule"},
                    "description": "What the tool answers in `agent:` tests: rules tried in order, the first whose "
                                   "`when` accepts the call answers; a rule without `when` is the default."},
    },
}

_TOOL_RULE = {
    "title": "tool result rule", "type": "object", "additionalProperties": False,
    "description": "One answer of a tool: `result` (it succeeds) or `error` (it fails), for the calls `when` "
                   "accepts.",
    "properties": {
        "when": {"$ref": "#/$defs/tool_args", "description": "Argument -> accepted values (as `tool_call` args); "
                 "leave out for the default rule."},
        "result": {"description": "What the tool returns: any value, or text with {{ argument }} templates."},
        "error": {"type": "string", "minLength": 1, "description": "The error message of a failing call (may use "
                  "{{ argument }} templates)."},
        "delay_s": {"type": "number", "minimum": 0, "maximum": 300,
                    "description": "Seconds the tool takes to answer (a slow tool)."},
        "set": {"type": "object", "minProperties": 1, "description": "State variables this call changes.",
                "examples": [{"booked": True}]},
    },
    "examples": [{"when": {"city": ["Paris"]}, "result": {"temp_c": 18}}, {"error": "unknown city"}],
}

_CONTENT_PARTS = {
    "type": "array", "minItems": 1, "title": "content parts",
    "description": "Text and images in one message (images in user messages; not in `agent:` tests).",
    "items": {"type": "object", "title": "content part", "additionalProperties": False,
              "oneOf": [{"required": ["text"], "not": {"required": ["detail"]}}, {"required": ["image"]}],
              "properties": {
                  "text": {"type": "string", "description": f"Text. {_TEMPLATE}"},
                  "image": {"type": "string", "minLength": 1, "description": "An image file, relative to the "
                            "suite file (PNG, JPEG, GIF or WEBP, at most 20 MB; sent as a base64 data URL), or an "
                            f"http(s) URL. {_TEMPLATE}", "examples": ["scans/invoice-17.png"]},
                  "detail": {"enum": ["low", "high", "auto"], "description": "The image detail asked for."}}},
    "examples": [[{"text": "What is the total?"}, {"image": "scans/invoice-17.png", "detail": "high"}]]}
_VARIANT = {
    "title": "variant", "type": "object", "additionalProperties": False, "minProperties": 1,
    "description": "One way to ask: a system prompt replacing the tests' own, and/or a template around the "
                   "last user message (`{{ prompt }}` is that message's text; case variables work too).",
    "properties": {
        "system": {"type": "string", "description": "System instructions for every test under this variant.",
                   "examples": ["Answer in one word."]},
        "prompt": {"type": "string", "description": "The last user message, rewritten: must use {{ prompt }}.",
                   "examples": ["Think step by step. {{ prompt }}"]},
    },
}
SUITE_SCHEMA: dict[str, Any] = {
    "$schema": DIALECT,
    "$id": "https://llm-eval-engine.local/schemas/suite.schema.json",
    "title": "suite",
    "description": "An evaluation suite: tests, how to score them, and shared tools and evaluators.",
    "type": "object", "additionalProperties": False, "required": ["suite", "tests"],
    "properties": {
        "suite": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$", "description": "The suite id, "
                  "unique across the suites loaded together (letters, digits, _ . -).", "examples": ["capitals"]},
        "description": {"type": "string", "description": "What the suite measures (for people)."},
        "tags": _TAGS,
        "defaults": {"type": "object", "title": "the defaults", "additionalProperties": False,
                     "description": "Settings applied to every test that does not set them itself.",
                     "properties": {**_RUN_SETTINGS, "tools": _TOOL_NAMES, "tags": _TAGS}},
        "tools": {"type": "object", "description": "Functions the model may call, named once, offered by name.",
                  "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"},
                  "additionalProperties": {"$ref": "#/$defs/tool"}},
        "evaluators": {"type": "object", "description": "Named evaluators, reused with `{use: name}`.",
                       "propertyNames": {"pattern": NAME_PATTERN},
                       "additionalProperties": {"$ref": "#/$defs/evaluator"}},
        "tests": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/test"},
                  "description": "The tests, in order."},
        "judge_prompt": {"description": "Replaces the shipped judge prompt for this suite's `judge` evaluators: "
                         "{system, user} templates over rubric, prompt, answer, reference, scale_text, or a file "
                         "in the suite's folder (see docs/evaluators.md).",
                         "oneOf": [{"type": "string", "minLength": 1},
                                   {"type": "object", "additionalProperties": False, "required": ["user"],
                                    "properties": {"system": {"type": "string", "description": "The system message."},
                                                   "user": {"type": "string", "description": "The user "
                                                            "message (must show {{ answer }})."}}}]},
        "mcp": MCP,
        "variants": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": NAME_PATTERN},
                     "additionalProperties": {"$ref": "#/$defs/variant"},
                     "description": "Named prompt variants: every test runs under each (a matrix with the models); "
                                    "results carry the name in their `variant` column.",
                     "examples": [{"terse": {"system": "Answer in one word."},
                                   "cot": {"prompt": "Think step by step. {{ prompt }}"}}]},
    },
    "$defs": {"test": _TEST, "tool": _TOOL, "tool_rule": _TOOL_RULE, "agent": _AGENT, "mcp_server": MCP_SERVER,
              **_evaluator_defs(),
              "message_tool_call": _MESSAGE_TOOL_CALL, "tool_choice": _TOOL_CHOICE,
              "content_parts": _CONTENT_PARTS, "variant": _VARIANT},
}


def dump(schema: dict[str, Any]) -> str:
    """The schema as the JSON text stored in schemas/."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    """Rewrite schemas/suite.schema.json and schemas/models.schema.json from this source."""
    SCHEMA_DIR.mkdir(exist_ok=True)
    (SCHEMA_DIR / "suite.schema.json").write_text(dump(SUITE_SCHEMA), encoding="utf-8")
    (SCHEMA_DIR / "models.schema.json").write_text(dump(MODELS_SCHEMA), encoding="utf-8")


if __name__ == "__main__":
    main()
