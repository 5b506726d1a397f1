"""Safe YAML loading that keeps the line and column of every node: the one reader of suites, models files
and harness files (in `engine.base`, so the harness layer, below the suite layer, can use it too).

ruamel.yaml's C safe loader composes the node tree (each node carries its start mark; its pure-Python loader
only where the C parser wrongly refuses a file); the Python values are built here from that tree, which is
where the positions are recorded and the safety rules live:

- plain scalars are read with YAML 1.2's core schema (`no` and `yes` stay text, `0o17` is octal); dates and `=`
  stay text too, since suites hold no timestamps;
- any other tag (`!!python/object`, `!!binary`, custom `!tags`) is refused;
- duplicate mapping keys are errors, and so are merge keys (`<<`) except in files of a kind that reads them
  (another tool's config: `FileKind.merge_keys`); nesting deeper than `MAX_DEPTH` is refused;
- the file size is capped (`MAX_BYTES`; a suite file's cap is a setting, `ENGINE_MAX_SUITE_MB`) and aliases are
  counted while building values, so a billion-laughs file is refused long before it is expanded;
- every value's position is recorded in `Positions`, keyed by its path (`("tests", 3, "eval")`).

The loader knows no file format: a `FileKind` passed in names the file in its messages ("not allowed in
harness files"), and the default keeps the suite's words.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.cyaml import CParser
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import ScalarNode, SequenceNode
from ruamel.yaml.parser import Parser
from ruamel.yaml.reader import Reader
from ruamel.yaml.resolver import Resolver
from ruamel.yaml.scanner import Scanner
from ruamel.yaml.tag import Tag

from engine.base.diagnostic import Diagnostic
from engine.base.limits import DEFAULT_SUITE_MB, SUITE_MB_SETTING
from engine.base.positions import START, Entry, Path_, Positions, at

__all__ = ["MAX_BYTES", "SUITE_FILE", "FileKind", "LoadedYaml", "Positions", "load_yaml_file", "load_yaml_text",
           "size_limit", "yaml_hint"]

MAX_BYTES = 5 * 1024 * 1024
MAX_DEPTH = 100   # nesting of lists and mappings: far past any suite, and safe for every recursive reader after
# Values built per composed node before we call it alias abuse: generous for honest reuse of anchors.
_EXPANSION_FACTOR = 20
_EXPANSION_FLOOR = 10_000

_CORE = "tag:yaml.org,2002:"
_STR, _SEQ, _MAP = _CORE + "str", _CORE + "seq", _CORE + "map"
_SCALARS = {_CORE + k for k in ("null", "bool", "int", "float")}   # the core schema's non-text scalars
_TAGS = {tag: Tag(suffix=tag) for tag in _SCALARS}


@dataclass(frozen=True)
class FileKind:
    """How the loader's messages name the file it reads.

    Args:
        noun: What the file is, as in "not allowed in {noun} files" (`suite`, `harness`, `models`).
        empty: What an empty file should hold: "a suite needs at least `suite:` and `tests:`".
        too_big: The fix for a file over its size limit: "split it into several suites".
        merge_keys: Read YAML merge keys (`<<: *base`, the keys of the mapping(s) it names, the mapping's own
            keys winning), as another tool's files may use them; off for the engine's own files.
        setting: The environment variable that sets the size limit of this kind of file, in MB (None: `MAX_BYTES`).
        default_mb: The limit when the setting is not set.
    """

    noun: str
    empty: str
    too_big: str
    merge_keys: bool = False
    setting: str | None = None
    default_mb: float = MAX_BYTES / (1024 * 1024)


SUITE_FILE = FileKind("suite", "a suite needs at least `suite:` and `tests:`",
                      "split it into several suites, or move its case rows to a `cases_from:` file (read a row at a "
                      "time)", setting=SUITE_MB_SETTING, default_mb=DEFAULT_SUITE_MB)


def size_limit(kind: FileKind) -> tuple[int, str | None]:
    """(the largest file of `kind` read, in bytes; what is wrong with its setting, or None).

    A setting that is not a positive number of MB is a problem, and the default limit holds.
    """
    default = int(kind.default_mb * 1024 * 1024)
    raw = os.environ.get(kind.setting, "").strip() if kind.setting else ""
    if not raw:
        return default, None
    try:
        megabytes = float(raw)
    except ValueError:
        megabytes = math.nan
    if not (math.isfinite(megabytes) and megabytes > 0):
        return default, (f"{kind.setting}={raw[:40]} is not a size in MB; set it to a positive number such as "
                         f"{kind.setting}=50, or unset it for the default {kind.default_mb:g} MB")
    return int(megabytes * 1024 * 1024), None


class _Refused(Exception):
    """A rule of the safe loader was broken; carries the diagnostic."""

    def __init__(self, line: int, col: int, message: str) -> None:
        super().__init__(message)
        self.line, self.col, self.message = line, col, message


class _Rules(Resolver):
    """The resolver both loaders share: ruamel's YAML 1.2 patterns for the core schema, and a nesting limit.

    The table keeps ruamel's own patterns (compiled once, not through its lazy wrapper) for null, bool, int and
    float only: dates and `=` read as text, and `<<` is a plain key the builder refuses. Each tag is one shared
    `Tag`, whose text ruamel works out once.
    """

    yaml_implicit_resolvers = {  # noqa: RUF012 (ruamel's resolver reads this class-level table)
        first: [(_TAGS[tag], pattern.lazy_self()) for tag, pattern in patterns if tag in _TAGS]
        for first, patterns in Resolver.yaml_implicit_resolvers.items()}
    processing_version = (1, 2)   # what ruamel's int and float constructors ask (1.1 would read `017` as octal)
    nesting = 0

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Tag:
        """The tag of an untagged node: a plain scalar's by the patterns, else its kind's default."""
        if kind is ScalarNode:
            if implicit[0]:
                for tag, pattern in self.yaml_implicit_resolvers.get(value[:1], ()):
                    if pattern.match(value):
                        return tag
            return self.DEFAULT_SCALAR_TAG
        return self.DEFAULT_SEQUENCE_TAG if kind is SequenceNode else self.DEFAULT_MAPPING_TAG

    # The composer calls these two around every node. The C composer's recursion has no depth limit of its own
    # (tens of thousands of `[` overflow the C stack), so the nesting is counted here and refused past MAX_DEPTH.
    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise _Refused(*at(current_node.start_mark), f"lists and mappings here are nested more than {MAX_DEPTH} "
                                                          "levels deep; flatten them")

    def ascend_resolver(self) -> None:
        self.nesting -= 1


class _Loader(CParser, SafeConstructor, _Rules):  # type: ignore[misc]
    """ruamel.yaml's C safe loader (as `ruamel.yaml.cyaml.CSafeLoader` is made) with the shared rules."""

    def __init__(self, source: str) -> None:
        CParser.__init__(self, source)
        self._parser = self._composer = self
        SafeConstructor.__init__(self, loader=self)
        _Rules.__init__(self, loadumper=self)


