"""The `engine view` web server (aiohttp): the page, its script and style, and a JSON API over `store.Store`.

Safety: every response carries a strict Content-Security-Policy (scripts and styles only from this server, no
inline code, nothing fetched elsewhere), and JSON has `<`, `>` and `&` escaped, so no text from a model can become
markup. Bound to a loopback address, the server answers only requests whose Host is a loopback name (a web page
cannot reach it through a name of its own); bound elsewhere, every request must carry the token the printed URL
holds (then a cookie), compared in constant time. A label is written only from a JSON POST with the page's own
header, which a cross-site form cannot send.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import secrets
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from engine.base.hosts import is_loopback
from engine.errors import ResultsError
from engine.view.store import Store

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
COOKIE = "engine_view_token"
CLIENT_HEADER = "X-Engine-View"
MAX_BODY = 64 * 1024
MAX_OFFSET = 10**12   # a page's offset and size: beyond any run (larger sizes are cut to the page limit)
MAX_CASE = 2**31 - 1  # case_index is a 32-bit column; -1 means "no case"

STORE: web.AppKey[Store] = web.AppKey("store", Store)
TOKEN: web.AppKey[str] = web.AppKey("token", str)
REVIEWER: web.AppKey[str] = web.AppKey("reviewer", str)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def dumps(data: Any) -> bytes:
    """JSON with `<`, `>` and `&` as \\u escapes: valid JSON that no HTML parser can read markup from."""
    raw = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    return raw.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


@web.middleware
async def _headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = exc
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Cache-Control"] = "no-store"
    return response


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The token (bound beyond loopback) or a loopback Host (bound to loopback); the page's header on a POST."""
    token = request.app[TOKEN]
    given = request.query.get("token")
    if token:
        presented = given if given is not None else request.cookies.get(COOKIE, "")
        if not hmac.compare_digest(presented.encode(), token.encode()):
            return web.Response(status=403, text="engine view: open the URL `engine view` printed (it holds the "
                                                 "access token)\n")
    elif not is_loopback(request.url.host or ""):
        return web.Response(status=403, text="engine view: this server answers only loopback names "
                                             "(127.0.0.1, localhost)\n")
    if request.method not in ("GET", "HEAD") and (
            request.headers.get(CLIENT_HEADER) != "1" or request.content_type != "application/json"):
        return web.Response(status=403, text="engine view: writes come from the page only\n")
    response = await handler(request)
    if token and given is not None:
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
    return response


async def _index(request: web.Request) -> web.StreamResponse:
    return web.Response(body=(STATIC / "index.html").read_bytes(), content_type="text/html", charset="utf-8")


async def _asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in ASSETS:
        raise web.HTTPNotFound()
    return web.Response(body=(STATIC / name).read_bytes(), content_type=ASSETS[name], charset="utf-8")


async def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> web.Response:
    """Run a store method in a worker thread (scans and statistics block) and answer its JSON."""
    try:
        return _json(await asyncio.to_thread(function, *args, **kwargs))
    except KeyError as exc:
        return _error(404, f"no such run: {exc.args[0] if exc.args else ''}")
    except ValueError as exc:
        return _error(400, str(exc))
    except ResultsError as exc:
        return _error(422, str(exc))


def _run(request: web.Request) -> Any:
    return request.app[STORE].run(request.query.get("run", ""))


class BadParameter(ValueError):
    """A query parameter the API cannot take: answered 400 with the message (the page shows it)."""


