"""The SSE decoder: chunk boundaries anywhere, no line limit, comments skipped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.client.sse import SSEDecoder

STREAM = ": ping\n\ndata: {\"a\": \"é€😀\"}\n\nevent: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n".encode()


def decode(chunks: list[bytes]) -> list[str]:
    decoder = SSEDecoder()
    out: list[str] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out + decoder.close()


def test_whole_stream() -> None:
    assert decode([STREAM]) == ['{"a": "é€😀"}', "line1\nline2", "[DONE]"]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    assert decode(chunks) == decode([STREAM])


def test_crlf_split_between_cr_and_lf() -> None:
    assert decode([b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]) == ["a", "b"]


def test_huge_line_and_unterminated_last_event() -> None:
    big = b"x" * (6 * 1024 * 1024)
    assert decode([b"data: " + big[:1000], big[1000:], b"\n\ndata: tail"]) == [big.decode(), "tail"]
