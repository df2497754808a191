"""PersistentTensorDict: TensorDicts stored in HDF5 files (h5py, the ``h5`` extra), read lazily.

Public path ``tensorbatch.persistent``; ``PersistentTensorDict`` and ``from_h5`` are exported by
``tensorbatch`` too. This module imports h5py only when a file is used: its body attaches
``TensorDictBase.to_h5`` and ``TensorDictBase.from_h5`` (``base.py`` imports no feature).

File layout (plain HDF5, as tensordict 0.15.3 writes it, readable by any HDF5 tool): a group per nested
TensorDict, a dataset per leaf; see ``_format.py`` for strings, non-tensor values and the attributes kept
for what tensordict drops (batch sizes, dim names, bfloat16/float8 dtypes).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..base import TensorDictBase

if TYPE_CHECKING:
    from ._file import ReadOnlyError
    from ._node import PersistentTensorDict


def from_h5(
    h5_file: str | os.PathLike[str],
    mode: str = "r",
    *,
    batch_size: Any = None,
    batch_dims: int | None = None,
    auto_batch_size: bool = False,
    non_tensor_as_stack: bool = False,
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
    from ._node import from_h5 as build

    return build(
        h5_file,
        mode,
        batch_size=batch_size,
        batch_dims=batch_dims,
        auto_batch_size=auto_batch_size,
        non_tensor_as_stack=non_tensor_as_stack,
        **kwargs,
    )


def _from_h5(
    cls: Any,
    /,
    filename: str | os.PathLike[str],
    mode: str = "r",
    *,
    batch_size: Any = None,
    batch_dims: int | None = None,
    auto_batch_size: bool = False,
    non_tensor_as_stack: bool = False,
    **kwargs: Any,
) -> PersistentTensorDict:
    """Open an HDF5 file as a :class:`PersistentTensorDict` (see :func:`tensorbatch.from_h5`)."""
    return from_h5(
        filename,
        mode,
        batch_size=batch_size,
        batch_dims=batch_dims,
        auto_batch_size=auto_batch_size,
        non_tensor_as_stack=non_tensor_as_stack,
        **kwargs,
    )


def from_dict(
    input_dict: Any, filename: str | os.PathLike[str], batch_size: Any = None, device: Any = None, **kwargs: Any
) -> PersistentTensorDict:
    """Write a dict or TensorDict to a new HDF5 file (atomically) and return it open read-write.

    See :meth:`PersistentTensorDict.from_dict`.
    """
    from ._node import from_dict as build

    return build(input_dict, filename, batch_size, device, **kwargs)


def to_h5(self: TensorDictBase, filename: str | os.PathLike[str], **kwargs: Any) -> PersistentTensorDict:
    """Write this TensorDict to a new HDF5 file and return it open as a :class:`PersistentTensorDict`.

    The file is written under a temporary name next to ``filename``, then renamed onto it: a process killed
    meanwhile leaves the previous file intact. ``kwargs``: dataset options (``compression="gzip"``,
    ``chunks=True``, ``fletcher32=True``...); ``file_options={...}`` go to ``h5py.File``.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch import TensorDict
        >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
        >>> data = TensorDict({"a": torch.arange(3)}, [3]).to_h5(path)
        >>> data["a"], data.batch_size
        (tensor([0, 1, 2]), torch.Size([3]))
        >>> data.close()
    """
    return from_dict(self, filename, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "PersistentTensorDict":
        from ._node import PersistentTensorDict

        return PersistentTensorDict
    if name == "ReadOnlyError":
        from ._file import ReadOnlyError

        return ReadOnlyError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


for _cls, _name, _value in ((TensorDictBase, "to_h5", to_h5), (TensorDictBase, "from_h5", classmethod(_from_h5))):
    setattr(_cls, _name, _value)  # attached here: base.py imports no feature
# TensorDict.from_schema is tensorbatch/_schema.py's: storage="h5" dispatches to _node.from_schema

__all__ = ["PersistentTensorDict", "ReadOnlyError", "from_dict", "from_h5"]
