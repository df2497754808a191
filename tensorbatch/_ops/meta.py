"""Leaf metadata: what a storage backend knows about an entry without reading its data.

A backend answers ``_leaf_meta(key)`` with a :class:`LeafMeta`; :func:`meta_of` gives the same for a
value already in memory. Keys, repr and the row writes use metadata to avoid reading leaves.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .._keys import key_tuple
from .traverse import MISSING, NON_TENSOR_TYPES, is_node, is_td

TENSOR = "tensor"
NODE = "node"
NON_TENSOR = "non-tensor"


class LeafMeta(NamedTuple):
    """``(shape, dtype, kind)`` of an entry.

    ``shape`` is the full shape of a tensor leaf, or the batch size of a node or non-tensor leaf;
    ``dtype`` is None for nodes and non-tensor leaves; ``kind`` is ``"tensor"``, ``"node"`` or
    ``"non-tensor"``.
    """

    shape: torch.Size
    dtype: torch.dtype | None
    kind: str


def meta_of(value: Any) -> LeafMeta:
    """The :class:`LeafMeta` of a value already in memory.

    Examples:
        >>> meta_of(torch.zeros(2, 3))
        LeafMeta(shape=torch.Size([2, 3]), dtype=torch.float32, kind='tensor')
    """
    if isinstance(value, torch.Tensor):
        return LeafMeta(value.shape, value.dtype, TENSOR)
    if type(value) in NON_TENSOR_TYPES:
        return LeafMeta(value.batch_size, None, NON_TENSOR)
    if is_td(value):
        return LeafMeta(value.batch_size, None, NODE)
    return LeafMeta(torch.Size(getattr(value, "shape", ())), getattr(value, "dtype", None), NON_TENSOR)


def node_meta(td: Any, key: Any) -> tuple[Any, LeafMeta] | None:
    """``(node holding it, its LeafMeta)`` for the entry at nested ``key``, or None when it is missing."""
    path = key_tuple(key)
    node = td
    for name in path[:-1]:
        node = node._get_str(name, MISSING)
        if node is MISSING or not is_node(node):
            return None
    if not node._has_str(path[-1]):
        return None
    return node, node._leaf_meta(path[-1])


def common_batch(shapes: list[Any], batch_dims: int | None = None) -> torch.Size:
    """The longest leading shape every one of ``shapes`` starts with (at most ``batch_dims`` dims).

    What ``auto_batch_size_`` and the backends infer a node's batch size from.

    Examples:
        >>> common_batch([torch.Size([3, 4, 2]), torch.Size([3, 4])])
        torch.Size([3, 4])
        >>> common_batch([torch.Size([3, 4, 2]), torch.Size([3, 5])], batch_dims=1)
        torch.Size([3])
    """
    common: list[int] = []
    if shapes:
        limit = min(len(s) for s in shapes)
        if batch_dims is not None:
            limit = min(limit, batch_dims)
        for i in range(limit):
            if any(s[i] != shapes[0][i] for s in shapes):
                break
            common.append(shapes[0][i])
    return torch.Size(common)
