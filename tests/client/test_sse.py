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


def reference(stream: bytes) -> list[str]:
    """The events of a whole stream, read line by line as the SSE rules say (no chunks, no fast path)."""
    text = stream.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    events: list[str] = []
    data: list[str] | None = None
    for line in text.split("\n"):
        if not line:
            if data is not None:
                events.append("\n".join(data))
            data = None
        elif line[0] != ":":
            field, _, value = line.partition(":")
            if field == "data":
                (data := data if data is not None else []).append(value[1:] if value[:1] == " " else value)
    if data is not None:
        events.append("\n".join(data))
    return events


_LINES = st.sampled_from(["data: {\"a\": 1}", "data:x", "data: ", "data", ": ping", "event: e", "id: 3", "",
                          "data: two\nwords", "data: é😀", "retry: 10"])
_ENDINGS = st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\r\n\r\n"])


@given(st.lists(st.tuples(_LINES, _ENDINGS), max_size=20), st.lists(st.integers(min_value=0, max_value=400),
                                                                       max_size=8))
def test_whole_events_and_any_mix_of_lines_read_as_the_rules_say(lines: list[tuple[str, str]],
                                                                  cuts: list[int]) -> None:
    # Whole one-line `data: ` events take a fast path in `feed`; every other shape, and any chunking, must
    # still give what reading the stream line by line gives.
    stream = "".join(line + end for line, end in lines).encode()
    points = sorted({c for c in cuts if c <= len(stream)})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert decode(chunks) == reference(stream)
