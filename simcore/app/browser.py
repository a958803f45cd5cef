"""Drive ``simcore app`` in headless Chromium: the browser test and the README screenshots.

:func:`running_app` starts the app on a free port and stops it. :class:`Browser` runs
headless Chromium and talks to it over the DevTools protocol (``websockets``, a
streamlit dependency): it opens a page, polls the DOM in real time until the app's
script has finished (the first sweep of a fresh server compiles the kernels, which no
fixed wait or virtual-time budget covers reliably), and saves a screenshot.
:func:`pareto_chart_problems` lists what the Explore page's Pareto chart lacks in a DOM,
:func:`frontier_pixels` counts its frontier markers' pixels in a screenshot. Make the
README screenshots, one per page at 1400 x 1000::

    python -m simcore.app.browser docs/img       # docs/img/app_explore.png, ...
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .logic import FRONTIER_PALETTE, PAGES, footer

__all__ = ["CHROMIUM", "WINDOW", "PAGE_DONE", "page_url", "free_port", "running_app",
           "Browser", "script_finished", "page_done", "pareto_chart_problems", "frontier_pixels",
           "screenshots"]

CHROMIUM = "/usr/bin/chromium"
#: Browser viewport (width, height) in CSS pixels.
WINDOW = (1400, 1000)
#: The Explore chart's axis titles, as :func:`~simcore.app.logic.explore_chart` sets them.
_AXIS_TITLES = ("latency (ms)", "cost_score (")
_FOOTER = footer()
#: Text that shows a page finished with its default inputs (``?demo=1``).
PAGE_DONE = {"explore": "Pareto frontier:", "serving": "tokens/s per GPU vs tokens/s per user",
             "compare": "speed-up", "autotune": "chosen config",
             "validation": "per-source breakdown"}


def page_url(base: str, page: str, *, demo: bool = True) -> str:
    """``http://host:port/?page=explore&demo=1``."""
    if page.capitalize() not in PAGES:
        raise ValueError(f"page {page!r}: pass one of {', '.join(p.lower() for p in PAGES)}")
    return f"{base}/?page={page.lower()}" + ("&demo=1" if demo else "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group of ``proc`` (started with a new session), then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@contextlib.contextmanager
def running_app(*, port: int | None = None, startup_s: float = 90.0) -> Iterator[str]:
    """Run ``python -m simcore app --port PORT`` until the block ends; yields its URL."""
    port = port or free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # the server's output goes to a file: a pipe nobody reads would block it when full
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "simcore", "app", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                out = log.read().decode(errors="replace")
                raise RuntimeError(f"simcore app exited with {proc.returncode}: {out[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=1) as resp:
                    if resp.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"simcore app did not answer on {url} in {startup_s:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        _stop(proc)
        log.close()


def script_finished(dom: str) -> bool:
    """The app's script ran to its end: the footer (rendered last) is there and no
    running indicator is shown."""
    return _FOOTER in dom and "stStatusWidgetRunning" not in dom


class Browser:
    """Headless Chromium driven over the DevTools protocol; a context manager.

    Examples
    --------
    ::

        with running_app() as url, Browser() as b:
            dom = b.open(page_url(url, "explore"))
            b.screenshot("explore.png")
    """

    def __init__(self, *, binary: str = CHROMIUM, window: tuple[int, int] = WINDOW,
                 startup_s: float = 60.0) -> None:
        self.binary, self.window, self.startup_s = binary, window, startup_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: Any = None
        self._id = 0
        self._profile: tempfile.TemporaryDirectory[str] | None = None
        self._stack = contextlib.ExitStack()
        self._log: Any = None

    def __enter__(self) -> Browser:
        from websockets.sync.client import connect

        self._profile = tempfile.TemporaryDirectory(prefix="simcore-chromium-")
        self._log = tempfile.TemporaryFile()  # a file, not a pipe: nobody reads it
        w, h = self.window
        self._proc = subprocess.Popen(
            [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--no-first-run", "--hide-scrollbars",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--window-size={w},{h}", f"--user-data-dir={self._profile.name}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self._log, start_new_session=True)
        try:
            port = self._devtools_port()
            deadline = time.monotonic() + self.startup_s
            while True:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                            timeout=5) as resp:
                    pages = [t for t in json.load(resp) if t.get("type") == "page"]
                if pages or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            if not pages:
                raise RuntimeError("chromium opened no page")
            self._ws = self._stack.enter_context(connect(
                pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=self.startup_s))
            self.call("Emulation.setDeviceMetricsOverride",
                      width=w, height=h, deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _devtools_port(self) -> int:
        """The port chromium chose (``--remote-debugging-port=0`` writes it to
        ``DevToolsActivePort`` in the profile)."""
        assert self._proc is not None and self._profile is not None
        marker = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline and self._proc.poll() is None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return int(marker.read_text().split()[0])
            time.sleep(0.1)
        self._log.seek(0)
        out = self._log.read().decode(errors="replace")
        raise RuntimeError(f"chromium did not start its DevTools server: {out[-1500:]}")

    def __exit__(self, *exc: object) -> None:
        if self._ws is not None:
            self._ws = None
            with contextlib.suppress(Exception):
                self._stack.close()
        if self._proc is not None:
            _stop(self._proc)
            self._proc = None
        if self._profile is not None:
            self._profile.cleanup()
            self._profile = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its ``result`` (events in between are dropped)."""
        if self._ws is None:
            raise RuntimeError("use Browser as a context manager")
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv(timeout=120))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return res.get("result", {}).get("value")

    def dom(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML") or "")

    def open(self, url: str, *, done: Callable[[str], bool] = script_finished,
             timeout_s: float = 240.0, settle_s: float = 1.0) -> str:
        """Navigate to ``url`` and poll (real time) until ``done(dom)`` holds for
        ``settle_s`` and every image has loaded; returns that DOM. After ``timeout_s``
        returns the last DOM (the caller's checks then say what is missing)."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        since = None
        dom = ""
        while time.monotonic() < deadline:
            time.sleep(0.5)
            dom = self.dom()
            ready = done(dom) and bool(self.evaluate(
                "Array.from(document.images).every(i => i.complete)"))
            if not ready:
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= settle_s:
                return self.dom()
        return dom

    def screenshot(self, png: str | os.PathLike[str]) -> Path:
        """The viewport (:attr:`window`) as PNG."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path = Path(png)
        path.write_bytes(base64.b64decode(data))
        return path


def _chart_dom(dom: str) -> str:
    """The part of ``dom`` from the vega chart element to the next page element."""
    start = dom.find('data-testid="stVegaLiteChart"')
    if start < 0:
        return ""
    end = dom.find('data-testid="stElementContainer"', start)
    return dom[start:end if end > 0 else len(dom)]


def pareto_chart_problems(dom: str) -> list[str]:
    """What the Explore page's rendered Pareto chart lacks in ``dom`` (empty: it is there):
    the frontier header, the vega chart drawn as SVG marks, its axis titles and frontier
    markers in :data:`~simcore.app.logic.FRONTIER_PALETTE` colours."""
    problems = []
    if "Pareto frontier:" not in dom:
        problems.append("no 'Pareto frontier:' header")
    chart = _chart_dom(dom)
    if not chart:
        return [*problems, "no vega chart element (stVegaLiteChart)"]
    if not re.search(r'<svg[^>]*class="marks"', chart):
        problems.append("the vega chart drew no SVG marks")
    texts = set(re.findall(r"<text[^>]*>([^<]*)</text>", chart))
    for title in _AXIS_TITLES:
        if not any(t.startswith(title) for t in texts):
            problems.append(f"no axis title {title!r} in the chart")
    fills = {f.lower() for f in re.findall(r'fill="(#[0-9a-fA-F]{6})"', chart)}
    if not fills & set(FRONTIER_PALETTE):
        problems.append("no frontier marker (FRONTIER_PALETTE fill) in the chart")
    return problems


def frontier_pixels(png: str | os.PathLike[str], *, tolerance: int = 6) -> int:
    """Pixels of ``png`` within ``tolerance`` (0-255, per channel) of a
    :data:`~simcore.app.logic.FRONTIER_PALETTE` colour other than black."""
    import matplotlib.image
    import numpy as np

    img = matplotlib.image.imread(os.fspath(png))
    rgb = np.rint(img[..., :3].astype(float) * (255 if img.dtype.kind == "f" else 1))
    n = 0
    for hex_ in FRONTIER_PALETTE:
        want = np.array([int(hex_[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)
        if not want.any():
            continue  # black: text and lines are black too
        n += int((np.abs(rgb - want) <= tolerance).all(axis=-1).sum())
    return n


def page_done(page: str) -> Callable[[str], bool]:
    """A ``done`` test for :meth:`Browser.open`: the script finished and ``page`` shows
    its result (:data:`PAGE_DONE`)."""
    text = PAGE_DONE[page.lower()]
    return lambda dom: script_finished(dom) and text in dom


def screenshots(outdir: str | os.PathLike[str]) -> list[Path]:
    """One screenshot per page with its default inputs run: ``outdir/app_<page>.png``."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    with running_app() as url, Browser() as browser:
        for page in (p.lower() for p in PAGES):
            dom = browser.open(page_url(url, page), done=page_done(page))
            path = browser.screenshot(out / f"app_{page}.png")
            problems = pareto_chart_problems(dom) if page == "explore" else (
                [] if PAGE_DONE[page] in dom else [f"no {PAGE_DONE[page]!r}"])
            if problems:
                raise RuntimeError(f"the {page} page did not finish ({'; '.join(problems)});"
                                   f" see {path}")
            paths.append(path)
    return paths


if __name__ == "__main__":
    for p in screenshots(sys.argv[1] if len(sys.argv) > 1 else "."):
        print(f"{p} ({p.stat().st_size / 1e3:.0f} kB)")
