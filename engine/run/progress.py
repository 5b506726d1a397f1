"""Progress while a run goes, and the per-model summary at the end.

A rich progress bar on a terminal (its elapsed time ticks while no call ends); plain periodic lines when stdout
is not a TTY (CI logs, `make run | tee`), one at least every HEARTBEAT_S even while no call ends (a slow model, an
agent task's many turns, a long sandboxed check); nothing with `--quiet`. Rich is imported only when a bar or a
table is drawn.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from engine.base.heartbeat import HEARTBEAT_S, Heartbeat
from engine.run.run_config import RunStats


def _tokens_per_s(stats: RunStats, elapsed: float) -> str:
    """Completion tokens per second, or a dash while no server has reported token counts."""
    return f"{stats.completion_tokens / elapsed:.0f} tok/s" if stats.token_rows else "tok/s -"


def _paced(stats: RunStats) -> str:
    """The calls the rate limit holds back now, when there are any."""
    return f", {stats.rate_limited} paced to the rate limit" if stats.rate_limited else ""


def _batches(stats: RunStats) -> str:
    """The batches of a batch run, when there are any: "batches 3 sent (2 in progress, 1 done) holding 2000 rows,
    120 rows gathered"."""
    if not stats.batches_submitted and not stats.batch_rows_gathered:
        return ""
    gathered = f", {stats.batch_rows_gathered} rows gathered" if stats.batch_rows_gathered else ""
    return (f", batches {stats.batches_submitted} sent ({stats.batches_submitted - stats.batches_done} in progress, "
            f"{stats.batches_done} done) holding {stats.batch_rows_held} rows{gathered}")


def rate_of_scored(passed: int, scored: int) -> str:
    """A pass rate that says what it is over: "100.0% of 2 scored" (error rows and rows recorded unscored are not
    scored), or "-" when nothing was."""
    return f"{100.0 * passed / scored:.1f}% of {scored} scored" if scored else "-"


def _passed(stats: RunStats) -> str:
    """What the rows done so far came to: "2 of 6 passed, 4 errors (pass rate 100.0% of 2 scored)"."""
    failed = sum(m.failed for m in stats.by_model.values())
    rate = rate_of_scored(stats.passed, stats.passed + failed)
    return f"{stats.passed} of {stats.done} passed, {stats.errors} errors (pass rate {rate})"


def _line(stats: RunStats) -> str:
    elapsed = max(1e-9, time.monotonic() - stats.started)
    speed = stats.done / elapsed
    left = stats.total - stats.done
    eta = f"{left / speed:.0f}s" if speed > 0 and left > 0 else "-"
    return (f"{stats.done}/{stats.total} done: {_passed(stats)}, retries {stats.retries} "
            f"({stats.retrying} waiting{_paced(stats)}), in flight {stats.in_flight}{_batches(stats)}, "
            f"{_tokens_per_s(stats, elapsed)}, eta {eta}")


class Progress:
    """Shows progress; call `watch` with the run's stats when it starts, `update` after each commit and `close` at
    the end.

    Args:
        quiet: Show nothing.
        stream: Where to write (stdout by default).
        plain_every_s: Seconds between plain lines when not on a terminal.
        heartbeat_s: Off a terminal, the longest time without a line once `watch` has started.
    """

    def __init__(self, *, quiet: bool = False, stream: TextIO | None = None, plain_every_s: float = 5.0,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.plain_every_s = plain_every_s
        self.heartbeat_s = heartbeat_s
        self._last = 0.0
        self._bar: Any = None
        self._task: Any = None
        self._heartbeat: Heartbeat | None = None
        if not quiet and self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("[bold]run"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                     console=Console(file=self.stream), transient=False)
            self._bar.start()

    def update(self, stats: RunStats) -> None:
        """Refresh the display from the stats."""
        if self.quiet:
            return
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task("run", total=stats.total, info="")
            elapsed = max(1e-9, time.monotonic() - stats.started)
            info = (f"{_passed(stats)}  retries {stats.retries} ({stats.retrying} waiting"
                    f"{_paced(stats)})  "
                    f"in flight {stats.in_flight}{_batches(stats)}  "
                    f"{_tokens_per_s(stats, elapsed)}")
            self._bar.update(self._task, completed=stats.done, total=stats.total, info=info)
            return
        now = time.monotonic()
        if now - self._last >= self.plain_every_s or stats.done == stats.total:
            self._last = now
            self._write(_line(stats))
            if self._heartbeat is not None:
                self._heartbeat.said()

    def watch(self, stats: RunStats) -> None:
        """Off a terminal, print `stats` whenever no line came for `heartbeat_s` (the run may wait minutes for its
        next commit), until `close`."""
        if self.quiet or self._bar is not None or self._heartbeat is not None:
            return
        self._heartbeat = Heartbeat(lambda _: self._write(_line(stats)), self.heartbeat_s).start()

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")   # one write: the heartbeat's thread may write too
        self.stream.flush()

    def close(self) -> None:
        """Stop the bar, or the heartbeat."""
        if self._bar is not None:
            self._bar.stop()
        if self._heartbeat is not None:
            self._heartbeat.stop()


def summary_rows(stats: RunStats) -> list[dict[str, Any]]:
    """One summary dict per model: done, passed, failed, errors, unscored (`eval: {none: true}`), pass rate over
    the scored rows, cost, mean latency, cached rows."""
    out = []
    for name, m in stats.by_model.items():
        scored = m.passed + m.failed
        out.append({
            "model": name, "done": m.done, "passed": m.passed, "failed": m.failed, "errors": m.errors,
            "unscored": m.unscored, "scored": scored,
            "pass_rate": (m.passed / scored) if scored else None, "fallbacks": m.fallbacks,
            "retries": m.retries, "cost": m.cost if m.priced else None,
            "mean_latency_s": (m.latency_sum / m.timed) if m.timed else None,   # cached rows are not timed
            "cached": m.cached,
            "error_kinds": dict(m.error_kinds),
        })
    return out


def print_summary(stats: RunStats, *, stream: TextIO | None = None) -> None:
    """Print the per-model summary table (rich on a terminal, aligned text otherwise): passed out of every row
    done, errors beside it, and the pass rate saying it is over the scored rows only."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="results by model")
    for column in ("model", "done", "passed", "failed", "errors", "pass rate (errors left out)", "fallbacks",
                   "cost", "mean latency"):
        table.add_column(column, justify="left" if column == "model" else "right")
    notes = []
    for row in summary_rows(stats):
        kinds = ", ".join(f"{k}×{v}" for k, v in sorted(row["error_kinds"].items()))
        done = str(row["done"]) + (f" ({row['cached']} cached)" if row["cached"] else "")
        table.add_row(row["model"], done, f"{row['passed']} of {row['done']}", str(row["failed"]),
                      f"{row['errors']}" + (f" ({kinds})" if kinds else ""),
                      rate_of_scored(row["passed"], row["scored"]),
                      str(row["fallbacks"]), "-" if row["cost"] is None else f"{row['cost']:.4f}",
                      "-" if row["mean_latency_s"] is None else f"{row['mean_latency_s']:.2f}s")
        unscored = f", {row['unscored']} recorded unscored (eval: {{none: true}})" if row["unscored"] else ""
        if row["errors"] or unscored:
            notes.append(f"{row['model']}: {row['passed']} of {row['done']} passed, {row['errors']} errors{unscored}"
                         f" (errors are not scored: `engine analyze` counts them apart)")
    console = Console(file=stream or sys.stdout, width=120)
    console.print(table)
    for note in notes:
        console.print(note, markup=False, highlight=False)
