"""Headless Chromium driven over the DevTools protocol, for tests of pages with scripts.

Why the DevTools protocol and not Selenium: Debian's ``chromium`` is all the
tests need (``.ci/run`` installs it); Selenium would also need
``chromium-driver`` and a pinned client. The protocol is one websocket
(``websocket-client``, a dev dependency) on the browser Chromium starts with
``--remote-debugging-port=0``; the calls used here (``Page.navigate``,
``Runtime.evaluate``, ``Input.dispatchMouseEvent``) are stable across
versions.

What it records while the page runs: every console message and uncaught
exception (a clean page has none) and every JavaScript dialog (an
``alert`` from a trace string that got executed would open one; the dialog
is dismissed and recorded, so a test fails instead of hanging).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: Seconds to wait for the browser to start, a page to load, a condition to hold.
TIMEOUT = 30.0


def find_chromium() -> str | None:
    """The Chromium binary on PATH (Debian's ``chromium`` first), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@contextmanager
def chromium_page() -> Iterator[Chromium]:
    """A headless Chromium page; the test skips, saying why, when there is no Chromium."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium; "
                    "apt-get install chromium)")
    with Chromium(binary) as page:
        yield page


class BrowserError(AssertionError):
    """The page did not do what the test waited for; the message says what."""


class Chromium:
    """One headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, binary: str, width: int = 1400, height: int = 1000) -> None:
        import websocket  # websocket-client (dev dependency)

        self._profile = Path(tempfile.mkdtemp(prefix="tracehouse-chromium-"))
        self._process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking",
             "--remote-debugging-port=0", f"--user-data-dir={self._profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port = self._devtools_port()
            page = self._page_socket(port)
            self._socket = websocket.create_connection(page, timeout=TIMEOUT,
                                                       suppress_origin=True)
        except BaseException:
            self.close()
            raise
        self._next_id = 0
        self.console: list[str] = []
        self.dialogs: list[str] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _devtools_port(self) -> int:
        marker = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BrowserError(f"chromium exited with status {self._process.returncode}")
            if marker.is_file() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.05)
        raise BrowserError("chromium did not open its DevTools port")

    @staticmethod
    def _page_socket(port: int) -> str:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                        timeout=TIMEOUT) as answer:
                targets = json.load(answer)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.05)
        raise BrowserError("chromium opened no page")

    # ------------------------------------------------------------------ protocol

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result, recording the events that arrive meanwhile."""
        self._next_id += 1
        ident = self._next_id
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._record(message)

    def _record(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(arg.get("value", arg.get("description", "")))
                                         for arg in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console.append(f"uncaught: {details.get('text')} "
                                f"{details.get('exception', {}).get('description', '')}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            self.console.append(f"{entry.get('level')}: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(params.get("message", ""))
            self._socket.send(json.dumps({"id": 0, "method": "Page.handleJavaScriptDialog",
                                          "params": {"accept": False}}))

    # ------------------------------------------------------------------ the page

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises awaited), as JSON."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, what: str, timeout: float = TIMEOUT) -> Any:
        """Poll ``expression`` until it is truthy; return its value or fail saying ``what``."""
        deadline = time.monotonic() + timeout
        # An element stands for true (returned by value, a DOM node would be an empty object).
        checked = f"(() => {{ const v = ({expression}); return v instanceof Node ? true : v; }})()"
        while time.monotonic() < deadline:
            value = self.evaluate(checked)
            if value:
                return value
            time.sleep(0.05)
        raise BrowserError(f"timed out waiting for {what} ({expression}); "
                           f"page says: {self.evaluate('document.body.innerText.slice(0, 500)')}")

    def click_at(self, x: float, y: float) -> None:
        """A real mouse click (move, press, release) at page coordinates ``x``, ``y``."""
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                      clickCount=1)

    def click(self, selector_expression: str) -> None:
        """Click the middle of the element a JavaScript expression returns (scrolled into view)."""
        box = self.evaluate(f"""(() => {{
            const node = {selector_expression};
            if (!node) return null;
            node.scrollIntoView({{block: "center"}});
            const r = node.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2];
        }})()""")
        if box is None:
            raise BrowserError(f"nothing to click: {selector_expression}")
        self.click_at(*box)

    def type_text(self, text: str) -> None:
        """Type ``text`` into the focused element, as keystrokes."""
        self.call("Input.insertText", text=text)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        sock = getattr(self, "_socket", None)
        if sock is not None:
            sock.close()
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
