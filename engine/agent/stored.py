"""A stored agent row back into a `Transcript`, so `engine rescore` scores trajectories as the run did.

The row's `transcript`, `ledger` and `tool_events` columns are `Transcript.records()`,
`ledger_records()` and `tool_event_records()`; this is their inverse (tool-call arguments come back
from the raw text, decoded as the client decodes them). A single-turn row gives None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from engine.model.answer import ToolCall
from engine.model.transcript import LedgerEntry, Message, ToolEvent, Transcript

__all__ = ["transcript_of_row"]

_LEDGER_KEYS = tuple(f.name for f in fields(LedgerEntry))
_EVENT_KEYS = tuple(f.name for f in fields(ToolEvent) if f.name != "arguments")


def transcript_of_row(row: Mapping[str, Any]) -> Transcript | None:
    """The conversation a results row recorded, or None for a single-turn row."""
    records = row.get("transcript")
    if records is None or row.get("outcome") is None:
        return None
    messages = tuple(
        Message(role=str(r["role"]), content=r.get("content"), reasoning=r.get("reasoning"),
                tool_call_id=r.get("tool_call_id"), turn=int(r.get("turn") or 0),
                tool_calls=tuple(ToolCall.from_raw(str(c.get("name") or ""), c.get("arguments") or "",
                                                   id=c.get("id")) for c in r.get("tool_calls") or ()))
        for r in records)
    ledger = tuple(LedgerEntry(**{key: entry.get(key) for key in _LEDGER_KEYS if key in entry})
                   for entry in row.get("ledger") or ())
    events = []
    for event in row.get("tool_events") or ():
        call = ToolCall.from_raw(str(event.get("name") or ""), event.get("raw_arguments") or "")
        events.append(ToolEvent(**{key: event.get(key) for key in _EVENT_KEYS}, arguments=call.arguments))
    state = json.loads(row["state"]) if row.get("state") else {}
    error = row.get("error_message") if row.get("outcome") == "error" else None
    return Transcript(messages, ledger, tuple(events), row["outcome"], state, error, float(row.get("latency_s") or 0))
