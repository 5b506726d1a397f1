"""Render an Analysis for the terminal (rich), as Markdown, JSON or CSV."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.analysis.fold import drop_zero_columns, fold_passk, fold_rows, hoist_common_text
from engine.analysis.items import FALLBACK_LEFT_OUT
from engine.analysis.summary import Analysis, json_safe, summary_lines

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("table", "markdown", "json", "csv")
TABLES = ("models", "tests", "suites", "tags", "passk", "comparisons", "agents", "variants", "variant_comparisons")


def _num(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ci(mean: float, lo: float, hi: float) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    return f"{mean:.3f} [{_num(lo)}, {_num(hi)}]"


#: The models table's time to first token: the first visible content or tool-call delta (not the first byte
#: of the reply, `ttft_provider_s`, which the HTML report shows beside it).
TTFT_HEADER = "p50 TTFT (visible) s"


def _money(value: Any) -> str:
    """A total cost: "-" when nothing was priced, else up to 4 significant decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4f}" if value >= 0.01 else f"{value:.6f}"


def _pct(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.1%}"


def _test_name(row: pd.Series) -> str:
    case = int(row["case_index"])
    return f"{row['suite']}/{row['test_id']}" + (f"#{case}" if case >= 0 else "")


Section = tuple[str, list[str], list[list[str]]]   # (title, header, rows of cells)
#: A section with the one line that says what its fold left out ("" when nothing was).
FoldedSection = tuple[str, list[str], list[list[str]], str]


def _zero_folded(title: str, header: list[str], rows: list[list[str]], full: bool,
                 keep: tuple[str, ...]) -> FoldedSection:
    header, rows, line = drop_zero_columns(header, rows, full=full, keep=keep)
    return title, header, rows, line


def sections(analysis: Analysis, *, full: bool = False) -> list[FoldedSection]:
    """The views people read, in order: (title, header, rows of text cells, fold line).

    Args:
        analysis: The analysis.
        full: Every row and column; by default each table is folded to what its data can say
            (engine.analysis.fold), with one line saying what was left out.
    """
    out: list[FoldedSection] = []
    models = analysis.models
    out.append(_zero_folded(
        f"Models (mean over tests; {analysis.interval_method})",
        ["model", "tests", "clusters", "score [CI]", "pass rate [CI]", "errors", "truncated",
         "p50 latency s", TTFT_HEADER, "tokens out", "cost", "notes"],
        [[str(r.model), str(r.tests), str(r.clusters), _ci(r.mean_score, r.score_lo, r.score_hi),
          _ci(r.pass_rate, r.pass_lo, r.pass_hi), _pct(r.error_rate), _pct(r.truncation_rate),
          _num(r.latency_p50, 2), _num(r.ttft_p50, 2), _num(r.completion_tokens, 1), _money(r.cost), str(r.notes)]
         for r in models.itertuples()], full, ("model", "tests", "clusters", "score [CI]", "pass rate [CI]")))
    agents = analysis.agents
    if agents is not None and len(agents):
        out.append(_zero_folded(
            "Agents (multi-turn conversations: means per conversation, counts over all; no interval)",
            ["model", "conversations", "turns", "prose turns", "tool calls", "invented tools",
             "bad args", "completed", "escalated", "capped", "stuck", "failed", "error"],
            [[str(r.model), str(r.conversations), _num(r.mean_turns, 2), _num(r.mean_prose_turns, 2),
              _num(r.mean_tool_calls, 2), f"{r.invented_tools} ({_pct(r.invented_rate)})",
              f"{r.bad_tool_args} ({_pct(r.bad_args_rate)})", str(r.completed), str(r.escalated),
              str(r.capped), str(r.stuck), str(r.failed),
              str(r.error) + (f" (+{r.other_outcome} other)" if r.other_outcome else "")]
             for r in agents.itertuples()], full, ("model", "conversations")))
    passk = analysis.passk
    if passk is not None and len(passk) and int(passk["k"].max()) > 1:
        shown_k, line = fold_passk(passk, full=full)
        out.append((f"pass@k (at least one of k attempts passes; Chen et al. 2021) and pass^k (all k pass; "
                    f"τ-bench), unbiased from n attempts, mean over tests [{analysis.level:.0%} CI]",
                    ["model", "suite", "k", "tests", "pass@k [CI]", "pass^k [CI]", "left out (< k attempts)"],
                    [[str(r.model), str(r.suite), str(r.k), str(r.tests),
                      _ci(r.pass_at_k, r.pass_at_k_lo, r.pass_at_k_hi),
                      _ci(r.pass_hat_k, r.pass_hat_k_lo, r.pass_hat_k_hi), str(r.cells_short)]
                     for r in shown_k.itertuples()], line))
    if analysis.comparisons:
        out.append(("Paired comparisons (best model against each other; a verdict needs the paired interval and "
                    "McNemar to agree)",
                    ["A", "B", "tests (clusters)", "win/tie/loss", "only A / only B pass", "McNemar p", "verdict"],
                    [[c.model_a, c.model_b, f"{c.tests} ({c.clusters})", f"{c.wins}/{c.ties}/{c.losses}",
                      f"{c.only_a}/{c.only_b}", _num(c.mcnemar_p, 4), c.verdict] for c in analysis.comparisons],
                    ""))
    if analysis.variants is not None and len(analysis.variants):
        out.append(_zero_folded(
            f"Prompt variants per model (mean over tests; {analysis.interval_method})",
            ["model", "variant", "tests", "score [CI]", "pass rate [CI]", "errors", "tokens out"],
            [[str(r.model), str(r.variant), str(r.tests), _ci(r.mean_score, r.score_lo, r.score_hi),
              _ci(r.pass_rate, r.pass_lo, r.pass_hi), _pct(r.error_rate), _num(r.completion_tokens, 1)]
             for r in analysis.variants.itertuples()], full, ("model", "variant", "tests")))
    if analysis.variant_comparisons:
        out.append(("Paired variant comparisons (per model: best variant against each other, paired by test; the "
                    "same rule as models)",
                    ["model", "A", "B", "tests (clusters)", "mean A−B [CI]", "only A / only B pass", "McNemar p",
                     "verdict"],
                    [[v.model, v.comparison.model_a, v.comparison.model_b,
                      f"{v.comparison.tests} ({v.comparison.clusters})",
                      _ci(v.comparison.mean_diff, v.comparison.diff_lo, v.comparison.diff_hi),
                      f"{v.comparison.only_a}/{v.comparison.only_b}", _num(v.comparison.mcnemar_p, 4),
                      v.comparison.verdict] for v in analysis.variant_comparisons], ""))
    out.extend(_test_sections(analysis, full))
    out.append(_zero_folded(
        "Suite health (share of tests; health = share discriminating)",
        ["suite", "tests", "saturated", "floor", "uninformative", "discriminating", "flaky", "health"],
        [[str(r["suite"]), str(r["tests"])] + [f"{r[c]:.0%}" for c in
          ("saturated", "floor", "uninformative", "discriminating", "flaky", "health")]
         for _, r in analysis.suites.iterrows()], full, ("suite", "tests", "health")))
    return out


