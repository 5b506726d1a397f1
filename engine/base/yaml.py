"""Safe YAML loading that keeps the line and column of every node: the one loader for suites, models files
and harness files (it sits in `engine.base` so the harness layer, below the suite layer, can use it too).

Why libyaml (PyYAML's C parser) and not ruamel.yaml: ruamel's composer is pure Python and took 3.2 s to
compose a 10,000-test suite on the reference machine, against 0.35 s for libyaml; `engine validate` must
stay well under 2 s at that size. Only the *composer* is used: scalars are resolved here with the YAML 1.2
core schema (so `no` stays the text "no", as ruamel and YAML 1.2 read it), and Python values are built
here, which is where the safety rules live:

- any tag outside the core schema (`!!python/object`, `!!binary`, custom `!tags`) is refused;
- duplicate mapping keys are errors;
- the file size is capped (`MAX_BYTES`) and aliases are counted while building values, so a
  billion-laughs file is refused long before it is expanded;
- every value's position is recorded in `Positions`, keyed by its path (`("tests", 3, "eval")`).

The loader knows no file format: a `FileKind` passed in names the file in its messages ("not allowed in
harness files"), and the default keeps the suite's words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml as pyyaml

from engine.base.diagnostic import Diagnostic
from engine.base.positions import START, Entry, Path_, Positions, at

__all__ = ["MAX_BYTES", "SUITE_FILE", "FileKind", "LoadedYaml", "Positions", "load_yaml_file", "load_yaml_text",
           "yaml_hint"]

MAX_BYTES = 5 * 1024 * 1024
# Values built per composed node before we call it alias abuse: generous for honest reuse of anchors.
_EXPANSION_FACTOR = 20
_EXPANSION_FLOOR = 10_000


_CORE = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_CORE + k for k in ("str", "int", "float", "bool", "null"))
_SEQ, _MAP = _CORE + "seq", _CORE + "map"
_ALLOWED_TAGS = {_STR, _INT, _FLOAT, _BOOL, _NULL, _SEQ, _MAP}

# YAML 1.2 core schema, https://yaml.org/spec/1.2.2/#1032-tag-resolution
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_RE = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_RE = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


@dataclass(frozen=True)
class FileKind:
    """How the loader's messages name the file it reads.

    Args:
        noun: What the file is, as in "not allowed in {noun} files" (`suite`, `harness`, `models`).
        empty: What an empty file should hold: "a suite needs at least `suite:` and `tests:`".
        too_big: The fix for a file over `MAX_BYTES`: "split it into several suites".
    """

    noun: str
    empty: str
    too_big: str


SUITE_FILE = FileKind("suite", "a suite needs at least `suite:` and `tests:`", "split it into several suites")

_MAY_BE_SPECIAL = frozenset("0123456789+-.~nNtTfF")
_WORD_START = frozenset("nNtTfF")   # of those, the letters: only words (null, true, false) can start with them
_NULL_WORDS = frozenset({"null", "Null", "NULL"})
_BOOL_WORDS = frozenset({"true", "True", "TRUE", "false", "False", "FALSE"})


class _Loader(pyyaml.CSafeLoader if pyyaml.__with_libyaml__ else pyyaml.SafeLoader):  # type: ignore[misc]
    """libyaml's composer with YAML 1.2 core-schema tag resolution for plain scalars."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is pyyaml.ScalarNode:
            if not implicit[0]:  # quoted: always text
                return _STR
            if value and value[0] not in _MAY_BE_SPECIAL:  # most scalars are words: skip the regexes
                return _STR
            first = value[:1]
            if first in _WORD_START:
                # Keys and words such as `tests`, `name`, `Town5`: only the null and bool words among them are
                # not text, and a plain scalar never ends in a line break (which `$` would also match), so a set
                # lookup says what the four regexes said. They ran on 117,000 scalars of the bench suite.
                return _NULL if value in _NULL_WORDS else _BOOL if value in _BOOL_WORDS else _STR
            if not value or first == "~":
                return _NULL if value in ("", "~") else _STR   # `~x` is text: no number starts with `~`
            # A digit, sign or dot: never null or a bool, so only the number regexes are asked.
            if _INT_RE.match(value):
                return _INT
            if _FLOAT_RE.match(value):
                return _FLOAT
            return _STR
        return _SEQ if kind is pyyaml.SequenceNode else _MAP

    # The composer calls these two around every node (133,000 times each for the bench suite) for YAML path
    # resolvers, which this loader never has: nothing to look up. Composing that suite: medians of 15 runs in
    # turn with PyYAML's, 0.91x and 0.86x (issue #22 item 3, third pass).
    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        return None

    def ascend_resolver(self) -> None:
        return None


