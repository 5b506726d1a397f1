"""Where a run scores what may not score on its event loop: blocking checks in threads, slow ones in processes.

The run's event loop reads every call's reply (and stamps its first token); a check that may run long on an
answer the model wrote to stall it (ifeval, JSON Schema validation, a regex over a long answer, ...) must not run
there, nor anywhere the interpreter lock lets it stop the loop, and its time limit must be enforceable.
`ScoringPool` (the `Places` of engine.evaluators.scoring) gives a run (and `engine rescore`) both, and
`ScoringPool.score` is the one path an answer takes to its verdict there:

- `in_thread`: a blocking scorer (exec, python, workspace_check: it waits for a sandboxed program, which that
  program's own `timeout_s` ends) in a worker thread, at most one per CPU;
- `isolated`: a synchronous subtree scored in a scoring process. The processes are forked from the run (the
  engine is loaded already) and are handed the test and the answer: a compiled tree holds closures, which
  do not travel, so the process compiles the tree again from the test's spec and variables. There every
  leaf runs under its `timeout_s` (default 10 s): a timer signal ends it (Python code and `re` stop at
  once); a check that ignores the signal inside C code is ended with its process once the subtree's whole
  budget is spent, and another process takes its place. Each leaf also runs under its `memory_mb` (default
  1024 MiB): the process's address space (RLIMIT_AS) is held to what it was when the leaf started plus that
  much, so an answer written to make a check allocate many GiB gets a MemoryError, and the process is replaced
  after it answers (a check that dies of it instead is replaced too). Either way the verdict is an error that
  names the check, the limit and the answer's size, and the run goes on.

`close()` kills the processes at once: SIGTERM or a second Ctrl-C ends a run whatever a check is doing. A
process dies with the run too (the kernel's parent-death signal), and reads nothing but its socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import os
import pickle
import resource
import signal
import socket
import struct
import time
from typing import Any, NamedTuple

from engine.evaluators.base import error
from engine.evaluators.compose import finish
from engine.evaluators.scoring import (
    answer_size,
    evaluator_of,
    inline,
    run_leaves_through,
    score,
    score_async,
    score_node,
)
from engine.model.answer import Answer
from engine.model.scoring import Record, Scorer, ScoringContext
from engine.model.test import Test
from engine.model.tree import Node
from engine.model.verdict import Verdict

__all__ = ["STOPPED", "ScoringPool", "too_big", "too_long"]

#: The error of an answer whose scoring the run's end cut short (the row keeps the paid answer).
STOPPED = ("not scored: the run was stopped before this answer was scored (its answer is kept; engine rescore "
           "scores it)")
_GRACE_S = 2.0   # a job's budget beyond its checks' own limits: unpickling the test, compiling its tree
_HEADER = struct.Struct("!Q")
_PR_SET_PDEATHSIG = 1
_REAP_S = 2.0        # a process whose socket closed mid-job has this long to end by itself
_REAP_POLL_S = 0.01


def _shown(answer: Answer) -> str:
    size = answer_size(answer)
    return (f"{size} character{'s' * (size != 1)}" if size < 1000 else f"{size / 1000:.0f} KB" if size < 1_000_000
            else f"{size / 1_000_000:.1f} MB")


def too_long(kinds: str, limit: float, answer: Answer) -> str:
    """The reason of a check stopped at its time limit."""
    return f"{kinds} took longer than {limit:g} s on an answer of {_shown(answer)} (its `timeout_s` sets the limit)"


def too_big(kinds: str, limit_mb: int, answer: Answer) -> str:
    """The reason of a check stopped at its memory limit."""
    return (f"{kinds} used more than {limit_mb} MiB of memory on an answer of {_shown(answer)} (its `memory_mb` "
            "sets the limit)")


class _Job(NamedTuple):
    """What a scoring process needs to score one subtree: the test (no compiled parts), where the subtree is,
    the answer and the rest of the scoring context."""

    test: Test
    path: tuple[int, ...]
    answer: Answer
    record: Record | None
    transcript: Any
    root_threshold: float | None


def _portable(test: Test) -> Test:
    """The test without what is compiled (closures): the scoring process compiles the tree again from `eval`. A
    workspace block stays (a check may ask whether the test has one), its files in a plain dict."""
    workspace = test.workspace
    if workspace is not None:
        workspace = dataclasses.replace(workspace, files=dict(workspace.files))
    return dataclasses.replace(test, evaluator=None, agent_tools={}, golden_turns=(), workspace=workspace,
                               case_origin=None, images=())


def _leaves(node: Node) -> list[Node]:
    """The checks that score under limits of their own: a held tree's score inside its holder's (`_under_limit`)."""
    return [leaf for _, leaf in node.walk(enter_held=False) if not leaf.children]


# ------------------------------------------------------------------------------------------ in a scoring process

class _Deadline(BaseException):
    """Raised by the timer signal in a leaf's scorer (a BaseException: a scorer's `except Exception` cannot keep
    it)."""


_deadlines: list[float] = []   # the leaves being scored (a final_answer's child inside it): each one's deadline
_ceilings: list[int] = []      # and each one's address-space limit, bytes
_MIB = 1024 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE")


class _Memory:
    """The process's own address-space limit (restored between leaves), and whether a check ran out of memory
    (the process is then replaced: what the check left behind may be fragments of the heap)."""

    own: tuple[int, int] = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    exhausted = False


def _on_alarm(signum: int, frame: Any) -> None:
    if _deadlines:
        raise _Deadline


def _arm() -> None:
    signal.setitimer(signal.ITIMER_REAL, max(_deadlines[-1] - time.monotonic(), 0.001) if _deadlines else 0)


def _address_space() -> int | None:
    """This process's address space now, bytes (/proc/self/statm), or None where there is no /proc."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[0]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _limit_memory() -> None:
    """Hold the address space to the innermost leaf's ceiling, or give the process its own limit back."""
    soft, hard = _Memory.own
    if _ceilings:
        soft = _ceilings[-1] if hard == resource.RLIM_INFINITY else min(_ceilings[-1], hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _under_limit(node: Node, answer: Answer, ctx: ScoringContext) -> Any:
    """A leaf's scorer, stopped at its time and memory limits (or at an enclosing leaf's, when that binds
    first)."""
    assert node.scorer is not None
    own = time.monotonic() + node.timeout_s
    _deadlines.append(min(own, _deadlines[-1]) if _deadlines else own)
    now = _address_space()
    ceiling = None if now is None else now + node.memory_mb * _MIB
    if ceiling is not None:
        _ceilings.append(min(ceiling, _ceilings[-1]) if _ceilings else ceiling)
    try:
        _arm()
        _limit_memory()
        return node.scorer(answer, ctx)
    except _Deadline:
        if _deadlines[-1] < own:
            raise   # an enclosing leaf's limit
        return error(too_long(node.kind, node.timeout_s, answer), kind=node.kind)
    except MemoryError:
        _Memory.exhausted = True
        if ceiling is None or _ceilings[-1] < ceiling:
            raise   # an enclosing leaf's limit (or none of ours: the machine's)
        _ceilings.pop()   # the limit off before anything more is allocated
        ceiling = None
        _limit_memory()
        return error(too_big(node.kind, node.memory_mb, answer), kind=node.kind)
    finally:
        _deadlines.pop()
        if ceiling is not None:
            _ceilings.pop()
        _arm()
        _limit_memory()


def _answer(data: bytes) -> Verdict:
    """One job's verdict; never raises."""
    try:
        job: _Job = pickle.loads(data)
        node = evaluator_of(job.test)
        if node is None:
            return error("the scoring process found no check to score")
        for index in job.path:
            node = node.children[index]
        ctx = ScoringContext(job.test, job.test.variables, transcript=job.transcript, record=job.record)
        return score_node(node, job.answer, ctx, job.root_threshold)
    except _Deadline:
        return error("the checks took longer than their time limits")
    except MemoryError:
        return error("the checks used more memory than their limits (`memory_mb`)")
    except Exception as exc:  # noqa: BLE001 - a job that cannot be read is its row's error, never a dead process
        return error(f"the scoring process could not score this answer: {type(exc).__name__}: {exc}")


def _read(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            return None
        got += n
    return bytes(data)


def _serve(sock: socket.socket) -> None:
    """A scoring process's life: a job in, its verdict out, until the run closes its end."""
    signal.signal(signal.SIGALRM, _on_alarm)
    _Memory.own = resource.getrlimit(resource.RLIMIT_AS)
    run_leaves_through(_under_limit)
    while not _Memory.exhausted:   # a process a check ran out of memory in has answered its last job
        head = _read(sock, _HEADER.size)
        if head is None:
            return
        data = _read(sock, _HEADER.unpack(head)[0])
        if data is None:
            return
        verdict = _answer(data)
        try:
            out = pickle.dumps((verdict, _Memory.exhausted), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - a scorer's details that do not pickle
            out = pickle.dumps((error(f"the verdict could not be sent back: {type(exc).__name__}: {exc}"),
                                _Memory.exhausted))
        sock.sendall(_HEADER.pack(len(out)) + out)


def _become_scorer(sock: socket.socket, parent: int, masked: set[signal.Signals]) -> None:
    """In the forked child: leave the run's signals and files to it, die with it, then serve."""
    signal.set_wakeup_fd(-1)   # the run's event loop listens there: never write to it
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the run's; it kills this process
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        return
    keep = sock.fileno()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)   # the run's output is the run's
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, masked)
    _serve(sock)


# ------------------------------------------------------------------------------------------ in the run

class _Process:
    """One scoring process, from the run's side."""

    def __init__(self, pid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.pid = pid
        self.reader = reader
        self.writer = writer
        self.reaped = False

    async def ask(self, payload: bytes) -> bytes:
        self.writer.write(_HEADER.pack(len(payload)) + payload)
        await self.writer.drain()
        (size,) = _HEADER.unpack(await self.reader.readexactly(_HEADER.size))
        return await self.reader.readexactly(size)

    async def ending(self) -> int | None:
        """The signal that ended the process, if one did: after its socket closed mid-job it is ending, and is
        reaped here (waited for `_REAP_S` at most; `kill` then ends it)."""
        for _ in range(int(_REAP_S / _REAP_POLL_S)):
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                self.reaped = True
                return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            await asyncio.sleep(_REAP_POLL_S)
        return None

    def kill(self) -> None:
        if self.reaped:   # its pid may be another process's by now
            self.writer.transport.abort()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.writer.transport.abort()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _fork() -> tuple[int, socket.socket]:
    """A new scoring process (its pid) and the run's end of its socket."""
    ours, theirs = socket.socketpair()
    masked = {signal.SIGINT, signal.SIGTERM}
    parent = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, masked)   # no signal reaches the child before it has its own
    try:
        pid = os.fork()
        if pid == 0:   # the child never returns into the run's code
            code = 0
            try:
                ours.close()
                _become_scorer(theirs, parent, masked)
            except BaseException:  # noqa: BLE001 - whatever happens, this process ends here
                code = 1
            finally:
                os._exit(code)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, masked)
    theirs.close()
    return pid, ours


