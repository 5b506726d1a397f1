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
    """`Positions.of` answered from path-keyed dicts: what the position tree must agree with."""
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
    monkeypatch.setenv("ENGINE_MAX_SUITE_MB", str(100 / 1024 / 1024))
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


def test_yaml_12_words_dates_and_octal_read_as_suites_mean_them() -> None:
    """YAML 1.1's yes/no/on/off words and leading-zero octal are not what suite authors mean; dates and `=` are
    text, since no suite field holds a timestamp."""
    loaded = load_yaml_text("a: on\nb: Off\nc: y\nd: 017\ne: 0o17\nf: 2024-05-01\ng: =\nh: null\ni: -2\nj: 1.5\n",
                            "f.yaml")
    assert loaded.diagnostics == []
    assert loaded.data == {"a": "on", "b": "Off", "c": "y", "d": 17, "e": 15, "f": "2024-05-01", "g": "=",
                           "h": None, "i": -2, "j": 1.5}
    assert type(loaded.data["j"]) is float and type(loaded.data["d"]) is int


def test_explicit_core_tags_are_read_and_others_refused_with_the_place() -> None:
    loaded = load_yaml_text("a: !!str 5\nb: !!int '7'\nc: !!float 1\nd: !!seq [x]\n", "f.yaml")
    assert loaded.data == {"a": "5", "b": 7, "c": 1.0, "d": ["x"]}
    [diag] = load_yaml_text("a: 1\nb: !!binary aGk=\n", "f.yaml").diagnostics
    assert (diag.line, diag.col) == (2, 4) and "'!!binary' is not allowed in suite files" in diag.message
    [diag] = load_yaml_text("a: !!str [1]\n", "f.yaml").diagnostics
    assert (diag.line, diag.col) == (1, 4) and "a list cannot have the tag '!!str'" in diag.message
    [diag] = load_yaml_text("a: !!int x\n", "f.yaml").diagnostics
    assert "'x' is not a valid int; quote it" in diag.message


def test_merge_keys_and_alias_loops_are_refused() -> None:
    [diag] = load_yaml_text("base: &b {x: 1}\nother:\n  <<: *b\n", "f.yaml").diagnostics
    assert (diag.line, diag.col) == (3, 3) and "merge keys" in diag.message
    assert load_yaml_text("a: {'<<': 1}\n", "f.yaml").data == {"a": {"<<": 1}}   # quoted, it is a plain key
    [diag] = load_yaml_text("a: &x [1, *x]\n", "f.yaml").diagnostics
    assert "refers to the value that contains it" in diag.message


FOREIGN = suite_yaml.FileKind("promptfoo config", "write prompts:", "split it", merge_keys=True)


def test_a_foreign_config_reads_merge_keys_as_js_yaml_does() -> None:
    text = "base: &b {a: 1, b: 2}\nmore: &m {c: 3, a: 9}\nt:\n  x: 0\n  <<: [*b, *m]\n  b: 5\n"
    loaded = load_yaml_text(text, "c.yaml", kind=FOREIGN)
    assert loaded.diagnostics == []
    # Its own keys win wherever they are written; among the mappings merged, the first named wins.
    assert loaded.data["t"] == {"x": 0, "a": 1, "c": 3, "b": 5}
    assert loaded.positions.of(("t", "a")) == (1, 14) and loaded.positions.of(("t", "b")) == (6, 6)
    [diag] = load_yaml_text("t: {<<: 3}\n", "c.yaml", kind=FOREIGN).diagnostics
    assert (diag.line, diag.col) == (1, 5) and "takes a mapping or a list of mappings" in diag.message


def test_merge_keys_do_not_get_round_the_anchor_budget() -> None:
    rows = ["a0: &a0 {k: [lol, lol, lol, lol, lol, lol, lol, lol, lol]}"]
    rows += [f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 9)}]}}" for i in range(1, 12)]
    [diag] = load_yaml_text("\n".join(rows) + "\n", "c.yaml", kind=FOREIGN).diagnostics
    assert "repeats anchors" in diag.message


def test_colons_and_question_marks_inside_flow_plain_scalars_are_read_with_their_places() -> None:
    """YAML 1.2 allows `:` and `?` inside a plain scalar in a [list] or {mapping}; the C parser ruamel ships
    (libyaml 0.1.7) refuses them, so such a file must still load, with positions, limits and refusals."""
    text = "base_urls: [http://gpu1:8000/v1, http://gpu2:8000/v1]\nat: {time: 12:30, q: a?b}\nn: [1, yes]\n"
    loaded = load_yaml_text(text, "models.yaml")
    assert loaded.diagnostics == []
    assert loaded.data == {"base_urls": ["http://gpu1:8000/v1", "http://gpu2:8000/v1"],
                           "at": {"time": "12:30", "q": "a?b"}, "n": [1, "yes"]}
    assert loaded.positions.of(("base_urls", 1)) == (1, 34) and loaded.positions.of(("at", "q"), key=True) == (2, 19)
    assert loaded.positions.raw == {("n", 0): "1"}
    [diag] = load_yaml_text("a: [http://x]\na: 2\n", "f.yaml").diagnostics
    assert (diag.line, diag.col) == (2, 1) and "duplicate key 'a'" in diag.message
    [diag] = load_yaml_text("a: [http://x]\nb: [1, *nope]\n", "f.yaml").diagnostics   # the real error, not the ':'
    assert (diag.line, diag.col) == (2, 8) and "undefined alias" in diag.message
    [diag] = load_yaml_text("a: [http://x, " + "[" * 150 + "]" * 150 + "]\n", "f.yaml").diagnostics
    assert "nested more than" in diag.message


def test_deep_nesting_is_refused_at_its_place_not_crashing() -> None:
    """Far past the limit too: the C composer would run out of stack on tens of thousands of levels."""
    for depth in (suite_yaml.MAX_DEPTH + 5, 200_000):
        [diag] = load_yaml_text("suite: s\ntests: " + "[" * depth + "]" * depth + "\n", "f.yaml").diagnostics
        assert diag.line == 2 and "nested more than" in diag.message
        [diag] = load_yaml_text("suite: s\ntests:\n" + "- " * depth + "x\n", "f.yaml").diagnostics
        assert diag.line == 3 and "nested more than" in diag.message
    shallow = suite_yaml.MAX_DEPTH // 2
    assert load_yaml_text("a: " + "[" * shallow + "]" * shallow + "\n", "f.yaml").diagnostics == []
