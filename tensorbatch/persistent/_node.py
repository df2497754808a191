"""PersistentTensorDict: the stored layer over the HDF5 dialect, and its constructors.

The TensorDict side (batch checks, names, lock, ``with``/close, pickling, lazy indexed views, row reads and
writes) is :class:`~tensorbatch.stored.StoredTensorDict`'s; the file side is :class:`._dialect.H5Dialect`'s.
This module adds what is HDF5's own: the constructor's arguments, the batch sizes a file records (a nested
group recording none takes its parent's), ``from_h5``/``from_dict``/``from_schema`` and the copies.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from .._base.coerce import as_device
from .._ops.traverse import is_td
from ..base import TensorDictBase
from ..stored._node import State, StoredTensorDict
from ..stored._write import allocate, write_all
from ._dialect import H5Dialect, check_tree
from ._file import atomic_target, open_file, split_options

if TYPE_CHECKING:
    import h5py


class PersistentTensorDict(StoredTensorDict):
    """A TensorDict stored in an HDF5 file: groups are nested TensorDicts, datasets are leaves.

    Reading a key reads that dataset (a new tensor, cast to ``device``); reading a nested key gives a view of
    the group. Writes go to the file. Indexing gives a view that reads only the rows asked for.

    Keyword Args:
        batch_size: the leading dims shared by every leaf (default: the one the file records, else ``[]``).
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

    __slots__ = ()

    def __new__(cls, *args: Any, backend: str = "h5", **kwargs: Any) -> Any:
        """``backend="zarr"`` gives the zarr-stored TensorDict (``tensorbatch.stored``) over ``filename``/``group``."""
        if backend == "zarr":
            from ..stored._zarr import from_zarr

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
        self._open(
            batch_size=batch_size,
            filename=filename,
            group=group,
            mode=mode,
            backend=backend,
            device=device,
            file_options=file_options,
            non_tensor_as_stack=non_tensor_as_stack,
            allow_external=allow_external,
            **kwargs,
        )

    def _open(
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
    ) -> bool:
        """``__init__``'s work; True when the file records the root's batch size (what ``from_h5`` asks next)."""
        if backend != "h5":
            raise NotImplementedError(f"unknown backend {backend!r}: PersistentTensorDict supports 'h5' and 'zarr'")
        if (filename is None) == (group is None):
            raise RuntimeError(
                f"pass either group or filename, not both: got group={group!r} and filename={filename!r}"
            )
        options, dataset_kwargs = split_options(kwargs, file_options)
        root: Any = open_file(filename, mode, options) if filename is not None else group
        dialect = H5Dialect(
            root,
            device=as_device(device),
            dataset_kwargs=dataset_kwargs,
            file_options=options,
            non_tensor_as_stack=non_tensor_as_stack,
            allow_external=allow_external,
        )
        state = self._state = State(dialect)
        self._path = ()
        state.given = True  # a nested group recording no batch size takes its parent's
        recorded, names = dialect.node_facts(())
        if batch_size is None:
            state.batch[()] = torch.Size(()) if recorded is None else recorded
            if names is not None:
                state.names[()] = names
            return recorded is not None
        size = torch.Size(batch_size)
        state.batch[()] = torch.Size(())  # checked against the datasets
        try:
            self._check_batch(size, opening=True)
        except BaseException:
            state.batch.clear()
            raise
        if recorded is None and dialect.writable:  # a new file records it: reopening it gives this size back
            self._apply_batch(size)
        else:  # a batch size already recorded in the file is left as it is
            state.batch.clear()  # (nested groups recording none take this one)
            state.batch[()] = size
        return recorded is not None

    # ------------------------------------------------------------------ file
    @property
    def _shared(self) -> H5Dialect:
        return self._state.dialect  # type: ignore[return-value]  # always an H5Dialect

    @property
    def _group(self) -> h5py.Group:
        """The h5py group of this node."""
        return self._shared.obj(self._path)

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
        dialect = self._shared
        return dialect.file.mode if dialect.file else dialect.mode

    def __enter__(self) -> PersistentTensorDict:
        return TensorDictBase.__enter__(self)  # type: ignore[return-value]  # self

    def _entry(self, key: str) -> tuple[Any, Any]:
        """``(h5py object, kind)`` of the entry ``key`` (``(None, None)`` when missing)."""
        kind = self._state.entries(self._path).get(key)
        return (None, None) if kind is None else (self._shared.obj((*self._path, key)), kind)


