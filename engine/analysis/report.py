"""`engine report`: one self-contained HTML file (inline CSS, JS and SVG; opens offline).

The page holds the analysis as JSON in a <script type="application/json"> block; a small inline script
draws every section `engine analyze` prints (models with CIs and the paired comparisons, agents, prompt
variants, the judges, pass@k, the per-test lists, suite health) and what only a page can show: the tests ×
models heatmap, the discrimination-vs-difficulty scatter and the per-test drill-down (with the workspace diff
of a workspace test). `report.html#test=SUITE/TEST_ID` opens the drill-down on that test. Every text from the
results reaches the page through `textContent`, never as HTML, so a prompt or an answer cannot inject markup.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.cells import DEFAULT_CLUSTER, build_cells
from engine.analysis.fold import fold_passk
from engine.analysis.items import DEFAULT_ALPHA, DEFAULT_CORRECTION
from engine.analysis.report_assets import CSS, JS
from engine.analysis.summary import analyze, json_safe, summary_lines
from engine.judge.trust import judge_report

if TYPE_CHECKING:
    import pandas as pd

MAX_HEATMAP_TESTS = 400
MAX_TEXT = 2000
#: Distinct system fingerprints listed per model (more are counted, not listed).
MAX_FINGERPRINTS = 5


def _clean(value: Any) -> Any:
    """JSON-safe scalars: numpy to Python, NaN to None."""
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict, str)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, tuple):
        return [_clean(v) for v in value]
    return value


def _clip(text: Any) -> str | None:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return None
    text = str(text)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"… [{len(text) - MAX_TEXT} more characters]"


def _evaluator_nodes(nodes: Any) -> list[dict[str, Any]]:
    if nodes is None or (isinstance(nodes, float) and math.isnan(nodes)):
        return []
    return [{k: _clean(node.get(k)) for k in ("path", "kind", "name", "score", "weight", "passed", "error", "reason")}
            for node in list(nodes)]


AGENT_COUNTS = ("outcome", "turns", "prose_turns", "tool_calls_made", "invented_tools", "bad_tool_args")


def _listed(value: Any) -> list[Any]:
    """A list column's cell as a Python list (Arrow gives numpy arrays; a null cell is [])."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return list(value)


def _transcript(messages: Any) -> list[dict[str, Any]]:
    """The `transcript` column of one row, trimmed for the drill-down: each message's role, turn, text,
    the calls an assistant turn made, and for a `tool` message the tool, its status and the result text
    (the page folds tool results so the conversation reads as the model's turns)."""
    out = []
    for message in _listed(messages):
        out.append({
            "turn": _clean(message.get("turn")), "role": _clean(message.get("role")),
            "content": _clip(message.get("content")),
            "tool_calls": [{"name": _clean(call.get("name")), "arguments": _clip(call.get("arguments"))}
                           for call in _listed(message.get("tool_calls"))],
            "tool_name": _clean(message.get("tool_name")), "tool_status": _clean(message.get("tool_status")),
        })
    return out


def _agent_counts(record: Any) -> dict[str, Any] | None:
    """The conversation's counts, outcome and final state (JSON text), or None for a single-turn row."""
    values = {name: _clean(record.get(name)) for name in AGENT_COUNTS}
    values["state"] = _clip(record.get("state"))
    diff = _clip(record.get("workspace_diff"))   # workspace tests only (docs/agents.md section 8)
    if diff is not None:
        values.update({"failed_commands": _clean(record.get("failed_commands")),
                       "refused_paths": _clean(record.get("refused_paths")), "workspace_diff": diff})
    return values if values["turns"] is not None else None


