"""Fixtures of the store tests: the run's shared server and private servers for fault tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _redis_server import Server, shared_server, start_server


@pytest.fixture(scope="session")
def server() -> Server:
    """The server shared by the whole run (stopped by pid at session end, see the root conftest)."""
    return shared_server()


@pytest.fixture
def private_server() -> Iterator[Any]:
    """A factory of private servers (``private_server("--maxmemory", "2mb")``), each stopped after the test."""
    started: list[Server] = []

    def start(*args: str) -> Server:
        started.append(start_server(*args))
        return started[-1]

    yield start
    for srv in started:
        srv.close()
