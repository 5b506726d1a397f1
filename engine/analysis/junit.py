"""JUnit XML for CI systems: one testsuite per model, one testcase per test × model."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from engine.analysis.cells import Cells, build_cells

if TYPE_CHECKING:
    import pandas as pd


def junit_xml(df: pd.DataFrame | None, *, cells: Cells | None = None) -> str:
    """JUnit XML text: a test × model that fails (no strict majority of passed attempts) is a <failure>; one with
    no scored attempt is an <error> when one errored, else <skipped> (every row recorded unscored, `eval: {none:
    true}`).

    Args:
        df: Results rows.
        cells: A grid already built from `df`; None builds it.
    """
    if cells is None:
        if df is None:
            raise ValueError("junit_xml: give results rows or cells")
        cells = build_cells(df)
    root = ET.Element("testsuites", name="engine")
    items = cells.items
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for m, model in enumerate(cells.models):
        suite = ET.SubElement(root, "testsuite", name=model)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for i, item in enumerate(items.itertuples()):
            if cells.n_rows[i, m] == 0:
                continue
            case = int(item.case_index)
            name = f"{item.test_id}" + (f"[{case}]" if case >= 0 else "")
            testcase = ET.SubElement(suite, "testcase", classname=f"{item.suite}.{model}", name=name)
            counts["tests"] += 1
            score = cells.score[i, m]
            props = ET.SubElement(testcase, "properties")
            ET.SubElement(props, "property", name="score", value="" if math.isnan(score) else f"{score:.4f}")
            ET.SubElement(props, "property", name="attempts", value=str(int(cells.n_rows[i, m])))
            if cells.n_scored[i, m] == 0 and cells.n_errors[i, m] == 0:
                counts["skipped"] += 1
                ET.SubElement(testcase, "skipped", message="recorded unscored (eval: {none: true})")
            elif cells.n_scored[i, m] == 0:
                counts["errors"] += 1
                ET.SubElement(testcase, "error", message="every attempt errored (no score)")
            elif cells.passes[i, m] != 1:
                counts["failures"] += 1
                ET.SubElement(testcase, "failure", message=(
                    f"score {score:.3f} below threshold {item.threshold:g} "
                    f"(pass rate {cells.pass_rate[i, m]:.2f} over {int(cells.n_scored[i, m])} attempts)"))
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(df: pd.DataFrame | None, path: str | Path, *, cells: Cells | None = None) -> Path:
    """Write `junit_xml(df)` to `path` (parent folders created).

    Args:
        df: Results rows.
        path: The XML file to write.
        cells: A grid already built from `df`.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(junit_xml(df, cells=cells), encoding="utf-8")
    return target
