"""`engine run --until-decided` on a real run folder: the embedded gemma-3-270m (marked local_model).

tests/fixtures/until_decided/: 100 one-digit additions, the model few-shot on /completions against the same model
in chat. The sequential run must name the same better model as the full run (the folder completed by
`--resume --complete` and read by `engine analyze`), with fewer calls. bench/bench_until_decided.py --real prints
the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.local_model

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "until_decided"


def engine(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m engine ARGS` in a real subprocess, with room for a loaded machine (a call takes ~1 s)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, env=env,
                          check=False, timeout=1800)


def test_until_decided_on_the_embedded_model_matches_the_full_run(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs the [local] extra: pip install -e '.[local]'")
    out = tmp_path / "results"
    seq = engine("run", str(FIXTURES / "suites"), "--models", str(FIXTURES / "models.yaml"), "--until-decided",
                 "gemma-fewshot,gemma-chat", "--seed", "1", "--no-cache", "--out", str(out), "--run-id", "seq",
                 "--quiet")
    assert seq.returncode == 0, seq.stderr
    run_dir = out / "seq"
    decision = json.loads((run_dir / "_manifest.json").read_text())["until_decided"]
    rows = len(pd.read_parquet(run_dir))
    print(seq.stdout)
    assert decision["better"] == "gemma-fewshot" and rows == decision["jobs_made"] < decision["jobs_full_run"] == 200
    # --resume of a decided run keeps its decision: nothing more to run; --resume --complete runs the rest.
    resumed = engine("run", "--resume", str(run_dir), "--no-cache", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert len(pd.read_parquet(run_dir)) == rows
    completed = engine("run", "--resume", str(run_dir), "--complete", "--no-cache", "--quiet")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(engine("analyze", str(run_dir), "--format", "json").stdout)
    (comparison,) = report["comparisons"]
    assert comparison["better"] == decision["better"], comparison["verdict"]
    assert len(pd.read_parquet(run_dir)) == 200