def from_h5(
    h5_file: str | os.PathLike[str],
    mode: str = "r",
    *,
    batch_size: Any = None,
    batch_dims: int | None = None,
    auto_batch_size: bool = False,
    non_tensor_as_stack: bool = False,
    file_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> PersistentTensorDict:
    """Open an HDF5 file as a :class:`PersistentTensorDict` (reads metadata only).

    Without ``batch_size``, the batch sizes recorded by ``to_h5``/``from_dict`` are used; a file without
    them gets, per nested TensorDict, the largest batch size its entries share (at most ``batch_dims``
    dims; ``auto_batch_size=True`` ignores recorded sizes). ``file_options={...}`` go to ``h5py.File``
    (``locking``, ``swmr``, ``libver``, ``rdcc_nbytes``...); other keyword arguments are dataset options.
    Entries whose data lies in other files (external links, external or virtual storage) raise
    ``PermissionError`` naming the file and the entry, unless ``allow_external=True`` is passed.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch import TensorDict, from_h5
        >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
        >>> TensorDict({"a": torch.zeros(3, 2), "n": {"b": torch.ones(3)}}, [3]).to_h5(path).close()
        >>> with from_h5(path) as data:
        ...     print(data.batch_size, data["n", "b"])
        torch.Size([3]) tensor([1., 1., 1.])
    """
    if batch_size is not None and auto_batch_size:
        raise TypeError("pass batch_size or auto_batch_size=True, not both")
    out: PersistentTensorDict = PersistentTensorDict.__new__(PersistentTensorDict)
    recorded = out._open(
        filename=h5_file,
        mode=mode,
        batch_size=batch_size,
        file_options=file_options,
        non_tensor_as_stack=non_tensor_as_stack,
        **kwargs,
    )
    state = out._state
    if batch_size is None and (auto_batch_size or batch_dims is not None or not recorded):
        # inferred from the datasets' shapes at the first use of a batch size: opening stays cheap
        state.batch.clear()
        state.names.clear()
        state.given, state.infer, state.batch_dims = False, True, batch_dims
    return out


def from_dict(
    input_dict: Any,
    filename: str | os.PathLike[str],
    batch_size: Any = None,
    device: Any = None,
    *,
    batch_dims: int | None = None,
    auto_batch_size: bool = False,
    file_options: dict[str, Any] | None = None,
    progress: bool | None = None,
    atomic: bool = False,
    **kwargs: Any,
) -> PersistentTensorDict:
    """Write a dict or a TensorDict to a new HDF5 file and return it open (mode ``"r+"``).

    As tensordict, ``filename`` is created, or truncated and written in place; every entry is checked first, so
    a value HDF5 cannot hold raises before the file is touched. ``atomic=True`` writes the file under a
    temporary name next to ``filename`` and renames it onto it: a process killed while writing leaves the
    previous file intact (the rename costs 10-40% of a write). A file open in this process (the source itself,
    say), which HDF5 cannot truncate, is always replaced so (tensordict raises). ``kwargs`` are dataset
    options (``compression``, ``chunks``, ``fletcher32``...); ``file_options`` go to ``h5py.File``.
    ``progress=True`` shows a tqdm bar counting the bytes written (None: :class:`~tensorbatch.set_progress`'s
    switch).

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch.persistent import PersistentTensorDict
        >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
        >>> data = PersistentTensorDict.from_dict({"a": torch.arange(3)}, path, batch_size=[3])
        >>> data["a"], data.mode
        (tensor([0, 1, 2]), 'r+')
        >>> data.close()
    """
    from .._td import TensorDict

    options, dataset_kwargs = split_options(kwargs, file_options)
    if is_td(input_dict):
        source = input_dict
        if batch_size is not None:
            source = source.clone(False)
            source.batch_size = batch_size
    else:
        source = TensorDict(input_dict, batch_size=batch_size if batch_size is not None else [])
        if batch_size is None:  # as tensordict: the largest batch size the entries share
            source.auto_batch_size_(batch_dims=batch_dims)
    filename = os.fspath(filename)
    check_tree(source)  # every entry, before the file is truncated
    if not atomic:
        try:
            file = open_file(filename, "w", options)
        except OSError as err:
            if "already open" not in str(err):
                raise
            atomic = True  # (open here, maybe by the source: written aside, the open handles keep the old file)
        else:
            return _written(file, source, progress, device, options, dataset_kwargs)
    with atomic_target(filename, create=False) as tmp:
        file = open_file(tmp, "w-", options)
        try:
            _written(file, source, progress, device, options, dataset_kwargs)
            file.flush()  # complete on disk before it takes the name (HDF5 keeps metadata in memory until then)
            if os.name == "nt":  # (a file open on Windows cannot be renamed)
                file.close()
        except BaseException:
            file.close()
            raise
    # Renamed while open (POSIX): opening it by its name shares HDF5's open file (its name: the new one)
    out = PersistentTensorDict(filename=filename, mode="r+", device=device, file_options=options, **dataset_kwargs)
    file.close()
    return out


def _written(
    file: Any, source: Any, progress: bool | None, device: Any, options: dict[str, Any], dataset_kwargs: dict[str, Any]
) -> PersistentTensorDict:
    """``source`` written into the new open HDF5 ``file``: the PersistentTensorDict over it (closes it on failure)."""
    try:  # (the new file's facts are known: none recorded, nothing to read)
        dialect = H5Dialect(file, device=as_device(device), dataset_kwargs=dataset_kwargs, file_options=options)
        out: PersistentTensorDict = PersistentTensorDict._view(State(dialect), ())  # type: ignore[assignment]
        out._state.given, out._state.batch[()] = True, torch.Size(())
        write_all(out, source, progress, "to_h5")
    except BaseException:
        file.close()
        raise
    return out


def clone(
    self: PersistentTensorDict, recurse: bool = True, *, filename: str | os.PathLike[str] | None = None, **kwargs: Any
) -> Any:
    """A copy of a PersistentTensorDict.

    ``recurse=True`` copies the data to a new file (``filename``, else a temporary file removed on
    ``close()``); ``recurse=False`` gives a new PersistentTensorDict over the same open file (no reopening).
    """
    dialect = self._shared
    if not recurse:
        state = self._state
        copy = State(dialect.copy(), state.batch_dims, state.infer)
        copy.given = state.given
        copy.children, copy.meta, copy.layouts = state.children, state.meta, state.layouts  # (one open file)
        copy.batch.update(state.batch)
        copy.names.update(state.names)
        return PersistentTensorDict._view(copy, self._path)
    owned = filename is None
    if filename is None:
        fd, filename = tempfile.mkstemp(suffix=".h5", prefix="tensorbatch-clone-")
        os.close(fd)
    out = from_dict(
        self, filename, device=self.device, file_options=dialect.file_options, **{**dialect.dataset_kwargs, **kwargs}
    )
    out._shared.owned = owned
    return out


def replace(self: PersistentTensorDict, *args: Any, **kwargs: Any) -> Any:
    """An in-memory copy with some entries replaced (the file is left unchanged); ``self`` if none are given.

    A shallow copy of a PersistentTensorDict shares its file, so the generic ``copy().update(...)`` would
    write the file: the entries are read into memory first.
    """
    from .._base.values import replace as generic

    if len(args) > 1 or (not kwargs and (not args or not hasattr(args[0], "__len__") or not len(args[0]))):
        return generic(self, *args)  # self, or the generic error
    return generic(self.to_tensordict(), *args, **kwargs)


def from_schema(
    schema: Mapping[Any, tuple[Any, torch.dtype]],
    filename: str | os.PathLike[str],
    *,
    batch_size: Any = None,
    device: Any = None,
    file_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> PersistentTensorDict:
    """A new HDF5 file with a zero-filled leaf per schema entry, allocated without writing data.

    ``schema`` maps keys (strings or tuples of strings) to ``(element_shape, dtype)``; each leaf has the
    shape ``[*batch_size, *element_shape]``. HDF5 allocates the datasets' space when data is first written
    and reads unwritten data as zeros, so a schema of any size is created at once.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch.persistent import PersistentTensorDict
        >>> path = os.path.join(tempfile.mkdtemp(), "buffer.h5")
        >>> data = PersistentTensorDict.from_schema({"obs": ([4], torch.float32)}, path, batch_size=[1000])
        >>> data["obs"].shape, data["obs"][3].sum().item(), os.path.getsize(path) < 100_000
        (torch.Size([1000, 4]), 0.0, True)
        >>> data.close()
    """
    out = PersistentTensorDict(filename=filename, mode="w", device=device, file_options=file_options, **kwargs)
    allocate(out, schema, torch.Size(() if batch_size is None else batch_size))
    return out


def _from_dict_method(
    cls: Any, /, input_dict: Any, filename: Any = None, batch_size: Any = None, device: Any = None, **kwargs: Any
) -> Any:
    """Write a dict or TensorDict to a new HDF5 file and open it (see :func:`from_dict`)."""
    return from_dict(input_dict, filename, batch_size, device, **kwargs)


def _from_schema_method(cls: Any, /, schema: Any, filename: str | os.PathLike[str], **kwargs: Any) -> Any:
    """A new file with zero-filled leaves from ``(element_shape, dtype)`` pairs, no data written."""
    return from_schema(schema, filename, **kwargs)


for _name, _value in (  # (set here: their signatures are not the base class's)
    ("from_dict", classmethod(_from_dict_method)),
    ("from_schema", classmethod(_from_schema_method)),
    ("clone", clone),
    ("replace", replace),
):
    setattr(PersistentTensorDict, _name, _value)