@dataclass
class LoadedYaml:
    """A parsed document: its Python value, the positions of its nodes, and what went wrong."""

    data: Any
    positions: Positions
    diagnostics: list[Diagnostic]


class _Refused(Exception):
    """A rule of the safe loader was broken; carries the diagnostic."""

    def __init__(self, line: int, col: int, message: str) -> None:
        super().__init__(message)
        self.line, self.col, self.message = line, col, message


def _int(text: str) -> int:
    if text.startswith("0o"):
        return int(text, 0)
    if text.startswith("0x"):
        return int(text, 0)
    return int(text)


def _float(text: str) -> float:
    low = text.lower()
    if low.endswith(".inf"):
        return float("-inf") if low.startswith("-") else float("inf")
    if low == ".nan":
        return float("nan")
    return float(text)


class _Builder:
    """Turns composed nodes into plain dict/list/scalars, recording positions and enforcing limits.

    The hot loop of every load (74,000 nodes in the 10,003-test bench suite): attribute lookups are hoisted
    into locals and text, the usual scalar, returns first. Building that suite's values took 0.22 s of CPU
    with the previous one-method-per-step builder and 0.13-0.15 s with this one (runs back to back, load ~6;
    issue #22, bench/README.md); positions as a tree (`Positions`) instead of path-keyed dicts took it to
    0.09 s (issue #22 item 3, third pass).
    """

    def __init__(self, budget: int, noun: str) -> None:
        self.noun = noun
        self.budget = budget
        self.built = 0
        self.open: set[int] = set()
        self.raw: dict[Path_, str] = {}
        self.root: Entry | None = None

    @property
    def positions(self) -> Positions:
        """What was recorded (nothing, when the build was refused before it finished)."""
        return Positions(self.root, self.raw, self.built)

    def build(self, node: Any, path: Path_) -> Any:
        raw = self.raw
        open_nodes, noun, budget = self.open, self.noun, self.budget
        scalar_node, sequence_node = pyyaml.ScalarNode, pyyaml.SequenceNode
        allowed, text_tag, seq_tag, map_tag, merge_tag = _ALLOWED_TAGS, _STR, _SEQ, _MAP, _CORE + "merge"
        built = self.built
        # What the last `value_of` call built: its position and the entries inside it (None for a scalar).
        made_pos: Any = START
        made_inner: dict[str, Entry] | list[Entry] | None = None

        def value_of(node: Any, path: Path_) -> Any:
            nonlocal built, made_pos, made_inner
            built += 1
            mark = node.start_mark
            if built > budget:
                raise _Refused(*at(mark), "this file repeats anchors (&name / *name) too many times; it would expand "
                                     "to a huge document, so it is refused. Write the values out instead")
            tag = node.tag
            kind = node.__class__
            if kind is scalar_node and tag == text_tag:
                made_pos, made_inner = mark, None
                return node.value
            if tag not in allowed:
                shown = tag.replace(_CORE, "!!")
                raise _Refused(*at(mark), f"the tag '{shown}' is not allowed in {noun} files (only plain YAML "
                                     "values are); remove it")
            if kind is scalar_node or isinstance(node, scalar_node):
                value, plain = _scalar(node, tag)
                if plain:
                    raw[path] = node.value
                made_pos, made_inner = mark, None
                return value
            marker = id(node)
            if marker in open_nodes:
                raise _Refused(*at(mark), "an alias (*name) refers to the value that contains it; remove the loop")
            open_nodes.add(marker)   # no try/finally: a refusal ends the whole build
            if kind is sequence_node or isinstance(node, sequence_node):
                if tag != seq_tag:
                    raise _Refused(*at(mark), f"a list cannot have the tag '{tag.replace(_CORE, '!!')}'")
                out_list = []
                items: list[Entry] = []
                for i, item in enumerate(node.value):
                    out_list.append(value_of(item, path + (i,)))
                    items.append((None, made_pos, made_inner))
                open_nodes.discard(marker)
                made_pos, made_inner = mark, items
                return out_list
            if tag != map_tag:
                raise _Refused(*at(mark), f"a mapping cannot have the tag '{tag.replace(_CORE, '!!')}'")
            out: dict[str, Any] = {}
            entries: dict[str, Entry] = {}
            for key_node, value_node in node.value:
                kmark = key_node.start_mark
                if key_node.__class__ is not scalar_node and not isinstance(key_node, scalar_node):
                    if key_node.tag == merge_tag:
                        raise _Refused(*at(kmark), "merge keys ('<<') are not supported; write the keys out")
                    raise _Refused(*at(kmark), "a key must be a plain name, not a list or mapping")
                key = key_node.value  # keys are always names: `1: x` has the key "1", `no:` the key "no"
                if key_node.tag == merge_tag or (key == "<<" and not key_node.style):
                    raise _Refused(*at(kmark), "merge keys ('<<') are not supported; write the keys out")
                if key in out:
                    first = at(entries[key][0] or kmark)   # a mapping's entries always have their key's mark
                    raise _Refused(*at(kmark), f"duplicate key '{key}' (first written on line {first[0]}); "
                                                "keep one of them")
                out[key] = value_of(value_node, path + (key,))
                entries[key] = (kmark, made_pos, made_inner)
            open_nodes.discard(marker)
            made_pos, made_inner = mark, entries
            return out

        try:
            value = value_of(node, path)
            self.root = (None, made_pos, made_inner)
            return value
        finally:
            self.built = built
            # `value_of` calls itself, so it and its cells are a reference cycle, and the cells held the whole
            # positions tree: it lived on, after its file was loaded, until the collector ran. The collection
            # after `engine validate`'s load walked it (the bench suite's 133,000 marks and 125,000 tuples).
            made_inner = None
            value_of = None  # type: ignore[assignment]


