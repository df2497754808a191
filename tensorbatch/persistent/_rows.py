"""Reading and writing the rows a RowPlan selects from one h5py dataset, with a cost model.

- an int or a slice is one hyperslab read;
- sorted unique rows (``plan.rows``) of a contiguous dataset are read either as the span they cover, in
  bounded blocks (cheap when the rows are dense in it: contiguous bytes), or as selections of those rows
  (cheap when they are sparse: HDF5 reads only them);
- a compressed chunked dataset is read by touched chunks, each once (a selection would decompress a chunk
  for each row it holds), runs of consecutive chunks in bounded blocks; for chunks that fit HDF5's chunk
  cache both ways read every touched chunk whole, and the cost model weighs the selection's cost per row
  against ours per chunk;
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
# HDF5's default chunk cache (rdcc_nbytes): chunks up to this size are read whole by a selection
CHUNK_CACHE_BYTES = 1 << 20
# In a chunked dataset, a selected row costs about as much as copying this many bytes (HDF5's per-row
# overhead), and reading one chunk ourselves about this many on top of its size (measured, h5py 3).
SELECT_ROW_BYTES = 48 << 10
CHUNK_CALL_BYTES = 192 << 10
# Bound on a read buffer (a block of the span, or of the selected rows), beyond the result itself: at most a
# quarter of the result, at least _MIN_BLOCK_BYTES, so the peak stays under twice the result.
BLOCK_BYTES = 4 << 20
_MIN_BLOCK_BYTES = 64 << 10


def read_rows(ds: h5py.Dataset, plan: RowPlan) -> np.ndarray:
    """``ds[plan.index]`` as a numpy array of shape ``plan.target_shape(ds.shape)``."""
    if plan.kind != "rows":  # an int or a slice: one hyperslab
        return np.asarray(ds[plan.index])
    rows = plan.rows.numpy()
    rest = ds.shape[1:]
    n = len(rows)
    inverse = None if plan.inverse is None else plan.inverse.numpy()
    out = np.empty((*((n,) if inverse is None else inverse.shape), *rest), dtype=ds.dtype)
    if not n or not out.size:
        return out
    flat = out.reshape(-1, *rest)
    if inverse is None:
        if _direct(ds, rows, flat):
            return out
        for i0, i1, data in _pieces(ds, rows):
            flat[i0:i1] = data
        return out
    order = np.argsort(inverse.ravel(), kind="stable")  # output positions grouped by the unique row they show
    sorted_inverse = inverse.ravel()[order]
    for i0, i1, data in _pieces(ds, rows):
        a, b = np.searchsorted(sorted_inverse, (i0, i1))
        flat[order[a:b]] = data[sorted_inverse[a:b] - i0]
    return out


def _block_rows(n: int, row_bytes: int) -> int:
    budget = max(min(BLOCK_BYTES, n * row_bytes // 4), _MIN_BLOCK_BYTES)
    return max(1, budget // max(row_bytes, 1))


def _strategy(ds: h5py.Dataset, rows: np.ndarray) -> str:
    """``"range"``, ``"chunks"``, ``"span"`` or ``"select"``: how to read the sorted unique ``rows``."""
    n = len(rows)
    first, last = int(rows[0]), int(rows[-1])
    if last - first + 1 == n:
        return "range"
    row_bytes = ds.dtype.itemsize * math.prod(ds.shape[1:])
    chunks = ds.chunks
    if chunks is not None and ds._filters:
        return "chunks"  # (a selection would decompress a chunk for each row it holds)
    if chunks is not None and row_bytes * chunks[0] <= CHUNK_CACHE_BYTES:
        # both read every touched chunk whole: a selection pays per row, our reads per chunk (and a copy)
        ids = rows // chunks[0]
        touched = 1 + int(np.count_nonzero(ids[1:] != ids[:-1]))
        return "chunks" if n * SELECT_ROW_BYTES > touched * (row_bytes * chunks[0] + CHUNK_CALL_BYTES) else "select"
    if (last - first + 1) * row_bytes <= n * (row_bytes + ROW_COST_BYTES):
        return "span"  # dense enough: contiguous bytes beat a selection of rows
    return "select"


def _direct(ds: h5py.Dataset, rows: np.ndarray, flat: np.ndarray) -> bool:
    """Read sorted unique rows straight into ``flat`` when no gather is needed (a range, a selection)."""
    how = _strategy(ds, rows)
    if how == "range" and len(rows) == ds.shape[0]:
        ds.read_direct(flat)
    elif how == "range":
        ds.read_direct(flat, np.s_[int(rows[0]):int(rows[-1]) + 1], np.s_[0:len(rows)])
    elif how == "select":
        ds.read_direct(flat, np.s_[rows], np.s_[0:len(rows)])
    else:
        return False
    return True


def _pieces(ds: h5py.Dataset, rows: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(i0, i1, ds[rows[i0:i1]])`` pieces covering the sorted unique ``rows``, read the cheapest way."""
    n = len(rows)
    how = _strategy(ds, rows)
    first, last = int(rows[0]), int(rows[-1])
    if how == "range":
        yield 0, n, ds[first:last + 1]
        return
    if how == "chunks":  # runs of consecutive touched chunks, read in blocks of whole chunks
        step = ds.chunks[0]
        row_bytes = ds.dtype.itemsize * math.prod(ds.shape[1:])
        per_block = max(1, _block_rows(n, row_bytes) // step) * step  # whole chunks per read
        ids = rows // step
        starts = np.flatnonzero(np.r_[True, ids[1:] - ids[:-1] > 1])  # a new run where a chunk is skipped
        for a, b in itertools.pairwise(np.r_[starts, n]):
            start, end = int(ids[a]) * step, min((int(ids[b - 1]) + 1) * step, ds.shape[0])
            for r0 in range(start, end, per_block):
                r1 = min(r0 + per_block, end)
                i0, i1 = (int(i) for i in np.searchsorted(rows, (r0, r1)))
                if i1 > i0:
                    block = ds[r0:r1]
                    yield i0, i1, block[rows[i0:i1] - r0]
        return
    block_rows = _block_rows(n, ds.dtype.itemsize * math.prod(ds.shape[1:]))
    if how == "span":  # the span in bounded blocks
        i0 = 0
        for r0 in range(first, last + 1, block_rows):
            r1 = min(r0 + block_rows, last + 1)
            i1 = int(np.searchsorted(rows, r1))
            if i1 > i0:
                block = ds[r0:r1]
                yield i0, i1, block[rows[i0:i1] - r0]
            i0 = i1
        return
    for i0 in range(0, n, block_rows):  # sparse: selections of the rows, in bounded blocks
        i1 = min(i0 + block_rows, n)
        yield i0, i1, ds[rows[i0:i1]]


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