class _PythonLoader(Reader, Scanner, Parser, Composer, SafeConstructor, _Rules):
    """ruamel.yaml's pure-Python safe loader (as `ruamel.yaml.loader.SafeLoader` is made) with the shared rules.

    Read only when the C parser refuses a file: ruamel's C parser is libyaml 0.1.7, which refuses YAML 1.2
    that ruamel's Python parser reads, such as a `:` or `?` inside a plain scalar in a [list] or {mapping}
    (`base_urls: [http://gpu1:8000/v1]`).
    """

    max_depth = 0   # ruamel's own depth check, off: the shared MAX_DEPTH applies to both loaders

    def __init__(self, source: str) -> None:
        self.comment_handling = None
        Reader.__init__(self, source, loader=self)
        Scanner.__init__(self, loader=self)
        Parser.__init__(self, loader=self)
        Composer.__init__(self, loader=self)
        SafeConstructor.__init__(self, loader=self)
        _Rules.__init__(self, loadumper=self)
        self.warn_double_anchors = False   # YAML lets a later anchor reuse a name, as the C parser allows


@dataclass
class LoadedYaml:
    """A parsed document: its Python value, the positions of its nodes, and what went wrong."""

    data: Any
    positions: Positions
    diagnostics: list[Diagnostic]


class _Builder:
    """Turns composed nodes into plain dict/list/scalars, recording positions and enforcing limits.

    The hot loop of every load: attribute lookups are hoisted into locals, and text, the usual scalar, returns
    first. Scalars of the other core types are made by the loader's own constructors.
    """

    def __init__(self, loader: SafeConstructor, budget: int, noun: str, merge_keys: bool = False) -> None:
        self.loader = loader
        self.noun = noun
        self.merge_keys = merge_keys
        self.budget = budget
        self.built = 0
        self.raw: dict[Path_, str] = {}
        self.root: Entry | None = None

    @property
    def positions(self) -> Positions:
        """What was recorded (nothing, when the build was refused before it finished)."""
        return Positions(self.root, self.raw, self.built)

    def build(self, node: Any, path: Path_) -> Any:
        raw, loader, noun, budget, merge_keys = self.raw, self.loader, self.noun, self.budget, self.merge_keys
        constructors = loader.yaml_constructors
        open_nodes: set[Any] = set()   # the lists and mappings being built, to refuse an alias to its container
        text_tag, seq_tag, map_tag = _Rules.DEFAULT_SCALAR_TAG, _Rules.DEFAULT_SEQUENCE_TAG, _Rules.DEFAULT_MAPPING_TAG
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
            ctag = node.ctag   # the resolver's own Tag objects for untagged text, lists and mappings
            if ctag is text_tag:
                made_pos, made_inner = mark, None
                return node.value
            if isinstance(node, ScalarNode):
                made_pos, made_inner = mark, None
                tag = str(ctag)
                if tag == _STR:
                    return node.value
                if tag not in _SCALARS:
                    raise _Refused(*at(mark), f"the tag '{_shown(tag)}' is not allowed in {noun} files (only "
                                              "plain YAML values are); remove it")
                try:
                    value = constructors[tag](loader, node)
                except (ValueError, IndexError):
                    raise _Refused(*at(mark), f"'{node.value}' is not a valid {tag.replace(_CORE, '')}; quote it "
                                              "if you meant text") from None
                if not node.style:   # written plain: its source is kept for the hints
                    raw[path] = node.value
                return value
            if node in open_nodes:
                raise _Refused(*at(mark), "an alias (*name) refers to the value that contains it; remove the loop")
            if ctag is not seq_tag and ctag is not map_tag:
                tag, is_list = str(ctag), isinstance(node, SequenceNode)
                if tag not in _SCALARS and tag not in (_STR, _SEQ, _MAP):
                    raise _Refused(*at(mark), f"the tag '{_shown(tag)}' is not allowed in {noun} files (only "
                                              "plain YAML values are); remove it")
                if tag != (_SEQ if is_list else _MAP):
                    raise _Refused(*at(mark), f"a {'list' if is_list else 'mapping'} cannot have the tag "
                                              f"'{_shown(tag)}'")
            open_nodes.add(node)   # no try/finally: a refusal ends the whole build
            if isinstance(node, SequenceNode):
                out_list = []
                items: list[Entry] = []
                for i, item in enumerate(node.value):
                    out_list.append(value_of(item, path + (i,)))
                    items.append((None, made_pos, made_inner))
                open_nodes.discard(node)
                made_pos, made_inner = mark, items
                return out_list
            out: dict[str, Any] = {}
            entries: dict[str, Entry] = {}
            merged: set[str] | None = None   # keys a merge key brought in: the mapping's own keys replace them
            for key_node, value_node in node.value:
                kmark = key_node.start_mark
                if not isinstance(key_node, ScalarNode):
                    raise _Refused(*at(kmark), "a key must be a plain name, not a list or mapping")
                key = key_node.value  # keys are always names: `1: x` has the key "1", `no:` the key "no"
                if key == "<<" and not key_node.style:
                    if not merge_keys:
                        raise _Refused(*at(kmark), "merge keys ('<<') are not supported; write the keys out")
                    value = value_of(value_node, path + (key,))
                    inner: Any = made_inner
                    if isinstance(value, dict):
                        sources = [(value, inner)]
                    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                        sources = [(v, e[2]) for v, e in zip(value, inner, strict=True)]
                    else:
                        raise _Refused(*at(kmark), "a merge key ('<<') takes a mapping or a list of mappings "
                                                   "(an alias such as *base)")
                    merged = merged if merged is not None else set()
                    for source, source_entries in sources:   # the first mapping named wins over later ones
                        for name, item in source.items():
                            if name not in out:
                                out[name] = item
                                entries[name] = source_entries[name]
                                merged.add(name)
                    continue
                if merged and key in merged:
                    merged.discard(key)
                    del out[key]
                if key in out:
                    first = at(entries[key][0] or kmark)   # a mapping's entries always have their key's mark
                    raise _Refused(*at(kmark), f"duplicate key '{key}' (first written on line {first[0]}); "
                                                "keep one of them")
                out[key] = value_of(value_node, path + (key,))
                entries[key] = (kmark, made_pos, made_inner)
            open_nodes.discard(node)
            made_pos, made_inner = mark, entries
            return out

        try:
            value = value_of(node, path)
            self.root = (None, made_pos, made_inner)
            return value
        finally:
            self.built = built
            # `value_of` calls itself, so it and its cells are a reference cycle, and the cells held the whole
            # positions tree: break it, so the tree goes with its file rather than at the next collection.
            made_inner = None
            value_of = None  # type: ignore[assignment]


