"""The tests of loaded suites, held compactly: a run's memory follows the calls in flight, not the suite's size.

A suite's tests are mostly case rows of a few test definitions. What the rows of one definition share (its
settings, tools, tags, evaluator spec, and the compiled evaluator when the spec has no template) is kept once,
as a *frame*. What each row has of its own is split: its key (id, hash, case row) stays in memory, about 50
bytes a test, since resuming, sharding, filtering and the manifest read every test's key; the rest (messages,
variables, golden, where the row came from) is pickled to a spool, a temporary file that stays in memory up to
`SPOOL_MEMORY_BYTES` and moves to the temporary folder (TMPDIR) past it. Reading a test rebuilds it: the row
unpickled, the frame's parts added, and an evaluator whose spec has templates compiled again for the row (the
same compile the loader ran, so the rebuilt Test equals the one loaded).

`TestSet` is the `Sequence[Test]` the loader hands out (a suite's tests, or a selection of them). Code that
reads every test's key, tags or settings but not its messages reads `keys_of(tests)`, which works on any
sequence of Tests and rebuilds nothing.
"""

from __future__ import annotations

import array
import copy
import dataclasses
import functools
import itertools
import operator
import pickle
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Self, TypeVar, overload

from engine.errors import StorageError
from engine.model.agent import AgentSettings
from engine.model.test import Test, TestKey
from engine.model.tree import Node

__all__ = [
    "SPOOL_MEMORY_BYTES",
    "RowEvaluator",
    "TestSet",
    "TestStore",
    "definition_samples",
    "joined",
    "keys_of",
    "subset",
]

#: The spool stays in memory up to this size, then moves to a temporary file (in TMPDIR).
SPOOL_MEMORY_BYTES = 8 * 1024 * 1024

#: Rebuilds a row's evaluator from the test's spec and the row's variables (`engine.suite.expand.RowEvaluator`).
RowEvaluator = Callable[[Any, Mapping[str, Any]], Node]

# A test's own parts: kept in memory (its key) or spooled (the rest). Every other field is the frame's.
_KEPT = ("id", "hash", "case_index")
_SPOOLED = ("messages", "prompt", "golden", "variables", "golden_turns", "case_origin", "images")
_FRAME = tuple(f.name for f in dataclasses.fields(Test)
               if f.init and f.name not in _KEPT and f.name not in _SPOOLED and f.name != "evaluator")
_AT = {name: i for i, name in enumerate(_FRAME)}
_VARIABLES = _SPOOLED.index("variables")
_frame_values = operator.attrgetter(*_FRAME)
_spooled_values = operator.attrgetter(*_SPOOLED)
_RECENT_FRAMES = 64   # frames looked up by identity: a definition's rows (and variants) come one after another
# A Test is rebuilt field by field, as pickle rebuilds an object: its dataclass __init__ checks nothing and costs
# twice as much. The fields it computes later (`_messages_json`, `_golden_json`) start as None.
_SETTERS = {f.name: getattr(Test, f.name).__set__ for f in dataclasses.fields(Test)}
_FRAME_SETTERS = tuple(_SETTERS[name] for name in _FRAME)
_SPOOLED_SETTERS = tuple(_SETTERS[name] for name in _SPOOLED)
_UNSET_SETTERS = tuple(_SETTERS[f.name] for f in dataclasses.fields(Test) if not f.init)


class _Key(NamedTuple):
    """A test's key and settings, read without rebuilding it (`TestKey`): its own fields, then its frame's."""

    id: str
    hash: str
    case_index: int | None
    suite: str
    variant: str | None
    repeat: int
    agent: AgentSettings | None
    tags: tuple[str, ...]
    file: str
    line: int
    max_tokens: int | None


_KEY_OF_FRAME = _Key._fields[3:]
_new_key = functools.partial(tuple.__new__, _Key)   # a key from a tuple of its fields, without a Python call


class _Frame:
    """What the rows of one test definition share.

    Args:
        values: The frame fields' values, in `_FRAME` order.
        evaluator: Its first row's evaluator, which its rows share until one comes with another (compiled for
            that row from a spec with templates): from then on, each row's is compiled by `rebuild` when it is read.
        rebuild: How the loader compiled a row's evaluator from the spec and the row's variables.
    """

    __slots__ = ("evaluator", "key", "per_row", "rebuild", "values")

    def __init__(self, values: tuple[Any, ...], evaluator: Node | None, rebuild: RowEvaluator) -> None:
        self.values = values
        self.evaluator = evaluator
        self.rebuild = rebuild
        self.per_row = False
        self.key = tuple(values[_AT[name]] for name in _KEY_OF_FRAME)   # the frame's fields of `_Key`

    def see(self, evaluator: Node | None) -> None:
        """Another row, with `evaluator`: one of its own makes the frame's rows compiled as they are read."""
        if not self.per_row and evaluator is not self.evaluator:
            self.evaluator, self.per_row = None, True

    def evaluator_of(self, variables: Mapping[str, Any]) -> Node | None:
        """The evaluator of a row whose variables are `variables`."""
        if not self.per_row:
            return self.evaluator
        return self.rebuild(self.values[_AT["eval"]], variables)


