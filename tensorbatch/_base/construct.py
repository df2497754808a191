"""Constructors on every TensorDict type (``fromkeys``, ``from_dict_instance``) and ``clear_device_``.

They build in-memory TensorDicts (``TensorDictBase._dense_cls``) whatever the class they are called on;
the typed wrappers forward them (``_delegation.py``), which gives their own class back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._keys import NestedKey
from .._ops.traverse import is_node, named_nodes

if TYPE_CHECKING:
    from ..base import TensorDictBase


def fromkeys(cls: type, keys: Sequence[NestedKey], value: Any = 0) -> Any:
    """A TensorDict (batch size ``[]``) with every key set to ``value``, like :meth:`dict.fromkeys`.

    A nested key creates the nested TensorDicts; a number becomes a tensor per key, a tensor is stored as
    it is (every key then holds the same tensor).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict.fromkeys(["a", ("b", "c")], torch.zeros(3))
        >>> td["b", "c"].tolist(), td["a"] is td["b", "c"]
        ([0.0, 0.0, 0.0], True)
    """
    out = cls._dense_cls()  # type: ignore[attr-defined]
    for key in keys:
        out.set(key, value)
    return out


def from_dict_instance(
    self: TensorDictBase,
    input_dict: Any,
    *,
    auto_batch_size: bool | None = None,
    batch_size: Any = None,
    device: Any = None,
    batch_dims: int | None = None,
    names: Any = None,
) -> Any:
    """:meth:`from_dict`, where a nested dict under a key holding a TensorClass here becomes that class.

    Use it to turn the output of :meth:`to_dict` back into the classes of this TensorDict; the values of
    this TensorDict are not used. Other nested dicts become TensorDicts.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorClass, TensorDict
        >>> class Point(TensorClass):
        ...     x: torch.Tensor
        >>> td = TensorDict(a=torch.zeros(()), p=Point(x=torch.zeros(())))
        >>> type(td.from_dict_instance({"a": torch.ones(()), "p": {"x": torch.ones(())}})["p"]).__name__
        'Point'
    """
    out = self._dense_cls.from_dict(
        input_dict,
        auto_batch_size=auto_batch_size,
        batch_size=batch_size,
        device=device,
        batch_dims=batch_dims,
        names=names,
    )
    _retype(self, out)
    return out


def _retype(like: Any, out: Any) -> None:
    """Give the nested TensorDicts of ``out`` the TensorClass of the entry under the same key in ``like``."""
    for key in list(out.keys()):
        value, mine = out._get_str(key), like._get_str(key, None)
        if not is_node(value) or not is_node(mine):
            continue
        _retype(mine, value)
        if getattr(type(mine), "_tb_tensorclass", False):
            out._set_str(key, type(mine).from_tensordict(value), inplace=False, validated=True)


def clear_device_(self: TensorDictBase) -> TensorDictBase:
    """Forget the device of this TensorDict and of every one nested in it (the leaves stay where they are).

    Leaves on any device can then be set. Returns self.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), n={"b": torch.zeros(3)}, batch_size=[3], device="cpu")
        >>> td.clear_device_().device, td["n"].device, td["a"].device
        (None, None, device(type='cpu'))
    """
    for _, node in named_nodes(self, members=True):
        if node is not self and getattr(type(node), "clear_device_", None) is not clear_device_:
            node.clear_device_()  # a wrapper or a backend keeping its device its own way
        else:
            node._adopt_device(None)  # (a lazy stack's device is its members': they are walked too)
    return self
