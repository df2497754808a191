"""Making PersistentTensorDicts: from_h5, from_dict, to_h5, clone, and the batch size read from metadata."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import Any

import torch

from .. import _progress
from .._ops.traverse import is_td
from ._file import atomic_target, open_file, split_options
from ._format import write_batch_attrs
from ._node import PersistentTensorDict as PersistentTensorDict


def from_h5(
    filename: str | os.PathLike[str],
    mode: str = "r",
    *,
    batch_size: Any = None,
    batch_dims: int | None = None,
    auto_batch_size: bool = False,
    non_tensor_as_stack: bool = False,
    file_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> PersistentTensorDict:
    """Open an HDF5 file as a :class:`PersistentTensorDict` (nothing is read but metadata).

    Without ``batch_size``, the batch sizes recorded by ``to_h5``/``from_dict`` are used; a file without them
    (written by another tool) gets, for each nested TensorDict, the largest batch size its entries share
    (at most ``batch_dims`` dims). ``auto_batch_size=True`` ignores the recorded sizes.
    Entries whose data lies in other files (external links, external or virtual storage) raise
    ``PermissionError`` unless ``allow_external=True`` is passed.

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
    out = PersistentTensorDict(
        filename=filename,
        mode=mode,
        batch_size=batch_size,
        file_options=file_options,
        non_tensor_as_stack=non_tensor_as_stack,
        **kwargs,
    )
    if batch_size is None and (not out._shared.recorded or auto_batch_size or batch_dims is not None):
        # inferred from the datasets' shapes at the first use of a batch size: opening stays cheap
        out._shared.batch.clear()
        out._shared.names.clear()
        out._shared.auto = (out._group, out._name, batch_dims)
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
    **kwargs: Any,
) -> PersistentTensorDict:
    """Write a dict or a TensorDict to a new HDF5 file and return it open (mode ``"r+"``).

    The file is written under a temporary name next to ``filename``, then renamed onto it: a process killed
    while writing leaves the previous file intact. ``kwargs`` are dataset options (``compression``,
    ``chunks``, ``fletcher32``...); ``file_options`` go to ``h5py.File``. ``progress=True`` shows a tqdm bar
    counting the bytes written (None: :class:`~tensorbatch.set_progress`'s switch).

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
    with atomic_target(filename) as tmp:
        file = open_file(tmp, "w", options)
        try:
            out = PersistentTensorDict(group=file, batch_size=source.batch_size, **dataset_kwargs)
            names = source._maybe_names()
            if names is not None:
                out.names = list(names)
            write_batch_attrs(file, source.batch_size, names)
            for key, value in _progress.entries(source._items_str(), progress, "to_h5"):
                out._set_str(key, value, inplace=False, validated=True)
        finally:
            file.close()
    out = PersistentTensorDict(filename=filename, mode="r+", device=device, file_options=options, **dataset_kwargs)
    _load_recorded(out)
    return out


def _load_recorded(out: PersistentTensorDict) -> None:
    """The root batch size and names recorded in the file (the constructor read them)."""
    from ._format import read_batch_attrs

    size, names = read_batch_attrs(out._group)
    out._shared.batch[out._name] = torch.Size(()) if size is None else size
    if names is not None:
        out._shared.names[out._name] = names


def clone(
    self: PersistentTensorDict, recurse: bool = True, *, filename: str | os.PathLike[str] | None = None, **kwargs: Any
) -> Any:
    """A copy of a PersistentTensorDict.

    ``recurse=True`` copies the data to a new file (``filename``, else a temporary file removed on
    ``close()``); ``recurse=False`` gives a new PersistentTensorDict over the same open file (no reopening).
    """
    if not recurse:
        shared = self._shared
        from ._file import Shared

        copy = Shared(
            shared.file,
            shared.mode,
            shared.device,
            shared.dataset_kwargs,
            shared.file_options,
            shared.non_tensor_as_stack,
            shared.allow_external,
        )
        copy.batch.update(shared.batch)
        copy.names.update(shared.names)
        # one cache per open file (writes drop entries)
        copy.entries, copy.keys, copy.tables, copy.direct = shared.entries, shared.keys, shared.tables, shared.direct
        copy.auto = shared.auto
        return PersistentTensorDict._node(copy, self._group)
    owned = filename is None
    if filename is None:
        fd, filename = tempfile.mkstemp(suffix=".h5", prefix="tensorbatch-clone-")
        os.close(fd)
    out = from_dict(
        self,
        filename,
        device=self.device,
        file_options=self._shared.file_options,
        **{**self._shared.dataset_kwargs, **kwargs},
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
    from .._keys import key_tuple

    size = torch.Size(() if batch_size is None else batch_size)
    out = PersistentTensorDict(
        filename=filename, mode="w", batch_size=size, device=device, file_options=file_options, **kwargs
    )
    write_batch_attrs(out._group, size, None)
    for key, (shape, dtype) in schema.items():
        path = key_tuple(key)
        node: Any = out._walk_to(path, create=True)
        node._alloc_leaf(path[-1], (*size, *shape), dtype)
    return out


def _from_h5_method(cls: Any, /, filename: str | os.PathLike[str], mode: str = "r", **kwargs: Any) -> Any:
    """Open an HDF5 file (see :func:`tensorbatch.persistent.from_h5`)."""
    return from_h5(filename, mode, **kwargs)


def _from_dict_method(
    cls: Any, /, input_dict: Any, filename: Any = None, batch_size: Any = None, device: Any = None, **kwargs: Any
) -> Any:
    """Write a dict or TensorDict to a new HDF5 file and open it (see :func:`from_dict`)."""
    return from_dict(input_dict, filename, batch_size, device, **kwargs)


def _from_schema_method(cls: Any, /, schema: Any, filename: str | os.PathLike[str], **kwargs: Any) -> Any:
    """A new file with zero-filled leaves from ``(element_shape, dtype)`` pairs, no data written."""
    return from_schema(schema, filename, **kwargs)


# The constructors and copies of the class live here (they need the file machinery, not the node's):
for _name, _value in (
    ("from_h5", classmethod(_from_h5_method)),
    ("from_dict", classmethod(_from_dict_method)),
    ("from_schema", classmethod(_from_schema_method)),
    ("clone", clone),
    ("replace", replace),
):
    setattr(PersistentTensorDict, _name, _value)
