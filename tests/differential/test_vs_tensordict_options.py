"""Differential tests: the global modes' getters with ``allow_none`` against tensordict 0.15.3.

A mode that nothing set (no environment variable at import, no setter) reads ``None`` under
``allow_none=True`` and its default otherwise; inside a setter's block it reads the block's value. Each
library runs in a fresh process: a test that set a mode for the rest of its process would change the answer.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.differential

GETTERS = [
    ("list_to_stack", "set_list_to_stack", True),
    ("capture_non_tensor_stack", "set_capture_non_tensor_stack", True),
    ("capture_non_tensor_stack", "set_capture_non_tensor_stack", False),
    ("lazy_legacy", "set_lazy_legacy", False),
]

_SCRIPT = """
import sys, warnings
lib = __import__(sys.argv[1])
out = []
for getter, setter, mode in {getters!r}:
    get = getattr(lib, getter)
    outside = (get(), get(allow_none=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated modes warn in both
        with getattr(lib, setter)(mode):
            inside = (get(), get(allow_none=True))
    out.append((outside, inside, (get(), get(allow_none=True))))
print(repr(out))
"""


def _reads(module: str) -> list:
    env = {k: v for k, v in os.environ.items() if k not in ("LIST_TO_STACK", "CAPTURE_NONTENSOR_STACK")}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(getters=GETTERS), module],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_allow_none(ref, tb) -> None:
    expected = _reads(ref.__name__)
    assert expected[0] == ((True, None), (True, True), (True, None))  # the premise: unset reads None
    assert _reads(tb.__name__) == expected
