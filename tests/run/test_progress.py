"""Progress lines and the summary say '-' for what the server never reported, never a made-up 0."""

from __future__ import annotations

import io
from pathlib import Path

from engine.run.progress import Progress, print_summary
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.helpers import make_model, make_test, run_jobs


def _outputs(stats) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    line = io.StringIO()
    progress = Progress(stream=line, plain_every_s=0)
    progress.update(stats)
    table = io.StringIO()
    print_summary(stats, stream=table)
    return line.getvalue(), table.getvalue()


async def test_unknown_tokens_and_unpriced_models_show_a_dash(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="ok", usage=None)   # as llama.cpp's stream
    stats = await run_jobs(tmp_path, [make_model(fake_openai.base_url)], [make_test(i) for i in range(3)])
    line, table = _outputs(stats)
    assert "tok/s -" in line and "0 tok/s" not in line
    model_row = next(r for r in table.splitlines() if r.startswith("│ m "))
    cells = [c.strip() for c in model_row.strip("│").split("│")]
    assert cells[7] == "-"   # the cost column: no price in models.yaml


async def test_known_tokens_and_prices_are_shown(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="ok", usage={"prompt_tokens": 1000, "completion_tokens": 500})
    model = make_model(fake_openai.base_url, price_in=1.0, price_out=2.0)
    stats = await run_jobs(tmp_path, [model], [make_test(i) for i in range(2)])
    line, table = _outputs(stats)
    assert "tok/s -" not in line and " tok/s" in line
    assert "0.0040" in table   # 2 × (1000 × $1 + 500 × $2) / 1M


async def test_errors_stand_beside_the_pass_rate(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """2 passed and 4 error rows read "2 of 6 passed, 4 errors", never a bare "100.0%" over the 2 scored."""
    fake_openai.responder = lambda body: (Reply(content="ok") if "question 0" in str(body) or "question 1" in str(body)
                                          else Reply(fault="http_400"))
    stats = await run_jobs(tmp_path, [make_model(fake_openai.base_url)], [make_test(i) for i in range(6)])
    line, table = _outputs(stats)
    assert "6/6 done: 2 of 6 passed, 4 errors (pass rate 100.0% of 2 scored)" in line
    model_row = next(r for r in table.splitlines() if r.startswith("│ m "))
    cells = [c.strip() for c in model_row.strip("│").split("│")]
    assert cells[2:6] == ["2 of 6", "0", "4 (http_400×4)", "100.0% of 2 scored"]
    assert "pass rate (errors left out)" in " ".join(table.split())
    assert "m: 2 of 6 passed, 4 errors" in table


def test_off_a_terminal_a_line_comes_while_no_call_ends_and_stops_with_the_run() -> None:
    """A run waiting minutes for its next result (a slow model, a long agent task) still prints, at most every
    heartbeat_s (shortened here), and nothing once it is closed."""
    import time

    from engine.run.run_config import RunStats

    out = io.StringIO()
    stats = RunStats()
    stats.total = 4
    progress = Progress(stream=out, heartbeat_s=0.05)
    progress.watch(stats)
    deadline = time.monotonic() + 30
    while out.getvalue().count("\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    progress.close()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("0/4 done: ") for line in lines), lines
    time.sleep(0.2)
    assert out.getvalue().splitlines() == lines             # closed: silent


def test_quiet_prints_nothing_even_while_a_run_waits() -> None:
    import time

    from engine.run.run_config import RunStats

    out = io.StringIO()
    progress = Progress(stream=out, quiet=True, heartbeat_s=0.01)
    progress.watch(RunStats())
    time.sleep(0.2)
    progress.close()
    assert out.getvalue() == ""


def test_a_batch_run_shows_its_batches_and_the_rows_they_hold() -> None:
    from engine.run.run_config import RunStats

    stats = RunStats(total=2120, batches_submitted=3, batches_done=1, batch_rows_held=2000, batch_rows_gathered=120)
    line, _ = _outputs(stats)
    assert "batches 3 sent (2 in progress, 1 done) holding 2000 rows, 120 rows gathered" in line
    assert "batches" not in _outputs(RunStats(total=5))[0]   # a live run's line is unchanged
