"""Differential tests: the batch sizes inferred for files that record none, HDF5 and zarr, per library.

A file written by another tool (h5py, zarr) records no batch size; tensordict's ``from_h5``/``from_zarr``
give each nested TensorDict the longest leading shape its entries share, nested ones first (a group's own
batch size counts as its shape), at most ``batch_dims`` dims. Each layout below is written once by hand and
opened by both libraries; the batch size of every node, reached key by key (``td["n"]["m"]``), must agree.
(tensordict gives a node reached by a tuple key, ``td["n", "m"]``, its root's batch size instead: a recorded
difference, ``tests/persistent/test_h5_interop.py``.)
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.differential, pytest.mark.filterwarnings("ignore")]
h5py = pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")

# leaf path -> shape (None: an empty group)
LAYOUTS: dict[str, dict[str, tuple[int, ...] | None]] = {
    "depth1": {"a": (5, 2, 3), "nested/deep": (5, 2)},
    "depth2": {"a": (5, 2, 3), "n/m/deep": (5, 2, 4)},
    "siblings": {"a": (5, 2, 3), "n/x": (5, 2, 7), "n/m/deep": (5, 2, 4)},
    "siblings_of_other_depths": {"n/x": (5, 3), "n/m/deep": (5, 2, 4), "o/y": (5, 2)},
    "only_nested": {"n/x": (5, 3, 2)},
    "scalar_leaf": {"a": (5,), "n/s": ()},
    "shorter_nested": {"a": (4, 3), "n/b": (4,), "n/c/d": (4, 3, 2)},
    "empty_group": {"a": (3, 2), "e": None},
}


def _write_h5(path: Path, layout: dict[str, Any]) -> str:
    with h5py.File(path, "w") as f:
        for name, shape in layout.items():
            if shape is None:
                f.create_group(name)
            else:
                f[name] = np.zeros(shape, dtype=np.float32)
    return str(path)


def _write_zarr(path: Path, layout: dict[str, Any]) -> str:
    zarr = pytest.importorskip("zarr", reason="zarr (the zarr extra) is not installed")
    root = zarr.open_group(str(path), mode="w")
    for name, shape in layout.items():
        *groups, leaf = name.split("/")
        node = root
        for group in groups:
            node = node.require_group(group)
        if shape is None:
            node.require_group(leaf)
        else:
            node.create_array(leaf, data=np.zeros(shape, dtype=np.float32))
    return str(path)


def _nodes(td: Any) -> dict[str, list[int]]:
    """The batch size of every node, each reached key by key from its parent."""
    out = {"": list(td.batch_size)}

    def walk(node: Any, prefix: str) -> None:
        for key in list(node.keys()):
            value = node.get(key)
            if hasattr(value, "batch_size") and "NonTensor" not in type(value).__name__:
                out[prefix + key] = list(value.batch_size)
                walk(value, prefix + key + "/")

    walk(td, "")
    return out


def _open(lib: Any, storage: str, where: str, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if storage == "h5":
            return lib.PersistentTensorDict.from_h5(where, **kwargs)
        return lib.TensorDict.from_zarr(where, **kwargs)


@pytest.mark.parametrize("storage", ["h5", "zarr"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_inferred_batch_sizes_as_reference(ref, tb, tmp_path, storage, layout):
    write = _write_h5 if storage == "h5" else _write_zarr
    where = write(tmp_path / f"data.{storage}", LAYOUTS[layout])
    want, got = _open(ref, storage, where), _open(tb, storage, where)
    try:
        assert _nodes(got) == _nodes(want)
    finally:
        want.close()
        got.close()


def test_file_tensordict_wrote_reopened_as_reference(ref, tb, tmp_path):
    """tensordict's ``from_dict`` records no batch size in an HDF5 file: both libraries infer the same ones."""
    import torch

    path = str(tmp_path / "td.h5")
    ref.PersistentTensorDict.from_dict(
        {"a": torch.rand(5, 2, 3), "nested": {"deep": torch.rand(5, 2)}}, path, batch_size=[5]
    ).close()
    want, got = _open(ref, "h5", path), _open(tb, "h5", path)
    try:
        assert _nodes(got) == _nodes(want) == {"": [5, 2], "nested": [5, 2]}
    finally:
        want.close()
        got.close()
