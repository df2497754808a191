"""``to_zarr`` / ``from_zarr`` / ``from_schema(storage="zarr")``: the zarr dialect registered as a storage."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from ..base import TensorDictBase
from ._node import StoredTensorDict
from ._register import register_storage
from ._zarr import ZarrDialect, check_dtype


def from_zarr(
    zarr_file: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
    non_tensor_as_stack: bool = False,
    allow_pickle: bool | None = None,
    storage_options: dict[str, Any] | None = None,
) -> StoredTensorDict:
    """Open a zarr group (a path, an fsspec URL or a zarr store) as a TensorDict read on access.

    Batch sizes are those ``to_zarr`` recorded (tensordict's layout); a group that records none gets the
    longest leading shape its entries share (at most ``batch_dims`` dims; ``auto_batch_size=True`` ignores the
    recorded sizes). ``batch_size`` is checked and taken without writing. Rows are read on indexing, one read per
    leaf; ``mode="r+"`` or ``"a"`` writes through. Pickled non-tensor values are read only with
    ``allow_pickle=True`` (tensordict reads them with a warning: pickle runs code). ``storage_options`` go to
    fsspec (credentials, endpoints). ``non_tensor_as_stack`` is accepted for tensordict's signature: string
    columns are stacks already.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch import TensorDict, from_zarr
        >>> path = os.path.join(tempfile.mkdtemp(), "data.zarr")
        >>> _ = TensorDict({"a": torch.arange(6).view(3, 2), "n": {"b": torch.ones(3)}}, [3]).to_zarr(path)
        >>> with from_zarr(path) as data:
        ...     print(data.batch_size, data[1:]["a"].tolist(), data["n", "b"])
        torch.Size([3]) [[2, 3], [4, 5]] tensor([1., 1., 1.])
    """
    dialect = ZarrDialect(zarr_file, mode, storage_options=storage_options, allow_pickle=bool(allow_pickle))
    return StoredTensorDict(dialect, batch_size=batch_size, batch_dims=batch_dims, auto_batch_size=auto_batch_size)


def _open(
    filename: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
    non_tensor_as_stack: bool = False,
    allow_pickle: bool | None = None,
    storage_options: dict[str, Any] | None = None,
) -> StoredTensorDict:
    """Open a zarr group as a TensorDict read on access (see :func:`tensorbatch.from_zarr`)."""
    return from_zarr(
        filename,
        mode=mode,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        batch_size=batch_size,
        non_tensor_as_stack=non_tensor_as_stack,
        allow_pickle=allow_pickle,
        storage_options=storage_options,
    )


def to_zarr(
    self: TensorDictBase,
    filename: Any,
    *,
    allow_pickle: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> StoredTensorDict:
    """Write this TensorDict to a new zarr group (replacing what is there) and return it open read-write.

    The layout is tensordict 0.15.3's (each library reads the other's). ``kwargs`` go to
    ``zarr.Group.create_array``: by default a leaf is one uncompressed chunk; ``chunks=(16,)`` chunks every
    leaf's first dim by 16 (the others stay whole), ``compressors=...`` compresses. ``filename`` is a path, an
    fsspec URL (``storage_options`` for its filesystem) or a zarr store. ``allow_pickle=False`` refuses to read
    back the pickled non-tensor values this call writes.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch import TensorDict
        >>> stored = TensorDict({"a": torch.arange(3)}, [3]).to_zarr(os.path.join(tempfile.mkdtemp(), "d.zarr"))
        >>> stored["a"], stored.batch_size
        (tensor([0, 1, 2]), torch.Size([3]))
    """
    for key, value in self.items(include_nested=True, leaves_only=True):  # every dtype checked before a write
        if isinstance(value, torch.Tensor):
            check_dtype(key if isinstance(key, tuple) else (key,), value.dtype)
    dialect = ZarrDialect(
        filename, "w", storage_options=storage_options, allow_pickle=allow_pickle is not False, array_options=kwargs
    )
    out = StoredTensorDict(dialect)
    out.batch_size = self.batch_size
    names = self._maybe_names()
    if names is not None:
        out.names = names
    with dialect.transaction():
        for key, value in self.items():
            out._set_str(key, value, inplace=False, validated=True)
    dialect.consolidate()
    return out


def from_schema(
    schema: Mapping[Any, tuple[Any, torch.dtype]],
    filename: str | os.PathLike[str] | None = None,
    *,
    batch_size: Any = None,
    device: Any = None,
    **kwargs: Any,
) -> StoredTensorDict:
    """Zero-filled leaves in a new zarr group, written without data (unwritten chunks read as 0)."""
    if filename is None:
        raise TypeError("from_schema(storage='zarr') needs filename= (a path or a URL)")
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"a zarr TensorDict lives on the CPU, not {device}")
    storage_options = kwargs.pop("storage_options", None)
    out = StoredTensorDict(ZarrDialect(filename, "w", storage_options=storage_options, array_options=kwargs))
    size = torch.Size(() if batch_size is None else batch_size)
    out.batch_size = size
    for key, (shape, dtype) in schema.items():
        path = (key,) if isinstance(key, str) else tuple(key)
        node = out
        for part in path[:-1]:
            if part not in node.keys():
                node._set_str(part, out._dense_cls({}, batch_size=size), inplace=False, validated=True)
            node = node._get_str(part)
        node._alloc_leaf(path[-1], (*size, *shape), dtype)
    return out


register_storage("zarr", to=to_zarr, opener=_open, schema=from_schema)
