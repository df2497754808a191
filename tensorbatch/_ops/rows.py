"""The row planner: a dim-0 index normalised once, for any storage backend to map to its cheapest reads.

A storage backend (HDF5, Redis, ...) reads and writes whole rows of the first batch dim. Whatever the
user typed (an int, a slice, a list, an index tensor in any order with repeats, a bool mask), the planner
turns it into one :class:`RowPlan`:

- ``"int"``: one row (``plan.index``, non-negative); the dim disappears from the result;
- ``"slice"``: a forward slice with non-negative ``start``/``stop`` and ``step >= 1`` (``plan.index``);
- ``"rows"``: ``plan.rows``, sorted and unique (what h5py hyperslabs and GETRANGE runs want), and
  ``plan.inverse`` such that ``rows[inverse]`` is the requested order, repeats and shape included
  (None when the request already was sorted and unique).

``plan.index`` is always an index that torch accepts on the first dim and that gives the requested rows.
:func:`split_index` splits a whole batch index into a row plan and the rest, applied in memory to the
rows read.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._errors import fmt_path, fmt_shape

_Tensor = torch.Tensor
_Size = torch.Size
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class RowPlan:
    """A dim-0 index, normalised: see the module docstring.

    Attributes:
        kind: ``"int"``, ``"slice"`` or ``"rows"``.
        size: the length of the indexed dim.
        index: the torch index giving the requested rows (an int, a slice or a long tensor).
        rows: the sorted unique rows (a long tensor; for ``"int"`` and ``"slice"`` too, built on demand).
        inverse: positions into ``rows`` giving the requested order, or None when ``rows`` is the request.
        shape: the dims the index puts in place of dim 0 (``()`` for an int, ``(n,)`` for a slice or mask,
            the index tensor's shape for an index tensor).

    Examples:
        >>> plan = plan_rows(torch.tensor([3, 1, 3]), 5)
        >>> plan.kind, plan.rows.tolist(), plan.inverse.tolist()
        ('rows', [1, 3], [1, 0, 1])
        >>> plan_rows(slice(-2, None), 5).index
        slice(3, 5, 1)
    """

    __slots__ = ("_rows", "index", "inverse", "kind", "shape", "size")

    def __init__(
        self,
        kind: str,
        size: int,
        index: Any,
        rows: _Tensor | None = None,
        inverse: _Tensor | None = None,
        shape: tuple[int, ...] = (),
    ) -> None:
        self.kind = kind
        self.size = size
        self.index = index
        self._rows = rows
        self.inverse = inverse
        self.shape = _Size(shape)

    @property
    def rows(self) -> _Tensor:
        """The sorted unique rows read or written."""
        if self._rows is None:
            self._rows = torch.arange(self.size)[self.index].reshape(-1)
        return self._rows

    @property
    def count(self) -> int:
        """Number of distinct rows touched."""
        if self.kind == "int":
            return 1
        if self.kind == "slice":
            return self.shape[0]
        return len(self.rows)

    def target_shape(self, leaf_shape: Any) -> torch.Size:
        """Shape of ``leaf[plan.index]`` for a leaf of shape ``leaf_shape`` (without reading it)."""
        return self.shape if len(leaf_shape) == 1 else _Size((*self.shape, *leaf_shape[1:]))

    def last_positions(self) -> _Tensor | None:
        """For a write: the position in the requested order that each of ``rows`` takes its value from.

        With repeated rows the last occurrence wins (as a sequential write would leave it); None when the
        request already was sorted and unique (values map to ``rows`` one to one).
        """
        if self.inverse is None:
            return None
        inverse = self.inverse.reshape(-1)
        positions = torch.arange(len(inverse))
        out = torch.full((len(self.rows),), -1, dtype=torch.int64)
        return out.scatter_reduce_(0, inverse, positions, reduce="amax")

    def __repr__(self) -> str:
        if self.kind == "rows":
            inverse = None if self.inverse is None else self.inverse.tolist()
            return f"RowPlan(rows={self.rows.tolist()}, inverse={inverse})"
        return f"RowPlan({self.kind}={self.index!r}, size={self.size})"


def _out_of_bounds(index: int, size: int) -> IndexError:
    return IndexError(f"index {index} is out of bounds for dimension 0 with size {size}")


def plan_rows(index: Any, size: int) -> RowPlan:
    """Normalise a dim-0 index for a dim of length ``size`` (IndexError when a row is out of bounds).

    Accepts an int (numpy ints and 0-d integer tensors too), a slice, a list/tuple/range/array of ints,
    a 1-d bool mask of length ``size`` (as a tensor, array or list of bools) and an integer index tensor
    of any shape (repeats and any order allowed).

    Examples:
        >>> plan_rows(-1, 4).index
        3
        >>> plan_rows([True, False, True, False], 4).rows.tolist()
        [0, 2]
        >>> plan_rows(torch.tensor([[2, 0], [0, 2]]), 4).inverse.tolist()
        [[1, 0], [0, 1]]
    """
    if isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_)):
        i = int(index)
        if not -size <= i < size:
            raise _out_of_bounds(i, size)
        return RowPlan("int", size, i + size if i < 0 else i)
    if type(index) is slice:
        if index.step is not None and index.step <= 0:
            raise ValueError(f"slice step must be greater than zero, got {index.step}")
        start, stop, step = index.indices(size)
        length = len(range(start, stop, step))
        stop = start + length * step if length else start  # the tightest stop: equal slices compare equal
        return RowPlan("slice", size, slice(start, stop, step), shape=(length,))
    if isinstance(index, (bool, np.bool_)):
        raise IndexError(f"a bool ({index!r}) is not a row index: use a mask with one entry per row")
    tensor = _as_index_tensor(index)
    if tensor.dtype == torch.bool:
        if tensor.ndim != 1 or tensor.shape[0] != size:
            raise IndexError(
                f"a row mask must be 1-d with one entry per row: got shape {fmt_shape(tensor.shape)} for "
                f"dimension 0 of size {size}"
            )
        rows = tensor.nonzero().reshape(-1)
        return RowPlan("rows", size, rows, rows, None, (len(rows),))
    if tensor.dtype not in _INT_DTYPES:
        raise IndexError(f"row indices must be integers or bools, got dtype {tensor.dtype}")
    if tensor.ndim == 0:
        return plan_rows(int(tensor), size)
    tensor = tensor.to(torch.int64)
    if tensor.numel():
        lo, hi = (int(v) for v in torch.aminmax(tensor))
        if lo < -size or hi >= size:
            raise _out_of_bounds(hi if hi >= size else lo, size)
        if lo < 0:
            tensor = torch.where(tensor < 0, tensor + size, tensor)
    flat = tensor.reshape(-1)
    if tensor.ndim == 1 and (len(flat) < 2 or bool((flat[1:] > flat[:-1]).all())):  # already sorted, unique
        return RowPlan("rows", size, tensor, tensor, None, tuple(tensor.shape))
    rows, inverse = torch.unique(tensor, sorted=True, return_inverse=True)
    return RowPlan("rows", size, tensor, rows, inverse, tuple(tensor.shape))


def _as_index_tensor(index: Any) -> _Tensor:
    if isinstance(index, _Tensor):  # rows are planned on the host: a storage backend reads there
        return index if index.device.type == "cpu" else index.cpu()
    if isinstance(index, (list, tuple, range, np.ndarray)):
        try:
            tensor: _Tensor = torch.as_tensor(list(index) if isinstance(index, range) else index)
        except (TypeError, ValueError, RuntimeError) as err:
            raise IndexError(f"invalid row index {index!r}: {err}") from None
        if tensor.numel() == 0:
            return tensor.to(torch.int64)  # [] is no row, as torch reads it
        return tensor
    raise IndexError(f"unsupported row index type {type(index).__name__}: {index!r}")


def split_index(index: tuple[Any, ...], batch_size: torch.Size) -> tuple[RowPlan, tuple[Any, ...] | None]:
    """Split a normalised batch index (``_ops.index.normalize``'s tuple) into rows and the rest.

    Returns ``(plan, rest)``: reading ``plan``'s rows and applying ``rest`` (None: nothing) to them in
    memory gives ``leaf[index]``. The rows are as few as the index allows: an int or a slice on dim 0
    reads just those rows, a lone index tensor or mask on dim 0 reads its rows; any other index reads
    every row and applies the whole index in memory.

    Examples:
        >>> plan, rest = split_index((1, slice(0, 2)), torch.Size([3, 4]))
        >>> plan.index, rest
        (1, (slice(0, 2, None),))
        >>> split_index((torch.tensor([2, 0]),), torch.Size([3, 4]))[1] is None
        True
    """
    size = batch_size[0]
    if not index:
        return RowPlan("slice", size, slice(0, size, 1), shape=(size,)), None
    first = index[0]
    tail: tuple[Any, ...] = ()
    if len(index) == 1:  # the common case: only dim 0 indexed
        plain_tail = True
    else:
        tail = index[1:]
        plain_tail = all(type(item) is slice and item == slice(None) for item in tail)
    if isinstance(first, int) and not isinstance(first, bool):  # basic indexing composes: x[i, r] == x[i][r]
        return plan_rows(first, size), (tail if tail and not plain_tail else None)
    if type(first) is slice:
        plan = plan_rows(first, size)
        return plan, ((slice(None), *tail) if tail and not plain_tail else None)
    if isinstance(first, _Tensor) and plain_tail and (first.dtype != torch.bool or first.ndim == 1):
        return plan_rows(first, size), None
    return RowPlan("slice", size, slice(0, size, 1), shape=(size,)), index


def check_fits(path: tuple[str, ...], value_shape: Any, target: torch.Size) -> None:
    """Raise RuntimeError (naming ``path``) unless a value of ``value_shape`` broadcasts to ``target``."""
    if value_shape == target:
        return
    try:
        ok = torch.broadcast_shapes(value_shape, target) == target  # type: ignore[no-untyped-call]
    except RuntimeError:
        ok = False
    if not ok:
        raise RuntimeError(
            f"cannot write a value of shape {fmt_shape(value_shape)} into {fmt_path(path)} at an index "
            f"selecting shape {fmt_shape(target)}"
        )
