"""Top-level fixtures: the TensorDict flavours of the conformance suite (see ``tests/_flavours.py``)."""

from __future__ import annotations

import pytest
from _flavours import FLAVOURS, Flavour

from tensorbatch import TensorDictBase


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> Flavour:
    """One flavour of ``FLAVOURS``; tests using it run once per flavour."""
    return request.param


@pytest.fixture
def tdf(flavour: Flavour) -> TensorDictBase:
    """A fresh TensorDict from the flavour's factory (reference content, batch [3, 4])."""
    return flavour.factory()