class TestStore:
    """Every test the loader expanded, compactly (the module docstring); `TestSet`s are views of it.

    Not for use from several threads at once while tests are added; reads are safe from any thread.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self) -> None:
        self._spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)   # noqa: SIM115 - lives with the store
        self._end = 0
        self._offsets = array.array("Q", [0])
        self._frame_of = array.array("I")
        self._ids = bytearray()                # the ids' UTF-8 text, one after another
        self._id_ends = array.array("Q")
        self._hashes = bytearray()             # 8 bytes a test: the 16 hex digits of its hash
        self._cases = array.array("q")         # -1: no case row
        self._frames: list[_Frame] = []
        self._recent: dict[tuple[Any, ...], int] = {}
        self._lock = threading.Lock()
        self._reading = False

    def __len__(self) -> int:
        return len(self._id_ends)

    def add(self, test: Test, rebuild: RowEvaluator) -> int:
        """Keep `test` (its position is returned).

        Args:
            test: An expanded test whose evaluator is compiled from `test.eval`: one object shared by the rows
                of its definition when the spec has no template, one per row otherwise.
            rebuild: How the loader compiled a row's evaluator; called again when a test whose definition's rows
                each have their own is read.

        Raises:
            StorageError: The spool could not be written (its temporary folder is full or not writable).
        """
        digest = bytes.fromhex(test.hash)
        if len(digest) != 8:
            raise ValueError(f"test {test.id!r}: a test hash is 16 hex digits, got {test.hash!r}")
        frame = self._frame(test, rebuild)
        blob = pickle.dumps(_spooled_values(test), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            if self._reading:
                self._spool.seek(self._end)
                self._reading = False
            self._spool.write(blob)
        except OSError as exc:
            raise StorageError(f"cannot keep the expanded tests in a temporary file in {tempfile.gettempdir()} "
                               f"({exc.strerror or exc}); free space there or set TMPDIR to a folder with room",
                               disk_full=exc.errno == 28) from exc
        self._end += len(blob)
        self._offsets.append(self._end)
        self._frame_of.append(frame)
        self._ids += test.id.encode()
        self._id_ends.append(len(self._ids))
        self._hashes += digest
        self._cases.append(-1 if test.case_index is None else test.case_index)
        return len(self) - 1

    def _frame(self, test: Test, rebuild: RowEvaluator) -> int:
        """The index of the test's frame: the last one, or one of the recent ones, when every frame field is the
        same object (the expander hands a definition's rows the same objects; the frames keep them alive, so an
        object's id names it while it is in `_recent`)."""
        values = _frame_values(test)
        if self._frames and all(map(operator.is_, values, self._frames[-1].values)):
            found: int | None = len(self._frames) - 1
        else:
            key = tuple(map(id, values))
            found = self._recent.get(key)
        if found is not None:
            self._frames[found].see(test.evaluator)
            return found
        self._frames.append(_Frame(values, test.evaluator, rebuild))
        if len(self._recent) >= _RECENT_FRAMES:
            del self._recent[next(iter(self._recent))]
        self._recent[tuple(map(id, values))] = len(self._frames) - 1
        return len(self._frames) - 1

    def test(self, position: int) -> Test:
        """The test at `position`, rebuilt."""
        start, end = self._offsets[position], self._offsets[position + 1]
        with self._lock:
            self._reading = True
            self._spool.seek(start)
            blob = self._spool.read(end - start)
        frame = self._frames[self._frame_of[position]]
        own = pickle.loads(blob)
        case = self._cases[position]
        test = object.__new__(Test)
        for setter, value in zip(_FRAME_SETTERS, frame.values, strict=True):
            setter(test, value)
        for setter, value in zip(_SPOOLED_SETTERS, own, strict=True):
            setter(test, value)
        for setter in _UNSET_SETTERS:
            setter(test, None)
        _SETTERS["id"](test, self._id(position))
        _SETTERS["hash"](test, self._hashes[8 * position:8 * position + 8].hex())
        _SETTERS["case_index"](test, None if case < 0 else case)
        _SETTERS["evaluator"](test, frame.evaluator_of(own[_VARIABLES]))
        return test

    def key(self, position: int) -> _Key:
        """The test's key and settings, without rebuilding it."""
        case = self._cases[position]
        return _new_key((self._id(position), self._hashes[8 * position:8 * position + 8].hex(),
                         None if case < 0 else case, *self._frames[self._frame_of[position]].key))

    def _id(self, position: int) -> str:
        return self._ids[self._id_ends[position - 1] if position else 0:self._id_ends[position]].decode()

    def frame_of(self, position: int) -> int:
        """The frame (test definition) of the test at `position`."""
        return self._frame_of[position]

    def rebuilt_per_row(self, frame: int) -> bool:
        """Whether the rows of `frame` each have their own evaluator, compiled as they are read."""
        return self._frames[frame].per_row


_Item = TypeVar("_Item")


class _View(Sequence[_Item]):
    """The items of a `TestStore` at `positions`, in order, each read from the store by `read` when asked for."""

    def __init__(self, store: TestStore, positions: range | array.array[int], read: Callable[[int], _Item]) -> None:
        self.store = store
        self.positions = positions
        self._read = read

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, index: int) -> _Item: ...
    @overload
    def __getitem__(self, index: slice) -> Self: ...
    def __getitem__(self, index: int | slice) -> _Item | Self:
        if isinstance(index, slice):
            view = copy.copy(self)
            view.positions = _compact(self.positions[index])
            return view
        return self._read(self.positions[index])

    def __iter__(self) -> Iterator[_Item]:
        read = self._read
        for position in self.positions:
            yield read(position)