def _test_sections(analysis: Analysis, full: bool) -> list[FoldedSection]:
    """The per-test lists: discriminating (ranked), uninformative, saturated, floor, flaky, mixed attempts."""
    out: list[FoldedSection] = []
    tests = analysis.tests
    header = ["test", "difficulty", "item-rest r", "exact p", "adjusted q", "pass counts"]
    every = f"--full shows them (--format csv: every test, {len(tests)})"

    def rows(frame: pd.DataFrame) -> list[list[str]]:
        return [[_test_name(r), _num(r["difficulty"]), _num(r["item_rest_r"]), _num(r["p_value"], 4),
                 _num(r["q_value"], 4), str(r["pass_counts"])] for _, r in frame.iterrows()]

    chosen = tests[tests["status"] == "discriminating"].sort_values(
        ["item_rest_r", "q_value"], ascending=[False, True], na_position="last", kind="stable")
    rule = "BH q" if analysis.correction == "bh" else "Holm-adjusted p"
    title = (f"Discriminating tests: pass rates differ between models beyond sampling noise ({rule} ≤ "
             f"{analysis.alpha:g}), ranked by item-rest r")
    if len(chosen):
        kept, line = fold_rows(chosen, "discriminating tests", full=full, how=every)
        shown = rows(kept)
        out.append((f"{title} - {len(chosen)} of {len(tests)}" + (f", top {len(shown)}" if line else ""),
                    header, shown, line))
    for status, title in (("uninformative", "Uninformative tests: no evidence the models' pass rates differ"),
                          ("saturated", "Saturated tests: every model passes most of its attempts (drop or "
                                        "harden)"),
                          ("floor", "Floor tests: no model passes most of its attempts (check golden and "
                                    "evaluator)"),
                          (FALLBACK_LEFT_OUT, "Not classed: failing rows were served by a fallback model and left "
                                              "out")):
        chosen = tests[tests["status"] == status]
        if len(chosen):
            kept, line = fold_rows(chosen, f"{status} tests", full=full, how=every)
            shown = [[_test_name(r), _num(r["difficulty"]), str(r["reason"])] for _, r in kept.iterrows()]
            more = f", first {len(shown)}" if line else ""
            header_why, shown, shared = hoist_common_text(["test", "difficulty", "why"], shown, 2, full=full)
            out.append((f"{title} - {len(chosen)} of {len(tests)}{more}", header_why, shown,
                        "\n".join(x for x in (shared, line) if x)))
    flaky = tests[tests["flaky"]]
    if len(flaky):
        kept, line = fold_rows(flaky, "flaky tests", full=full, how=every)
        shown = [[_test_name(r), str(r["flaky_models"]), str(r["pass_counts"])] for _, r in kept.iterrows()]
        out.append((f"Flaky tests: attempts at temperature 0 disagree (nondeterministic server or evaluator) - "
                    f"{len(flaky)} of {len(tests)}" + (f", first {len(shown)}" if line else ""),
                    ["test", "models", "pass counts"], shown, line))
    mixed = tests[(tests["mixed_models"] != "") & ~tests["flaky"]]
    if len(mixed):
        kept, line = fold_rows(mixed, "tests whose attempts disagree", full=full, how=every)
        shown = [[_test_name(r), str(r["mixed_models"])] for _, r in kept.iterrows()]
        out.append((f"Attempts that disagree at temperature > 0 (sampling, not a flag) - {len(mixed)} of "
                    f"{len(tests)}" + (f", first {len(shown)}" if line else ""),
                    ["test", "passes / attempts of the models that disagree"], shown, line))
    return out