def _shown(tag: str) -> str:
    """A tag as it is written in a file: `!!python/object` rather than its full `tag:yaml.org,2002:` name."""
    return tag.replace(_CORE, "!!")


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
        node, loader = _compose(source)
    except _Refused as exc:
        return LoadedYaml(None, positions, [Diagnostic(file, exc.line, exc.col, exc.message)])
    except MarkedYAMLError as exc:
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
    except YAMLError as exc:  # e.g. a reader error on control characters
        return LoadedYaml(None, positions, [Diagnostic(file, 1, 1, f"not valid YAML: {exc}")])
    if node is None:
        return LoadedYaml(None, positions, [Diagnostic(file, 1, 1, f"the file is empty; {kind.empty}")])
    budget = _EXPANSION_FLOOR + _EXPANSION_FACTOR * max(1, source.count("\n"))
    builder = _Builder(loader, budget, kind.noun, kind.merge_keys)
    try:
        data = builder.build(node, ())
    except _Refused as exc:
        return LoadedYaml(None, builder.positions, [Diagnostic(file, exc.line, exc.col, exc.message)])
    return LoadedYaml(data, builder.positions, [])


def _compose(source: str) -> tuple[Any, SafeConstructor]:
    """The document's node tree, and the loader that made it (its constructors make the scalars).

    The C parser reads; where it refuses a [list] or {mapping} that the Python parser may read (see
    `_PythonLoader`), that one decides.
    """
    loader = _Loader(source)
    try:
        return loader.get_single_node(), loader
    except MarkedYAMLError as exc:
        if "flow" not in str(exc.context) and "unexpected ':'" not in str(exc.problem):
            raise
        refused = exc
    finally:
        loader.dispose()
    python_loader = _PythonLoader(source)
    try:
        return python_loader.get_single_node(), python_loader
    except MarkedYAMLError as exc:   # the C parser's ':' may have been no error at all: then the real one is this
        raise (exc if "unexpected ':'" in str(refused.problem) else refused) from None


