"""CopyOnRead: the generic code's paths for a TensorDict whose reads are copies out of a storage.

Reading a leaf of such a TensorDict (HDF5, Redis, zarr, ...) returns a copy, so the generic code must not
index, write into or modify in place the leaves it read. It calls hooks instead (``_base/storage.py``, whose
defaults work on the leaves in memory); this class overrides them once, for every stored node, indexed view
and stored lazy-stack element, on top of the backend's row hooks (``_leaf_meta``, ``_read_rows``,
``_write_rows``, ``_alloc_leaf``):

- indexing, ``get_at``, ``set_at_``, ``update_at_`` and ``td[idx] = value``: the dim-0 part of an index
  becomes one :class:`~tensorbatch._ops.rows.RowPlan`, read or written in one batched call; whatever the
  index does past dim 0 is done in memory on those rows;
- an in-place op writes the leaves it modified back (``_write_back``, ``_write_back_leaf``);
- walks by metadata (``_meta_items``), ``entry_class`` from metadata, ``to_tensordict`` as one row read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from .._base.leaves import check_layout
from .._errors import locked
from .._keys import key_tuple
from .._ops.index import index_leaves, normalize, setitem_memory, update_at_memory
from .._ops.meta import TENSOR, node_meta
from .._ops.rows import plan_rows, split_index
from .._ops.traverse import NON_TENSOR_TYPES, is_node, leaf_metas, named_leaves, source_leaves, write_back
from ..base import TensorDictBase

_Tensor = torch.Tensor
_PLAIN = (_Tensor, int, float, bool)  # values a row write takes as they are


class CopyOnRead(TensorDictBase):
    """The storage hooks of a TensorDict whose reads are copies (see the module docstring).

    Not a backend itself: :class:`~tensorbatch.stored.StoredTensorDict`, its indexed views and the stored
    lazy stack's elements subclass it and give the primitives and the row hooks.
    """

    __slots__ = ()

    # ------------------------------------------------------------------ walks, reads out, in-place writes
    def _meta_items(self) -> Iterable[tuple[str, Any]]:
        return ((key, self._meta_value(key)) for key in self._keys_str())

    def _meta_value(self, key: str) -> Any:
        meta = self._leaf_meta(key)
        return meta if meta.kind == TENSOR else self._get_str(key)

    def entry_class(self, key: Any) -> type:
        """Type of the value at ``key``: a tensor leaf answers from its metadata, unread."""
        found = node_meta(self, key)
        if found is not None and found[1].kind == TENSOR:
            return _Tensor  # a stored leaf reads back as a plain tensor
        return type(self._get(key))

    def densify(self, layout: Any = torch.strided) -> TensorDictBase:
        """Itself: a stored TensorDict holds no lazy stack."""
        check_layout(layout)
        return self

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDictBase:
        """An in-memory TensorDict copy: every row read in one batched call."""
        if not self.batch_dims:
            return self.clone()
        n = self.batch_size[0]
        out: TensorDictBase = self._read_rows(plan_rows(torch.arange(n), n))  # rows: new memory
        return out

    def _materialize(self) -> TensorDictBase:
        return self.to_tensordict()

    def _write_back(self, leaves: list[Any]) -> None:
        write_back(self, leaves)

    def _write_back_leaf(self, key: Any, leaf: Any) -> None:
        path = key_tuple(key)
        node = self._get(path[:-1]) if len(path) > 1 else self
        node._set_str(path[-1], leaf, inplace=True, validated=True)

    # ------------------------------------------------------------------ indexing through the row hooks
    def _read_index(self, index: Any) -> Any:
        """``self[index]`` through ``_read_rows``."""
        idx, _, _ = normalize(self, index)  # also checks the index against the batch size
        return self._read_normalized(idx)

    def _read_normalized(self, idx: tuple[Any, ...]) -> Any:
        """``self[idx]`` for an index ``_ops.index.normalize`` returned for this node (a view keeps one)."""
        batch_size = self.batch_size
        if not batch_size:  # no rows to plan: a 0-d store is read whole
            return index_leaves(self.to_tensordict(), idx)
        plan, rest = split_index(idx, batch_size)
        out = self._read_rows(plan)
        return out if rest is None else index_leaves(out, rest)

    def _read_at(self, key: Any, index: Any, default: Any) -> Any:
        """``self.get_at(key, index, default)``: the rows of that one leaf."""
        path = key_tuple(key)
        node: Any = self._parent_of(path) if len(path) > 1 else self
        if node is None or not node._has_str(path[-1]):
            if node is None:
                self._deepest(path)  # a path through a leaf: KeyError
            return self._get(path, default)  # the default, None, or the KeyError
        items = index if type(index) is tuple else (index,)
        if not node.batch_dims or not items or any(i is Ellipsis or i is None for i in items):
            return node._get_str(path[-1])[index]
        first = items[0]
        if isinstance(first, (list, range, np.ndarray)):
            first = torch.as_tensor(first)
        plan, rest = split_index((first, *items[1:]), node.batch_size)
        rows = node._read_rows(plan, (path[-1],))._get_str(path[-1])
        return rows if rest is None else rows[rest]

    def _set_at(self, key: Any, value: Any, index: Any) -> None:
        """``self.set_at_(key, value, index)`` through ``_write_rows``."""
        self._write_at(index, {key_tuple(key): value}, strict=True)

    def _write_index(self, index: Any, value: Any) -> None:
        """``self[index] = value`` through ``_write_rows``."""
        idx, _, _ = normalize(self, index)
        if is_node(value) or isinstance(value, dict):
            values = dict(source_leaves(value, "writing at an index"))
        else:  # one value for every tensor leaf (non-tensor leaves are left alone, as in memory)
            values = {
                path: value
                for path, meta in leaf_metas(self)
                if isinstance(meta, _Tensor) or getattr(meta, "kind", None) == TENSOR
            }
        self._write_at(idx, values, strict=False, source=value)

    def _update_at(self, source: Any, index: Any, clone: bool, wanted: set[Any] | None) -> None:
        """``self.update_at_(source, index)`` through ``_write_rows``."""
        leaves = source_leaves(source, "writing at an index")
        values = {path: value.clone() if clone else value for path, value in leaves if wanted is None or path in wanted}
        self._write_at(index, values, strict=True)

    def _write_at(self, index: Any, values: dict[tuple[str, ...], Any], *, strict: bool, source: Any = None) -> None:
        """Write ``values`` (path -> value) at a batch index, everything checked before any write.

        ``strict`` (set_at_, update_at_): every path must exist. Otherwise (``self[index] = source``) new
        keys are created, as in memory. A dim-0 index into existing tensor leaves is one ``_write_rows``
        call; any other write reads the rows it touches, writes them in memory (the in-memory checks), and
        writes them back with one ``_write_rows`` call.
        """
        td: Any = self
        if type(index) is not tuple:
            index = normalize(td, index)[0]
        batch = td.batch_size
        if batch:  # the common case first: existing tensor leaves at dim-0 rows, one _write_rows
            plan, rest = split_index(index, batch)
            if (
                rest is None
                and all(isinstance(value, _PLAIN) for value in values.values())
                and td._are_tensor_leaves(values)
            ):
                td._write_rows(plan, values)
                return
        found = {path: node_meta(td, path) for path in values}
        missing = [path for path, meta in found.items() if meta is None]
        if missing and strict:
            td._get(missing[0])  # the KeyError naming the path
        if missing and td.is_locked:
            raise locked()
        if not td.batch_dims:  # no rows: a 0-d store is read and written whole
            sub = td.to_tensordict()
            _write_in_memory(sub, index or (Ellipsis,), values, strict, source)
            td.update({path: sub._get(path) for path in values}, inplace=True)
            return
        sub = td._read_rows(plan)
        _write_in_memory(sub, rest or (Ellipsis,), values, strict, source)
        tensors: dict[tuple[str, ...], Any] = {}
        for path in values:
            leaf = sub._get(path)
            node = td._walk_to(path, create=True)
            if found[path] is None:  # a new key: allocated from its schema, then written like the others
                if type(leaf) in NON_TENSOR_TYPES:
                    node._set_str(path[-1], leaf._follow(node.batch_size), inplace=False, validated=True)
                    continue
                if not isinstance(leaf, _Tensor):  # a node created by the write: its leaves are listed too
                    continue
                node._alloc_leaf(path[-1], (*td.batch_size, *leaf.shape[len(sub.batch_size) :]), leaf.dtype)
            elif type(leaf) in NON_TENSOR_TYPES:  # a small object stored whole: merged, then replaced
                node._merge_non_tensor(path[-1], plan.index, leaf)
                continue
            elif is_node(leaf):  # a whole node written at the index: its tensor leaves
                tensors.update(((*path, *p), x) for p, x in named_leaves(leaf) if isinstance(x, _Tensor))
                continue
            tensors[path] = leaf
        td._write_rows(plan, tensors)


def _write_in_memory(
    sub: Any, index: tuple[Any, ...], values: dict[tuple[str, ...], Any], strict: bool, source: Any
) -> None:
    if strict:
        update_at_memory(sub, values, index, False, None)
    else:
        setitem_memory(sub, index, source)
