"""The stored-TensorDict layer: the TensorDict API over a storage, written once over a small dialect.

:class:`StoredTensorDict` implements the primitives and storage hooks of ``tensorbatch/BACKENDS.md`` (batch
checks, names, lock, ``with``/close, pickling, row reads and writes; ``_copies.CopyOnRead``, its base, the generic
code's paths for reads that are copies) over a :class:`Dialect`, which only says how one storage keeps entries by
path. A dialect module (``tensorbatch/stored/_zarr.py``) plus one :func:`register_storage` call make a storage
known everywhere (``to_X``/``from_X``, ``from_schema(storage=)``, the TensorClass/TypedTensorDict wrappers).
"""

from ._dialect import Dialect as Dialect
from ._node import ReadOnlyStorageError as ReadOnlyStorageError
from ._node import StoredTensorDict as StoredTensorDict
from ._register import register_storage as register_storage
from ._zarr import from_zarr as from_zarr  # (light: zarr is imported when a store is opened)

__all__ = ["Dialect", "ReadOnlyStorageError", "StoredTensorDict", "from_zarr", "register_storage"]
