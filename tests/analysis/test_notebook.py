"""notebooks/analysis.ipynb runs top to bottom against a results folder the test writes."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from builders import grid_rows, write_run

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "analysis.ipynb"


def test_notebook_executes_on_generated_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient

    grid = {"a": {"t1": [1, 1], "t2": [1, 0], "t3": [0, 0]}, "b": {"t1": [1, 1], "t2": [0, 0], "t3": [0, 0]}}
    write_run(tmp_path / "results" / "run-1", grid_rows(grid, tags=["demo"]))
    monkeypatch.setenv("ENGINE_RESULTS", str(tmp_path / "results"))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "\n".join(
        str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
        for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", []))
    assert "12 rows, models: ['a', 'b']" in outputs
    assert "floor" in outputs and "t3" in outputs
    assert "no model passes" in outputs
    assert "pass_at_k" in outputs and "pass_hat_k" in outputs
