"""The Toxiproxy HTTP API: routes, status codes and JSON shapes of Shopify/toxiproxy api.go.

Status codes: create proxy 201, populate 201, delete/reset 204, everything else 200; errors as
``{"error": message, "status": code}`` (unknown proxy/toxic 404, duplicate name 409, bad body,
missing field, invalid stream or toxic type 400, a listen address in use 500 with Go's
``listen tcp ...: bind: address already in use``). A route with the wrong method is 405 with an
empty body and an unknown path is 404 ``404 page not found`` (gorilla/mux defaults).
"""
from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Awaitable, Callable

from .httpd import Request, Response
from .proxy import ProxyCollection
from .toxics import ApiError, bad_request_body, toxic_from_request

# Reported by GET /version. A semver with a pre-release tag, so clients that compare versions
# see a 2.x server and humans see that it is not the Go binary.
VERSION = "2.12.0-brokerconf"

# Toxiproxy bounds each request with a 25 s http.TimeoutHandler; we bound every control
# operation that could wait (listening) much tighter, and none waits on traffic (#412, #558).
CONTROL_TIMEOUT = 5.0


def json_response(status: int, payload: Any) -> Response:
    return Response(status, json.dumps(payload, separators=(",", ":")).encode())


def error_response(error: ApiError) -> Response:
    # http.Error appends a newline to the JSON body.
    return Response(error.status, (json.dumps(error.body(), separators=(",", ":")) + "\n").encode())


def decode_json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8")) if body.strip() else _EMPTY
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request_body(str(exc)) from None


_EMPTY = object()  # Go's decoder reports EOF on an empty body


def require_object(value: Any) -> dict[str, Any]:
    if value is _EMPTY:
        raise bad_request_body("EOF")
    if not isinstance(value, dict):
        raise bad_request_body(f"expected a JSON object, got {type(value).__name__}")
    return value


Route = tuple[str, "re.Pattern[str]", Callable[..., Awaitable[Response]]]


