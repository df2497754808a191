"""Reading and writing the rows a RowPlan selects from one h5py dataset, with a cost model.

HDF5 reads a contiguous dataset, and a chunked one without filters opened without a chunk cache
(:func:`open_without_cache`), straight from the file: a selection costs the bytes it selects plus a fixed cost
per row (a run of consecutive rows is one). So:

- an int or a slice is one hyperslab read, which is the result;
- sorted unique rows (``plan.rows``) that are consecutive are one hyperslab; otherwise they are read either
  as the span they cover, in bounded blocks (cheap when the rows are dense in it: contiguous bytes), or as
  selections of those rows (cheap when they are sparse: HDF5 reads only them); in the requested order
  (a mask, a sorted index) the selection is read as the result itself;
- a compressed chunked dataset is read by touched chunks, each once (a selection would decompress a chunk
  for each row it holds), runs of consecutive chunks in bounded blocks of whole chunks;
- the requested order and repeats (``plan.inverse``) are restored by scattering each block into the
  result. The blocks are bounded by ``budget``: the caller passes a quarter of the size of everything it
  reads at once (all the leaves of an index), so the peak memory of a read stays under twice its result
  (a chunk cache would hold up to ``rdcc_nbytes``, 8 MiB by default, per dataset: hence none).

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

# A selected row costs about as much as reading this many more contiguous bytes (HDF5's cost per row of a
# selection; measured with h5py 3 and HDF5 2 on a local disk, page cache warm).
ROW_COST_BYTES = 8192
# Bounds on a read buffer beyond the result (``budget``): a block smaller than MIN_BLOCK_BYTES costs more
# in calls than it saves, one larger than BLOCK_BYTES saves nothing.
BLOCK_BYTES = 4 << 20
MIN_BLOCK_BYTES = 64 << 10


def wants_no_cache(ds: h5py.Dataset) -> bool:
    """True for a chunked dataset without filters: its rows are best read with no chunk cache.

    HDF5 then reads the selected bytes of a chunk straight from the file, instead of the whole chunk into
    a cache that keeps up to ``rdcc_nbytes`` (8 MiB by default in HDF5 2) per open dataset.
    """
    return ds.chunks is not None and not ds._filters


def open_without_cache(group: h5py.Group, key: str, readonly: bool) -> h5py.Dataset:
    """``group[key]`` opened with no chunk cache.

    The dataset must not be open already: HDF5 shares an open dataset, and its first open sets the cache.
    """
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_chunk_cache(1, 0, 0.75)  # (hash slots, bytes, preemption policy)
    return h5py.Dataset(h5py.h5d.open(group.id, key.encode(), dapl), readonly=readonly)


def result_bytes(ds: h5py.Dataset, plan: RowPlan) -> int:
    """Bytes of ``ds[plan.index]``."""
    return int(ds.dtype.itemsize * math.prod(plan.shape) * math.prod(ds.shape[1:]))


def block_budget(total: int) -> int:
    """The read buffer allowed to a read whose results take ``total`` bytes: a quarter of it, within bounds.

    (A block, the rows gathered from it, and HDF5's and Python's small buffers stay under ``total``.)
    """
    return min(BLOCK_BYTES, max(total // 4, MIN_BLOCK_BYTES))


def read_rows(ds: h5py.Dataset, plan: RowPlan, budget: int | None = None) -> np.ndarray:
    """``ds[plan.index]`` as a numpy array of shape ``plan.target_shape(ds.shape)``.

    ``budget`` bounds the bytes of a read buffer beyond the result (default: from this result alone).
    """
    if plan.kind != "rows":  # an int or a slice: one hyperslab
        return read_hyperslab(ds, plan.index)
    rows = plan.rows.numpy()
    rest = ds.shape[1:]
    n = len(rows)
    inverse = None if plan.inverse is None else plan.inverse.numpy()
    if not n or not math.prod(rest):
        return np.empty((*plan.shape, *rest), dtype=ds.dtype)
    row_bytes = ds.dtype.itemsize * math.prod(rest)
    how = _strategy(ds, rows, row_bytes)
    if inverse is None and how == "range":
        return np.asarray(ds[int(rows[0]):int(rows[-1]) + 1])
    if inverse is None and how == "select":  # the rows in the requested order: the selection is the result
        return np.asarray(ds[rows])
    if budget is None:
        budget = block_budget(result_bytes(ds, plan))
    out = np.empty((*plan.shape, *rest), dtype=ds.dtype)
    flat = out.reshape(-1, *rest)
    # (each piece is dropped before the next is read: one block alive at a time)
    pieces = _pieces(ds, rows, how, max(1, budget // row_bytes))
    if inverse is None:
        for i0, i1, data in pieces:
            flat[i0:i1] = data
            del data
        return out
    order = np.argsort(inverse.ravel(), kind="stable")  # output positions grouped by the unique row they show
    if len(order) == n:  # no repeats: unique row i goes to order[i]
        for i0, i1, data in pieces:
            flat[order[i0:i1]] = data
            del data
        return out
    sorted_inverse = inverse.ravel()[order]
    for i0, i1, data in pieces:
        a, b = np.searchsorted(sorted_inverse, (i0, i1))
        flat[order[a:b]] = data[sorted_inverse[a:b] - i0]
        del data
    return out


def read_hyperslab(ds: h5py.Dataset, index: int | slice) -> np.ndarray:
    """``ds[index]`` for an int or a slice.

    h5py's reader of simple datasets (numbers, a simple dataspace) is called straight, as
    ``Dataset.__getitem__`` calls it first: the checks around it cost about a third of a small read.
    """
    try:
        if ds._fast_read_ok:
            return np.asarray(ds._fast_reader.read((index,)))
    except (AttributeError, TypeError):  # another h5py, or an index its reader does not take: the general path
        pass
    return np.asarray(ds[index])


def _strategy(ds: h5py.Dataset, rows: np.ndarray, row_bytes: int) -> str:
    """``"range"``, ``"chunks"``, ``"span"`` or ``"select"``: how to read the sorted unique ``rows``."""
    n = len(rows)
    first, last = int(rows[0]), int(rows[-1])
    if last - first + 1 == n:
        return "range"
    if ds.chunks is not None and ds._filters:
        return "chunks"  # (a selection would decompress a chunk for each row it holds)
    if (last - first + 1) * row_bytes <= n * (row_bytes + ROW_COST_BYTES):
        return "span"  # dense enough: contiguous bytes beat a selection of rows
    return "select"


def _pieces(ds: h5py.Dataset, rows: np.ndarray, how: str, block_rows: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(i0, i1, ds[rows[i0:i1]])`` pieces covering the sorted unique ``rows``, read as ``how`` says.

    Each read is at most ``block_rows`` rows (at least one chunk of a compressed dataset).
    """
    n = len(rows)
    first, last = int(rows[0]), int(rows[-1])
    if how == "chunks":  # runs of consecutive touched chunks, read in blocks of whole chunks
        step = ds.chunks[0]
        per_block = max(1, block_rows // step) * step
        ids = rows // step
        starts = np.flatnonzero(np.r_[True, ids[1:] - ids[:-1] > 1])  # a new run where a chunk is skipped
        for a, b in itertools.pairwise(np.r_[starts, n]):
            start, end = int(ids[a]) * step, min((int(ids[b - 1]) + 1) * step, ds.shape[0])
            for r0 in range(start, end, per_block):
                r1 = min(r0 + per_block, end)
                i0, i1 = (int(i) for i in np.searchsorted(rows, (r0, r1)))
                if i1 > i0:
                    block = ds[r0:r1]
                    piece = block[rows[i0:i1] - r0]
                    del block
                    yield i0, i1, piece
        return
    if how in ("span", "range"):  # the span in bounded blocks
        starts = np.arange(first, last + 1, block_rows)
        ends = np.searchsorted(rows, starts + block_rows)
        local = rows - np.repeat(starts, np.diff(ends, prepend=0))  # each row's place in its block
        i0 = 0
        for r0, i1 in zip(starts.tolist(), ends.tolist(), strict=True):
            if i1 > i0:
                block = ds[r0:min(r0 + block_rows, last + 1)]
                piece = block[local[i0:i1]]
                del block
                yield i0, i1, piece
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
