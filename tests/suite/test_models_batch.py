"""`batch:` and the batch prices in models.yaml: read into ModelConfig, bad values refused at their place."""

from __future__ import annotations

from pathlib import Path

from engine.model.model_config import BatchSettings, ModelConfig, batch_settings
from engine.suite import load_models


def _load(tmp_path: Path, entries: str) -> tuple[dict[str, ModelConfig], list[str]]:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n" + entries, encoding="utf-8")
    models, diagnostics = load_models(path)
    return models, [str(d).split("models.yaml:")[1] for d in diagnostics]


def test_batch_true_a_mapping_and_false_are_read(tmp_path: Path) -> None:
    models, problems = _load(tmp_path, """\
  a: {base_url: "http://127.0.0.1:1/v1", batch: true}
  b: {base_url: "http://127.0.0.1:1/v1", batch: {size: 200, max_wait_s: 5}}
  c: {base_url: "http://127.0.0.1:1/v1", batch: {max_wait_s: 0.5}}
  d: {base_url: "http://127.0.0.1:1/v1", batch: false}
  e: {base_url: "http://127.0.0.1:1/v1"}
""")
    assert problems == []
    assert models["a"].batch == BatchSettings()
    assert models["b"].batch == BatchSettings(size=200, max_wait_s=5.0)
    assert models["c"].batch == BatchSettings(size=BatchSettings().size, max_wait_s=0.5)
    assert (models["d"].batch, models["e"].batch) == (False, None)
    # --batch batches what says nothing; `batch: false` stays live either way; a declared one batches without it
    assert [batch_settings(models[n], True) for n in "abde"] == [BatchSettings(), BatchSettings(size=200,
                                                                 max_wait_s=5.0), None, BatchSettings()]
    assert [batch_settings(models[n], False) for n in "ade"] == [BatchSettings(), None, None]


def test_bad_batch_values_are_refused_where_they_are_written(tmp_path: Path) -> None:
    _, problems = _load(tmp_path, """\
  a: {base_url: "http://127.0.0.1:1/v1", batch: {size: 0}}
  b: {base_url: "http://127.0.0.1:1/v1", batch: soon}
  c: {base_url: "http://127.0.0.1:1/v1", batch: {sise: 10}}
  d: {base_url: "http://127.0.0.1:1/v1", batch: {}}
  e: {base_url: "http://127.0.0.1:1/v1", batch: {size: 100000}}
  f: {base_url: "http://127.0.0.1:1/v1", price: {input: 1, output: 2, batch_discount: 2}}
""")
    assert problems == [
        "2:56: error: 'size' must be at least 1, but it is 0",
        "3:49: error: 'batch' must be true or false or a mapping (key: value lines), but it is the text 'soon'",
        "4:50: error: unknown key 'sise' in a batch — did you mean 'size'?",
        "5:49: error: 'batch' needs at least one of 'size', 'max_wait_s'",
        "6:56: error: 'size' must be at most 50000, but it is 100000",
        "7:87: error: 'batch_discount' must be at most 1, but it is 2",
    ]


def test_batch_on_an_embedded_model_says_it_has_no_batch_api(tmp_path: Path) -> None:
    _, problems = _load(tmp_path, "  g:\n    builtin: gemma-3-270m\n    batch: {size: 10}\n")
    assert problems == ["4:12: error: batch: the embedded model 'gemma-3-270m' runs on this machine and has no batch "
                        "API (its calls cost nothing); remove `batch:` from this entry"]


def test_batch_prices_are_read(tmp_path: Path) -> None:
    models, problems = _load(tmp_path, """\
  a: {base_url: "http://127.0.0.1:1/v1", price: {input: 2.5, output: 10, batch_input: 1, batch_output: 4}}
  b: {base_url: "http://127.0.0.1:1/v1", price: {input: 2, output: 8, batch_discount: 0.25}}
""")
    assert problems == []
    assert (models["a"].price_batch_in, models["a"].price_batch_out, models["a"].batch_discount) == (1.0, 4.0, None)
    assert (models["b"].price_batch_in, models["b"].batch_discount) == (None, 0.25)

