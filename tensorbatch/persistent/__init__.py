"""PersistentTensorDict: TensorDicts stored in HDF5 files (h5py, the ``h5`` extra), read lazily.

Public path ``tensorbatch.persistent``; ``PersistentTensorDict`` and ``from_h5`` are exported by
``tensorbatch`` too. HDF5 is a dialect of the stored layer (``tensorbatch/stored``): ``_dialect.py`` speaks
h5py, ``_node.py`` is the class and its constructors; h5py is imported only when a file is used. The
``register_storage`` call below attaches ``TensorDictBase.to_h5``/``from_h5`` and ``from_schema(storage="h5")``.

File layout (plain HDF5, as tensordict 0.15.3 writes it, readable by any HDF5 tool): a group per nested
TensorDict, a dataset per leaf; see ``_format.py`` for strings, non-tensor values and the attributes kept
for what tensordict drops (batch sizes, dim names, bfloat16/float8 dtypes).
"""

from __future__ import annotations

import os
from typing import Any

from ..base import TensorDictBase
from ..stored._register import register_storage
from ._file import ReadOnlyError as ReadOnlyError
from ._node import PersistentTensorDict as PersistentTensorDict
from ._node import from_dict as from_dict
from ._node import from_h5 as from_h5


def to_h5(self: TensorDictBase, filename: str | os.PathLike[str], **kwargs: Any) -> PersistentTensorDict:
    """Write this TensorDict to a new HDF5 file and return it open as a :class:`PersistentTensorDict`.

    As tensordict, an existing file is truncated and written in place (every entry checked first: a value HDF5
    cannot hold leaves it untouched); ``atomic=True`` writes aside and renames, so that a process killed
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


register_storage("h5", to=to_h5, opener=from_h5, schema="tensorbatch.persistent._node:from_schema", where="filename")

__all__ = ["PersistentTensorDict", "ReadOnlyError", "from_dict", "from_h5"]