def _scalar(node: Any, tag: str) -> tuple[Any, bool]:
    """A scalar that is not text: its value, and whether it was written plain (kept for the hints)."""
    text = node.value
    try:
        if tag == _STR:
            return text, False
        if tag == _NULL:
            value: Any = None
        elif tag == _BOOL:
            value = text.lower() == "true"
        elif tag == _INT:
            value = _int(text)
        else:
            value = _float(text)
    except ValueError:
        mark = node.start_mark
        raise _Refused(mark.line + 1, mark.column + 1,
                       f"'{text}' is not a valid {tag.replace(_CORE, '')}; quote it if you meant text") from None
    return value, not node.style  # libyaml reports plain style as "", pure PyYAML as None


def yaml_hint(source: str, line: int, problem: str) -> str:
    """A plain-words hint for a YAML syntax error at 1-based `line` of `source`."""
    lines = source.splitlines()
    here = lines[line - 1] if 0 < line <= len(lines) else ""
    before = lines[line - 2] if 1 < line <= len(lines) + 1 else ""
    if "\t" in here or "tab" in problem:
        return "YAML does not allow tab characters for indentation; indent with spaces"
    stripped = here.lstrip()
    if stripped.startswith("eval:") and before.lstrip().startswith("golden:"):
        indent, above = len(here) - len(stripped), len(before) - len(before.lstrip())
        if indent > above:
            return ("`eval:` is indented deeper than `golden:` above it, so YAML reads it as part of the golden "
                    "answer; line `eval:` up with `golden:`")
        if indent < above:
            return ("`eval:` is indented less than `golden:` above it, so YAML no longer reads it as part of "
                    "this test; line `eval:` up with `golden:`")
    if "mapping values are not allowed" in problem:
        return ("a `key: value` appears where YAML did not expect one; check this line's indentation against "
                "the line above, or quote a value that contains ': '")
    if "quoted" in problem:
        return "a quoted text is never closed; add the closing quote"
    if "expected ',' or ']'" in problem or "expected ',' or '}'" in problem:
        return "a [list] or {mapping} written on one line is not closed, or an item in it needs quotes"
    if "undefined alias" in problem:
        return "an alias (*name) refers to an anchor (&name) that is not defined above it"
    if "could not find expected ':'" in problem:
        return "a line that should be `key: value` has no ':'; check the line above too"
    return "check the indentation and quoting here"


