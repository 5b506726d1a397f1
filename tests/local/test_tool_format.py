"""The engine's chat format for small tool-calling models (engine/local/tool_format.py), without a model: the
prompt it renders. Its grammar steps run against the real model in test_tool_models.py (local_model)."""

from __future__ import annotations

from engine.local.tool_format import DEFAULT_SYSTEM, END, render_prompt

TOOL = {"type": "function", "function": {"name": "find_slots", "description": "Free tables.",
                                         "parameters": {"type": "object", "properties": {"day": {"type": "string"}}}}}


def test_the_tools_are_listed_even_without_a_system_message() -> None:
    prompt = render_prompt([{"role": "user", "content": "Tables on friday?"}], [TOOL])
    assert prompt.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}")
    assert 'functions.find_slots: Free tables.\n  arguments (JSON Schema): {"type": "object"' in prompt
    assert prompt.endswith(f"<|im_start|>user\nTables on friday?{END}\n<|im_start|>assistant\n")


def test_calls_and_their_results_are_rendered_for_the_next_turn() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tables on friday?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "find_slots", "arguments": '{"day": "friday"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"free": ["19:00"]}'},
        {"role": "assistant", "content": "19:00 is free."},
    ]
    prompt = render_prompt(messages, [TOOL])
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\nYou can call these functions:")
    assert prompt.count("<|im_start|>system") == 1
    assert f'<|im_start|>assistant\nfunctions.find_slots:\n{{"day": "friday"}}{END}' in prompt
    assert f'<|im_start|>tool\n{{"free": ["19:00"]}}{END}' in prompt          # the model reads the result
    assert f"<|im_start|>assistant\nmessage:\n19:00 is free.{END}" in prompt
