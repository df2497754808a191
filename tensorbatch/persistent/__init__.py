"""PersistentTensorDict: TensorDicts stored in HDF5 files (h5py), read lazily.

Public path ``tensorbatch.persistent``; ``PersistentTensorDict`` and ``from_h5`` are also exported by
``tensorbatch``. Importing this module attaches ``TensorDictBase.to_h5`` and ``TensorDict.from_h5``.
"""

from __future__ import annotations

from .._td import TensorDict
from ..base import TensorDictBase
from ._build import clone as _clone
from ._build import from_dict as _from_dict
from ._build import from_h5
from ._build import to_h5 as _to_h5
from ._file import ReadOnlyError
from ._node import PersistentTensorDict

PersistentTensorDict.from_dict = staticmethod(_from_dict)  # type: ignore[assignment]
PersistentTensorDict.from_h5 = staticmethod(from_h5)  # type: ignore[attr-defined]
PersistentTensorDict.clone = _clone  # type: ignore[method-assign]
TensorDictBase.to_h5 = _to_h5  # type: ignore[attr-defined]
TensorDict.from_h5 = staticmethod(from_h5)  # type: ignore[attr-defined]

__all__ = ["PersistentTensorDict", "ReadOnlyError", "from_h5"]
