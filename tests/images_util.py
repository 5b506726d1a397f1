"""Tiny real image files for the image tests (a 1x1 PNG, a JPEG header), written with the standard library."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path


def png_bytes(rgb: tuple[int, int, int] = (0, 255, 0)) -> bytes:
    """A valid 1x1 RGB PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" + bytes(rgb)))
            + chunk(b"IEND", b""))


def write_png(path: Path, rgb: tuple[int, int, int] = (0, 255, 0)) -> bytes:
    """Write a 1x1 PNG at `path` (folders made) and return its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = png_bytes(rgb)
    path.write_bytes(data)
    return data