@web.middleware
async def _parameters(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadParameter as exc:
        return _error(400, str(exc))


FLAGS = {"": False, "0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}


def _flag(request: web.Request, name: str) -> bool:
    """A yes/no parameter: 1, true or yes; 0, false, no or absent."""
    value = request.query.get(name, "").lower()
    if value not in FLAGS:
        raise BadParameter(f"`{name}` must be 1 or 0 (true/false, yes/no), not {value[:40]!r}")
    return FLAGS[value]


def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    """A whole-number parameter between `low` and `high` (written in digits, an optional minus sign)."""
    text = request.query.get(name, "")
    if text == "":
        return default
    if not re.fullmatch(r"-?[0-9]{1,19}", text) or not low <= int(text) <= high:
        raise BadParameter(f"`{name}` must be a whole number from {low} to {high}, not {text[:40]!r}")
    return int(text)


def _text(request: web.Request, name: str, *, required: bool = False) -> str:
    """A text parameter; `required` ones must be given and not empty."""
    value = request.query.get(name, "")
    if required and not value:
        raise BadParameter(f"`{name}` is required")
    return value


async def _runs(request: web.Request) -> web.StreamResponse:
    return await _call(request.app[STORE].runs)


async def _me(request: web.Request) -> web.StreamResponse:
    return _json({"reviewer": request.app[REVIEWER]})


async def _summary(request: web.Request) -> web.StreamResponse:
    return await _call(lambda: _run(request).summary())


async def _grid(request: web.Request) -> web.StreamResponse:
    q = request.query
    offset, limit = _int(request, "offset", 0, 0, MAX_OFFSET), _int(request, "limit", 50, 1, MAX_OFFSET)
    return await _call(lambda: _run(request).grid(
        suite=q.get("suite") or None, tag=q.get("tag") or None, klass=q.get("class") or None,
        failed=_flag(request, "failed"), errors=_flag(request, "errors"), query=q.get("q") or None,
        offset=offset, limit=limit))


async def _test(request: web.Request) -> web.StreamResponse:
    suite, test_id = _text(request, "suite", required=True), _text(request, "test_id", required=True)
    case = _int(request, "case", -1, -1, MAX_CASE)
    return await _call(lambda: _run(request).attempts(suite, test_id, case))


async def _diff(request: web.Request) -> web.StreamResponse:
    return await _call(request.app[STORE].diff, request.query.get("a", ""), request.query.get("b", ""))


async def _label(request: web.Request) -> web.StreamResponse:
    if (request.content_length or 0) > MAX_BODY:
        return _error(413, f"a label is at most {MAX_BODY} bytes")
    body = await request.content.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        return _error(413, f"a label is at most {MAX_BODY} bytes")
    try:
        record = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _error(400, "the body is not JSON")
    if not isinstance(record, dict) or not isinstance(record.get("run"), str):
        return _error(400, "the body must be a JSON object naming its `run`")
    record["reviewer"] = request.app[REVIEWER]
    record.pop("at", None)
    run = record.pop("run")
    return await _call(lambda: {"labels": request.app[STORE].run(run).add_label(record)})


def make_app(store: Store, *, token: str = "", reviewer: str = "reviewer") -> web.Application:
    """The application.

    Args:
        store: The runs it serves.
        token: The access token every request must carry (empty: loopback only, no token).
        reviewer: The name written with each label.
    """
    app = web.Application(middlewares=[_headers, _guard, _parameters], client_max_size=MAX_BODY)
    app[STORE], app[TOKEN], app[REVIEWER] = store, token, reviewer
    app.router.add_get("/", _index)
    app.router.add_get("/static/{name}", _asset)
    app.router.add_get("/api/me", _me)
    app.router.add_get("/api/runs", _runs)
    app.router.add_get("/api/summary", _summary)
    app.router.add_get("/api/grid", _grid)
    app.router.add_get("/api/test", _test)
    app.router.add_get("/api/diff", _diff)
    app.router.add_post("/api/label", _label)
    return app


def new_token(host: str) -> str:
    """The token a server bound to `host` requires: none on loopback, else 32 random bytes (URL-safe)."""
    return "" if is_loopback(host) else secrets.token_urlsafe(32)


async def serve(root: Path, *, host: str, port: int, reviewer: str,
                ready: Callable[[str], None]) -> None:
    """Serve until cancelled; `ready` gets the URL to open once the socket listens.

    Raises:
        ResultsError: `root` holds no run.
        OSError: The address cannot be bound.
    """
    store = Store(root)
    token = new_token(host)
    runner = web.AppRunner(make_app(store, token=token, reviewer=reviewer), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        shown = f"[{host}]" if ":" in host else host
        ready(f"http://{shown}:{bound}/" + (f"?token={token}" if token else ""))
        # The newest run is prepared while the browser opens (a daemon: Ctrl-C never waits for it).
        threading.Thread(target=store.warm, name="engine-view-warm", daemon=True).start()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