def load_yaml_text(source: str, file: str, *, kind: FileKind = SUITE_FILE) -> LoadedYaml:
    """Parse one YAML document from text.

    Args:
        source: The file's text.
        file: The path to name in diagnostics.
        kind: How the messages name the file (default: a suite file).

    Returns:
        The loaded value (None on error), positions, and diagnostics (empty when fine).
    """
    positions = Positions()
    try:
        loader = _Loader(source)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except pyyaml.MarkedYAMLError as exc:
        context = str(exc.context or "")
        # An unclosed quote or [list] is found at the end of the file; where it opens is more useful.
        opened = "quoted scalar" in context or "flow" in context
        mark = (exc.context_mark if opened else None) or exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = str(exc.problem or exc.context or "not valid YAML")
        if "quoted scalar" in context:
            problem = f"{problem} {context}"
        if "tab" in problem:  # libyaml points at the start of the scalar; the tab itself is more useful
            line, col = _first_tab(source, line, col)
        msg = f"not valid YAML: {problem}; {yaml_hint(source, line, problem)}"
        return LoadedYaml(None, positions, [Diagnostic(file, line, col, msg)])
    except pyyaml.YAMLError as exc:  # e.g. a reader error on control characters
        return LoadedYaml(None, positions, [Diagnostic(file, 1, 1, f"not valid YAML: {exc}")])
    if node is None:
        return LoadedYaml(None, positions, [Diagnostic(file, 1, 1, f"the file is empty; {kind.empty}")])
    builder = _Builder(budget=_EXPANSION_FLOOR + _EXPANSION_FACTOR * max(1, source.count("\n")), noun=kind.noun)
    try:
        data = builder.build(node, ())
    except _Refused as exc:
        return LoadedYaml(None, builder.positions, [Diagnostic(file, exc.line, exc.col, exc.message)])
    except RecursionError:
        return LoadedYaml(None, builder.positions,
                          [Diagnostic(file, 1, 1, "the file nests lists or mappings too deeply to read")])
    return LoadedYaml(data, builder.positions, [])


def _first_tab(source: str, line: int, col: int) -> tuple[int, int]:
    lines = source.splitlines()
    for number in range(max(1, line - 1), min(len(lines), line + 1) + 1):
        index = lines[number - 1].find("\t")
        if index >= 0:
            return number, index + 1
    return line, col


def load_yaml_file(path: Path, file: str | None = None, *, kind: FileKind = SUITE_FILE) -> LoadedYaml:
    """Read and parse a YAML file, refusing files over `MAX_BYTES` and text that is not UTF-8.

    Args:
        path: The file to read.
        file: The name to use in diagnostics (default: `str(path)`).
        kind: How the messages name the file (default: a suite file).
    """
    name = file if file is not None else str(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            return LoadedYaml(None, Positions(), [Diagnostic(
                name, 1, 1, f"the file is {size / 1e6:.1f} MB; {kind.noun} files are limited to "
                            f"{MAX_BYTES // (1024 * 1024)} MB: {kind.too_big}")])
        raw = path.read_bytes()
    except OSError as exc:
        return LoadedYaml(None, Positions(), [Diagnostic(name, 0, 0, f"cannot read the file: {exc.strerror}")])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return LoadedYaml(None, Positions(), [Diagnostic(
            name, line, 1, "the file is not UTF-8 text; save it as UTF-8")])
    return load_yaml_text(text, name, kind=kind)
