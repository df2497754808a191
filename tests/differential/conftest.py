"""Fixtures for the differential suite (tensorbatch versus tensordict 0.15.3).

``ref`` is the reference module (``tensordict``); the suite skips when it is not installed.
``tb`` is the module under test: ``tensorbatch`` by default, or the module named by the environment
variable ``TB_DIFF_SUBJECT`` (``TB_DIFF_SUBJECT=tensordict`` self-checks the tests against the reference).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest

from ._diff import SUBJECT_ENV
from ._diff import run_both as _run_both


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "differential: compares results with tensordict 0.15.3")


@pytest.fixture(scope="session")
def ref() -> Any:
    return pytest.importorskip(
        "tensordict", reason="tensordict (the reference, 0.15.3) is not installed; differential tests need it"
    )


@pytest.fixture(scope="session")
def tb(ref: Any) -> Any:
    name = os.environ.get(SUBJECT_ENV, "tensorbatch")
    module = importlib.import_module(name)
    missing = [n for n in ("TensorDict", "TensorDictBase") if not hasattr(module, n)]
    if missing:
        pytest.fail(f"subject module {name!r} lacks {missing}", pytrace=False)
    return module


@pytest.fixture
def run_both(ref: Any, tb: Any):
    """``run_both(fn, **kw)``: run ``fn(lib, td)`` with both libraries and compare (``_diff.run_both``)."""

    def runner(fn, **kwargs):
        return _run_both(ref, tb, fn, **kwargs)

    return runner
