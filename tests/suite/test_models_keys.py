"""models.yaml: where the API key goes (`api_key_header`, `api_key_query`) and credentials in `base_url`."""

from __future__ import annotations

from pathlib import Path

from engine.suite.models_file import load_models

SECRET = "qs-9f8e7d6c5b4a"


def _load(tmp_path: Path, entry: str) -> tuple[dict, list]:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  m:\n" + entry)
    return load_models(path)


def test_a_key_in_base_url_is_a_warning_that_names_api_key_env_and_never_the_value(tmp_path: Path) -> None:
    configs, problems = _load(tmp_path, f"    base_url: http://h/v1?api-version=1&api-key={SECRET}\n")
    (warning,) = problems
    assert warning.severity == "warning" and warning.line == 3 and "'api-key'" in warning.message
    assert "api_key_env" in warning.message and "api_key_query: api-key" in warning.message
    assert SECRET not in str(warning) and configs["m"].base_url.endswith(SECRET)   # loaded all the same


def test_an_api_version_alone_is_no_warning(tmp_path: Path) -> None:
    assert _load(tmp_path, "    base_url: http://h/v1?api-version=2024-06-01\n")[1] == []


def test_key_places_are_read_and_checked(tmp_path: Path) -> None:
    configs, problems = _load(tmp_path, "    base_url: http://h/v1\n    api_key_env: K\n    api_key_header: api-key\n")
    assert problems == [] and configs["m"].api_key_header == "api-key" and configs["m"].api_key_query is None
    _, problems = _load(tmp_path, "    base_url: http://h/v1\n    api_key_query: key\n")
    assert [p.severity for p in problems] == ["error"] and "api_key_env" in problems[0].message
    _, problems = _load(tmp_path, "    base_url: http://h/v1\n    api_key_env: K\n    api_key_query: key\n"
                                  "    api_key_header: api-key\n")
    assert [p.severity for p in problems] == ["error"] and "both" in problems[0].message
    _, problems = _load(tmp_path, "    base_url: http://h/v1\n    api_key_env: K\n    api_key_header: \"a b\"\n")
    assert [p.severity for p in problems] == ["error"] and problems[0].line == 5


def test_a_refused_base_url_is_shown_without_its_credentials(tmp_path: Path) -> None:
    _, problems = _load(tmp_path, f"    base_url: \"ftp://u:pw-{SECRET}@h/v1?key={SECRET}\"\n")
    (error,) = problems
    assert error.severity == "error" and "must start with http://" in error.message and SECRET not in str(error)
