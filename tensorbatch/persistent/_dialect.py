"""The HDF5 dialect of the stored layer: one open h5py file (or group) spoken in paths.

:class:`~tensorbatch.stored.StoredTensorDict` does the TensorDict side (batch checks, names, lock, views,
pickling); this module only says how h5py keeps entries, with the fast paths HDF5 needs: the h5py objects are
opened once per path and kept while the file is open (looking one up costs more than reading a small
dataset), uncompressed chunked datasets are opened without a chunk cache, rows are read by ``_rows.py`` (one
hyperslab, chunk reads, or ``preadv`` straight from a read-only file) under one read budget per index, and
entries whose data lies in other files are refused unless ``allow_external`` (``_file.outside``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._errors import fmt_path
from .._ops.meta import NODE, NON_TENSOR, TENSOR, LeafMeta
from .._ops.rows import RowPlan
from .._ops.traverse import NON_TENSOR_TYPES, is_td, unwrapped
from .._unbatched import UnbatchedTensor
from ..stored._dialect import Dialect, Path, array_mismatch
from . import _format as fmt
from ._file import ReadOnlyError, add_h5_note, h5_errors, open_file, outside, refuse_outside
from ._rows import (
    DirectRows,
    block_budget,
    direct_rows,
    open_without_cache,
    read_hyperslab,
    read_rows,
    result_bytes,
    wants_no_cache,
    write_rows,
)

if TYPE_CHECKING:
    import h5py
else:
    from ._h5 import h5py  # (imported on first use)

_READ_ERRORS = (OSError, ValueError, TypeError, RuntimeError)
_from_numpy = torch.from_numpy


class H5Dialect(Dialect):
    """The entries of an h5py group (a file's root by default), by path from it.

    Args:
        root: the open ``h5py.File`` or ``h5py.Group`` the paths start from.
        device: the device tensors are cast to when read (None: as read, on the CPU).
        dataset_kwargs: ``create_dataset`` options of new leaves with at least one dim.
        file_options: the ``h5py.File`` options the file was opened with (kept to reopen it).
        non_tensor_as_stack: read a non-tensor dataset with one element per row as a NonTensorStack.
        allow_external: follow external links and read data stored in other files.
    """

    name = "h5"
    batch_mismatch = staticmethod(array_mismatch)  # (tensordict's words for its file formats)
    copy_reads = True
    lazy_index = True
    read_only_facts = True  # (as tensordict: a batch size set on a file open "r" is kept in memory)

    def __init__(
        self,
        root: Any,
        *,
        device: torch.device | None = None,
        dataset_kwargs: dict[str, Any] | None = None,
        file_options: dict[str, Any] | None = None,
        non_tensor_as_stack: bool = False,
        allow_external: bool = False,
    ) -> None:
        file = root if isinstance(root, h5py.File) else root.file  # (``.file`` builds a new File object each time)
        self.file, self.root, self.root_name = file, root, root.name
        self.fileno = file.id.fileno  # (HDF5's number of the open file: objects of other files have another)
        self.filename: str = file.filename
        self.mode: str = file.mode
        self.device = device
        self.dataset_kwargs = dict(dataset_kwargs or {})
        self.file_options = dict(file_options or {})
        self.non_tensor_as_stack = non_tensor_as_stack
        self.allow_external = allow_external
        self.owned = False  # a temporary file (clone): removed on close
        # chunked datasets without filters are opened with no chunk cache (``_rows.wants_no_cache``), unless
        # the caller chose a chunk cache size
        self.chunk_cache_off = "rdcc_nbytes" not in self.file_options
        self.objects: dict[Path, Any] = {(): root}  # path -> open h5py object (dropped when it changes)
        self.dtypes: dict[Path, torch.dtype | None] = {}  # path -> torch dtype of a dataset, None: non-tensor
        self.refused: dict[Path, str] = {}  # path -> why it is not opened (data outside the file)
        self.direct: dict[str, DirectRows | None] = {}  # dataset name -> how to read its rows from the file
        self.slabs: dict[Path, tuple[Any, Any, Any]] = {}  # path -> (h5py's reader or None, dataset, bits dtype)
        self._count = itertools.count(1)  # leaf_id: a number per created leaf
        self._serials: dict[Path, int] = {}
        self._held: list[Any] = []  # objects deleted last (see ``delete``)

    # ------------------------------------------------------------------ pickling: what reopens the file
    def __getstate__(self) -> dict[str, Any]:
        if self.file:
            self.file.flush()
        return {
            "filename": self.filename,
            "mode": "r" if self.mode == "r" else "r+",  # never "w", which would truncate it
            "root": self.root_name,
            "device": self.device,
            "dataset_kwargs": self.dataset_kwargs,
            "file_options": self.file_options,
            "non_tensor_as_stack": self.non_tensor_as_stack,
            "allow_external": self.allow_external,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        file = open_file(state.pop("filename"), state.pop("mode"), state["file_options"])
        self.__init__(file[state.pop("root")], **state)  # type: ignore[misc]

    # ------------------------------------------------------------------ facts
    @property
    def writable(self) -> bool:
        return self.mode != "r" and bool(self.file)  # (the mode as opened: h5py asks HDF5 at each read)

    def refuse_write(self, key: Any, path: Path) -> Exception:
        name = self.h5_name((*path, key) if isinstance(key, str) else path)
        if not self.file:
            return ValueError(f"cannot write {name!r}: the HDF5 file {self.filename!r} is closed")
        return ReadOnlyError(
            f"cannot write {name!r}: the HDF5 file {self.filename!r} is open read-only "
            "(open it with mode='r+' or 'a' to write)"
        )

    def describe(self, path: Path) -> str:
        return f"the HDF5 file {self.filename!r}, object {self.h5_name(path)!r}"

    def h5_name(self, path: Path) -> str:
        """The HDF5 name of ``path`` (``"/a/b"``)."""
        root: str = self.root_name
        return root.rstrip("/") + "/" + "/".join(path) if path else root

    # ------------------------------------------------------------------ structure
    def entries(self, path: Path) -> dict[str, str]:
        if not self.file:
            raise ValueError(f"cannot read {self.h5_name(path)!r}: the HDF5 file {self.filename!r} is closed")
        group, out = self.obj(path), {}
        for key in group:
            kind = self._open(group, (*path, key))
            if kind is not None:
                out[key] = kind
        return out

    def _open(self, group: Any, path: Path) -> str | None:
        """Open the entry ``path`` of ``group`` and cache it; its kind (None: a dangling link).

        An entry reaching data outside the file is listed as a tensor leaf and refused when used.
        """
        key = path[-1]
        if not self.allow_external:
            why = outside(group, key, None, self.fileno)  # (checked before the link is followed)
            if why is not None:
                self.refused[path] = why
                return TENSOR
        obj = group.get(key)
        if obj is None:
            return None
        if not self.allow_external:
            why = outside(group, key, obj, self.fileno)
            if why is not None:
                self.refused[path] = why
                return TENSOR
        if type(obj) is h5py.Dataset:
            if self.chunk_cache_off and wants_no_cache(obj):
                obj = None  # closed first: HDF5 shares an open dataset, and its first open sets the chunk cache
                obj = open_without_cache(group, key, self.file.mode == "r")
            dtype = self.dtypes[path] = fmt.leaf_dtype(obj)
            self.objects[path] = obj
            return NON_TENSOR if dtype is None else TENSOR
        self.objects[path] = obj
        return NODE

    def obj(self, path: Path) -> Any:
        """The open h5py object at ``path`` (refused when its data lies outside the file)."""
        found = self.objects.get(path)
        if found is not None:
            return found
        why = self.refused.get(path)
        if why is not None:
            raise refuse_outside(self.filename, self.h5_name(path), why)
        if not self.file:
            raise ValueError(f"cannot read {self.h5_name(path)!r}: the HDF5 file {self.filename!r} is closed")
        if self._open(self.obj(path[:-1]), path) is None:
            raise KeyError(f"no entry {self.h5_name(path)!r} in the HDF5 file {self.filename!r}")
        found = self.objects.get(path)
        return found if found is not None else self.obj(path)  # (else refused: raises)

    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        obj = self.obj(path)
        return torch.Size(obj.shape), self.dtypes[path]  # type: ignore[return-value]  # a tensor dataset

    def node_facts(self, path: Path) -> tuple[torch.Size | None, tuple[Any, ...] | None]:
        return fmt.read_batch_attrs(self.obj(path))

    def set_node_facts(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        with h5_errors(self.filename, self.h5_name(path)):
            fmt.write_batch_attrs(self.obj(path), batch_size, names)

    def create_node(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        with h5_errors(self.filename, self.h5_name(path)):
            group = self.obj(path[:-1]).create_group(path[-1], track_order=True)
            fmt.write_batch_attrs(group, batch_size, names, new=True)
        self.objects[path] = group
        self._held = []

    def delete(self, path: Path) -> None:
        n = len(path)
        # the deleted objects stay open until the next entry is made: HDF5 would give it their address
        self._held = [obj for p, obj in self.objects.items() if p[:n] == path]
        with h5_errors(self.filename, self.h5_name(path)):
            del self.obj(path[:-1])[path[-1]]
        self.forget(path)

    def forget(self, path: Path) -> None:
        """Drop what is cached of ``path`` and below (replaced or deleted)."""
        n = len(path)
        for table in (self.objects, self.dtypes, self.refused, self._serials, self.slabs):
            for known in [p for p in table if p[:n] == path]:
                del table[known]
        self.direct.clear()

    # ------------------------------------------------------------------ checks
    def check_value(self, path: Path, value: Any) -> None:
        check_entry(path, value)

    def check_replace(self, path: Path) -> None:
        why = self.refused.get(path)
        if why is not None:  # replacing needs a look at what is there: refused too
            raise refuse_outside(self.filename, self.h5_name(path), why)

    # ------------------------------------------------------------------ tensor leaves
    def _cast(self, leaf: torch.Tensor) -> torch.Tensor:
        device = self.device
        return leaf if device is None or device.type == "cpu" else leaf.to(device)

    def read(self, path: Path) -> torch.Tensor:
        obj = self.obj(path)
        try:
            out = fmt.from_numpy(np.asarray(obj[()]), self.dtypes[path])  # type: ignore[arg-type]  # a tensor
        except _READ_ERRORS as err:
            add_h5_note(err, self.filename, self.h5_name(path))
            raise
        return self._cast(out)

    def read_rows(self, path: Path, plan: RowPlan, budget: int | None = None) -> torch.Tensor:
        obj = self.obj(path)
        try:
            if plan.kind != "rows":
                array = read_hyperslab(obj, plan.index)
            else:
                array = read_rows(obj, plan, budget, self._direct(path, obj))
            leaf = fmt.from_numpy(array, self.dtypes[path])  # type: ignore[arg-type]  # a tensor dataset
        except _READ_ERRORS as err:
            add_h5_note(err, self.filename, self.h5_name(path))
            raise
        return self._cast(leaf)

    def read_many(self, paths: list[Path], plan: RowPlan) -> list[torch.Tensor]:
        """Rows of many datasets; an index's read buffers share one bound (a quarter of all it reads)."""
        if plan.kind != "rows":
            return self.read_slabs(paths, plan.index, plan.size)
        budget = block_budget(sum(result_bytes(self.obj(p), plan) for p in paths))
        return [self.read_rows(p, plan, budget) for p in paths]

    def read_slabs(self, paths: list[Path], index: int | slice, size: int) -> list[torch.Tensor]:
        """``leaf[index]`` of each dataset for an int or a slice: one hyperslab each, the hot path of views."""
        out, slabs, key = [], self.slabs, (index,)
        path: Path = ()
        device = self.device
        cast = device is not None and device.type != "cpu"
        try:
            for path in paths:
                found = slabs.get(path)
                if found is None:
                    found = slabs[path] = self._slab(path)
                read, ds, bits = found
                if read is not None:  # a new array from h5py (an int of a 1-d dataset: a numpy scalar)
                    array = read(key)
                    leaf = _from_numpy(array if type(array) is np.ndarray else np.array(array))
                else:
                    leaf = fmt.from_numpy(read_hyperslab(ds, index), self.dtypes[path])  # type: ignore[arg-type]
                if bits is not None:
                    leaf = leaf.view(bits)
                out.append(leaf.to(device) if cast else leaf)
        except _READ_ERRORS as err:
            add_h5_note(err, self.filename, self.h5_name(path))
            raise
        return out

    def _slab(self, path: Path) -> tuple[Any, Any, Any]:
        """``(read, dataset, bits)`` of the dataset at ``path``, for ``read_slabs``.

        ``read``: h5py's reader of a numeric dataset of a read-only file (kept as h5py keeps it: the checks
        around it cost a third of a small read), or None; ``bits``: the dtype its data are the bits of.
        """
        ds = self.obj(path)
        dtype = self.dtypes[path]
        read = None
        if ds._readonly:
            with contextlib.suppress(AttributeError):  # another h5py: the general path
                read = ds._fast_reader.read if ds._fast_read_ok else None
        bits = dtype if fmt.stored_as_bits(dtype) else None
        return (read, ds, bits) if read is not None else (None, ds, None)

    def _direct(self, path: Path, ds: Any) -> DirectRows | None:
        """How to read rows of the dataset at ``path`` straight from the file (read-only files), or None."""
        name = self.h5_name(path)
        direct = self.direct
        if name not in direct:
            direct[name] = direct_rows(ds, self.file) if self.file.mode == "r" else None
        return direct[name]

    def write(self, path: Path, value: torch.Tensor) -> None:
        array = fmt.to_numpy(value, value.dtype)
        _, bits = fmt.stored_dtype(value.dtype)
        with h5_errors(self.filename, self.h5_name(path)):
            ds = self.obj(path[:-1]).create_dataset(path[-1], data=array, **(self.dataset_kwargs if array.ndim else {}))
            if bits is not None:
                ds.attrs[fmt.DTYPE_ATTR] = bits
        self.forget(path)  # (opened again on use: without a chunk cache where it reads faster so)
        self._serials[path] = next(self._count)
        self._held = []

    def write_into(self, path: Path, value: torch.Tensor) -> None:
        obj = self.obj(path)
        dtype = self.dtypes[path]
        if tuple(value.shape) != obj.shape:  # as copy_: broadcast, cast
            value = value.expand(obj.shape)
        with h5_errors(self.filename, self.h5_name(path)):
            obj[...] = fmt.to_numpy(value, dtype)  # type: ignore[arg-type]  # a tensor dataset

    def write_rows(self, path: Path, plan: RowPlan, value: torch.Tensor) -> None:
        obj = self.obj(path)
        with h5_errors(self.filename, self.h5_name(path)):
            write_rows(obj, plan, fmt.to_numpy(value, self.dtypes[path]))  # type: ignore[arg-type]  # a tensor

    def alloc(self, path: Path, shape: torch.Size, dtype: torch.dtype) -> None:
        numpy_dtype, bits = fmt.stored_dtype(dtype)
        kwargs = self.dataset_kwargs if len(shape) else {}
        with h5_errors(self.filename, self.h5_name(path)):
            ds = self.obj(path[:-1]).create_dataset(path[-1], shape=tuple(shape), dtype=numpy_dtype, **kwargs)
            if bits is not None:
                ds.attrs[fmt.DTYPE_ATTR] = bits
        self.forget(path)
        self._serials[path] = next(self._count)
        self._held = []

    def leaf_id(self, path: Path) -> int:
        self.obj(path)
        return self._serials.setdefault(path, next(self._count))  # (numbered when created or first seen)

    # ------------------------------------------------------------------ non-tensor leaves
    def read_object(self, path: Path, batch_size: torch.Size) -> Any:
        ds = self.obj(path)
        with h5_errors(self.filename, self.h5_name(path)):
            value = fmt.read_non_tensor(ds, batch_size, self.non_tensor_as_stack)
        if type(value).__name__ == "NonTensorData" and value.batch_size != batch_size:
            value = value._follow(batch_size)
        return value

    def object_shape(self, path: Path, batch_size: torch.Size) -> torch.Size:
        shape = fmt.stack_shape(self.obj(path))
        return batch_size if shape is None else shape

    def write_object(self, path: Path, value: Any) -> None:
        with h5_errors(self.filename, self.h5_name(path)):
            fmt.write_non_tensor(self.obj(path[:-1]), path[-1], fmt.encode_non_tensor(path, value))
        self.forget(path)
        self._held = []

    # ------------------------------------------------------------------ life
    def flush(self) -> None:
        if self.file:
            self.file.flush()

    def close(self) -> None:
        self._held = []
        self.slabs.clear()
        self.objects.clear()
        self.objects[()] = self.root
        self.direct.clear()
        if self.file:
            self.file.close()
        if self.owned:
            with contextlib.suppress(OSError):
                os.remove(self.filename)
            self.owned = False

    def copy(self) -> H5Dialect:
        """Another dialect over the same open file and caches (a shallow copy of the TensorDict)."""
        out = object.__new__(H5Dialect)
        out.__dict__.update(self.__dict__)
        out.owned = False
        return out


def check_entry(path: Path, value: Any) -> None:
    """Raise (naming ``path``) for a key or a value an HDF5 file cannot hold, before anything is written."""
    fmt.check_key(path[-1])
    if isinstance(value, UnbatchedTensor):  # a dataset would read back as a batched leaf: refused
        raise NotImplementedError(
            f"PersistentTensorDict (HDF5) cannot store the UnbatchedTensor at {fmt_path(path)}: "
            "exclude it first (td.exclude(key)), or save the TensorDict with memmap or to_safetensors"
        )
    if isinstance(value, torch.Tensor):
        fmt.stored_dtype(value.dtype)  # (TypeError for a dtype HDF5 has no type for)


def check_tree(source: Any, prefix: Path = ()) -> None:
    """:func:`check_entry` for every entry of ``source``, from its metadata (``from_dict``, before truncating).

    A stored or lazily stacked tensor leaf is not read (its dtype is in its metadata; a ragged one is stacked,
    which raises); a non-tensor value is encoded, and the encoding dropped.
    """
    for key, meta in unwrapped(source)._meta_items():
        path = (*prefix, key)
        if isinstance(meta, LeafMeta):  # a tensor leaf that is not in memory
            fmt.check_key(key)
            fmt.stored_dtype(meta.dtype)  # type: ignore[arg-type]  # (a tensor's)
            if -1 in meta.shape:  # the members of a lazy stack differ there: the write would fail half way
                source._get_str(key)
        elif is_td(meta) and type(meta) not in NON_TENSOR_TYPES:
            fmt.check_key(key)
            check_tree(meta, path)
        else:
            check_entry(path, meta)
            if type(meta) in NON_TENSOR_TYPES:
                fmt.encode_non_tensor(path, meta)
