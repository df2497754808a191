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
- in a file open read-only, the rows of an uncompressed dataset of native numbers whose rows lie whole
  in the file are read straight from it (:class:`DirectRows`, ``os.preadv``): HDF5's selections cost ~6 µs
  a scattered row, a ``preadv`` 1.5 µs; rows close together are read as runs;
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
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._ops.rows import RowPlan

if TYPE_CHECKING:
    import h5py
else:
    from ._h5 import h5py  # (imported on first use)

# A selected row costs about as much as reading this many more contiguous bytes (HDF5's cost per row of a
# selection; measured with h5py 3 and HDF5 2 on a local disk, page cache warm).
ROW_COST_BYTES = 8192
# Rows read straight from the file (DirectRows): a run of rows close together is read whole into a buffer
# and picked from it when it holds at least this many (fewer cost less read one by one: ~1.5 µs a row).
MIN_RUN_ROWS = 8
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


def read_rows(
    ds: h5py.Dataset,
    plan: RowPlan,
    budget: int | None = None,
    direct: DirectRows | None = None,
) -> np.ndarray:
    """``ds[plan.index]`` as a numpy array of shape ``plan.target_shape(ds.shape)``.

    ``budget`` bounds the bytes of a read buffer beyond the result (default: from this result alone);
    ``direct`` (from :func:`direct_rows`) reads the rows from the file without HDF5's selections.
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
    if direct is not None and how != "range":
        if budget is None:
            budget = block_budget(result_bytes(ds, plan))
        out = direct.read(rows, inverse, plan.shape, budget)
        if out is not None:
            return out
    if inverse is None and how == "range":
        return np.asarray(ds[int(rows[0]) : int(rows[-1]) + 1])
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


class DirectRows:
    """Where the rows of a dataset lie in its file: rows read with ``os.preadv``, without HDF5's selections.

    HDF5 maps a selection of scattered rows element by element (``H5D__piece_mem_cb``) and reads each row
    with a call of its own: about 6 µs a row of 64 floats, where a ``preadv`` of the row costs 1.5 µs.
    This is only made (:func:`direct_rows`) where the bytes in the file are the rows as numpy holds them
    and nothing else writes them: a file open read-only by every handle of this process (HDF5 then
    buffers no writes), the default (sec2) driver, an uncompressed contiguous dataset or a chunked one
    whose chunks hold whole rows, allocated, of a native numeric dtype. The file descriptor is HDF5's
    own (the same file even if the path was replaced since), asked for at each read (an error once closed).
    """

    __slots__ = ("addresses", "base", "dataset", "dtype", "file_id", "row_bytes", "step")

    def __init__(self, ds: h5py.Dataset, file_id: Any, base: int, step: int) -> None:
        self.dataset = ds
        self.file_id = file_id
        self.dtype = ds.dtype
        self.row_bytes = ds.dtype.itemsize * math.prod(ds.shape[1:])
        self.base = base  # byte offset of row 0 (contiguous)
        self.step = step  # rows per chunk (chunked), else 0
        self.addresses: dict[int, int] = {}  # chunk number -> byte offset of the chunk

    def offsets(self, rows: np.ndarray) -> np.ndarray | None:
        """Byte offsets of the sorted ``rows`` in the file; None if a chunk they touch is not allocated."""
        rb = self.row_bytes
        if not self.step:
            contiguous: np.ndarray = self.base + rows * rb
            return contiguous
        step = self.step
        chunks = rows // step
        touched = np.unique(chunks)
        known = self.addresses
        spare = self.dataset.shape[1:]
        starts = []
        for c in touched.tolist():
            found = known.get(c)
            if found is None:
                found = self.dataset.id.get_chunk_info_by_coord((c * step, *(0 for _ in spare))).byte_offset
                if found is None:  # never written: HDF5 gives the fill value
                    return None
                known[c] = found
            starts.append(found)
        offsets: np.ndarray = np.asarray(starts, dtype=np.int64)[np.searchsorted(touched, chunks)]
        offsets += (rows - chunks * step) * rb
        return offsets

    def read(
        self,
        rows: np.ndarray,
        inverse: np.ndarray | None,
        shape: tuple[int, ...],
        budget: int,
    ) -> np.ndarray | None:
        """The rows ``rows[inverse]`` (sorted unique ``rows``) in an array of shape ``(*shape, *rest)``.

        Rows close together in the file (gaps under ROW_COST_BYTES, one chunk) are read as one run into a
        buffer of at most ``budget`` bytes and picked from it; the others are read straight into their place.
        None when a touched chunk is not allocated (the caller reads through HDF5).
        """
        offsets = self.offsets(rows)
        if offsets is None:
            return None
        rb = self.row_bytes
        n = len(rows)
        out = np.empty((*shape, *self.dataset.shape[1:]), dtype=self.dtype)
        flat = out.reshape(-1).view(np.uint8).reshape(-1, rb)  # the result's rows, as bytes
        if inverse is None:
            place = np.arange(n)
        else:  # where each unique row is put first (its repeats are copied from there at the end)
            inverse = inverse.reshape(-1)
            place = np.empty(n, dtype=np.int64)
            place[inverse] = np.arange(len(inverse))
        gaps = np.diff(offsets) - rb
        cut = (gaps < 0) | (gaps > ROW_COST_BYTES)
        if self.step:
            cut |= np.diff(rows // self.step) != 0  # a run stays in a chunk (chunks lie anywhere in the file)
        starts = np.flatnonzero(np.r_[True, cut]).tolist()
        fd = self.file_id.get_vfd_handle()
        preadv = os.preadv
        view = out.reshape(-1).view(np.uint8).data
        offs = offsets.tolist()
        places = place.tolist()
        block = max(budget, rb)
        scratch = None
        for a, b in zip(starts, [*starts[1:], n], strict=True):
            if b - a < MIN_RUN_ROWS:  # rows read one by one, each into its place
                for i in range(a, b):
                    p = places[i] * rb
                    if preadv(fd, [view[p : p + rb]], offs[i]) != rb:
                        raise _short_read(offs[i])
                continue
            if scratch is None:
                scratch = np.empty(block, np.uint8)
            while a < b:  # a run of rows close together: read whole, in pieces of at most ``block`` bytes
                e = a + int(offsets[a:b].searchsorted(offs[a] + block - rb, "right"))
                size = offs[e - 1] + rb - offs[a]
                if preadv(fd, [scratch.data[:size]], offs[a]) != size:
                    raise _short_read(offs[a])
                flat[place[a:e]] = scratch[:size].reshape(-1, rb)[(offsets[a:e] - offs[a]) // rb]
                a = e
        view.release()
        if inverse is not None and len(inverse) > n:  # repeats: copied from the first place of their row
            first = place[inverse]
            todo = np.flatnonzero(first != np.arange(len(inverse)))
            per_block = max(1, budget // rb)
            for i in range(0, len(todo), per_block):
                some = todo[i : i + per_block]
                flat[some] = flat[first[some]]
        return out


def _short_read(offset: int) -> OSError:
    return OSError(f"the file ends before the bytes of a row at offset {offset} (truncated?)")


def direct_rows(ds: h5py.Dataset, file: h5py.File) -> DirectRows | None:
    """A :class:`DirectRows` for ``ds`` when its rows can be read from the file directly, else None."""
    try:
        file_id = file.id
        dt = ds.dtype
        if (
            not hasattr(os, "preadv")
            or file_id.get_intent() != h5py.h5f.ACC_RDONLY
            or file.driver != "sec2"
            or dt.kind not in "iuf"
            or not dt.isnative
            or not ds.shape
            or ds._filters
            or ds.is_virtual
            or ds.id.fileno != file_id.fileno
        ):  # (a dataset of another file: its offsets are not this file's)
            return None
        dsid = ds.id
        if not dsid.get_type().equal(h5py.h5t.py_create(dt)):  # the bytes in the file are numpy's
            return None
        dcpl = dsid.get_create_plist()
        layout = dcpl.get_layout()
        if layout == h5py.h5d.CONTIGUOUS and not dcpl.get_external_count():
            size = dt.itemsize * math.prod(ds.shape)
            if dsid.get_storage_size() < size:  # not allocated (the offset is then undefined)
                return None
            return DirectRows(ds, file_id, int(dsid.get_offset()), 0)
        if layout == h5py.h5d.CHUNKED and tuple(ds.chunks[1:]) == tuple(ds.shape[1:]):
            return DirectRows(ds, file_id, 0, int(ds.chunks[0]))
    except (AttributeError, TypeError, ValueError, RuntimeError, OSError):  # another h5py or HDF5: HDF5 reads
        pass
    return None


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
                block = ds[r0 : min(r0 + block_rows, last + 1)]
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
        ds[first : last + 1] = flat
    else:
        ds[rows] = np.ascontiguousarray(flat)
