"""The hidden check of `summarise-csv`: one test per field of summary.json, so each right field is a third
of the score (the check passes only when all three are right)."""

import json
from pathlib import Path


def summary() -> dict:
    return json.loads(Path("summary.json").read_text())


def test_total_units() -> None:
    assert summary().get("total_units") == 18


def test_revenue_by_region() -> None:
    revenue = {region: round(value, 2) for region, value in summary().get("revenue_by_region", {}).items()}
    assert revenue == {"north": 251.3, "south": 64.4, "east": 240.5}


def test_top_product() -> None:
    assert summary().get("top_product") == "kettle"
