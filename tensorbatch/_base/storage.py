"""Storage hooks: what a storage backend (HDF5, Redis, ...) overrides to avoid reading whole leaves.

The generic defaults serve backends whose leaves are in memory.

The contract is described in ``tensorbatch/BACKENDS.md``. In short, a backend whose ``_get_str`` reads
data out of storage overrides:

- ``_leaf_meta(key)``: ``(shape, dtype, kind)`` of an entry of this level without reading its data;
- ``_read_rows(plan, keys)``: the rows of a :class:`~tensorbatch._ops.rows.RowPlan` for every leaf, in one
  batched read, as an in-memory TensorDict;
- ``_write_rows(plan, values)``: values written at the plan's rows, all validated before any write;
- ``_alloc_leaf(key, shape, dtype)``: a new leaf from a schema, without data (zeros).

A backend whose reads are copies also changes where the generic code works on the leaves it read
(indexing, ``get_at``/``set_at_``/``update_at_``, the write-back after an in-place op, key walks by
metadata): the stored layer's ``CopyOnRead`` (``tensorbatch/stored/_copies.py``) does that once, through the hooks
above. The defaults below read and write the in-memory leaves, so TensorDict, lazy stacks and memmap keep
their own paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .._errors import add_path_note, fmt_path
from .._ops.index import get_at_memory, index_leaves, set_at_memory, setitem_memory, takes_all, update_at_memory
from .._ops.meta import TENSOR, LeafMeta, meta_of, node_meta
from .._ops.rows import RowPlan, check_fits

_Tensor = torch.Tensor


class StorageHooks:
    """Mixin of TensorDictBase: the storage hooks and their in-memory defaults (see the module docstring)."""

    __slots__ = ()

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
        return self._items_str()  # type: ignore[attr-defined, no-any-return]  # a primitive

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

    # ------------------------------------------------------------------ where copy-on-read storage differs
    # The generic code calls these where a backend whose reads are copies must not work on the leaves it
    # read: indexing, get_at/set_at_/update_at_, and the write-back after an in-place op. The defaults work
    # on the leaves in memory; the stored layer (``stored/_copies.py``, ``CopyOnRead``) overrides them all.
    def _read_index(self, index: Any) -> Any:
        """``self[index]`` (a key-free index; ``self`` itself for ``:``s and ``...``, as tensordict's)."""
        if takes_all(index, len(self.batch_size)):  # type: ignore[attr-defined]
            return self
        return index_leaves(self, index)

    def _write_index(self, index: Any, value: Any) -> None:
        """``self[index] = value`` (a key-free index)."""
        setitem_memory(self, index, value)

    def _read_at(self, key: Any, index: Any, default: Any) -> Any:
        """``self.get_at(key, index, default)``."""
        return get_at_memory(self, key, index, default)

    def _set_at(self, key: Any, value: Any, index: Any) -> None:
        """``self.set_at_(key, value, index)``."""
        set_at_memory(self, key, value, index)

    def _update_at(self, source: Any, index: Any, clone: bool, wanted: set[Any] | None) -> None:
        """``self.update_at_(source, index, clone)``, writing only the leaf paths in ``wanted`` (None: all)."""
        update_at_memory(self, source, index, clone, wanted)

    def _write_back(self, leaves: list[Any]) -> None:
        """Store ``leaves`` (``flat_leaves(self)``, just modified in place) back: nothing to do in memory."""

    def _write_back_leaf(self, key: Any, leaf: Any) -> None:
        """Store the tensor ``leaf`` read at ``key`` and modified in place back: nothing to do in memory."""

    def _materialize(self) -> Any:
        """This TensorDict with its leaves in memory (itself; a stored one reads its rows into a TensorDict)."""
        return self