def _first_tab(source: str, line: int, col: int) -> tuple[int, int]:
    lines = source.splitlines()
    for number in range(max(1, line - 1), min(len(lines), line + 1) + 1):
        index = lines[number - 1].find("\t")
        if index >= 0:
            return number, index + 1
    return line, col


def load_yaml_file(path: Path, file: str | None = None, *, kind: FileKind = SUITE_FILE) -> LoadedYaml:
    """Read and parse a YAML file, refusing files over the size limit (`size_limit`) and text that is not UTF-8.

    Args:
        path: The file to read.
        file: The name to use in diagnostics (default: `str(path)`).
        kind: How the messages name the file (default: a suite file).
    """
    name = file if file is not None else str(path)
    limit, problem = size_limit(kind)
    if problem is not None:
        return LoadedYaml(None, Positions(), [Diagnostic(name, 0, 0, problem)])
    try:
        size = path.stat().st_size
        if size > limit:
            setting = (f" ({kind.setting}); {kind.too_big}, or raise the limit: {kind.setting}="
                       f"{math.ceil(size / (1024 * 1024))}" if kind.setting else f": {kind.too_big}")
            return LoadedYaml(None, Positions(), [Diagnostic(
                name, 1, 1, f"the file is {size / (1024 * 1024):.1f} MB; {kind.noun} files are limited to "
                            f"{limit / (1024 * 1024):g} MB{setting}")])
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
