"""Top-level fixtures: the TensorDict flavours of the conformance suite (see ``tests/_flavours.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from _flavours import FLAVOURS, Flavour


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> Flavour:
    """One flavour of ``FLAVOURS``; tests using it run once per flavour."""
    return request.param


@pytest.fixture
def tdf(flavour: Flavour) -> Any:
    """A fresh collection from the flavour's factory (reference content, batch [3, 4]): a TensorDict, or a
    TensorClass for the ``tensorclass_*`` flavours."""
    return flavour.factory()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the test run's Redis/Valkey server (when one was started), also after a failure."""
    from _redis_server import stop_shared_server

    stop_shared_server()
