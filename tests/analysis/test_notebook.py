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


def test_without_engine_results_the_notebook_reads_the_last_run_one_folder_up(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Opened by hand in Jupyter from the repository, the kernel starts in notebooks/: results/ is one folder up."""
    from nbclient import NotebookClient

    write_run(tmp_path / "results" / "run-1", grid_rows({"a": {"t1": [1]}, "b": {"t1": [0]}}))
    (tmp_path / "results" / "latest").symlink_to("run-1")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.delenv("ENGINE_RESULTS", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    notebook.cells = notebook.cells[:2]          # the loading cell
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path / "notebooks")}}).execute()
    assert "2 rows, models: ['a', 'b'], runs: ['run-1']" in str(notebook.cells[1].outputs)
