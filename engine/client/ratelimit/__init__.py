"""Pacing model calls to what a provider allows: one budget per endpoint, API key and model.

A `Budget` paces the calls to one model at one endpoint with one key; every entry naming that model there
shares it, and so do other models' entries once the provider's replies show that their limit is one and the
same. It holds a `Pace` for requests and one for tokens: a token bucket refilled at the lowest rate known, of
the smallest size known, from three sources:

- declared: a `rate_limit:` in models.yaml;
- published: the provider's rate-limit headers, read as a hint. `remaining` and `reset` describe the bucket that
  is counted (remaining = size - rate x reset, as the bucket is full again after `reset`): fitted over recent
  replies they give that bucket's real size and rate even where `limit` counts another period (a per-minute
  figure beside a one-second bucket); until they do, a single reply gives (limit - remaining) / reset, but no
  more a second than the bucket holds now;
- learned: a 429 is the truth. A refusal the pace did not foresee lowers the rate, which climbs back while calls
  succeed, until the published or declared limits, which stay a ceiling, bind again.

The modules, bottom up:

    headers.py   what a reply publishes (`read_headers`, `Limit`) and the bucket its pairs describe (`fit_bucket`)
    cost.py      what a request costs against a token limit (`request_tokens`)
    pace.py      one resource's pace: its bucket (`Bucket`), its limits and how refusals and successes move it
    budget.py    the budget of one model, endpoint and key: the calls' turns, the first call's probe, what a
                 reply teaches, budgets merged when their limit is one (`Budget`, `Ticket`, `budget_key`)
"""

from __future__ import annotations

from engine.client.ratelimit.budget import Budget, PastDeadline, Ticket, budget_key, key_digest
from engine.client.ratelimit.cost import request_tokens
from engine.client.ratelimit.headers import Limit, Published, fit_bucket, parse_duration, parse_reset, read_headers
from engine.client.ratelimit.pace import Bucket, Pace

__all__ = ["Bucket", "Budget", "Limit", "Pace", "PastDeadline", "Published", "Ticket", "budget_key", "fit_bucket",
           "key_digest", "parse_duration", "parse_reset", "read_headers", "request_tokens"]