def _shown_tests(tests: pd.DataFrame, limit: int) -> np.ndarray:
    """Indices of the tests to draw: all when few, else evenly spaced over difficulty plus every flagged one."""
    order = np.argsort(tests["difficulty"].fillna(-1).to_numpy(), kind="stable")
    if len(order) <= limit:
        return order
    flagged = np.nonzero((tests["status"].isin(["floor", "saturated"]) | tests["flaky"]).to_numpy())[0]
    spaced = order[np.linspace(0, len(order) - 1, limit).astype(int)]
    chosen = np.unique(np.concatenate([spaced, flagged[: limit // 2]]))
    return chosen[np.argsort(tests["difficulty"].fillna(-1).to_numpy()[chosen], kind="stable")]


def _drilldown(df: pd.DataFrame, item_code: np.ndarray, model_code: np.ndarray, shown: np.ndarray,
               models: list[str]) -> dict[str, list[dict[str, Any]]]:
    """One representative attempt per (shown test, model): a failing one when there is, to show why."""
    import pandas as pd

    mask = np.isin(item_code, shown)
    if not mask.any():
        return {}
    sub = pd.DataFrame({
        "item": item_code[mask], "model": model_code[mask], "row": np.nonzero(mask)[0],
        "passed_rank": df["passed"].to_numpy()[mask] == True,  # noqa: E712 - object array: None must rank as False
        "attempt": pd.to_numeric(df["attempt"], errors="coerce").fillna(0).to_numpy()[mask],
    }).sort_values(["item", "model", "passed_rank", "attempt"], kind="stable")
    first = sub.drop_duplicates(["item", "model"])
    counts = sub.groupby(["item", "model"]).size()
    out: dict[str, list[dict[str, Any]]] = {}
    for item, model, row in zip(first["item"], first["model"], first["row"], strict=True):
        record = df.iloc[int(row)]
        out.setdefault(str(int(item)), []).append({
            "model": models[int(model)],
            "attempt": _clean(record.get("attempt")),
            "attempts": int(counts[(item, model)]),
            "score": _clean(record.get("score")),
            "passed": _clean(record.get("passed")),
            "prompt": _clip(record.get("prompt")),
            "answer": _clip(record.get("answer")),
            "golden": _clip(record.get("golden")),
            "finish_reason": _clean(record.get("finish_reason")),
            "error": _clip(" ".join(str(x) for x in (record.get("error_kind"), record.get("error_message"))
                                    if x is not None and not pd.isna(x))) or None,
            "evaluators": _evaluator_nodes(record.get("evaluators")),
            "agent": _agent_counts(record),
            "transcript": _transcript(record.get("transcript")),
        })
    return out


def _model_timing(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per model: the median of both times to first token (the reply's first byte, `ttft_provider_s`, and its
    first visible content or tool call, `ttft_visible_s`; rows from the response cache left out), the time
    spent waiting for rate limits (total, and the rows that waited) and the distinct `system_fingerprint`s."""
    import pandas as pd

    if "model" not in df or not len(df):
        return {}
    cached = df["cached"].astype("boolean").fillna(False) if "cached" in df else pd.Series(False, index=df.index)

    def numbers(column: str) -> pd.Series:
        if column not in df:
            return pd.Series(np.nan, index=df.index, dtype="float64")
        return pd.to_numeric(df[column], errors="coerce").astype("float64")

    timed = ~cached.to_numpy(dtype=bool)
    frame = pd.DataFrame({"model": df["model"].astype(str),
                          "provider": numbers("ttft_provider_s").where(timed),
                          "visible": numbers("ttft_visible_s").where(timed),
                          "wait": numbers("rate_limit_wait_s")})
    out: dict[str, dict[str, Any]] = {}
    fingerprints = df.get("system_fingerprint")
    for model, rows in frame.groupby("model", sort=True):
        waits = rows["wait"].dropna()
        found: list[str] = []
        if fingerprints is not None:
            found = sorted({str(v) for v in fingerprints.loc[rows.index].dropna() if str(v)})
        out[str(model)] = {"ttft_provider_p50": _clean(float(rows["provider"].median())),
                           "ttft_visible_p50": _clean(float(rows["visible"].median())),
                           "rate_limit_wait_s": _clean(float(waits.sum())) if len(waits) else None,
                           "rate_limited_rows": int((waits > 0).sum()),
                           "fingerprints": found[:MAX_FINGERPRINTS],
                           "more_fingerprints": max(0, len(found) - MAX_FINGERPRINTS)}
    return out


def _judges(df: pd.DataFrame, calibration: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The judges section of `engine analyze` (engine.judge.trust), or None when nothing was judged."""
    if "evaluators" not in df.columns or "judge_calls" not in df.columns or df["judge_calls"].isna().all():
        return None
    report = judge_report(df, calibration)
    return report if report["judges"] else None


def _irt(cells: Any) -> dict[str, Any]:
    """The IRT fit as `engine analyze --irt` prints it: its notes, then (title, header, rows) tables."""
    from engine.analysis.irt import fit_2pl, irt_sections, render_irt

    result = fit_2pl(cells)
    # the notes exactly as the terminal words them (render_irt is their one home)
    notes = [line.removeprefix("> note: ") for line in render_irt(result, "markdown").splitlines()
             if line.startswith("> note: ")]
    return {"notes": notes,
            "tables": [{"title": t, "header": h, "rows": r} for t, h, r in irt_sections(result)]}


def build_payload(df: pd.DataFrame, *, alpha: float = DEFAULT_ALPHA, cluster_by: str = DEFAULT_CLUSTER,
                  sources: Sequence[str] = (), max_tests: int = MAX_HEATMAP_TESTS,
                  correction: str = DEFAULT_CORRECTION,
                  calibration: Sequence[Mapping[str, Any]] = (), irt: bool = False) -> dict[str, Any]:
    """Everything the page draws, as strict-JSON-ready data (NaN as None).

    Args:
        df: Results rows with the text columns (prompt, answer, evaluators) for the drill-down.
        alpha: False-discovery rate of the "discriminating" call (see `per_test`).
        cluster_by: "test" or "case" (see `build_cells`).
        sources: The paths the results came from (shown in the header).
        max_tests: Most tests drawn in the heatmap and drill-down (flagged tests first among the rest).
        correction: "bh" or "holm" (see `per_test`).
        calibration: The judges' calibration records (`read_calibration_records`), for the judges section.
        irt: Also fit the 2PL IRT model (`engine analyze --irt`): its notes and tables as `irt`.
    """
    analysis = analyze(df, alpha=alpha, cluster_by=cluster_by, correction=correction)
    cells = build_cells(df, cluster_by=cluster_by)
    tests = analysis.tests
    shown = _shown_tests(tests, max_tests)
    # Columns in ranking order (best model first), as in the model table.
    ranked = [cells.models.index(m) for m in analysis.models["model"]]
    score = np.where(cells.has_data, cells.score, np.nan)[:, ranked]
    test_records = []
    for i, row in enumerate(tests.to_dict(orient="records")):
        record = {k: _clean(v) for k, v in row.items()}
        record["index"] = i
        record["scores"] = [_clean(float(v)) for v in score[i]] if i < len(score) else []
        test_records.append(record)
    as_dict = analysis.to_dict()
    timing = _model_timing(df)
    passk = analysis.passk if analysis.passk is not None else None
    folded, passk_fold = fold_passk(passk, full=False) if passk is not None else (None, "")
    return json_safe({
        "title": "Evaluation report",
        "interval": analysis.interval_method,
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "sources": list(sources),
        "runs": sorted({str(r) for r in df["run_id"].dropna().unique()}) if "run_id" in df else [],
        "rows": len(df),
        "summary": summary_lines(analysis),
        "notes": analysis.notes,
        "model_names": [cells.models[j] for j in ranked],
        "models": [{**m, **timing.get(str(m.get("model")), {})} for m in as_dict["models"]],
        "comparisons": as_dict["comparisons"],
        "agents": as_dict["agents"],
        "variants": as_dict["variants"],
        "variant_comparisons": as_dict["variant_comparisons"],
        "passk": as_dict["passk"],
        # the rows `engine analyze` shows by default, and its line saying what it left out (all rows fold below)
        "passk_shown": folded.to_dict(orient="records") if folded is not None else [],
        "passk_fold": passk_fold,
        "alpha": analysis.alpha,
        "correction": analysis.correction,
        "judges": _judges(df, calibration),
        "irt": _irt(cells) if irt else None,
        "suites": as_dict["suites"],
        "tests": test_records,
        "shown": [int(i) for i in shown],
        "drill": _drilldown(df, cells.item_code, cells.model_code, shown, cells.models),
    })


def render_html(payload: dict[str, Any]) -> str:
    """The page: the payload embedded as JSON, the CSS and the script inline.

    Args:
        payload: From `build_payload`.
    """
    data = json.dumps(payload, ensure_ascii=False, allow_nan=False, default=str)
    data = data.replace("</", "<\\/").replace("<!--", "<\\!--")  # cannot close the script element early
    title = html.escape(str(payload.get("title", "Evaluation report")))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{CSS}</style></head>
<body>
<header><h1>{title}</h1><p id="meta"></p><h2>Summary</h2><ul id="summary"></ul><ul id="notes"></ul></header>
<main>
<section id="section-models"><h2>Models</h2><p class="hint" id="interval"></p>
<div id="models"></div><div id="comparisons"></div></section>
<section id="section-agents" hidden><h2>Agents</h2><div id="agents"></div></section>
<section id="section-variants" hidden><h2>Prompt variants</h2><div id="variants"></div></section>
<section id="section-judges" hidden><h2>Judges</h2><p class="hint">How far each judge can be trusted: agreement with
its calibration labels, with the deterministic evaluators on the same rows, with the other judges, and with itself
across samples (definitions in docs/analysis.md, "Judges"). Figures over fewer pairs than the minimum are marked
"too few".</p><div id="judges"></div></section>
<section id="section-passk" hidden><h2>pass@k and pass^k</h2><p class="hint">pass@k: chance at least one of k
attempts passes (Chen et al. 2021); pass^k: chance all k pass (τ-bench). Unbiased from the n attempts of each test,
k ≤ n.</p><div id="passk"></div></section>
<section id="section-irt" hidden><h2>IRT (2PL)</h2><ul id="irt-notes"></ul><div id="irt"></div></section>
<section id="section-heatmap"><h2>Scores: tests × models</h2><p class="hint">Click a cell or a test to see the
prompt, the answers and why each evaluator decided as it did.</p><div id="heatmap"></div></section>
<section id="section-scatter"><h2>Discrimination vs difficulty</h2><p class="hint">x: difficulty (mean score;
right = easy); y: item-rest r (how well the test ranks models as the rest of its suite does); colour: status, where
"discriminating" means the models' pass rates differ beyond sampling noise.</p>
<div id="scatter"></div></section>
<section id="section-lists"><h2>Tests to look at</h2><div id="lists"></div></section>
<section id="section-suites"><h2>Suite health</h2><div id="suites"></div></section>
<section id="drill-section"><h2>Drill-down</h2><div id="drilldown"><p class="hint">Select a test.</p></div></section>
</main>
<script type="application/json" id="report-data">{data}</script>
<script>{JS}</script>
</body></html>
"""


def write_report(df: pd.DataFrame, path: str | Path, *, alpha: float = DEFAULT_ALPHA,
                 cluster_by: str = DEFAULT_CLUSTER, sources: Sequence[str] = (),
                 correction: str = DEFAULT_CORRECTION, calibration: Sequence[Mapping[str, Any]] = (),
                 irt: bool = False) -> Path:
    """Write the self-contained HTML report.

    Args:
        df: Results rows (load them with all columns so the drill-down has prompts and answers).
        path: The .html file to write (parent folders created).
        alpha: False-discovery rate of the "discriminating" call.
        cluster_by: "test" or "case".
        sources: The paths the results came from.
        correction: "bh" or "holm" (see `per_test`).
        calibration: The judges' calibration records (`read_calibration_records`).
        irt: Also show the 2PL IRT fit (needs 5+ models; else the note why none was made).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = build_payload(df, alpha=alpha, cluster_by=cluster_by, sources=sources, correction=correction,
                            calibration=calibration, irt=irt)
    target.write_text(render_html(payload), encoding="utf-8")
    return target
