"""Storage hooks: what a storage backend (HDF5, Redis, ...) overrides to avoid reading whole leaves.

The generic defaults serve backends whose leaves are in memory.

The contract is described in ``tensorbatch/BACKENDS.md``. In short, a backend whose ``_get_str`` reads
(copies) data sets ``_leaves_in_memory = False`` and overrides:

- ``_leaf_meta(key)``: ``(shape, dtype, kind)`` of an entry of this level without reading its data;
- ``_read_rows(plan, keys)``: the rows of a :class:`~tensorbatch._ops.rows.RowPlan` for every leaf, in one
  batched read, as an in-memory TensorDict;
- ``_write_rows(plan, values)``: values written at the plan's rows, all validated before any write;
- ``_alloc_leaf(key, shape, dtype)``: a new leaf from a schema, without data (zeros).

Generic code (indexing, ``get_at``/``set_at_``/``update_at_``, ``keys``, ``repr``, ``to_tensordict``)
calls these; the defaults below read and write the in-memory leaves, so TensorDict, lazy stacks and
memmap keep their own paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from .._errors import add_path_note, fmt_path, locked
from .._keys import key_tuple
from .._ops.index import index_leaves, normalize, setitem, update_at_
from .._ops.meta import TENSOR, LeafMeta, meta_of, node_meta
from .._ops.rows import RowPlan, check_fits, split_index
from .._ops.traverse import NON_TENSOR_TYPES, is_node, leaf_metas, named_leaves, source_leaves

_Tensor = torch.Tensor
_PLAIN = (_Tensor, int, float, bool)  # values a row write takes as they are


class StorageHooks:
    """Mixin of TensorDictBase: the storage hooks and their in-memory defaults (see the module docstring)."""

    __slots__ = ()

    # False for a backend whose _get_str reads (copies) data out of storage: generic indexing, get_at,
    # set_at_, update_at_, keys and repr then go through the hooks instead of the leaves.
    _leaves_in_memory: ClassVar[bool] = True

    def _leaf_meta(self, key: str) -> LeafMeta:
        """``(shape, dtype, kind)`` of the entry ``key`` of this level (KeyError when missing).

        A storage backend answers from its metadata; the default reads the value.
        """
        return meta_of(self._get_str(key))  # type: ignore[attr-defined]  # a TensorDictBase primitive

    def _meta_items(self) -> Iterable[tuple[str, Any]]:
        """``(key, value)`` for this level, where a tensor leaf may stand as its :class:`LeafMeta`.

        Nodes and non-tensor leaves are the values themselves (walks descend into nodes). For in-memory
        leaves these are just the items: a tensor carries its own metadata.
        """
        if self._leaves_in_memory:
            return self._items_str()  # type: ignore[attr-defined, no-any-return]  # a primitive
        return ((key, self._meta_value(key)) for key in self._keys_str())  # type: ignore[attr-defined]

    def _meta_value(self, key: str) -> Any:
        meta = self._leaf_meta(key)
        return meta if meta.kind == TENSOR else self._get_str(key)  # type: ignore[attr-defined]

    def _read_rows(self, plan: RowPlan, keys: Iterable[str] | None = None) -> Any:
        """The rows ``plan`` selects of every leaf (or of the entries ``keys`` of this level), in one read.

        The result is an in-memory TensorDict of batch size ``(*plan.shape, *batch_size[1:])``.

        Leaves may share memory with the storage where indexing in memory would (an int or a slice on a
        memory-backed store); a ``"rows"`` plan always gives new memory, as torch's advanced indexing.
        """
        source = self if keys is None else self.select(*keys)  # type: ignore[attr-defined]
        return index_leaves(source, plan.index)

    def _write_rows(self, plan: RowPlan, values: Mapping[tuple[str, ...], Any]) -> None:
        """Write ``values`` (leaf path below this node -> tensor or number) at the rows ``plan`` selects.

        Every path must be an existing tensor leaf and every value must broadcast to
        ``plan.target_shape(leaf_shape)``; all are checked before anything is written (RuntimeError or
        KeyError naming the path, the container unchanged).
        """
        checked = []
        for path, value in values.items():
            target = self._get(path)  # type: ignore[attr-defined]
            if not isinstance(target, _Tensor):
                raise TypeError(
                    f"cannot write rows into {fmt_path(path)}: it holds a {type(target).__name__}, not a tensor"
                )
            if isinstance(value, _Tensor):
                check_fits(path, value.shape, plan.target_shape(target.shape))
            checked.append((path, target, value))
        index = plan.index
        for path, target, value in checked:
            try:
                try:
                    target[index] = value
                except RuntimeError:  # index_put does not cast: cast, then write (it failed before writing)
                    if not isinstance(value, _Tensor) or value.dtype == target.dtype:
                        raise
                    target[index] = value.to(target.dtype)
            except Exception as err:
                add_path_note(err, "writing rows", path)
                raise

    def _are_tensor_leaves(self, paths: Iterable[tuple[str, ...]]) -> bool:
        """Whether every path (below this node) is an existing tensor leaf: what ``_write_rows`` can write.

        Asked before each row write; a backend that caches its layout answers without walking the nodes.
        """
        for path in paths:
            found = node_meta(self, path)
            if found is None or found[1].kind != TENSOR:
                return False
        return True

    def _merge_non_tensor(self, key: str, index: Any, value: Any) -> None:
        """Write ``value`` at the dim-0 ``index`` of the non-tensor leaf ``key`` of this level.

        Read, merged (``_written``), stored back whole. A store shared by processes overrides it to do that
        atomically.
        """
        current = self._get_str(key)  # type: ignore[attr-defined]
        self._set_str(key, current._written(index, value), inplace=False, validated=True)  # type: ignore[attr-defined]

    def _alloc_leaf(self, key: str, shape: Any, dtype: torch.dtype) -> None:
        """Create the tensor leaf ``key`` of this level from a schema, without data (zero-filled).

        ``shape`` is the full shape (batch dims first). A storage backend allocates in storage.
        """
        leaf = torch.zeros(shape, dtype=dtype, device=self.device)  # type: ignore[attr-defined]
        self._set_str(key, leaf, inplace=False, validated=True)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ the generic row paths
    # Used by ``_ops/index.py`` for a backend whose leaves are not in memory: the dim-0 part of an index
    # becomes one RowPlan, read or written in one batched call; whatever the index does past dim 0 is
    # done in memory on those rows. Backends do not override these.
    def _read_index(self, index: Any) -> Any:
        """``self[index]`` through ``_read_rows``."""
        idx, _, _ = normalize(self, index)  # also checks the index against the batch size
        return self._read_normalized(idx)

    def _read_normalized(self, idx: tuple[Any, ...]) -> Any:
        """``self[idx]`` for an index ``_ops.index.normalize`` returned for this node (a view keeps one)."""
        batch_size = self.batch_size  # type: ignore[attr-defined]
        if not batch_size:  # no rows to plan: a 0-d store is read whole
            return index_leaves(self.to_tensordict(), idx)  # type: ignore[attr-defined]
        plan, rest = split_index(idx, batch_size)
        out = self._read_rows(plan)
        return out if rest is None else index_leaves(out, rest)

    def _read_at(self, key: Any, index: Any, default: Any) -> Any:
        """``self.get_at(key, index, default)``: the rows of that one leaf."""
        path = key_tuple(key)
        node: Any = self._parent_of(path) if len(path) > 1 else self  # type: ignore[attr-defined]
        if node is None or not node._has_str(path[-1]):
            if node is None:
                self._deepest(path)  # type: ignore[attr-defined]  # a path through a leaf: KeyError
            return self._get(path, default)  # type: ignore[attr-defined]  # the default, None, or the KeyError
        items = index if type(index) is tuple else (index,)
        if not node.batch_dims or not items or any(i is Ellipsis or i is None for i in items):
            return node._get_str(path[-1])[index]
        first = items[0]
        if isinstance(first, (list, range, np.ndarray)):
            first = torch.as_tensor(first)
        plan, rest = split_index((first, *items[1:]), node.batch_size)
        rows = node._read_rows(plan, (path[-1],))._get_str(path[-1])
        return rows if rest is None else rows[rest]

    def _write_index(self, index: Any, value: Any) -> None:
        """``self[index] = value`` through ``_write_rows``."""
        idx, _, _ = normalize(self, index)
        if is_node(value) or isinstance(value, dict):
            values = dict(source_leaves(value, "writing at an index"))
        else:  # one value for every tensor leaf (non-tensor leaves are left alone, as in memory)
            values = {
                path: value
                for path, meta in leaf_metas(self)  # type: ignore[arg-type]
                if isinstance(meta, _Tensor) or getattr(meta, "kind", None) == TENSOR
            }
        self._write_at(idx, values, strict=False, source=value)

    def _update_at(self, source: Any, index: Any, clone: bool, wanted: Any) -> None:
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
        if td.batch_dims:  # the common case first: existing tensor leaves at dim-0 rows, one _write_rows
            plan, rest = split_index(index, td.batch_size)
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
        update_at_(sub, values, index)
    else:
        setitem(sub, index, source)
