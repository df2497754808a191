"""Helpers shared by the HDF5 test files: the subject module, plain summaries of what a file holds.

The subject is ``tensorbatch`` unless ``TB_DIFF_SUBJECT`` names another module, as in ``tests/differential``:
``TB_DIFF_SUBJECT=tensordict`` runs these tests against the reference itself, which is how they are checked.
Tests of what only tensorbatch does (``ours_only``) skip then, and deliberate differences (``difference``)
are strict xfails only when the subject is tensorbatch.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

h5py = pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")

SUBJECT = os.environ.get("TB_DIFF_SUBJECT", "tensorbatch")
IS_TB = SUBJECT == "tensorbatch"
tb: Any = importlib.import_module(SUBJECT)

ours_only = pytest.mark.skipif(not IS_TB, reason="tensorbatch's own behaviour (the subject is the reference)")


def difference(reason: str) -> Any:
    """A strict xfail pinning a deliberate difference from tensordict 0.15.3 (README, Differences)."""
    return pytest.mark.xfail(IS_TB, strict=True, reason=f"Difference: {reason}")


def quiet(fn: Callable[[], Any]) -> Any:
    """``fn()`` with warnings silenced (tensordict's FutureWarning on strings read as bytes, and the like)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def text(value: Any) -> Any:
    """A value with its strings as ``str``, lists as lists (tensordict 0.15.3 reads strings as bytes; 0.17 will
    read them as str, as we do)."""
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return text(value.tolist())
    if isinstance(value, (list, tuple)):  # tensordict's LinkedList too
        return [text(v) for v in value]
    return value


def bits(t: torch.Tensor) -> bytes:
    return t.detach().clone().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def is_collection(x: Any) -> bool:
    return hasattr(x, "batch_size") and hasattr(x, "keys") and not isinstance(x, torch.Tensor)


def _chained(td: Any, key: tuple[str, ...]) -> Any:
    """``td[k0][k1]...``: tensordict gives a node read by a tuple key (``td["n", "deep"]``) the root's batch size
    when it inferred them (pinned in test_h5_interop); node by node it gives the node's own, as we do."""
    for k in key:
        td = td[k]
    return td


def summary(td: Any) -> dict[Any, Any]:
    """Batch size and every entry (nested ones by tuple key) of a TensorDict-like, as plain values.

    Tensors give ``(dtype, shape, raw bytes)``, nodes their batch size, non-tensor leaves their value.
    """
    out: dict[Any, Any] = {(): ("node", tuple(td.batch_size))}
    for key in quiet(lambda: list(td.keys(include_nested=True))):
        key = key if isinstance(key, tuple) else (key,)
        value = quiet(lambda key=key: _chained(td, key))
        if isinstance(value, torch.Tensor):
            out[key] = ("tensor", str(value.dtype), tuple(value.shape), bits(value))
        elif is_collection(value):
            out[key] = ("node", tuple(value.batch_size))
        else:
            out[key] = ("value", text(value))
    return out


def raw_content(path: Path) -> dict[str, Any]:
    """Every group and dataset of an HDF5 file read with h5py alone: ``name -> numpy value or "<group>"``."""
    out: dict[str, Any] = {}
    with h5py.File(path, "r") as f:

        def visit(name: str, obj: Any) -> None:
            out[name] = "<group>" if isinstance(obj, h5py.Group) else obj[()]

        f.visititems(visit)
    return out


def assert_same_raw(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        if isinstance(a[name], np.ndarray):
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        else:
            assert a[name] == b[name], name
