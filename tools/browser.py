"""Headless Chromium for web envs: launch, pool, and guaranteed cleanup.

Each `Browser` is one Chromium driven over WebDriver (selenium + Debian's `chromedriver`).
Selenium, unlike Playwright's sync API, is not bound to the thread that started it, which
matters because agentrl runs sync tools in worker threads; a per-browser lock serializes use.

Cleanup is the hard part. Chromium double-forks helpers (crashpad, zygotes) that outlive the
browser, and in containers pid 1 often never reaps, so a plain `driver.quit()` leaves zombies
or live orphans. So chromedriver runs under a tiny *reaper* process (`_REAPER`): it is a child
subreaper, so every orphan of the browser tree is re-parented to it; when chromedriver exits, or
when our process dies (it polls its parent pid: PDEATHSIG would fire when the *thread* that
started it exits), it SIGKILLs and reaps everything left. `close()`, `atexit`
and the context manager all end in that path, and `leaked_processes()` lets tests assert it.

Every browser gets a fresh `--user-data-dir` and HOME (crash reports included) in a temp dir.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Debian's /usr/bin/chromium is a shell launcher adding extension flags; use the real binary.
_CHROMIUM_REAL = "/usr/lib/chromium/chromium"
OWNER_ENV = "AGENTRL_BROWSER_OWNER"  # tags every process of a browser tree (see leaked_...)
ID_ENV = "AGENTRL_BROWSER_ID"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--window-size=500,500",
)
SETUP_HINT = "install it with scripts/setup-web.sh (apt-get install chromium chromium-driver)"

_REAPER = r"""
import ctypes, os, signal, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
parent = int(sys.argv[1])
main = os.fork()
if main == 0:
    os.execv(sys.argv[2], sys.argv[2:])
def children():
    me, out = str(os.getpid()), []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == me:
                out.append(int(p))
        except (OSError, IndexError):
            pass
    return out
def kill_all():
    while True:
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.01)
signal.signal(signal.SIGTERM, lambda *_: kill_all())
while True:  # reap orphans as they come; stop when chromedriver or our owner is gone
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == main or os.getppid() != parent:
        kill_all()
        break
    if pid == 0:
        time.sleep(0.1)
"""


class BrowserUnavailable(ImportError):
    """Chromium or selenium is not installed: an optional dependency, like a missing extra,
    so registry-wide tests skip; the message says how to install it."""


def chromium_available() -> bool:
    return os.path.exists(CHROMIUM)


def require_chromium() -> None:
    """Raise `BrowserUnavailable` with an install hint unless everything is in place."""
    if not chromium_available():
        raise BrowserUnavailable(f"web envs need Chromium at {CHROMIUM}; {SETUP_HINT}")
    if not os.path.exists(CHROMEDRIVER):  # half an install is a broken install: fail, not skip
        raise RuntimeError(f"web envs need {CHROMEDRIVER}; {SETUP_HINT}")
    try:
        import selenium  # noqa: F401
    except ImportError as e:
        raise BrowserUnavailable("web envs need selenium: pip install 'agentrl[web]'") from e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """One headless Chromium. `driver` is a selenium WebDriver; hold `lock` while using it."""

    def __init__(self, start_timeout_s: float = 20.0) -> None:
        require_chromium()
        from selenium import webdriver

        self.lock = threading.RLock()
        self.home = tempfile.mkdtemp(prefix="agentrl-chromium-")
        port = _free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.home,
            "XDG_CONFIG_HOME": self.home,
            "XDG_CACHE_HOME": self.home,
            OWNER_ENV: str(os.getpid()),
            ID_ENV: self.home,
        }
        cmd = [CHROMEDRIVER, f"--port={port}", "--allowed-ips=127.0.0.1"]
        self.reaper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _REAPER, str(os.getpid()), *cmd],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            _wait_for_port(port, start_timeout_s, self.reaper)
            opts = webdriver.ChromeOptions()
            opts.binary_location = _CHROMIUM_REAL if os.path.exists(_CHROMIUM_REAL) else CHROMIUM
            for flag in (*FLAGS, f"--user-data-dir={self.home}/profile"):
                opts.add_argument(flag)
            self.driver: Any = webdriver.Remote(f"http://127.0.0.1:{port}", options=opts)
        except BaseException:
            self._kill()
            raise
        self.closed = False

    def processes(self) -> list[int]:
        """Live processes of this browser (chromedriver, chromium and helpers)."""
        return _tagged(f"{ID_ENV}={self.home}")

    def _kill(self) -> None:
        if self.reaper.poll() is None:
            self.reaper.terminate()
            try:
                self.reaper.wait(10)
            except subprocess.TimeoutExpired:
                self.reaper.kill()
                self.reaper.wait()
        shutil.rmtree(self.home, ignore_errors=True)

    def close(self) -> None:
        """Quit Chromium, then have the reaper kill and reap anything left."""
        with self.lock:
            if getattr(self, "closed", True):
                return
            self.closed = True
            try:
                self.driver.quit()
            except Exception:  # noqa: BLE001 - the reaper cleans up a wedged browser anyway
                pass
            self._kill()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wait_for_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromedriver exited at start (code {proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"chromedriver did not listen on port {port} in {timeout_s}s")


class BrowserPool:
    """Idle browsers reused across episodes and envs; at most `max_size` exist at once."""

    def __init__(self, max_size: int = 8) -> None:
        self.max_size = max_size
        self._idle: list[Browser] = []
        self._all: list[Browser | _Pending] = []
        self._cv = threading.Condition()

    def acquire(self, timeout_s: float = 60.0) -> Browser:
        with self._cv:
            if not self._idle and len(self._all) >= self.max_size:
                if not self._cv.wait_for(lambda: self._idle, timeout_s):
                    raise TimeoutError(
                        f"no free browser in {timeout_s}s (max_size={self.max_size})"
                    )
            if self._idle:
                return self._idle.pop()
            self._all.append(placeholder := _Pending())
        try:
            browser = Browser()
        finally:
            with self._cv:
                self._all.remove(placeholder)
        with self._cv:
            self._all.append(browser)
        return browser

    def release(self, browser: Browser) -> None:
        with self._cv:
            if browser.closed or browser not in self._all:  # closed, or the pool was closed
                if browser in self._all:
                    self._all.remove(browser)
                browser.close()
            else:
                self._idle.append(browser)
            self._cv.notify()

    @property
    def size(self) -> int:
        return len(self._all)

    def close(self) -> None:
        """Quit every browser, idle or in use; later `acquire`s start fresh ones."""
        with self._cv:
            browsers, self._all, self._idle = list(self._all), [], []
        for b in browsers:
            if isinstance(b, Browser):
                b.close()

    def __enter__(self) -> BrowserPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Pending:
    """Holds a pool slot while a browser starts outside the lock."""


_shared: BrowserPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> BrowserPool:
    """The process-wide pool web envs use by default; closed at interpreter exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = BrowserPool()
            atexit.register(_shared.close)
        return _shared


def leaked_processes(owner: int | None = None) -> list[int]:
    """Live processes of browsers started by `owner` (default: this process); after every
    pool and browser is closed this must be empty."""
    return _tagged(f"{OWNER_ENV}={owner or os.getpid()}")


def _tagged(tag: str) -> list[int]:
    """Non-zombie pids whose environment holds `tag` (readable for our own processes)."""
    want, found = tag.encode(), []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if want in (p / "environ").read_bytes().split(b"\0"):
                if (p / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(p.name))
        except OSError:
            continue
    return found
