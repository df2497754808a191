"""NumpyStore: a test storage, a dict of numpy arrays, written as a dialect of ``tensorbatch.stored`` only.

The stored layer (``StoredTensorDict``) gives the TensorDict API; this file only says how a dict of numpy
arrays holds entries, so the generic flavour suite run on it proves that the dialect protocol is enough:

- a tensor leaf is a numpy array under its full key path, a non-tensor leaf the object itself, a node its
  ordered child kinds, batch size and names; a dtype numpy lacks (bfloat16) is refused by ``Tensor.numpy``;
- a read wraps the array with ``torch.from_numpy`` (it shares the store's memory, as memmap does);
  ``CopyingNumpyStore`` reads copies instead (as h5py does): the conformance suite run on it proves that
  the generic in-place ops write their results back through the store;
- ``stats`` counts whole-leaf reads (``"leaf"``) and the layer's row hooks (``"read_rows"``,
  ``"write_rows"``, ``"alloc"``) so the tests can check that the row paths never read whole leaves.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import torch

from tensorbatch._ops.meta import NODE, NON_TENSOR, TENSOR
from tensorbatch._ops.rows import RowPlan
from tensorbatch.stored import Dialect, StoredTensorDict

Path = tuple[str, ...]


class NumpyDialect(Dialect):
    """Everything one store holds (see the module docstring)."""

    name = "numpy"
    lazy_index = False  # store[idx] reads the rows at once (an int or a slice is a view of the arrays)

    def __init__(self, copy_reads: bool) -> None:
        self.copy_reads = copy_reads
        self.data: dict[Path, Any] = {}  # path -> numpy array (a tensor leaf) or the non-tensor leaf
        self.children: dict[Path, dict[str, str]] = {(): {}}
        self.facts: dict[Path, tuple[torch.Size, Any]] = {(): (torch.Size(()), None)}
        self.stats: Counter[str] = Counter()
        self.serials: dict[Path, int] = {}  # path -> the number of the write that created its leaf
        self.count = itertools.count(1)

    def entries(self, path: Path) -> dict[str, str]:
        return self.children[path]

    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        return torch.Size(self.data[path].shape), torch.from_numpy(self.data[path]).dtype

    def node_facts(self, path: Path) -> tuple[torch.Size | None, Any]:
        return self.facts[path]

    def set_node_facts(self, path: Path, batch_size: torch.Size, names: Any) -> None:
        self.facts[path] = (batch_size, names)

    def create_node(self, path: Path, batch_size: torch.Size, names: Any) -> None:
        self.children[path[:-1]][path[-1]] = NODE
        self.children[path], self.facts[path] = {}, (batch_size, names)

    def delete(self, path: Path) -> None:
        if self.children[path[:-1]].pop(path[-1]) == NODE:
            for key in list(self.children[path]):
                self.delete((*path, key))
            del self.children[path], self.facts[path]
        self.data.pop(path, None)

    def read(self, path: Path) -> torch.Tensor:
        self.stats["leaf"] += 1
        leaf = torch.from_numpy(self.data[path])
        return leaf.clone() if self.copy_reads else leaf

    def read_rows(self, path: Path, plan: RowPlan) -> torch.Tensor:
        array = self.data[path]
        if plan.kind != "rows":  # an int or a slice: a view, as torch and numpy index
            return torch.from_numpy(array[plan.index])
        rows = array[plan.rows.numpy()]  # the sorted unique rows, put in order by the inverse permutation
        return torch.from_numpy(rows if plan.inverse is None else rows[plan.inverse.numpy()])

    def write(self, path: Path, value: torch.Tensor) -> None:
        self.data[path] = value.numpy().copy()  # the store owns its data
        self.serials[path] = next(self.count)
        self.children[path[:-1]][path[-1]] = TENSOR

    def write_into(self, path: Path, value: torch.Tensor) -> None:
        self.data[path][...] = value.numpy()  # numpy copes with overlapping memory

    def write_rows(self, path: Path, plan: RowPlan, value: torch.Tensor) -> None:
        array, value = self.data[path], value.numpy()
        if plan.kind != "rows":
            array[plan.index] = value
            return
        positions = plan.last_positions()  # the last repeat of a row wins
        flat = value.reshape(-1, *value.shape[len(plan.shape) :])
        array[plan.rows.numpy()] = flat if positions is None else flat[positions.numpy()]

    def alloc(self, path: Path, shape: torch.Size, dtype: torch.dtype) -> None:
        self.write(path, torch.zeros(shape, dtype=dtype))

    def leaf_id(self, path: Path) -> int:
        return self.serials[path]  # (not id(array): a replaced array's id may be reused by its successor)

    def read_object(self, path: Path, batch_size: torch.Size) -> Any:
        return self.data[path]

    def object_shape(self, path: Path, batch_size: torch.Size) -> torch.Size:
        return self.data[path].batch_size

    def write_object(self, path: Path, value: Any) -> None:
        self.data[path] = value
        self.children[path[:-1]][path[-1]] = NON_TENSOR


def _counted(hook: Callable[..., Any], stat: str) -> Callable[..., Any]:
    """The layer's row hook ``hook``, counted in ``stats[stat]`` when called (before it checks anything)."""

    def counted(self: NumpyStore, *args: Any) -> Any:
        self.stats[stat] += 1
        return hook(self, *args)

    return counted


class NumpyStore(StoredTensorDict):
    """A StoredTensorDict over a :class:`NumpyDialect`, filled from ``source`` (copied into the store)."""

    __slots__ = ()
    _copy_reads = False

    def __init__(self, source: Mapping[str, Any] | None = None, batch_size: Any = None) -> None:
        super().__init__(NumpyDialect(self._copy_reads))
        self.batch_size = () if batch_size is None else batch_size
        if source:
            self.update(source)

    stats = property(lambda self: self.dialect.stats, doc="Counts of whole-leaf reads and row hook calls.")
    _read_rows = _counted(StoredTensorDict._read_rows, "read_rows")
    _write_rows = _counted(StoredTensorDict._write_rows, "write_rows")
    _alloc_leaf = _counted(StoredTensorDict._alloc_leaf, "alloc")


class CopyingNumpyStore(NumpyStore):
    """A NumpyStore whose reads are copies (as an h5py or Redis backend's): a tensor read from it shares no
    memory with the store, so the generic in-place ops must write their results back through ``_set_str``."""

    __slots__ = ()
    _copy_reads = True
