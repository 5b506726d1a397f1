"""The safe YAML layer: positions, YAML 1.2 scalars, refusals, limits."""

from __future__ import annotations

from pathlib import Path

from engine.base import yaml as suite_yaml
from engine.base.yaml import load_yaml_file, load_yaml_text


def test_positions_of_values_and_keys_are_one_based() -> None:
    loaded = load_yaml_text("suite: s\ntests:\n  - id: a\n    prompt: hi\n", "f.yaml")
    assert loaded.diagnostics == []
    assert loaded.positions.values[("tests", 0, "prompt")] == (4, 13)
    assert loaded.positions.keys[("tests", 0, "prompt")] == (4, 5)
    assert loaded.positions.of(("tests", 0, "missing", 3)) == (3, 5)  # nearest ancestor


def _of_by_path(values: dict, keys: dict, path: tuple, key: bool) -> tuple[int, int]:
    """`Positions.of` as it was written over path-keyed dicts (before issue #22 kept positions as a tree)."""
    if key and path in keys:
        return keys[path]
    while path:
        if path in values:
            return values[path]
        path = path[:-1]
    return values.get((), (1, 1))


def test_positions_of_answers_as_path_keyed_dicts_for_every_path_and_beyond() -> None:
    """Every value's path, and steps past it that are not there (a missing key, an index out of range, a
    negative index, a key on a list, an index on a mapping), give what the path-keyed lookup gave."""
    text = ("suite: s\ntools: {t: {description: d}}\ntests:\n  - id: a\n    prompt: hi\n    cases:\n"
            "      - {x: 1, y: [1, {z: 2}]}\n      - {x: 2}\n  - &t {id: b, prompt: '1'}\n  - *t\n")
    positions = load_yaml_text(text, "f.yaml").positions
    values, keys = positions.values, positions.keys
    assert positions.count == len(values) == 24
    assert values[("tests", 2)] == values[("tests", 1)] == (9, 5)   # an alias is where its anchor is written
    assert keys[("tests", 0, "cases")] == (6, 5) and ("tests", 0) not in keys
    probes = [p + extra for p in values for extra in ((), ("nope",), (0,), (-1,), (99,), ("0",), (1, "z"))]
    assert len(probes) == 7 * len(values)
    for probe in probes:
        for key in (False, True):
            assert positions.of(probe, key=key) == _of_by_path(values, keys, probe, key), (probe, key)
    assert suite_yaml.Positions().of(("tests", 0)) == (1, 1)


def test_yaml_12_scalars_no_is_text_and_numbers_keep_their_source() -> None:
    loaded = load_yaml_text("a: no\nb: yes\nc: 1.10\nd: 0x1F\ne: ~\nf: True\ng: '7'\nh: .inf\ni: 1e3\n", "f.yaml")
    assert loaded.data == {"a": "no", "b": "yes", "c": 1.1, "d": 31, "e": None, "f": True, "g": "7",
                           "h": float("inf"), "i": 1000.0}
    assert loaded.positions.raw[("c",)] == "1.10"
    assert ("g",) not in loaded.positions.raw


def test_keys_are_always_text() -> None:
    assert load_yaml_text("1: a\nno: b\n", "f.yaml").data == {"1": "a", "no": "b"}


def test_duplicate_keys_are_errors_at_the_second_key() -> None:
    [diag] = load_yaml_text("a: 1\nb: 2\na: 3\n", "f.yaml").diagnostics
    assert (diag.line, diag.col) == (3, 1)
    assert "duplicate key 'a' (first written on line 1)" in diag.message


def test_python_tags_are_refused_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = f"a: !!python/object/apply:os.system ['touch {marker}']\n"
    [diag] = load_yaml_text(text, "f.yaml").diagnostics
    assert "not allowed" in diag.message
    assert not marker.exists()


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    loaded = load_yaml_text("\n".join(lines) + "\n", "f.yaml")
    assert loaded.data is None
    assert "repeats anchors" in loaded.diagnostics[0].message


def test_honest_anchor_reuse_is_fine() -> None:
    loaded = load_yaml_text("base: &b {x: 1}\nfirst: *b\nsecond: *b\n", "f.yaml")
    assert loaded.diagnostics == []
    assert loaded.data["second"] == {"x": 1}


def test_file_size_limit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(suite_yaml, "MAX_BYTES", 100)
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 200 + "\n", encoding="utf-8")
    [diag] = load_yaml_file(path).diagnostics
    assert "limited to" in diag.message and "split it" in diag.message


def test_non_utf8_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("a: ok\nb: caf\xe9\n".encode("latin-1"))
    [diag] = load_yaml_file(path).diagnostics
    assert diag.line == 2 and "UTF-8" in diag.message


def test_tab_hint_points_at_the_tab() -> None:
    [diag] = load_yaml_text("a:\n  b: 1\n\tc: 2\n", "f.yaml").diagnostics
    assert diag.line == 3 and "tab" in diag.message and "spaces" in diag.message


def test_plain_scalar_resolution_says_what_the_core_schema_regexes_say() -> None:
    """The resolver's shortcuts (text by first letter; null/bool words by set lookup, issue #22) give every
    plain scalar the tag the YAML 1.2 core-schema regexes give it, words and near-words included."""
    import itertools

    def by_regex(value: str) -> str:
        for pattern, tag in ((suite_yaml._NULL_RE, suite_yaml._NULL), (suite_yaml._BOOL_RE, suite_yaml._BOOL),
                             (suite_yaml._INT_RE, suite_yaml._INT), (suite_yaml._FLOAT_RE, suite_yaml._FLOAT)):
            if pattern.match(value):
                return tag
        return suite_yaml._STR

    loader = suite_yaml._Loader("a: 1")
    letters = "nNtTfFrueaslULE0x.1~+-"
    values = {"".join(chars) for size in range(5) for chars in itertools.product(letters[:8], repeat=size)}
    values |= {"".join(chars) for size in range(5) for chars in itertools.product("n0x.1~+-eI", repeat=size)}
    values |= {"null", "Null", "NULL", "nULL", "true", "True", "TRUE", "tRUE", "false", "False", "FALSE", "no",
               "Town5", "tests", "~", "", ".nan", ".inf", "-.inf", "0x1F", "0o7", "1e3", "1.5", "-3", "+3", "fals"}
    tags = {value: loader.resolve(suite_yaml.pyyaml.ScalarNode, value, (True, False)) for value in values}
    assert tags == {value: by_regex(value) for value in values}
    assert {tags["Null"], tags["FALSE"], tags["nULL"], tags["0x1F"]} == {suite_yaml._NULL, suite_yaml._BOOL,
                                                                         suite_yaml._STR, suite_yaml._INT}
    loader.dispose()
