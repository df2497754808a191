"""Fixtures of the torch.distributed tests: process groups kept for a whole module (see ``_dist_group.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _dist_group import Groups


@pytest.fixture(scope="module")
def groups() -> Iterator[Groups]:
    """``groups(n)``: the module's live gloo group of ``n`` processes (started on first use)."""
    found = Groups()
    yield found
    found.close()
