"""An indexed view of a storage backend: ``ptd[idx]`` reads its rows on access and writes through.

The view keeps its source node and the batch index. Reading a key reads those rows of that leaf
(``get_at``); writing a key writes those rows (``_write_at``); a nested key gives a view of the nested node
at the same index. Nothing is read when the view is made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .._ops.index import index_leaves, normalize
from .._ops.meta import NODE, NON_TENSOR, LeafMeta
from .._ops.rows import RowPlan, check_fits
from .._ops.traverse import NO_DEFAULT, is_node, source_leaves
from ..base import TensorDictBase
from ._copies import CopyOnRead

_Size = torch.Size


class IndexedView(CopyOnRead):
    """``source[index]`` without reading: a TensorDict whose leaves are the indexed rows of ``source``'s.

    Args:
        source: a storage node (a :class:`CopyOnRead`), or another view.
        index: a batch index of ``source``.
    """

    __slots__ = ("_bs", "_index", "_locked", "_names", "_source")

    def __init__(self, source: CopyOnRead, index: Any) -> None:
        idx, size, names = normalize(source, index)
        if size is None:  # masks and index tensors: the shape from an empty stand-in
            size = torch.zeros((), dtype=torch.bool).expand(source.batch_size)[idx].shape
        self._source, self._index, self._bs, self._locked = source, idx, _Size(size), False
        self._names = names if names is not None and any(n is not None for n in names) else None

    @classmethod
    def _at(
        cls, source: CopyOnRead, index: tuple[Any, ...], size: torch.Size, names: tuple[Any, ...] | None = None
    ) -> IndexedView:
        out = object.__new__(cls)
        out._source, out._index, out._bs, out._locked, out._names = source, index, size, False, names
        return out

    def _maybe_names(self) -> tuple[Any, ...] | None:
        """The dim names the index leaves of the source's (as indexing an in-memory TensorDict names them)."""
        return self._names

    @property
    def source(self) -> CopyOnRead:
        """The node this view indexes."""
        return self._source

    @property
    def batch_size(self) -> torch.Size:
        return self._bs

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        TensorDictBase.batch_size.fset(self, value)  # type: ignore[attr-defined]  # the base setter

    def _change_batch_size(self, new_size: torch.Size) -> None:
        if new_size != self._bs:
            raise RuntimeError(
                "cannot change the batch size of an indexed view of a PersistentTensorDict (call to_tensordict() first)"
            )

    @property
    def device(self) -> torch.device | None:
        return self._source.device

    def _sub_size(self, shape: Any) -> torch.Size:
        return _Size((*self._bs, *shape[self._source.batch_dims :]))

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        if not self._source._has_str(key):
            return self._source._get_str(key, default)  # the KeyError naming the key, or the default
        meta = self._source._leaf_meta(key)
        if meta.kind == NODE:
            size = self._sub_size(meta.shape)
            names = None if self._names is None else (*self._names, *[None] * (len(size) - len(self._bs)))
            return IndexedView._at(self._source._get_str(key), self._index, size, names)
        if meta.kind == NON_TENSOR:
            return self._source._get_str(key)[self._index]
        return self._source.get_at(key, self._index)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        self._write({key: value})

    def _write(self, entries: dict[str, Any]) -> None:
        values = dict(source_leaves(entries, "writing through an indexed view", _enter))
        self._source._write_at(self._index, values, strict=False, source=entries)

    def _del_str(self, key: str) -> None:
        raise RuntimeError(f"cannot delete {key!r} from an indexed view (it would delete it from the file)")

    def _keys_str(self) -> Any:
        return self._source._keys_str()

    def _has_str(self, key: str) -> bool:
        return self._source._has_str(key)

    @property
    def is_locked(self) -> bool:
        return self._locked

    def _set_lock(self, value: bool) -> None:
        self._locked = value

    # ------------------------------------------------------------------ storage hooks
    def _leaf_meta(self, key: str) -> LeafMeta:
        meta = self._source._leaf_meta(key)
        return LeafMeta(self._sub_size(meta.shape), meta.dtype, meta.kind)

    def _materialize(self) -> TensorDictBase:
        out = self._read()
        if self._names is not None:
            out.names = self._names
        return out

    def _read(self) -> TensorDictBase:
        index = self._index
        if len(index) == 1 and (type(index[0]) is slice or type(index[0]) is int):  # a hyperslab of each leaf
            read_slab = getattr(self._source, "_read_slab", None)
            if read_slab is not None:
                out: TensorDictBase = read_slab(index, self._bs[:1] if type(index[0]) is slice else ())
                return out
        out = self._source._read_normalized(index)  # (normalised for the source already)
        return out

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDictBase:
        """The view's rows, read into an in-memory TensorDict."""
        return self._materialize()

    def _read_rows(self, plan: RowPlan, keys: Iterable[str] | None = None) -> TensorDictBase:
        data = self._materialize()
        if keys is not None:
            data = data.select(*keys)
        n = self._bs[0]
        if (plan.kind == "rows" and plan.inverse is None and len(plan.rows) == n) or (
            plan.kind == "slice" and len(range(*plan.index.indices(n))) == n
        ):
            return data  # every row, in order (to_tensordict): already new memory
        return index_leaves(data, plan.index)  # type: ignore[no-any-return]

    def _write_rows(self, plan: RowPlan, values: Mapping[tuple[str, ...], Any]) -> None:
        data = self._materialize()
        for path, value in values.items():  # everything checked before the first write
            leaf = data._get(path)
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(f"cannot write rows into {path!r}: it is not a tensor leaf")
            if isinstance(value, torch.Tensor):
                check_fits(path, value.shape, plan.target_shape(leaf.shape))
        for path, value in values.items():
            data._get(path)[plan.index] = value
        self._source._write_at(self._index, {path: data._get(path) for path in values}, strict=True)

    def _read_index(self, index: Any, materialize: bool = False) -> Any:
        if materialize:
            return CopyOnRead._read_index(self, index)
        return IndexedView(self, index)

    def __reduce__(self) -> Any:
        return (IndexedView._at, (self._source, self._index, self._bs, self._names))

    def _check_batch(self, new_size: torch.Size, opening: bool = False) -> None:  # (nested views of nested nodes)
        self._change_batch_size(new_size)


def _enter(path: tuple[str, ...], value: Any) -> bool:
    """Walk into nested TensorDicts and dicts, not into non-tensor leaves (they are written whole)."""
    return is_node(value) or isinstance(value, dict)
