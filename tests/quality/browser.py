"""Open a page in headless Chromium over the DevTools protocol (``--remote-debugging-pipe``, no extra
package) and record what a person opening it would see in the console and the network panel.

Every request that is not ``file:``/``data:``/``blob:``/``about:`` is recorded as leaving the machine; a proxy
at an unreachable address makes sure none could succeed. Usable as a script:
``python -m tests.quality.browser <file> [<file> ...]`` prints the report of each page as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome-error:")


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageReport:
    url: str
    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, failed loads
    remote_requests: list[str] = field(default_factory=list)
    requests: int = 0
    probes: dict = field(default_factory=dict)  # expression -> its value in the page


class _Pipe:
    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.w, self.r, self.buf, self.next_id = write_fd, read_fd, b"", 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self.next_id += 1
        message: dict = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.w, json.dumps(message).encode() + b"\0")
        return self.next_id

    def _read(self, deadline: float) -> dict | None:
        import select

        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                return None
            chunk = os.read(self.r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buf += chunk
        raw, _, self.buf = self.buf.partition(b"\0")
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30):
        wanted = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline)
            if message is None:
                raise TimeoutError(method)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (message := self._read(deadline)) is not None:
            self.events.append(message)


def open_pages(paths: list[Path], probes: tuple[str, ...] = (), settle: float = 2.0) -> list[PageReport]:
    """Load each file in a fresh tab of one headless Chromium; report console errors and remote requests."""
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("no chromium on PATH")
    profile = tempfile.mkdtemp(prefix="changelake-chromium-")
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()

    def child_fds() -> None:  # Chromium reads commands on fd 3 and answers on fd 4
        read, write = (
            os.dup(to_chrome_r),
            os.dup(from_chrome_w),
        )  # above 4, so neither dup2 clobbers the other
        os.dup2(read, 3)
        os.dup2(write, 4)

    proc = subprocess.Popen(
        [
            binary,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "--proxy-server=http://127.0.0.1:9",  # nothing listens there: no request can reach a network
            "--proxy-bypass-list=<-loopback>",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "about:blank",
        ],
        preexec_fn=child_fds,
        pass_fds=(3, 4),  # kept open in the child (the dup2 targets above)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    pipe = _Pipe(to_chrome_w, from_chrome_r)
    reports = []
    try:
        for path in paths:
            url = Path(path).resolve().as_uri()
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                pipe.call(f"{domain}.enable", session=session)
            pipe.events.clear()
            pipe.call("Page.navigate", {"url": url}, session=session)
            deadline = time.monotonic() + 30
            while not any(
                e.get("method") == "Page.loadEventFired" and e.get("sessionId") == session
                for e in pipe.events
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{url} did not finish loading")
                pipe.pump(0.2)
            pipe.pump(settle)
            report = PageReport(url=url)
            for expression in probes:
                value = pipe.call(
                    "Runtime.evaluate",
                    {"expression": expression, "returnByValue": True, "awaitPromise": True},
                    session=session,
                )
                report.probes[expression] = value.get("result", {}).get("value")
            pipe.pump(0.5)
            for event in pipe.events:
                if event.get("sessionId") != session:
                    continue
                method, params = event.get("method"), event.get("params", {})
                if method == "Network.requestWillBeSent":
                    report.requests += 1
                    requested = params["request"]["url"]
                    if not requested.startswith(LOCAL_SCHEMES):
                        report.remote_requests.append(requested)
                elif method == "Network.loadingFailed":
                    report.errors.append(
                        f"load failed: {params.get('errorText')} ({params.get('blockedReason')})"
                    )
                elif method == "Runtime.exceptionThrown":
                    details = params["exceptionDetails"]
                    report.errors.append(
                        "exception: "
                        + details.get("exception", {}).get("description", details.get("text", ""))
                    )
                elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                    report.errors.append(
                        "console: "
                        + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                    )
                elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                    report.errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")
            reports.append(report)
            pipe.call("Target.closeTarget", {"targetId": target})
        try:
            pipe.call("Browser.close", timeout=5)
        except (TimeoutError, RuntimeError):
            pass
    finally:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(to_chrome_w)
        os.close(from_chrome_r)
        shutil.rmtree(profile, ignore_errors=True)
    return reports


#: What a working validation page has: Bootstrap's modal plugin (the "Show more info" button), bootstrap-table.
DATA_DOCS_PROBES = (
    "typeof window.jQuery",
    "typeof (window.jQuery && jQuery.fn.modal)",
    "typeof (window.jQuery && jQuery.fn.bootstrapTable)",
)

#: Click a validation page's "Show more info..." (a Bootstrap collapse) and say whether its section opened.
SHOW_MORE_INFO = """new Promise(done => {
  const link = [...document.querySelectorAll('a[data-toggle=collapse]')].find(a => /more info/i.test(a.textContent));
  if (!link) return done('no "Show more info" link');
  const section = document.querySelector(link.getAttribute('href'));
  link.click();
  setTimeout(() => done(section.classList.contains('show') ? 'opened' : 'stayed closed'), 1500);
})"""

if __name__ == "__main__":
    for r in open_pages([Path(p) for p in sys.argv[1:]], DATA_DOCS_PROBES):
        print(json.dumps(asdict(r), indent=2))
