"""Agents: multi-turn tool use with tool results declared in YAML.

What is here (the suite loader compiles tools and the agent block, engine/run/conversation.py runs
each agent job through `run_conversation`, engine/results/rows.py stores the transcript)::

    loop.py           run_conversation(call_model, messages, tools, AgentSettings) -> Transcript
    context.py        ContextBudget: what of a long conversation is sent back to the model
    model_caller.py   EndpointCaller: the loop's model on a real endpoint via engine.client.client
    golden.py         GoldenCaller / replay_golden: a reference conversation played back
    stored.py         transcript_of_row: a stored results row back into a Transcript (`engine rescore`)

What the loop works with lives below, in engine.model: a declared tool's `Tool.answer(arguments, state)`
(model/tools.py, compiled by engine.suite.tools), `AgentSettings` and `GoldenTurn` (model/agent.py,
compiled by engine.suite.agent) and the `Transcript` (model/transcript.py), which the evaluators and the
results rows read too. Layering: agent imports client, results.rows (is_fallback), model, errors and suite;
run imports agent; nothing here imports run or cli. Import each name from the module that defines it.
The YAML form, the columns a conversation fills and the trajectory evaluators are in docs/agents.md.
"""
