"""Reading and writing the rows a RowPlan selects from one h5py dataset, with a cost model.

- an int or a slice is one hyperslab read;
- sorted unique rows (``plan.rows``) are read either as the span they cover, in bounded blocks (cheap when
  the rows are dense in it: contiguous bytes), or as one selection of those rows (cheap when they are
  sparse: HDF5 reads only them); for a filtered (compressed) chunked dataset each touched chunk is read
  once, as HDF5 would otherwise decompress a chunk for each row it holds;
- the requested order and repeats (``plan.inverse``) are restored by scattering each block into the
  result, so the peak memory stays near the size of the result.

Writes take unsorted and repeated rows: the last repeat wins (``plan.last_positions``), then the sorted
unique rows are written in one selection.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from .._ops.rows import RowPlan

# A selected row costs about as much as reading this many more contiguous bytes (h5py builds one hyperslab
# per row; measured with h5py 3 on a local disk, page cache warm).
ROW_COST_BYTES = 8192
# Bound on the buffer of a span read (a block of the span), beyond the result itself.
BLOCK_BYTES = 4 << 20
_MIN_BLOCK_BYTES = 256 << 10


def read_rows(ds: h5py.Dataset, plan: RowPlan) -> np.ndarray:
    """``ds[plan.index]`` as a numpy array of shape ``plan.target_shape(ds.shape)``."""
    if plan.kind == "int":
        return np.asarray(ds[plan.index])
    if plan.kind == "slice":
        return np.asarray(ds[plan.index])
    rows = plan.rows.numpy()
    rest = ds.shape[1:]
    n = len(rows)
    inverse = None if plan.inverse is None else plan.inverse.numpy()
    out_shape = (n,) if inverse is None else inverse.shape
    out = np.empty((*out_shape, *rest), dtype=ds.dtype)
    if not n or not out.size:
        return out
    flat = out.reshape(-1, *rest)
    if inverse is None:
        for i0, i1, data in _pieces(ds, rows):
            flat[i0:i1] = data
        return out
    order = np.argsort(inverse.ravel(), kind="stable")  # output positions grouped by the unique row they show
    sorted_inverse = inverse.ravel()[order]
    for i0, i1, data in _pieces(ds, rows):
        a, b = np.searchsorted(sorted_inverse, (i0, i1))
        flat[order[a:b]] = data[sorted_inverse[a:b] - i0]
    return out


def _pieces(ds: h5py.Dataset, rows: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(i0, i1, ds[rows[i0:i1]])`` pieces covering the sorted unique ``rows``, read the cheapest way."""
    n = len(rows)
    row_bytes = ds.dtype.itemsize * math.prod(ds.shape[1:])
    first, last = int(rows[0]), int(rows[-1])
    span = last - first + 1
    if span == n:  # a contiguous range: one hyperslab
        yield 0, n, ds[first:last + 1]
        return
    chunks = ds.chunks
    if chunks is not None and ds._filters:  # compressed chunks: read each touched chunk once
        step = chunks[0]
        ids = rows // step
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        bounds = np.r_[starts, n]
        for i0, i1 in itertools.pairwise(bounds):
            c0 = int(ids[i0]) * step
            block = ds[c0:min(c0 + step, ds.shape[0])]
            yield int(i0), int(i1), block[rows[i0:i1] - c0]
        return
    if span * row_bytes <= n * (row_bytes + ROW_COST_BYTES):  # dense enough: read the span in blocks
        block_rows = max(1, max(min(BLOCK_BYTES, n * row_bytes // 2), _MIN_BLOCK_BYTES) // max(row_bytes, 1))
        i0 = 0
        for r0 in range(first, last + 1, block_rows):
            r1 = min(r0 + block_rows, last + 1)
            i1 = int(np.searchsorted(rows, r1))
            if i1 > i0:
                block = ds[r0:r1]
                yield i0, i1, block[rows[i0:i1] - r0]
            i0 = i1
        return
    yield 0, n, ds[rows]  # sparse: one selection of the rows


def write_rows(ds: h5py.Dataset, plan: RowPlan, value: np.ndarray) -> None:
    """``ds[plan.index] = value`` (``value`` broadcast to the target shape), the last repeat winning."""
    if plan.kind != "rows":
        ds[plan.index] = value
        return
    rows = plan.rows.numpy()
    if not len(rows):
        return
    target = plan.target_shape(ds.shape)
    value = np.broadcast_to(value, target)
    flat = value.reshape(-1, *ds.shape[1:])
    positions = plan.last_positions()
    if positions is not None:
        flat = flat[positions.numpy()]
    first, last = int(rows[0]), int(rows[-1])
    if last - first + 1 == len(rows):
        ds[first:last + 1] = flat
    else:
        ds[rows] = np.ascontiguousarray(flat)


def as_index(index: Any) -> Any:
    """A numpy form of a torch index h5py accepts."""
    return index.numpy() if hasattr(index, "numpy") else index
