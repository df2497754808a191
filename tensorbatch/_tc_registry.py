"""Every TensorClass subclass defined in this process, by ``module.QualName``: a look-up, never an import.

Loaders that find a class name in their data (a memory-mapped folder's ``_type``, a Redis store's
``__tensorclass__``) look it up here instead of importing the module the data names (importing runs that
module's code). ``tensorclass.py`` fills it when a class is made; it holds the latest class of a name, weakly.
"""

from __future__ import annotations

import weakref

DEFINED: weakref.WeakValueDictionary[str, type] = weakref.WeakValueDictionary()
"""``module.QualName`` -> the TensorClass subclass of that name defined last in this process."""


def class_name(cls: type) -> str:
    """``module.QualName`` of ``cls``: the key of :data:`DEFINED`, and what tensordict writes inside ``_type``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def lookup(name: str) -> type | None:
    """The TensorClass subclass defined in this process as ``name`` (``module.QualName``), or None."""
    return DEFINED.get(name)
