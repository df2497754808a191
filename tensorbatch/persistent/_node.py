"""PersistentTensorDict: a TensorDict whose leaves are datasets of an HDF5 file (h5py), read on access."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._base.coerce import as_device, checked_names
from .._errors import batch_mismatch, fmt_path, missing_key
from .._ops.meta import NODE, NON_TENSOR, TENSOR, LeafMeta
from .._ops.rows import RowPlan, check_fits, plan_rows
from .._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES, is_td
from .._unbatched import UnbatchedTensor
from ..base import TensorDictBase
from ..stored._view import IndexedView
from . import _format as fmt
from ._file import OutsideDataError, Shared, add_h5_note, h5_errors, open_file, outside, refuse_outside, split_options
from ._infer import auto_batch
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


_Size = torch.Size
_from_numpy = torch.from_numpy
_NO_ENTRY: tuple[Any, Any] = (None, None)


class PersistentTensorDict(TensorDictBase):
    """A TensorDict stored in an HDF5 file: groups are nested TensorDicts, datasets are leaves.

    Reading a key reads that dataset (a new tensor, cast to ``device``); reading a nested key gives a view of
    the group. Writes go to the file. Indexing reads only the rows asked for (see ``_rows.py``).

    Keyword Args:
        batch_size: the leading dims shared by every leaf (default ``[]``).
        filename: the path of the HDF5 file. Exclusive with ``group``.
        group: an open ``h5py.File`` or ``h5py.Group`` holding the data. Exclusive with ``filename``.
        mode: how the file is opened, as ``h5py.File``: ``"r"`` (default), ``"r+"``, ``"a"``, ``"w"``,
            ``"w-"``/``"x"``.
        backend: ``"h5"``, or ``"zarr"``: then the result is a zarr-stored TensorDict (``from_zarr``).
        device: the device leaves are cast to when read (default: None, the CPU).
        file_options: a dict of ``h5py.File`` options (``locking``, ``swmr``, ``libver``, ``rdcc_nbytes``,
            ...), kept apart from the dataset options below.
        non_tensor_as_stack: read a non-tensor dataset with one element per row (a string column written by
            another tool) as a NonTensorStack of its rows.
        allow_external: follow external links, and read and write datasets whose data is stored in other
            files (external raw storage, virtual datasets). Default False: such an entry raises
            ``PermissionError`` naming the file and the entry (soft links inside the file are followed).
        **kwargs: dataset options passed to ``h5py.Group.create_dataset`` when a leaf is written
            (``compression="gzip"``, ``chunks=True``, ``fletcher32=True`` for a checksum, ...).

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch.persistent import PersistentTensorDict
        >>> folder = tempfile.mkdtemp()
        >>> with PersistentTensorDict(filename=os.path.join(folder, "x.h5"), batch_size=[3], mode="w") as data:
        ...     data["a", "b"] = torch.zeros(3, 4)
        ...     data["a", "b"] += 1
        ...     print(data["a", "b"][0])
        tensor([1., 1., 1., 1.])
    """

    __slots__ = ("_group", "_name", "_shared")
    _leaves_in_memory = False

    def __new__(cls, *args: Any, backend: str = "h5", **kwargs: Any) -> Any:
        """``backend="zarr"`` gives the zarr-stored TensorDict (``tensorbatch.stored``) over ``filename``/``group``."""
        if backend == "zarr":
            from ..stored._zarr_io import from_zarr

            where = kwargs.pop("filename", None)
            group = kwargs.pop("group", None)
            kwargs.pop("device", None)
            return from_zarr(where if where is not None else group, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        *,
        batch_size: Any = None,
        filename: str | os.PathLike[str] | None = None,
        group: h5py.Group | None = None,
        mode: str = "r",
        backend: str = "h5",
        device: Any = None,
        file_options: dict[str, Any] | None = None,
        non_tensor_as_stack: bool = False,
        allow_external: bool = False,
        **kwargs: Any,
    ) -> None:
        if backend != "h5":
            raise NotImplementedError(f"unknown backend {backend!r}: PersistentTensorDict supports 'h5' and 'zarr'")
        options, dataset_kwargs = split_options(kwargs, file_options)
        if (filename is None) == (group is None):
            raise RuntimeError(
                f"pass either group or filename, not both: got group={group!r} and filename={filename!r}"
            )
        root: Any = open_file(filename, mode, options) if filename is not None else group
        file = root if filename is not None else root.file  # (``.file`` builds a new File object each time)
        self._shared = Shared(
            file, file.mode, as_device(device), dataset_kwargs, options, non_tensor_as_stack, allow_external
        )
        self._group = root
        self._name: str = root.name  # (h5py looks the name up at each ``.name``)
        size = _Size(() if batch_size is None else batch_size)
        if batch_size is None:
            recorded, names = fmt.read_batch_attrs(root)
            self._shared.recorded = recorded is not None
            self._shared.batch[root.name] = _Size(()) if recorded is None else recorded
            if names is not None:
                self._shared.names[root.name] = names
        else:  # checked against the datasets; a batch size already recorded in the file is left as it is
            self._shared.batch[root.name] = _Size(())
            self._check_batch(size)
            # a writable file recording none yet (a new one) records it, so that reopening it gives this size back
            self._apply_batch(size, record=self._shared.writable and fmt.read_batch_attrs(root)[0] is None)

    @classmethod
    def _node(cls, shared: Shared, group: h5py.Group, name: str | None = None) -> PersistentTensorDict:
        out = object.__new__(cls)
        out._shared, out._group, out._name = shared, group, group.name if name is None else name
        return out

    def _entry(self, key: str) -> tuple[Any, Any]:
        """``(h5py object, kind)`` of the entry ``key`` (``(None, None)`` when missing), cached per file.

        ``kind`` is NODE for a group, the torch dtype of a tensor dataset, None for a non-tensor dataset. The
        h5py objects stay valid while the file is open: looking them up again costs more than the read of a
        small dataset. Writes that replace or delete an entry drop it from the cache (``_forget``).
        """
        path = f"{self._name}/{key}" if self._name != "/" else f"/{key}"
        found = self._shared.entries.get(path)
        if found is not None:
            return found
        if type(key) is not str or "/" in key or key in fmt.BAD_KEYS:
            return _NO_ENTRY
        shared = self._shared
        group = self._group
        if not shared.allow_external and shared.file:
            why = outside(group, key, None, shared.fileno)  # (checked before the link is followed)
            if why is not None:
                raise refuse_outside(shared, path, why)
        obj = group.get(key)
        if obj is None:
            return _NO_ENTRY
        if not shared.allow_external:
            why = outside(group, key, obj, shared.fileno)
            if why is not None:
                raise refuse_outside(shared, path, why)
        if type(obj) is h5py.Dataset and self._shared.chunk_cache_off and wants_no_cache(obj):
            obj = None  # closed first: HDF5 shares an open dataset, and its first open sets the chunk cache
            obj = open_without_cache(self._group, key, self._shared.file.mode == "r")
        found = (obj, fmt.leaf_dtype(obj) if type(obj) is h5py.Dataset else NODE)
        self._shared.entries[path] = found
        return found

    def _child(self, key: str, obj: Any) -> PersistentTensorDict:
        return PersistentTensorDict._node(self._shared, obj, f"{self._name}/{key}" if self._name != "/" else f"/{key}")

    # ------------------------------------------------------------------ file
    @property
    def file(self) -> h5py.File:
        """The open ``h5py.File``."""
        return self._shared.file

    @property
    def filename(self) -> str:
        """The path of the HDF5 file."""
        return self._shared.filename

    @property
    def mode(self) -> str:
        """The mode the file is open with (``"r"`` or ``"r+"``: h5py reports these two)."""
        return self._shared.file.mode if self._shared.file else self._shared.mode

    def close(self) -> None:
        """Close the file (every view of it too). Reads and writes raise afterwards."""
        self._shared.close()

    def flush(self) -> None:
        """Write the file's buffers to disk."""
        if self._shared.file:
            self._shared.file.flush()

    def __enter__(self) -> PersistentTensorDict:
        return TensorDictBase.__enter__(self)  # type: ignore[return-value]  # self

    _exit_plain = close  # a plain ``with td:`` closes (a ``with td.lock_():`` undoes the lock: the base __exit__)

    # ------------------------------------------------------------------ primitives
    @property
    def batch_size(self) -> torch.Size:
        found = self._shared.batch.get(self._name)
        return found if found is not None else self._lookup_batch()

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        TensorDictBase.batch_size.fset(self, value)  # type: ignore[attr-defined]  # the base setter

    def _lookup_batch(self) -> torch.Size:
        """A node's batch size: recorded in its attributes, else its parent's.

        When ``from_h5`` left the sizes to infer at the first use, they are inferred here.
        """
        pending = self._shared.auto
        if pending is not None:
            self._shared.auto = None
            auto_batch(PersistentTensorDict._node(self._shared, pending[0], pending[1]), pending[2])
            found = self._shared.batch.get(self._name)
            if found is not None:
                return found
        recorded, names = fmt.read_batch_attrs(self._group)
        if recorded is None and self._name == "/":
            recorded = _Size(())
        elif recorded is None:
            recorded = PersistentTensorDict._node(self._shared, self._group.parent).batch_size
        elif names is not None:
            self._shared.names[self._name] = names
        self._shared.batch[self._name] = recorded
        return recorded

    def _change_batch_size(self, new_size: torch.Size) -> None:
        self._check_batch(new_size)
        self._apply_batch(new_size)

    def _check_batch(self, new_size: torch.Size) -> None:
        n = len(new_size)
        for key in self._keys_str():
            shape, _, kind = self._leaf_meta(key)
            if kind == NON_TENSOR:
                continue  # a non-tensor value follows the batch size
            if tuple(shape[:n]) == tuple(new_size):
                continue
            if kind == NODE and len(shape) < n and tuple(new_size[: len(shape)]) == tuple(shape):
                self._get_str(key)._check_batch(new_size)
                continue
            raise batch_mismatch(new_size, (*self._path(), key), shape)

    def _apply_batch(self, new_size: torch.Size, record: bool = True) -> None:
        for key in self._keys_str():
            obj, kind = self._entry(key)
            if kind is NODE:
                child = self._child(key, obj)
                if len(child.batch_size) < len(new_size):
                    child._apply_batch(new_size, record)
        name = self._name
        names = self._shared.names.get(name)
        if names is not None and len(names) != len(new_size):
            names = self._shared.names.pop(name)
            names = None
        self._shared.batch[name] = new_size
        if record and self._shared.writable:
            with h5_errors(self._shared, name):
                fmt.write_batch_attrs(self._group, new_size, names)

    @property
    def device(self) -> torch.device | None:
        return self._shared.device

    def _path(self) -> tuple[str, ...]:
        return tuple(p for p in self._name.split("/") if p)

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        try:
            obj, kind = self._entry(key)
            if obj is None:
                if not self._shared.file:
                    raise ValueError(f"cannot read {key!r}: the HDF5 file {self._shared.filename!r} is closed")
                if default is NO_DEFAULT:
                    raise missing_key((*self._path(), key), self._keys_str(), type(self).__name__)
                return default
            if kind is NODE:
                return self._child(key, obj)
            if kind is None:
                return self._non_tensor(obj)
            out = fmt.from_numpy(np.asarray(obj[()]), kind)
        except (OSError, ValueError, TypeError, RuntimeError) as err:
            add_h5_note(err, self._shared, f"{self._name.rstrip('/')}/{key}")
            raise
        device = self._shared.device
        return out if device is None or device.type == "cpu" else out.to(device)

    def _non_tensor(self, ds: h5py.Dataset) -> Any:
        with h5_errors(self._shared, ds.name):
            value = fmt.read_non_tensor(ds, self.batch_size, self._shared.non_tensor_as_stack)
        if type(value).__name__ == "NonTensorData" and value.batch_size != self.batch_size:
            value = value._follow(self.batch_size)
        return value

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        fmt.check_key(key)
        if isinstance(value, UnbatchedTensor):  # a dataset would read back as a batched leaf: refused
            raise NotImplementedError(
                f"PersistentTensorDict (HDF5) cannot store the UnbatchedTensor at "
                f"{fmt_path((*(p for p in self._name.split('/') if p), key))}: "
                "exclude it first (td.exclude(key)), or save the TensorDict with memmap or to_safetensors"
            )
        if not validated:
            value = self._validate(value, (key,))
        shared, group = self._shared, self._group
        name = f"{self._name.rstrip('/')}/{key}"
        shared.check_writable(name)
        existing, kind = self._entry(key)
        if existing is None:
            shared.keys.pop(self._name, None)  # a new key
        with h5_errors(shared, name):
            if isinstance(value, torch.Tensor):
                if self._set_tensor(key, value, existing, kind, inplace):
                    return  # written into the dataset: the cached entry stays valid
            elif type(value) in NON_TENSOR_TYPES or not is_td(value):
                if existing is not None:
                    del group[key]
                fmt.write_non_tensor(group, key, value, {})
            else:
                self._set_node(key, value, existing, inplace)
        self._forget(name, kind is NODE)

    def _set_tensor(self, key: str, value: torch.Tensor, existing: Any, kind: Any, inplace: bool) -> bool:
        """Write a tensor leaf; True when it was copied into the existing dataset."""
        group = self._group
        if inplace and kind is not None and kind is not NODE:  # copied into the dataset (as copy_: broadcast, cast)
            if tuple(value.shape) != existing.shape:
                value = value.expand(existing.shape)
            existing[...] = fmt.to_numpy(value, kind)
            return True
        array = fmt.to_numpy(value, value.dtype)  # converted before the old entry goes
        if existing is not None:  # set replaces the leaf (a new dataset, as a new tensor in memory)
            del group[key]
        _, bits = fmt.stored_dtype(value.dtype)
        ds = group.create_dataset(key, data=array, **(self._shared.dataset_kwargs if array.ndim else {}))
        if bits is not None:
            ds.attrs[fmt.DTYPE_ATTR] = bits
        return False

    def _set_node(self, key: str, value: Any, existing: Any, inplace: bool) -> None:
        group = self._group
        if inplace and existing is not None and type(existing) is not h5py.Dataset:
            self._child(key, existing).update_(value)
            return
        if isinstance(value, PersistentTensorDict) and value._shared.file == self._shared.file:
            value = value.to_tensordict()  # read before a node written onto itself is dropped
        entries = list(value._items_str())
        if existing is not None:
            del group[key]
        sub = group.create_group(key, track_order=True)
        self._forget(sub.name)
        child = PersistentTensorDict._node(self._shared, sub)
        self._shared.batch[sub.name] = value.batch_size
        names = value._maybe_names()
        if names is not None:
            self._shared.names[sub.name] = tuple(names)
        fmt.write_batch_attrs(sub, value.batch_size, names)
        for sub_key, sub_value in entries:
            child._set_str(sub_key, sub_value, inplace=False, validated=True)

    def _forget(self, name: str, below: bool = True) -> None:
        """Drop what is remembered of the entry ``name``, and with ``below`` of everything under it.

        Called when it was deleted or replaced.
        """
        shared = self._shared
        shared.entries.pop(name, None)
        shared.tables.clear()  # (rebuilt on the next read: writes that add, replace or delete entries are rare)
        shared.direct.clear()
        if not below:
            return
        prefix = name.rstrip("/") + "/"
        for table in (shared.entries, shared.batch, shared.names, shared.locked, shared.keys):
            for other in [k for k in table if k == name or k.startswith(prefix)]:
                del table[other]

    def _del_str(self, key: str) -> None:
        group = self._group
        if key not in self._keys_str():
            raise missing_key((*self._path(), key), self._keys_str(), type(self).__name__)
        name = f"{self._name.rstrip('/')}/{key}"
        self._shared.check_writable(name)
        with h5_errors(self._shared, name):
            del group[key]
        self._shared.keys.pop(self._name, None)
        self._forget(name)

    def _keys_str(self) -> Any:
        found = self._shared.keys.get(self._name)
        if found is None:  # listing a group costs more than reading a small dataset: kept until a key changes
            found = self._shared.keys[self._name] = tuple(self._group.keys())
        return found

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDictBase:
        """An in-memory TensorDict of every leaf: one read per dataset."""
        if not self.batch_dims:
            return TensorDictBase.to_tensordict(self)
        n = self.batch_size[0]
        return self._read_rows(plan_rows(slice(0, n), n))

    def _has_str(self, key: str) -> bool:
        try:
            return self._entry(key)[0] is not None
        except OutsideDataError:  # there, but not followed (``del`` removes the link only)
            return True

    @property
    def is_locked(self) -> bool:
        return self._shared.locked.get(self._name, False)

    def _set_lock(self, value: bool) -> None:
        self._shared.locked[self._name] = value

    def _maybe_names(self) -> tuple[Any, ...] | None:
        self.batch_size  # noqa: B018  # a nested node's names are read with its batch size
        return self._shared.names.get(self._name)

    @property
    def names(self) -> list[str | None]:
        """Names of the batch dims (None for unnamed dims), kept in the group's attributes."""
        names = self._maybe_names()
        return list(names) if names is not None else [None] * self.batch_dims

    @names.setter
    def names(self, value: Any) -> None:
        name = self._name
        if value is None:
            self._shared.names.pop(name, None)
            names = None
        else:
            names = checked_names(value, self.batch_size)
            if any(n is not None for n in names):
                self._shared.names[name] = names
            else:
                self._shared.names.pop(name, None)
                names = None
        if self._shared.writable:
            fmt.write_batch_attrs(self._group, self.batch_size, names)

    # ------------------------------------------------------------------ storage hooks
    def _leaf_meta(self, key: str) -> LeafMeta:
        obj, kind = self._entry(key)
        if obj is None:
            raise missing_key((*self._path(), key), self._keys_str(), type(self).__name__)
        if kind is NODE:
            return LeafMeta(self._child(key, obj).batch_size, None, NODE)
        if kind is not None:
            return LeafMeta(_Size(obj.shape), kind, TENSOR)
        shape = fmt.stack_shape(obj)
        return LeafMeta(self.batch_size if shape is None else shape, None, NON_TENSOR)

    def _read_rows(self, plan: RowPlan, keys: Iterable[str] | None = None, budget: int | None = None) -> TensorDictBase:
        if plan.kind != "rows" and keys is None:
            return self._read_slab((plan.index,), plan.shape)
        if budget is None and plan.kind == "rows":  # one bound on the read buffers of all the leaves read
            budget = block_budget(self._rows_bytes(plan, keys))
        out: dict[str, Any] = {}
        device = self._shared.device
        on_cpu = device is None or device.type == "cpu"
        hyperslab = plan.kind != "rows"  # an int or a slice
        for key in self._keys_str() if keys is None else keys:
            obj, kind = self._entry(key)
            if kind is NODE:
                out[key] = self._child(key, obj)._read_rows(plan, None, budget)
            elif kind is not None:
                try:
                    if hyperslab:
                        array = read_hyperslab(obj, plan.index)
                    else:
                        array = read_rows(obj, plan, budget, self._direct(key, obj))
                    leaf = fmt.from_numpy(array, kind)
                except (OSError, ValueError, TypeError, RuntimeError) as err:
                    add_h5_note(err, self._shared, f"{self._name.rstrip('/')}/{key}")
                    raise
                out[key] = leaf if on_cpu else leaf.to(device)
            elif obj is None:
                raise missing_key((*self._path(), key), self._keys_str(), type(self).__name__)
            else:
                out[key] = self._non_tensor(obj)[plan.index]
        return self._dense_cls._new_unsafe(out, plan.target_shape(self.batch_size), device)  # type: ignore[no-any-return]

    def _slab_table(self) -> tuple[tuple[str, Any, Any, Any, bool], ...]:
        """``(key, kind, source, read, bits)`` for each entry of this level, kept until an entry changes.

        ``source`` is the h5py object; ``read`` is the node's name for a group, else h5py's reader of a
        numeric dataset (``Dataset.__getitem__`` calls it first), kept when the file is read-only, as h5py
        keeps it (None otherwise); ``bits``: the dataset holds the bits of ``kind`` (bfloat16, float8).
        (Nothing here depends on a node's ``Shared``: ``clone(recurse=False)`` shares these tables.)
        """
        table = self._shared.tables.get(self._name)
        if table is None:
            rows = []
            for key in self._keys_str():
                obj, kind = self._entry(key)
                read = None
                if kind is NODE:
                    read = self._child(key, obj)._name
                elif kind is not None and obj._readonly:
                    with contextlib.suppress(AttributeError):  # another h5py: the general path
                        read = obj._fast_reader.read if obj._fast_read_ok else None
                rows.append((key, kind, obj, read, kind is not NODE and fmt.stored_as_bits(kind)))
            table = self._shared.tables[self._name] = tuple(rows)
        return table

    def _read_slab(self, index: tuple[Any], lead: tuple[int, ...]) -> TensorDictBase:
        """``self[index]`` read into memory, for an int or a slice ``index[0]`` (a hyperslab of each leaf).

        ``lead`` is what the index leaves of dim 0 (``()`` for an int, ``(n,)`` for a slice). This is
        ``_read_rows`` without a row plan: a small slice costs little more than its reads.
        """
        out: dict[str, Any] = {}
        device = self._shared.device
        for key, kind, source, read, bits in self._slab_table():
            if kind is NODE:
                out[key] = PersistentTensorDict._node(self._shared, source, read)._read_slab(index, lead)
                continue
            try:
                if read is not None:  # a new array from h5py: no copy needed
                    leaf = _from_numpy(read(index))
                    if bits:
                        leaf = leaf.view(kind)
                elif kind is not None:
                    leaf = fmt.from_numpy(read_hyperslab(source, index[0]), kind)
                else:
                    out[key] = self._non_tensor(source)[index[0]]
                    continue
            except (OSError, ValueError, TypeError, RuntimeError) as err:
                add_h5_note(err, self._shared, f"{self._name.rstrip('/')}/{key}")
                raise
            out[key] = leaf if device is None or device.type == "cpu" else leaf.to(device)
        return self._dense_cls._new_unsafe(out, _Size((*lead, *self.batch_size[1:])), device)  # type: ignore[no-any-return]

    def _direct(self, key: str, ds: h5py.Dataset) -> DirectRows | None:
        """How to read rows of the dataset ``key`` straight from the file (read-only files), or None."""
        direct = self._shared.direct
        path = f"{self._name.rstrip('/')}/{key}"
        if path not in direct:
            direct[path] = direct_rows(ds, self._shared.file) if self._shared.file.mode == "r" else None
        return direct[path]  # type: ignore[no-any-return]

    def _rows_bytes(self, plan: RowPlan, keys: Iterable[str] | None = None) -> int:
        """Bytes of the tensor leaves ``_read_rows(plan, keys)`` returns."""
        total = 0
        for key in self._keys_str() if keys is None else keys:
            obj, kind = self._entry(key)
            if kind is NODE:
                total += self._child(key, obj)._rows_bytes(plan)
            elif obj is not None and kind is not None:
                total += result_bytes(obj, plan)
        return total

    def _write_rows(self, plan: RowPlan, values: Mapping[tuple[str, ...], Any]) -> None:
        checked = []
        for path, value in values.items():  # everything checked before the first write
            node: Any = self
            for part in path[:-1]:
                obj, kind = node._entry(part)
                if kind is not NODE:
                    node = None
                    break
                node = node._child(part, obj)
            obj, kind = _NO_ENTRY if node is None else node._entry(path[-1])
            if kind is None or kind is NODE:
                if obj is None:
                    self._get(path)  # the KeyError naming a missing path
                raise TypeError(f"cannot write rows into {path!r}: it is not a tensor leaf")
            name = f"{node._name.rstrip('/')}/{path[-1]}"
            self._shared.check_writable(name)
            if isinstance(value, torch.Tensor):
                check_fits(path, value.shape, plan.target_shape(obj.shape))
            else:
                value = torch.as_tensor(value)
            checked.append((obj, fmt.to_numpy(value, kind), name))
        for obj, array, name in checked:
            with h5_errors(self._shared, name):
                write_rows(obj, plan, array)

    def _alloc_leaf(self, key: str, shape: Any, dtype: torch.dtype) -> None:
        fmt.check_key(key)
        name = f"{self._name.rstrip('/')}/{key}"
        self._shared.check_writable(name)
        numpy_dtype, bits = fmt.stored_dtype(dtype)
        with h5_errors(self._shared, name):
            if key in self._group:
                del self._group[key]
            self._forget(name)
            self._shared.keys.pop(self._name, None)
            kwargs = self._shared.dataset_kwargs if len(shape) else {}
            ds = self._group.create_dataset(key, shape=tuple(shape), dtype=numpy_dtype, **kwargs)
            if bits is not None:
                ds.attrs[fmt.DTYPE_ATTR] = bits

    def _read_index(self, index: Any, materialize: bool = False) -> Any:
        """``self[index]``: a lazy view that reads on access and writes through (``materialize``: read it)."""
        if materialize:
            return TensorDictBase._read_index(self, index)
        return IndexedView(self, index)

    # ------------------------------------------------------------------ pickling
    def __reduce__(self) -> Any:
        """Pickled as the file name and node path: unpickling reopens the file.

        It reopens ``"r"``, or ``"r+"`` when it was writable; never ``"w"``, which would truncate it.
        """
        shared = self._shared
        if shared.file:
            shared.file.flush()
        mode = "r" if self.mode == "r" else "r+"
        state = (
            shared.filename,
            mode,
            self._name,
            dict(shared.batch),
            dict(shared.names),
            shared.device,
            shared.dataset_kwargs,
            shared.file_options,
            shared.non_tensor_as_stack,
            dict(shared.locked),
        )
        return (_reopen, state)


def _reopen(
    filename: str,
    mode: str,
    name: str,
    batch: dict[str, torch.Size],
    names: dict[str, Any],
    device: Any,
    dataset_kwargs: dict[str, Any],
    file_options: dict[str, Any],
    as_stack: bool,
    locked: dict[str, bool],
) -> PersistentTensorDict:
    file = open_file(filename, mode, file_options)
    shared = Shared(file, mode, device, dataset_kwargs, file_options, as_stack)
    shared.batch.update(batch)
    shared.names.update(names)
    shared.locked.update(locked)
    return PersistentTensorDict._node(shared, file[name])
