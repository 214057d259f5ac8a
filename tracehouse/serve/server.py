"""The HTTP server: the page's three static files and the JSON API, nothing else.

Why the standard library's ``ThreadingHTTPServer``: the viewer's work is
in DuckDB (each request runs a few bound queries on its own cursor), so the
server needs no framework, starts in well under a second and adds no
dependency; one thread per request lets a slow query not hold up the page's
other requests.

What keeps it safe to run on a shared machine:

* it binds 127.0.0.1 unless told otherwise, and then answers only requests
  whose ``Host`` names the loopback (a web page elsewhere cannot reach it
  through a DNS name that resolves to 127.0.0.1: DNS rebinding);
* it answers GET and HEAD only; the API is a fixed table of read-only
  views (:mod:`tracehouse.serve.api`) and downloads
  (:mod:`tracehouse.serve.exports`, made in memory) on read-only cursors
  (:mod:`tracehouse.serve.marts`), so no request can write anything into
  the warehouse;
* every response forbids the page to load anything but its own files
  (``Content-Security-Policy``: no inline script, no other origin), so a
  trace string that slipped into markup still could not run, and nothing
  is fetched from the internet;
* stopping it (Ctrl-C) closes the read-only connection; the warehouse is
  never written, so it is as it was.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

import duckdb
import msgspec

from tracehouse.serve import DEFAULT_HOST, DEFAULT_PORT
from tracehouse.serve.api import ROUTES
from tracehouse.serve.exports import DOWNLOADS
from tracehouse.serve.marts import MartReader, WarehouseNotReady
from tracehouse.serve.params import BadRequest, Params

#: The page's files, shipped beside this module: path -> (file, content type).
STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/static/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
}
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class ViewerServer(ThreadingHTTPServer):
    """Serves one warehouse's marts; ``url`` is where to point a browser."""

    daemon_threads = True

    def __init__(self, reader: MartReader, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT) -> None:
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.reader = reader
        self.loopback_only = host in LOOPBACK_NAMES
        self.assets = {path: ((STATIC / name).read_bytes(), kind)
                       for path, (name, kind) in ASSETS.items()}
        super().__init__((host.strip("[]"), port), ViewerHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/"

    def server_close(self) -> None:
        super().server_close()
        self.reader.close()


class ViewerHandler(BaseHTTPRequestHandler):
    """One request: a static file, an API view as JSON, or an error as JSON."""

    server: ViewerServer
    protocol_version = "HTTP/1.1"

    def do_HEAD(self) -> None:  # noqa: N802 - the http.server spelling
        self._answer(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        if self.server.loopback_only and not self._host_is_loopback():
            self._send(HTTPStatus.FORBIDDEN, *_json({"error": "this viewer answers only "
                                                     "requests addressed to the loopback"}),
                       head=head)
            return
        url = urlsplit(self.path)
        asset = self.server.assets.get(url.path)
        if asset is not None:
            self._send(HTTPStatus.OK, *asset, head=head)
            return
        view = ROUTES.get(url.path)
        download = DOWNLOADS.get(url.path)
        if view is None and download is None:
            self._send(HTTPStatus.NOT_FOUND, *_json({"error": f"no such page: {url.path}"}),
                       head=head)
            return
        started = time.perf_counter()
        extra = {"Cache-Control": "no-store"}
        try:
            params = Params(parse_qs(url.query, keep_blank_values=True))
            with self.server.reader.cursor() as cur:
                if download is not None:
                    made = download(cur, params, self.server.reader.place)
                    body, kind = made.body, made.content_type
                    extra["Content-Disposition"] = f'attachment; filename="{made.filename}"'
                else:
                    body, kind = _json(view(cur, params))
            status = HTTPStatus.OK
        except BadRequest as exc:
            status, (body, kind) = HTTPStatus.BAD_REQUEST, _json({"error": str(exc)})
        except WarehouseNotReady as exc:
            status, (body, kind) = HTTPStatus.SERVICE_UNAVAILABLE, _json({"error": str(exc)})
        except duckdb.Error as exc:
            status, (body, kind) = HTTPStatus.INTERNAL_SERVER_ERROR, _json({
                "error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
        elapsed_ms = (time.perf_counter() - started) * 1e3  # queries and encoding: server-side
        extra["Server-Timing"] = f"marts;dur={elapsed_ms:.1f}"
        self._send(status, body, kind, head=head, extra=extra)

    def _host_is_loopback(self) -> bool:
        host = (self.headers.get("Host") or "").strip()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in LOOPBACK_NAMES

    def _send(self, status: HTTPStatus, body: bytes, kind: str, *, head: bool,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        try:
            self.end_headers()
            if not head:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page moved on before the answer came: nothing to tell it

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Quiet: a viewer's access log would only bury its one line of use."""


def _json(payload: Any) -> tuple[bytes, str]:
    """``payload`` as UTF-8 JSON, compact.

    Why msgspec (a dependency already, for ingest) and not ``json.dumps``: a
    timeline answer is tens of thousands of numbers per column, and the
    standard library took 35 CPU ms to write 8 columns of 60,000 integers
    that msgspec writes in 4 (benchmarks/README.md). A string no UTF-8 can
    hold (a lone surrogate) makes msgspec refuse; that answer goes through
    ``json.dumps`` with the character replaced, as before. A non-finite
    float is written as ``null`` (the views send none: :func:`.cells.plain`).
    """
    try:
        body = msgspec.json.encode(payload)
    except UnicodeEncodeError:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        body = text.encode("utf-8", errors="replace")
    return body, "application/json; charset=utf-8"


def make_server(warehouse: Path, host: str = DEFAULT_HOST,
                port: int = DEFAULT_PORT) -> ViewerServer:
    """A server over ``warehouse``'s marts bound to ``host:port`` (0: any free port), not yet
    serving; raises :class:`WarehouseNotReady` when there are no marts to show."""
    return ViewerServer(MartReader(warehouse), host=host, port=port)


def serve(warehouse: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          stream: TextIO | None = None) -> None:
    """Serve until Ctrl-C; say where on ``stream`` (default stderr)."""
    stream = sys.stderr if stream is None else stream
    server = make_server(warehouse, host, port)
    print(f"serving the marts of {server.reader.place.root} read-only at {server.url} "
          "(Ctrl-C stops)", file=stream, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped; the warehouse was only read", file=stream, flush=True)
    finally:
        server.server_close()
