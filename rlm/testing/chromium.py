"""Headless Chromium driven over the DevTools protocol on a pipe, for tests and screenshots.

``--remote-debugging-pipe`` makes Chromium read protocol messages from fd 3
and write them to fd 4, each one JSON text ended by a NUL byte.  Driving it
that way needs no port, no websocket client and no dependency: the browser
is a supervised child process whose pipes we own.  Networking is off
(``--disable-background-networking`` and friends) so a page that tried to
reach the network would fail visibly instead of slowly.

Never imported by the runtime.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["Browser", "BrowserError", "find_chromium"]

_CANDIDATES = (
    "chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome",
)

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-default-apps", "--disable-extensions", "--mute-audio",
    "--hide-scrollbars", "--remote-debugging-pipe",
)


class BrowserError(RuntimeError):
    """Chromium failed, answered with a protocol error, or took too long."""


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) executable, or None."""
    override = os.environ.get("RLM_CHROMIUM")
    if override:
        return shutil.which(override) or (override if Path(override).exists() else None)
    for name in _CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with one page (a tab), killed on ``close``.

    Use it as a context manager.  ``call`` sends a protocol command and waits
    for its answer; events that arrive meanwhile are kept in ``events``.
    """

    def __init__(self, executable: str, *, width: int = 1280, height: int = 900,
                 timeout: float = 30.0) -> None:
        self._timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="rlm-chromium-",
                                                    ignore_cleanup_errors=True)
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()
        # The child's ends must not sit at 3 or 4 themselves, or moving one would clobber the other.
        to_child, from_child = _above_four(to_child), _above_four(from_child)
        # A tiny Python trampoline moves our pipe ends to fds 3 and 4, where Chromium expects
        # them, and execs it (sh cannot: dash only redirects single-digit descriptors).
        script = ("import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4);"
                  " os.execv(sys.argv[3], sys.argv[3:])")
        args = [executable, *FLAGS, f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}", "about:blank"]
        self._log = Path(self._profile.name) / "chromium.log"
        try:
            with open(self._log, "wb") as log:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", script, str(to_child), str(from_child),
                     *args], pass_fds=(to_child, from_child),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True)
        finally:
            os.close(to_child)
            os.close(from_child)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"}, session=None)
            attached = self.call("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True}, session=None)
            self.session = attached["sessionId"]
            self.call("Page.enable")
            self.call("Runtime.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    # -- the protocol ----------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             session: str | bool | None = True) -> dict[str, Any]:
        """Send ``method`` (to the page's session unless ``session=None``); return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is True and self.session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self._timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"Chromium did not answer within {self._timeout:g} s")
            ready, _, _ = select.select([self._in], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium closed its DevTools pipe (it exited): {self._tail()}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        value: dict[str, Any] = json.loads(raw)
        return value

    def _tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-1500:]
        except OSError:
            return "(no log)"

    def wait_event(self, method: str, timeout: float | None = None) -> dict[str, Any]:
        """The first event called ``method`` (already received or coming)."""
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + (timeout or self._timeout)
        while True:
            message = self._read(deadline)
            if message.get("method") == method:
                return message
            self.events.append(message)

    # -- what tests do with a page ----------------------------------------------------

    def open(self, url: str) -> None:
        """Navigate to ``url`` and wait for its load event."""
        for target in ("about:blank", url):  # via a blank page, so a #fragment loads afresh
            self.events = [e for e in self.events if e.get("method") != "Page.loadEventFired"]
            result = self.call("Page.navigate", {"url": target})
            if result.get("errorText"):
                raise BrowserError(f"cannot open {target}: {result['errorText']}")
            self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                "returnByValue": True})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error: {text}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 10.0) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}")
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the middle of the element."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; e.scrollIntoView({block: 'center'});"
            " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2];"
            " })()")
        if box is None:
            raise BrowserError(f"nothing matches {selector}")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1],
                                                   "button": "left", "clickCount": 1})

    def drag(self, start: tuple[float, float], end: tuple[float, float]) -> None:
        """Press the mouse at ``start``, move it to ``end`` in a few steps, release it there."""
        self.call("Input.dispatchMouseEvent", {"type": "mousePressed", "x": start[0],
                                               "y": start[1], "button": "left", "clickCount": 1})
        for k in range(1, 6):
            x = start[0] + (end[0] - start[0]) * k / 5
            y = start[1] + (end[1] - start[1]) * k / 5
            self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y,
                                                   "button": "left", "buttons": 1})
        self.call("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": end[0], "y": end[1],
                                               "button": "left", "clickCount": 1})

    def screenshot(self, path: str | os.PathLike[str], *, full_page: bool = False) -> Path:
        """Save a PNG of the page (the viewport, or the whole page)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                              "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params)["data"]
        out = Path(path)
        out.write_bytes(base64.b64decode(data))
        return out

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Ask Chromium to quit, kill its process group if it lingers, and clean up."""
        if self._proc.poll() is None:
            try:
                os.write(self._out, json.dumps({"id": 0, "method": "Browser.close"}).encode()
                         + b"\0")
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass  # it is killed just below either way
        if self._proc.poll() is None or _group_alive(self._proc.pid):
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        for fd in (self._in, self._out):
            with contextlib.suppress(OSError):  # closed by an earlier close()
                os.close(fd)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _above_four(fd: int) -> int:
    """``fd`` moved to a descriptor number of 10 or more (the original is closed)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
