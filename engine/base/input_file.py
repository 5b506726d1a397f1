"""Opening a file the user named as input (a `--filter-file`, a case file): a regular file only, opened without
blocking, read under a size cap and, for line-based formats, a line-length cap.

A FIFO, a device (`/dev/zero`) or a socket is refused before a byte is read: it is opened with O_NONBLOCK (so a
FIFO with no writer never blocks the open) and checked with fstat on that same descriptor (no race with a file
swapped in between a check and the open). The errors name the file and the fix.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["InputFileError", "capped_lines", "open_checked", "open_regular", "read_capped"]

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class InputFileError(Exception):
    """An input file that is not a readable regular file within its caps.

    Args:
        what: What reads it ("--filter-file", "cases_from").
        path: The file.
        problem: What is wrong and the fix (the message without the file's name, for messages that name it).
        line: The 1-based line at fault (a line over its cap), or 0.
    """

    def __init__(self, what: str, path: Path, problem: str, line: int = 0) -> None:
        super().__init__(f"{what} {path}: {problem}")
        self.problem = problem
        self.line = line


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"


def open_checked(path: Path | str, refuse: Callable[[int], None], flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of `path` opened without blocking, `refuse(st_mode)` asked of that same descriptor (it raises
    to refuse the file) before the descriptor blocks again: the one way a file the user or the model named is
    opened, so that a FIFO never blocks and no file can be swapped in between the check and the open."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        refuse(os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: Path, what: str) -> BinaryIO:
    """`path` opened for reading in binary, after checking it is a regular file.

    Args:
        path: The file.
        what: What reads it, for messages ("--filter-file", "cases_from").

    Raises:
        InputFileError: It does not exist, cannot be opened, or is not a regular file.
    """
    def refuse(mode: int) -> None:
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise InputFileError(what, path, f"not a regular file (it is {kind}); {what} reads a regular file: "
                                             "save the data to a file and name that file")

    try:
        fd = open_checked(path, refuse)
    except FileNotFoundError:
        raise InputFileError(what, path, "no such file") from None
    except OSError as exc:
        raise InputFileError(what, path, f"cannot open it ({exc.strerror or exc}); check its permissions") from None
    return os.fdopen(fd, "rb")


def read_capped(path: Path, what: str, cap: int) -> bytes:
    """The whole of a regular file of at most `cap` bytes.

    Raises:
        InputFileError: Not a regular file (`open_regular`), or larger than `cap`.
    """
    with open_regular(path, what) as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise InputFileError(what, path, f"larger than {_mib(cap)}, the most {what} reads; is it the right file?")
    return data


def capped_lines(handle: io.TextIOBase, cap: int, what: str, path: Path, fix: str) -> Iterator[str]:
    """The lines of a text handle (line breaks kept), each read at most `cap` characters at a time.

    Raises:
        InputFileError: A line longer than `cap` characters, its break included (`line` set; `fix` ends the
            message); the rest of that line is never read.
    """
    number = 0
    while True:
        line = handle.readline(cap + 1)
        if not line:
            return
        number += 1
        if len(line) > cap:
            raise InputFileError(what, path, f"line {number} is longer than {cap:,} characters, the most a line "
                                             f"may hold; {fix}", line=number)
        yield line
