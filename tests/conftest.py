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
