"""A ``tracehouse serve`` server in a thread, and its JSON API, for the viewer's tests.

Why a module of its own: every viewer test file serves a warehouse and asks
its API; one context manager and one ``get`` keep them from differing in
how they start, stop or read errors.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tracehouse.serve.server import ViewerServer, make_server


@contextmanager
def serving(warehouse: Path) -> Iterator[ViewerServer]:
    """The viewer over ``warehouse`` on a free loopback port, serving in a thread."""
    server = make_server(warehouse, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def get(server: ViewerServer, view: str, **params: Any) -> Any:
    """The JSON answer of ``/api/<view>``; an error status fails with the server's message."""
    url = f"{server.url}api/{view}?{urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return json.load(answer)
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{exc.code}: {exc.read().decode()}") from None
