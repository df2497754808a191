"""NumpyStore: a test storage backend, a dict of numpy arrays, written against ``tensorbatch/BACKENDS.md`` only.

It implements the primitives and the storage hooks and nothing else, so the generic flavour suite run on it
proves that the contract is enough for a backend that keeps its leaves out of TensorDict's own dict:

- one ``_Storage`` holds every tensor leaf as a numpy array under its full key path, the non-tensor
  leaves as objects, and per node its batch size, lock flag and ordered child keys (like HDF5 groups);
- a node is a view ``NumpyStore(storage, prefix)``: reading a nested key gives a new view of the same
  storage, as an h5py group would;
- reading a tensor leaf wraps the array with ``torch.from_numpy`` (numpy storage is host memory: the read
  shares it, so in-place tensor ops on a read leaf reach the store, as with memmap); storing a tensor copies
  it into a new array (the store owns its data);
- ``_leaves_in_memory = False``: generic indexing, ``get_at``/``set_at_``/``update_at_`` and key listings go
  through ``_read_rows``/``_write_rows``/``_leaf_meta``, which use the row planner (sorted unique rows plus
  the inverse permutation, as an h5py backend needs). ``stats`` counts whole-leaf reads and row calls so the
  tests can check that those paths never read whole leaves.
- ``CopyingNumpyStore`` reads copies instead (as h5py does): the conformance suite run on it (flavour
  ``numpy_copy``) proves that the generic in-place ops write their results back through the store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from tensorbatch import TensorDict, TensorDictBase
from tensorbatch._errors import batch_mismatch, missing_key
from tensorbatch._ops.meta import NODE, NON_TENSOR, TENSOR, LeafMeta
from tensorbatch._ops.rows import RowPlan, check_fits
from tensorbatch._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES, is_td

_CPU = torch.device("cpu")
_NUMPY_OF = {  # the dtypes numpy can store (numpy has no bfloat16, no complex32)
    torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
    torch.uint8: np.uint8, torch.bool: np.bool_, torch.complex64: np.complex64, torch.complex128: np.complex128,
}
_TORCH_OF = {np.dtype(v): k for k, v in _NUMPY_OF.items()}


class _Storage:
    """Everything one store holds, shared by the views of its nodes."""

    __slots__ = ("arrays", "batch", "children", "locked", "objects", "stats")

    def __init__(self, batch_size: torch.Size) -> None:
        self.arrays: dict[tuple[str, ...], np.ndarray] = {}
        self.objects: dict[tuple[str, ...], Any] = {}  # non-tensor leaves
        self.children: dict[tuple[str, ...], dict[str, str]] = {(): {}}  # node path -> {key: kind}, ordered
        self.batch: dict[tuple[str, ...], torch.Size] = {(): batch_size}
        self.locked: dict[tuple[str, ...], bool] = {(): False}
        self.stats: Counter[str] = Counter()


def _to_numpy(value: torch.Tensor) -> np.ndarray:
    if value.dtype not in _NUMPY_OF:
        raise TypeError(f"NumpyStore cannot store dtype {value.dtype} (numpy has no such dtype)")
    return value.detach().cpu().numpy()


class NumpyStore(TensorDictBase):
    """A TensorDict whose leaves are numpy arrays in a :class:`_Storage` (see the module docstring).

    Args:
        source: a mapping of keys to tensors, nested mappings or TensorDicts (copied into the store).
        batch_size: the leading dims shared by every leaf.
    """

    __slots__ = ("_prefix", "_storage")
    _leaves_in_memory = False
    _copy_reads = False  # CopyingNumpyStore: reads are copies, as h5py's (writes must go through the store)

    def __init__(self, source: Mapping[str, Any] | None = None, batch_size: Any = None) -> None:
        self._storage = _Storage(torch.Size(() if batch_size is None else batch_size))
        self._prefix: tuple[str, ...] = ()
        if source:
            self.update(source)

    @classmethod
    def _view(cls, storage: _Storage, prefix: tuple[str, ...]) -> NumpyStore:
        out = object.__new__(cls)
        out._storage, out._prefix = storage, prefix
        return out

    @property
    def stats(self) -> Counter[str]:
        """Counts of whole-leaf reads (``"leaf"``) and hook calls (``"read_rows"``, ``"write_rows"``, ...)."""
        return self._storage.stats

    # ------------------------------------------------------------------ primitives
    @property
    def batch_size(self) -> torch.Size:
        return self._storage.batch[self._prefix]

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        TensorDictBase.batch_size.fset(self, value)  # type: ignore[attr-defined]  # the base setter

    def _change_batch_size(self, new_size: torch.Size) -> None:
        self._check_batch(new_size)  # the whole tree first: nothing changes on failure
        self._apply_batch(new_size)

    def _check_batch(self, new_size: torch.Size) -> None:
        n = len(new_size)
        for key in self._keys_str():
            shape, _, kind = self._leaf_meta(key)
            if shape[:n] == new_size:
                continue
            extends = len(shape) < n and tuple(new_size[: len(shape)]) == tuple(shape)
            if kind == NODE and extends:
                self._get_str(key)._check_batch(new_size)
            elif not (kind == NON_TENSOR and extends):
                raise batch_mismatch(new_size, (*self._prefix, key), shape)

    def _apply_batch(self, new_size: torch.Size) -> None:
        for key in self._keys_str():
            shape, _, kind = self._leaf_meta(key)
            if len(shape) < len(new_size):
                if kind == NODE:
                    self._get_str(key)._apply_batch(new_size)
                else:
                    self._storage.objects[(*self._prefix, key)] = self._get_str(key)._follow(new_size)
        self._storage.batch[self._prefix] = new_size

    @property
    def device(self) -> torch.device:
        return _CPU

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        kind = self._storage.children[self._prefix].get(key)
        if kind is None:
            if default is NO_DEFAULT:
                raise missing_key((*self._prefix, key), self._keys_str(), type(self).__name__)
            return default
        path = (*self._prefix, key)
        if kind == TENSOR:
            self._storage.stats["leaf"] += 1
            leaf = torch.from_numpy(self._storage.arrays[path])
            return leaf.clone() if self._copy_reads else leaf
        if kind == NODE:
            return type(self)._view(self._storage, path)
        return self._storage.objects[path]

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        if not validated:
            value = self._validate(value, (key,))
        storage, path = self._storage, (*self._prefix, key)
        kind = storage.children[self._prefix].get(key)
        if inplace and kind == TENSOR and isinstance(value, torch.Tensor):
            storage.arrays[path][...] = _to_numpy(value)  # numpy copes with overlapping memory
            return
        if inplace and kind == NODE and is_td(value) and type(value) not in NON_TENSOR_TYPES:
            type(self)._view(storage, path).update_(value)
            return
        if isinstance(value, torch.Tensor):
            array = _to_numpy(value).copy()  # checked before the old entry goes
            self._drop(key)
            storage.arrays[path] = array
            storage.children[self._prefix][key] = TENSOR
        elif type(value) in NON_TENSOR_TYPES or not is_td(value):
            self._drop(key)
            storage.objects[path] = value
            storage.children[self._prefix][key] = NON_TENSOR
        else:
            items = list(value.items())  # read before a node written onto itself is dropped
            self._drop(key)
            storage.children[self._prefix][key] = NODE
            storage.children[path], storage.batch[path] = {}, value.batch_size
            storage.locked[path] = False
            node = type(self)._view(storage, path)
            for sub_key, sub_value in items:
                node._set_str(sub_key, sub_value, inplace=False, validated=True)

    def _drop(self, key: str) -> None:
        """Forget the entry ``key`` and, for a node, everything under it (no-op when missing)."""
        storage, path = self._storage, (*self._prefix, key)
        kind = storage.children[self._prefix].pop(key, None)
        if kind == NODE:
            for sub in list(storage.children[path]):
                type(self)._view(storage, path)._drop(sub)
            del storage.children[path], storage.batch[path], storage.locked[path]
        else:
            storage.arrays.pop(path, None)
            storage.objects.pop(path, None)

    def _del_str(self, key: str) -> None:
        self._drop(key)

    def _keys_str(self) -> Any:
        return self._storage.children[self._prefix].keys()

    def _has_str(self, key: str) -> bool:
        return key in self._storage.children[self._prefix]

    @property
    def is_locked(self) -> bool:
        return self._storage.locked[self._prefix]

    def _set_lock(self, value: bool) -> None:
        self._storage.locked[self._prefix] = value

    # ------------------------------------------------------------------ storage hooks
    def _leaf_meta(self, key: str) -> LeafMeta:
        kind = self._storage.children[self._prefix].get(key)
        path = (*self._prefix, key)
        if kind == TENSOR:
            array = self._storage.arrays[path]
            return LeafMeta(torch.Size(array.shape), _TORCH_OF[array.dtype], TENSOR)
        if kind == NODE:
            return LeafMeta(self._storage.batch[path], None, NODE)
        if kind == NON_TENSOR:
            return LeafMeta(self._storage.objects[path].batch_size, None, NON_TENSOR)
        raise missing_key(path, self._keys_str(), type(self).__name__)

    def _read_rows(self, plan: RowPlan, keys: Iterable[str] | None = None) -> TensorDictBase:
        self._storage.stats["read_rows"] += 1
        return self._rows(plan, self._keys_str() if keys is None else keys)

    def _rows(self, plan: RowPlan, keys: Iterable[str]) -> TensorDictBase:
        storage, out = self._storage, {}
        for key in keys:
            path = (*self._prefix, key)
            kind = storage.children[self._prefix].get(key)
            if kind == TENSOR:
                out[key] = torch.from_numpy(_take(storage.arrays[path], plan))
            elif kind == NODE:
                out[key] = type(self)._view(storage, path)._rows(plan, storage.children[path])
            elif kind == NON_TENSOR:
                out[key] = storage.objects[path][plan.index]
            else:
                raise missing_key(path, self._keys_str(), type(self).__name__)
        return TensorDict(out, batch_size=plan.target_shape(self.batch_size), device=_CPU)

    def _write_rows(self, plan: RowPlan, values: Mapping[tuple[str, ...], Any]) -> None:
        self._storage.stats["write_rows"] += 1
        checked = []
        for path, value in values.items():  # everything checked before the first write
            full = (*self._prefix, *path)
            array = self._storage.arrays.get(full)
            if array is None:
                self._get(path)  # KeyError naming a missing path
                raise TypeError(f"cannot write rows into {path!r}: it is not a tensor leaf")
            target = plan.target_shape(array.shape)
            if isinstance(value, torch.Tensor):
                check_fits(path, value.shape, target)
                value = _to_numpy(value)
            checked.append((array, np.broadcast_to(np.asarray(value), target)))
        for array, value in checked:
            _put(array, plan, value)

    def _alloc_leaf(self, key: str, shape: Any, dtype: torch.dtype) -> None:
        self._storage.stats["alloc"] += 1
        if dtype not in _NUMPY_OF:
            raise TypeError(f"NumpyStore cannot store dtype {dtype} (numpy has no such dtype)")
        self._drop(key)
        self._storage.arrays[(*self._prefix, key)] = np.zeros(tuple(shape), dtype=_NUMPY_OF[dtype])
        self._storage.children[self._prefix][key] = TENSOR


class CopyingNumpyStore(NumpyStore):
    """A NumpyStore whose reads are copies (as an h5py or Redis backend's): a tensor read from it shares no
    memory with the store, so the generic in-place ops must write their results back through ``_set_str``."""

    __slots__ = ()
    _copy_reads = True


def _take(array: np.ndarray, plan: RowPlan) -> np.ndarray:
    """``array[plan.index]``: a view for an int or a slice (as torch and numpy index), else a copy of the
    sorted unique rows, put in the requested order by the inverse permutation."""
    if plan.kind == "int":
        return array[plan.index, ...]
    if plan.kind == "slice":
        return array[plan.index]
    rows = array[plan.rows.numpy()]
    return rows if plan.inverse is None else rows[plan.inverse.numpy()]


def _put(array: np.ndarray, plan: RowPlan, value: np.ndarray) -> None:
    """``array[plan.index] = value`` written at the sorted unique rows (the last repeat wins)."""
    if plan.kind != "rows":
        array[plan.index] = value
        return
    positions = plan.last_positions()
    flat = value.reshape(-1, *value.shape[len(plan.shape):])
    array[plan.rows.numpy()] = flat if positions is None else flat[positions.numpy()]