def tables_as_text(notes: list[str], tables: Sequence[Section | FoldedSection], *, width: int | None = None) -> str:
    """Notes, then rich tables, as plain text (colours when printed by a rich Console).

    Args:
        notes: Lines printed before the tables.
        tables: (title, header, rows) of each table, optionally with a fourth item: the fold line printed
            under the table (what was left out and how to see it).
        width: The console width (default 160).
    """
    from rich.console import Console
    from rich.table import Table

    buffer = io.StringIO()
    console = Console(file=buffer, width=width or 160, force_terminal=False, color_system=None)
    for note in notes:
        console.print(note)
    for title, header, rows, *folded in tables:
        table = Table(title=title, title_justify="left", show_lines=False)
        for name in header:
            table.add_column(name, overflow="fold")
        for cells in rows:
            table.add_row(*cells)
        console.print(table)
        if folded and folded[0]:
            console.print(folded[0], markup=False, highlight=False, soft_wrap=True)   # one line each, never wrapped
    return buffer.getvalue()


def tables_as_markdown(notes: list[str], tables: Sequence[Section | FoldedSection]) -> str:
    """Notes as quotes, then GitHub-flavoured Markdown tables (a fold line in italics under its table).

    Args:
        notes: Lines quoted before the tables.
        tables: (title, header, rows) of each table, optionally with the fold line.
    """
    lines = [f"> {n}" for n in notes]
    for title, header, rows, *folded in tables:
        lines += ["", f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in rows]
        if folded and folded[0]:
            lines += ["", *(f"*{line}*  " for line in folded[0].split("\n"))]
    return "\n".join(lines).lstrip() + "\n"


def render_table(analysis: Analysis, *, width: int | None = None, full: bool = False) -> str:
    """The summary, then rich tables as text (colours when printed by a rich Console); folded unless `full`."""
    summary = ["Summary", *(f"  {line}" for line in summary_lines(analysis)), ""]
    return tables_as_text([*summary, *(f"note: {n}" for n in analysis.notes)], sections(analysis, full=full),
                          width=width)


def render_markdown(analysis: Analysis, *, full: bool = False) -> str:
    """The summary as a list, then GitHub-flavoured Markdown tables (for CI job summaries); folded unless `full`."""
    summary = "### Summary\n\n" + "\n".join(f"- {line}" for line in summary_lines(analysis)) + "\n\n"
    return summary + tables_as_markdown([f"note: {n}" for n in analysis.notes], sections(analysis, full=full))


def render_json(analysis: Analysis) -> str:
    """Every table as JSON records (strict JSON: null, never NaN)."""
    return dumps_json(analysis.to_dict())


def dumps_json(payload: Any) -> str:
    """Strict JSON text of a payload: numpy values made plain, NaN and infinities as null."""
    return json.dumps(json_safe(payload), indent=2, ensure_ascii=False, allow_nan=False, default=str) + "\n"


def render_csv(analysis: Analysis, table: str = "tests") -> str:
    """One table as CSV.

    Args:
        analysis: The analysis.
        table: One of TABLES.
    """
    import pandas as pd

    if table not in TABLES:
        raise ValueError(f"--table {table}: choose one of {', '.join(TABLES)}")
    if table == "comparisons":
        frame = pd.DataFrame([c.to_dict() for c in analysis.comparisons])
    elif table == "passk":
        frame = analysis.passk if analysis.passk is not None else pd.DataFrame()
    elif table == "agents":
        frame = analysis.agents if analysis.agents is not None else pd.DataFrame()
    elif table == "variants":
        frame = analysis.variants if analysis.variants is not None else pd.DataFrame()
    elif table == "variant_comparisons":
        frame = pd.DataFrame([c.to_dict() for c in analysis.variant_comparisons])
    else:
        frame = getattr(analysis, table).copy()
        if "tags" in frame.columns:
            frame["tags"] = frame["tags"].map(";".join)
    return frame.to_csv(index=False)


def render(analysis: Analysis, fmt: str, *, table: str | None = None, full: bool = False) -> str:
    """Render in one of FORMATS.

    Args:
        analysis: The analysis.
        fmt: table | markdown | json | csv.
        table: For csv, which table (default tests).
        full: For table and markdown, every row and column (json and csv are always complete).
    """
    if fmt == "table":
        return render_table(analysis, full=full)
    if fmt == "markdown":
        return render_markdown(analysis, full=full)
    if fmt == "json":
        return render_json(analysis)
    if fmt == "csv":
        return render_csv(analysis, table or "tests")
    raise ValueError(f"--format {fmt}: choose one of {', '.join(FORMATS)}")