def _ended(node: Node, ended: int | None, exc: BaseException, answer: Answer) -> str:
    """Why a scoring process ended mid-job: a signal (a check's C code that could not allocate may abort, or
    crash), else the socket's error."""
    if ended is None:
        return f"the scoring process ended while it scored this answer ({exc})"
    try:
        name = signal.Signals(ended).name
    except ValueError:
        name = f"signal {ended}"
    limit = max((leaf.memory_mb for leaf in _leaves(node)), default=0)
    return (f"the scoring process was ended by {name} while {', '.join(node.kinds())} scored an answer of "
            f"{_shown(answer)}; a check that runs past its memory limit ({limit} MiB; its `memory_mb` sets it) "
            "can end so")


class ScoringPool:
    """A run's worker threads and scoring processes (see the module docstring).

    Args:
        processes: The most scoring processes at once (default: one per CPU, at most 4); started when first
            needed.
        threads: The most blocking scorers at once (default: one per CPU).
    """

    def __init__(self, processes: int | None = None, threads: int | None = None) -> None:
        cpus = os.cpu_count() or 1
        self._processes = asyncio.Semaphore(processes or min(cpus, 4))
        self._threads = asyncio.Semaphore(threads or cpus)
        self._idle: list[_Process] = []
        self._running: set[_Process] = set()
        self._closed = False

    async def score(self, test: Test, answer: Answer, ctx: ScoringContext) -> Verdict:
        """The answer's verdict, each check scored where it belongs: a tree of bounded checks on a short answer
        inline, any other here (worker threads, scoring processes under the checks' time limits) or awaited (a
        judge). Never raises."""
        node = test.evaluator
        if node is None or inline(node, answer):
            return score(test, answer, ctx)
        return await score_async(test, answer, ctx, places=self)

    async def in_thread(self, scorer: Scorer, answer: Answer, ctx: ScoringContext) -> Any:
        """A blocking scorer's result, from a worker thread."""
        async with self._threads:
            return await asyncio.to_thread(scorer, answer, ctx)

    async def isolated(self, node: Node, path: tuple[int, ...], answer: Answer, ctx: ScoringContext,
                       root_threshold: float | None) -> Verdict:
        """The verdict of the subtree `node` at `path`, scored in a scoring process; never raises but for a
        cancellation."""
        try:
            payload = pickle.dumps(_Job(_portable(ctx.test), path, answer, ctx.record, ctx.transcript,
                                        root_threshold), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - a case value that does not pickle: this row's error
            return self._error(node, f"{node.kind}: the answer could not be handed to a scoring process: "
                                     f"{type(exc).__name__}: {exc}", root_threshold)
        limits = sum(leaf.timeout_s for leaf in _leaves(node))
        async with self._processes:
            if self._closed:
                return self._error(node, STOPPED, root_threshold)
            try:
                process = self._idle.pop() if self._idle else await self._start()
            except OSError as exc:
                return self._error(node, f"no scoring process could start: {exc}", root_threshold)
            try:
                data = await asyncio.wait_for(process.ask(payload), limits + _GRACE_S)
            except TimeoutError:
                self._end(process)
                kinds = ", ".join(node.kinds())
                return self._error(node, too_long(kinds if node.children else node.kind, limits, answer)
                                   + ("" if not node.children else " (all its checks together)"), root_threshold)
            except (OSError, EOFError, asyncio.IncompleteReadError) as exc:
                try:
                    reason = STOPPED if self._closed else _ended(node, await process.ending(), exc, answer)
                finally:
                    self._end(process)
                return self._error(node, reason, root_threshold)
            except BaseException:
                self._end(process)   # cancelled mid-job: the process may still be at it
                raise
            answered = pickle.loads(data)
            if isinstance(answered, tuple) and len(answered) == 2 and answered[1] is True:
                self._end(process)   # a check ran out of memory there: a fresh process takes its place
            else:
                self._idle.append(process)
        verdict = answered[0] if isinstance(answered, tuple) and len(answered) == 2 else None
        return verdict if isinstance(verdict, Verdict) else self._error(node, "a scoring process answered "
                                                                             "something else", root_threshold)

    def close(self) -> None:
        """Kill every scoring process now (the run is over, or cancelled)."""
        self._closed = True
        for process in [*self._running]:
            self._end(process)

    async def _start(self) -> _Process:
        pid, sock = _fork()
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            sock.close()
            raise
        process = _Process(pid, reader, writer)
        self._running.add(process)
        return process

    def _end(self, process: _Process) -> None:
        self._running.discard(process)
        with contextlib.suppress(ValueError):
            self._idle.remove(process)
        process.kill()

    @staticmethod
    def _error(node: Node, reason: str, root_threshold: float | None) -> Verdict:
        return finish(node, error(reason, kind=node.kind), root_threshold)
