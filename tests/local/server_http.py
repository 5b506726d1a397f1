"""Requests to an embedded model's server the local-model tests share: a whole reply, and a stream's events."""

from __future__ import annotations

import json
import urllib.request
from typing import Any


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The whole JSON reply to `body` posted to `url`."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as resp:
        return json.load(resp)  # type: ignore[no-any-return]


def stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of `body` posted to `url` with `stream: true`, checked to end with `data: [DONE]`."""
    request = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as resp:
        lines = [line for line in resp.read().decode().splitlines() if line]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    return [json.loads(line[len("data: "):]) for line in lines[:-1] if line.startswith("data: ")]
