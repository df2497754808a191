"""Filling a new stored node, written once for every storage: from a TensorDict, or from a schema.

What the storages' constructors share (``to_zarr``, HDF5's ``from_dict``/``from_schema``, the Redis store's
``from_dict``); what each adds around them stays its own (HDF5's atomic rename, zarr's consolidated metadata,
the Redis store's one guarded script).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .. import _progress
from .._keys import key_tuple
from ..base import TensorDictBase
from ._node import StoredTensorDict


def write_all(out: StoredTensorDict, source: TensorDictBase, progress: bool | None, name: str) -> None:
    """Write ``source`` into ``out``, a new and empty stored node: batch size, dim names, then every entry.

    One transaction of the dialect. Values are taken as validated: ``source``'s batch size holds them.

    Args:
        out: the node written (its entries are replaced, nothing else is checked).
        source: the TensorDict whose entries are written.
        progress: a tqdm bar counting the bytes written (None: the switch :class:`~tensorbatch.set_progress`).
        name: the call shown before the bar (``"to_h5"``).
    """
    with out._state.dialect.transaction():
        record(out, source.batch_size, source._maybe_names())
        for key, value in _progress.entries(source._items_str(), progress, name):
            out._set_str(key, value, inplace=False, validated=True)


def allocate(out: StoredTensorDict, schema: Mapping[Any, tuple[Any, torch.dtype]], size: torch.Size) -> None:
    """Record ``size`` on ``out`` (a new stored node) and allocate a zero-filled leaf per ``schema`` entry.

    ``schema`` maps keys (strings or tuples of strings) to ``(element_shape, dtype)``; a leaf has the shape
    ``[*size, *element_shape]``, the nodes on its way are created. One transaction of the dialect.
    """
    with out._state.dialect.transaction():
        record(out, size, None)
        for key, (shape, dtype) in schema.items():
            path = key_tuple(key)
            out._walk_to(path, create=True)._alloc_leaf(path[-1], (*size, *shape), dtype)


def record(out: StoredTensorDict, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
    """Record the batch size and dim names of ``out``, a node without entries (nothing to check them against)."""
    state, path = out._state, out._path
    state.dialect.set_node_facts(path, batch_size, names)
    state.batch[path] = batch_size
    if names is not None and any(n is not None for n in names):
        state.names[path] = tuple(names)
    else:
        state.names.pop(path, None)