class ToxiproxyApi:
    def __init__(self, collection: ProxyCollection) -> None:
        self.collection = collection
        p, t = r"(?P<proxy>[^/]+)", r"(?P<toxic>[^/]+)"
        table = [
            ("POST", r"/reset", self.reset),
            ("GET", r"/proxies", self.proxy_index),
            ("POST", r"/proxies", self.proxy_create),
            ("POST", r"/populate", self.populate),
            ("GET", rf"/proxies/{p}", self.proxy_show),
            ("POST", rf"/proxies/{p}", self.proxy_update),
            ("PATCH", rf"/proxies/{p}", self.proxy_update),
            ("DELETE", rf"/proxies/{p}", self.proxy_delete),
            ("GET", rf"/proxies/{p}/toxics", self.toxic_index),
            ("POST", rf"/proxies/{p}/toxics", self.toxic_create),
            ("GET", rf"/proxies/{p}/toxics/{t}", self.toxic_show),
            ("POST", rf"/proxies/{p}/toxics/{t}", self.toxic_update),
            ("PATCH", rf"/proxies/{p}/toxics/{t}", self.toxic_update),
            ("DELETE", rf"/proxies/{p}/toxics/{t}", self.toxic_delete),
            ("GET", r"/version", self.version),
        ]
        self.routes: list[Route] = [(m, re.compile(rx + "$"), h) for m, rx, h in table]

    async def __call__(self, request: Request) -> Response:
        # api.go stopBrowsersMiddleware: refuse browsers, so a web page cannot drive the API.
        if request.headers.get("user-agent", "").startswith("Mozilla/"):
            return Response(403, b"User agent not allowed\n", "text/plain; charset=utf-8")
        path_matched = False
        for method, pattern, handler in self.routes:
            match = pattern.match(request.path)
            if match is None:
                continue
            path_matched = True
            if method != request.method:
                continue
            try:
                return await asyncio.wait_for(handler(request, **match.groupdict()), CONTROL_TIMEOUT)
            except ApiError as error:
                return error_response(error)
            except asyncio.TimeoutError:
                return error_response(
                    ApiError(f"control operation took longer than {CONTROL_TIMEOUT} s", 503)
                )
        if path_matched:
            return Response(405, b"", "text/plain; charset=utf-8")
        return Response(404, b"404 page not found\n", "text/plain; charset=utf-8")

    # --- proxies ----------------------------------------------------------------------------
    async def proxy_index(self, request: Request) -> Response:
        return json_response(200, {n: p.to_json() for n, p in self.collection.proxies.items()})

    async def proxy_create(self, request: Request) -> Response:
        body = require_object(decode_json(request.body))
        name, upstream, listen = body.get("name"), body.get("upstream"), body.get("listen", "")
        enabled = body.get("enabled", True)
        if not isinstance(name, str) or not name:
            raise ApiError("missing required field: name", 400)
        if not isinstance(upstream, str) or not upstream:
            raise ApiError("missing required field: upstream", 400)
        if not isinstance(listen, str) or not isinstance(enabled, bool):
            raise bad_request_body("listen must be a string and enabled a boolean")
        proxy = self.collection.new_proxy(name, listen, upstream)
        await self.collection.add(proxy, enabled)
        return json_response(201, proxy.to_json())

    async def populate(self, request: Request) -> Response:
        done: list = []
        try:
            entries = decode_json(request.body)
            if entries is _EMPTY:
                raise bad_request_body("EOF")
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise bad_request_body("expected a JSON array of proxy objects")
            # Check every entry before creating any proxy (proxy_collection.go PopulateJson).
            for number, entry in enumerate(entries, start=1):
                for required in ("name", "upstream"):
                    if not isinstance(entry.get(required), str) or not entry[required]:
                        raise ApiError(f"missing required field: {required} at proxy {number}", 400)
                if not isinstance(entry.get("enabled", True), bool):
                    raise bad_request_body(f"enabled must be a boolean at proxy {number}")
            for entry in entries:
                proxy = self.collection.new_proxy(
                    entry["name"], entry.get("listen", "") or "", entry["upstream"]
                )
                done.append(await self.collection.add_or_replace(proxy, entry.get("enabled", True)))
        except ApiError as error:
            body = dict(error.body(), proxies=[p.to_json() for p in done])
            return json_response(error.status, body)
        return json_response(201, {"proxies": [p.to_json() for p in done]})

    async def proxy_show(self, request: Request, proxy: str) -> Response:
        return json_response(200, self.collection.get(proxy).to_json())

    async def proxy_update(self, request: Request, proxy: str) -> Response:
        target = self.collection.get(proxy)
        await target.update(require_object(decode_json(request.body)))
        return json_response(200, target.to_json())

    async def proxy_delete(self, request: Request, proxy: str) -> Response:
        self.collection.remove(proxy)
        return Response(204)

    async def reset(self, request: Request) -> Response:
        await self.collection.reset()
        return Response(204)

    # --- toxics -----------------------------------------------------------------------------
    async def toxic_index(self, request: Request, proxy: str) -> Response:
        return json_response(200, self.collection.get(proxy).toxic_list())

    async def toxic_create(self, request: Request, proxy: str) -> Response:
        target = self.collection.get(proxy)
        toxic = toxic_from_request(require_object(decode_json(request.body)))
        target.add_toxic(toxic)
        return json_response(200, toxic.to_json())

    async def toxic_show(self, request: Request, proxy: str, toxic: str) -> Response:
        return json_response(200, self.collection.get(proxy).find_toxic(toxic).to_json())

    async def toxic_update(self, request: Request, proxy: str, toxic: str) -> Response:
        target = self.collection.get(proxy)
        target.find_toxic(toxic)  # 404 before looking at the body, as Toxiproxy
        updated = target.update_toxic(toxic, require_object(decode_json(request.body)))
        return json_response(200, updated.to_json())

    async def toxic_delete(self, request: Request, proxy: str, toxic: str) -> Response:
        self.collection.get(proxy).remove_toxic(toxic)
        return Response(204)

    async def version(self, request: Request) -> Response:
        body = json.dumps({"version": VERSION}) + "\n"
        return Response(200, body.encode(), "application/json;charset=utf-8")
