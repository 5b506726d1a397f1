"""Per-model agent figures: turns, tool calls, invented tools, bad arguments, how conversations ended.

Read from the agent columns of the results (engine/model/transcript.py `Transcript.counts()`):
`turns`, `prose_turns`, `tool_calls_made`, `invented_tools`, `bad_tool_args` and `outcome`. A single-turn
run has none of them (or has them all null, once the schema declares them): `per_model_agents` is then
None and nothing is shown. Only rows that are conversations count (non-null `turns`); error rows count
too, because `outcome` says how they ended. The figures are plain means and counts over conversations,
with no interval: they describe what the models did, they do not compare them (docs/analysis.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["AGENT_COLUMNS", "OUTCOMES", "per_model_agents"]

#: The count columns the figures read (the transcript and ledger columns are for the report's drill-down).
AGENT_COLUMNS: tuple[str, ...] = ("turns", "prose_turns", "tool_calls_made", "invented_tools", "bad_tool_args",
                                  "outcome")
#: How a conversation ends, in the order the table shows them.
OUTCOMES: tuple[str, ...] = ("completed", "escalated", "capped", "stuck", "failed", "error")


def per_model_agents(df: pd.DataFrame) -> pd.DataFrame | None:
    """One row per model that ran agent tests, or None when the results hold no conversation.

    Args:
        df: Results rows (from `load`); the agent columns may be absent.

    Returns:
        Columns: model, conversations, mean_turns, mean_prose_turns, mean_tool_calls, invented_tools (total),
        invented_rate (share of conversations with at least one invented tool), bad_tool_args (total),
        bad_args_rate (share with at least one), then one count per outcome (completed, escalated, capped,
        stuck, failed, error: `OUTCOMES`) and `other_outcome` for a value this version does not know. Models in
        name order.
    """
    import pandas as pd

    if "turns" not in df.columns or "model" not in df.columns:
        return None
    rows = df[df["turns"].notna()]
    if rows.empty:
        return None
    out = []
    for model, group in rows.groupby("model", sort=True):
        def column(name: str, frame: pd.DataFrame = group) -> pd.Series:
            if name not in frame.columns:
                return pd.Series([float("nan")] * len(frame), index=frame.index, dtype="float64")
            return pd.to_numeric(frame[name], errors="coerce")

        invented, bad = column("invented_tools"), column("bad_tool_args")
        outcome = group["outcome"].astype("object") if "outcome" in group.columns else pd.Series(dtype="object")
        record: dict[str, object] = {
            "model": str(model), "conversations": len(group),
            "mean_turns": float(column("turns").mean()),
            "mean_prose_turns": float(column("prose_turns").mean()),
            "mean_tool_calls": float(column("tool_calls_made").mean()),
            "invented_tools": int(invented.fillna(0).sum()), "invented_rate": float((invented > 0).mean()),
            "bad_tool_args": int(bad.fillna(0).sum()), "bad_args_rate": float((bad > 0).mean()),
        }
        ends = {name: int((outcome == name).sum()) for name in OUTCOMES}
        record.update(ends)
        record["other_outcome"] = len(group) - sum(ends.values())
        out.append(record)
    return pd.DataFrame(out)