class TestSet(_View[Test]):
    """Tests of a `TestStore`, in order: a suite's, a run's selection. Reading one rebuilds it."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, store: TestStore, positions: range | array.array[int]) -> None:
        super().__init__(store, positions, store.test)

    def keys(self) -> Sequence[TestKey]:
        """Every test's key and settings (`TestKey`), without rebuilding the tests."""
        return _View(self.store, self.positions, self.store.key)

    def __repr__(self) -> str:
        return f"TestSet({len(self)} tests)"


def _compact(positions: Iterable[int]) -> range | array.array[int]:
    """Positions as a range when they are one, else as a compact array."""
    if isinstance(positions, range):
        return positions
    held = array.array("Q", positions)
    if not held:
        return range(0)
    if all(b - a == 1 for a, b in itertools.pairwise(held)):
        return range(held[0], held[-1] + 1)
    return held


def keys_of(tests: Sequence[Test]) -> Sequence[TestKey]:
    """Every test's key and settings (suite, id, hash, case_index, variant, repeat, agent, tags, file, line):
    read from a TestSet's store without rebuilding its tests; a list of Tests is its own."""
    return tests.keys() if isinstance(tests, TestSet) else tests


def subset(tests: Sequence[Test], positions: Iterable[int]) -> Sequence[Test]:
    """The tests at `positions` (indexes into `tests`, in the order given)."""
    if isinstance(tests, TestSet):
        return TestSet(tests.store, _compact(tests.positions[i] for i in positions))
    return [tests[i] for i in positions]


def joined(parts: Iterable[Sequence[Test]]) -> Sequence[Test]:
    """The tests of `parts`, one after another (TestSets of one store stay a TestSet)."""
    parts = list(parts)
    if parts and all(isinstance(p, TestSet) for p in parts):
        stores = {id(p.store) for p in parts if isinstance(p, TestSet)}
        if len(stores) == 1:
            first = parts[0]
            assert isinstance(first, TestSet)
            return TestSet(first.store, _compact(i for p in parts if isinstance(p, TestSet) for i in p.positions))
    return [test for part in parts for test in part]


def definition_samples(tests: Sequence[Test], *, every_row_of: frozenset[str] = frozenset()) -> Iterator[Test]:
    """One test of each test definition in `tests`, enough to see what a definition's rows share (settings, tools,
    workspace, the kinds in its evaluator), without reading every row of a 200,000-row suite; and every test of a
    definition whose evaluator is compiled per row and holds a kind in `every_row_of` (its options, a judge's
    model say, may differ row by row). A list of Tests is given whole."""
    if not isinstance(tests, TestSet):
        yield from tests
        return
    store = tests.store
    seen: set[int] = set()
    every_row: set[int] = set()
    for position in tests.positions:
        frame = store.frame_of(position)
        if frame in seen and frame not in every_row:
            continue
        test = store.test(position)
        if frame not in seen:
            seen.add(frame)
            node = test.evaluator
            if every_row_of and store.rebuilt_per_row(frame) and node is not None and every_row_of & set(node.kinds()):
                every_row.add(frame)
        yield test
