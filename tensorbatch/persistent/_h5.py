"""h5py, imported on first use, so that ``from tensorbatch import PersistentTensorDict`` works without it.

The modules of this package take ``h5py`` from here (type checkers see the real module). The first
attribute read imports h5py and copies its namespace in: later reads are plain attribute reads.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _LazyModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        try:
            module = importlib.import_module(self.__name__)
        except ImportError as err:
            raise ModuleNotFoundError(
                f"PersistentTensorDict needs {self.__name__}, which is not installed "
                f"(pip install {self.__name__}, or the 'h5' extra)",
                name=self.__name__,
            ) from err
        self.__dict__.update(module.__dict__)
        return getattr(module, name)


h5py = _LazyModule("h5py")
