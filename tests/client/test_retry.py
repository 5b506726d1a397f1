"""Classification and backoff, as openai-python does them."""

from __future__ import annotations

import email.utils
import random
import time

import pytest
from multidict import CIMultiDict

from engine.client import retry


@pytest.mark.parametrize("status, retryable", [
    (400, False), (401, False), (403, False), (404, False), (422, False),
    (408, True), (409, True), (429, True), (500, True), (502, True), (503, True),
])
def test_status_classification(status: int, retryable: bool) -> None:
    err = retry.status_error(status, CIMultiDict(), "boom")
    assert err.kind == f"http_{status}"
    assert err.retryable is retryable
    assert "boom" in str(err)


def test_should_retry_header_overrides() -> None:
    assert retry.status_error(400, CIMultiDict({"x-should-retry": "true"}), "").retryable
    assert not retry.status_error(503, CIMultiDict({"x-should-retry": "false"}), "").retryable


def test_delay_from_headers() -> None:
    assert retry.retry_delay(CIMultiDict({"retry-after-ms": "250"}), 0) == 0.25
    assert retry.retry_delay(CIMultiDict({"Retry-After": "3"}), 0) == 3.0
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry.retry_delay(CIMultiDict({"Retry-After": future}), 0) <= 30


@pytest.mark.parametrize("value", ["0", "-1", "121", "soon"])
def test_out_of_range_retry_after_falls_back_to_backoff(value: str) -> None:
    delay = retry.retry_delay(CIMultiDict({"Retry-After": value}), 0, random.Random(1))
    assert 0.375 <= delay <= 0.5


def test_exponential_backoff_is_capped_with_jitter() -> None:
    rng = random.Random(7)
    for n, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delay = retry.retry_delay(None, n, rng)
        assert 0.75 * ceiling <= delay <= ceiling
