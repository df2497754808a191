"""The value a TensorClass stores for a field: casts, numbers, lists and Python values (``prepare``).

Split from ``tensorclass.py`` (its size budget); ``spec`` is a field's ``_Spec`` (``_tc_build.py``: its name and
annotation facts).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from . import _delegation
from ._list_leaf import read_list
from ._nontensor import NonTensorStack
from ._ops.traverse import is_td

_Tensor = torch.Tensor
_EMPTY = torch.Size([])
_TENSOR_LIKE = (int, float, bool, complex, list, tuple, np.ndarray, np.generic, Mapping)


def _cast(cls: Any, spec: Any, value: Any) -> Any:
    """``value`` converted to the field's annotated class (autocast); TypeError naming the field when it cannot be."""
    target = spec.cast
    if target is None or value is None or isinstance(value, target) or is_td(value):
        return value
    try:
        if target is _Tensor:
            return torch.as_tensor(value)
        if isinstance(value, _Tensor):
            value = value.item()
        return target(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(
            f"field {spec.name!r} of {cls.__name__} is annotated {target.__name__} and the class casts its "
            f"fields (autocast), but the value {value!r:.60} ({type(value).__name__}) cannot be cast: {err}"
        ) from None


def _number_field(cls: Any, spec: Any, value: Any, unbatched: bool) -> tuple[Any, bool]:
    """A value given to a field annotated ``int``/``float``/``bool``, as tensordict 0.15.3 stores it.

    Lists and arrays become tensors as for a tensor field; a Python number becomes a 0-d tensor when the
    batch size is empty (it fits no other), with the ``FutureWarning`` tensordict 0.15 gives when the number
    is of the annotated kind, and stays a Python value otherwise. The ``nocast`` option keeps every number.
    """
    if type(value) not in (int, float, bool):
        return value, not isinstance(value, (list, tuple, np.ndarray))
    if not unbatched:
        return value, True
    number: Any = spec.number
    if isinstance(value, number) or (number is float and isinstance(value, int)):
        warnings.warn(
            f"field {spec.name!r} of {cls.__name__} is annotated {number.__name__} and its "
            f"{type(value).__name__} value is stored as a 0-d tensor, as in tensordict 0.15 (whose 0.17 will keep "
            f"the Python value); annotate the field torch.Tensor to keep tensors, or give the class the nocast "
            f"option to keep Python values",
            FutureWarning,
            stacklevel=5,
        )
    return value, False  # the TensorDict turns it into a tensor


def _size(batch: Any) -> torch.Size:
    """``batch``: a batch size, or the TensorDict whose batch size it is (read only when needed)."""
    return batch if type(batch) is torch.Size else batch.batch_size


def _list_fits(value: list[Any], batch_size: torch.Size) -> bool:
    """True when the TensorDict reads the list ``value`` as a leaf of ``batch_size`` (a tensor or a stack)."""
    leaf = read_list(value, NonTensorStack)
    if leaf is None:
        return bool(batch_size) and len(value) == batch_size[0]
    shape = leaf.shape if isinstance(leaf, _Tensor) else leaf.batch_size
    return shape[: len(batch_size)] == batch_size


def prepare(cls: Any, spec: Any, value: Any, unbatched: bool = False, batch: Any = None) -> tuple[Any, bool]:
    """The value to store for ``spec`` and whether it must be kept as a Python value (a non-tensor leaf).

    ``unbatched``: the TensorDict's batch size is empty (a number given to an ``int``/``float``/``bool``
    field becomes a 0-d tensor then, see :func:`_number_field`). ``batch``: the TensorDict's batch size, or the
    TensorDict (read only for a list or a number). A list is read as the TensorDict reads it (a tensor or a
    stack of its items, as tensordict) when it fits the batch size, and kept as one Python value when it does
    not (tensordict raises: a ``default_factory=list`` field then fails for any batch size but ``[0]`` and
    ``[]``); autocast classes keep lists, as tensordict's. Fields annotated as tensors or numbers take lists as
    tensors (a misfit raises, as there).
    """
    if value is None:
        return None, False
    if type(value) in _delegation.WRAPPER_TYPES:
        if spec.forward is not None:
            spec.learn(type(value))
        if spec.nested is None:  # no class to read it back as (``Any``...): stored as it is, as tensordict
            return value, False
        return _delegation.unwrap(value), False
    if cls._autocast:
        value = _cast(cls, spec, value)
    if isinstance(value, _Tensor) or is_td(value):
        return value, False
    if type(value) is list and batch is not None and not (cls._autocast or spec.tensor or spec.number):
        return value, not _list_fits(value, _size(batch))
    if spec.tensor:
        if cls._nocast:
            return value, True
        if not isinstance(value, _TENSOR_LIKE):
            raise TypeError(
                f"field {spec.name!r} of {cls.__name__} is annotated Tensor but got a {type(value).__name__} "
                f"({value!r:.60}); pass a tensor (or a number, list or array), or annotate the field with the "
                f"type it holds, or use the nocast option to keep Python values"
            )
        return value, False  # the TensorDict turns numbers, lists and arrays into tensors
    if spec.nested is not None and isinstance(value, Mapping):
        return value, False
    if spec.number is not None and not (cls._nocast or cls._autocast):
        return _number_field(cls, spec, value, unbatched)
    if type(value) in (int, float, bool) and spec.number is None and not cls._nocast and batch is not None:
        return value, _size(batch) != _EMPTY  # a 0-d tensor in an empty batch, as tensordict (else it raises)
    return value, True
