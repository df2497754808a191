"""Stacking constructors as methods: ``lazy_stack``, ``maybe_dense_stack``, ``from_list`` and ``to_lazystack``.

tensordict offers them as classmethods of every TensorDict class (``LazyStackedTensorDict.lazy_stack``
is the common spelling); they live here, over :mod:`._lazy`'s functions, and :func:`install` puts
them on TensorDictBase (base.py imports no backend).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ._lazy import LazyStackedTensorDict, _pad_stack, lazy_stack, maybe_dense_stack
from ._ops.torch_function import stack
from ._ops.traverse import is_td
from .base import TensorDictBase

_Tensor = torch.Tensor


def _lazy_stack(
    cls: type,
    input: Sequence[Any],
    dim: int = 0,
    *,
    device: Any = None,
    out: Any = None,
    stack_dim_name: str | None = None,
    strict_shape: bool = False,
    as_list: bool = False,
    as_padded_tensor: bool = False,
    as_nested_tensor: bool = False,
    padding_side: str = "right",
    layout: Any = None,
    padding_value: float = 0.0,
) -> Any:
    """Stack TensorDicts lazily along ``dim`` (members kept apart); tensors are stacked as tensors.

    Args:
        cls: the class it is called on.
        input: TensorDicts (or tensors); ``items`` in ``LazyStackedTensorDict.lazy_stack``.
        dim: the new stack dim.
        device: move each member there first.
        out: a TensorDict to write the result into.
        stack_dim_name: the name of the stack dim.
        strict_shape: refuse members whose batch sizes differ.
        as_list: for tensor items: the list itself instead of a dense stack.
        as_padded_tensor: for tensor items: a stack padded to the largest shape (``padding_value``,
            on ``padding_side``).
        as_nested_tensor: for tensor items: a nested tensor (of ``layout``).
        padding_side: ``"right"`` or ``"left"``.
        layout: the nested tensor's layout (default ``torch.strided``).
        padding_value: the fill value of the padded stack.

    Examples:
        >>> from tensorbatch import LazyStackedTensorDict, TensorDict
        >>> s = LazyStackedTensorDict.lazy_stack([TensorDict(a=torch.zeros(2), batch_size=[2])] * 3, 1)
        >>> type(s).__name__, s.batch_size, s.stack_dim
        ('LazyStackedTensorDict', torch.Size([2, 3]), 1)
    """
    items = list(input)
    if items and all(isinstance(x, _Tensor) for x in items):
        if as_list:
            return items
        if as_nested_tensor:
            return torch.nested.nested_tensor(items, layout=layout or torch.strided)
        if as_padded_tensor:
            return _pad_stack(items, dim, padding_value, padding_side)
        return torch.stack(items, dim)
    if not all(is_td(x) for x in items):
        raise TypeError("lazy_stack expects a sequence of TensorDicts (or of tensors)")
    if strict_shape and len({td.batch_size for td in items}) > 1:
        sizes = [list(td.batch_size) for td in items]
        raise RuntimeError(
            f"lazy_stack(strict_shape=True): the batch sizes differ: {sizes}; stacking "
            "tensordicts requires them to have congruent batch sizes"
        )
    if device is not None:
        items = [td.to(device) for td in items]
    if stack_dim_name is not None:
        if not items:
            raise RuntimeError("lazy_stack expects a non-empty sequence of TensorDicts")
        result = LazyStackedTensorDict(*items, stack_dim=dim, stack_dim_name=stack_dim_name)
        return result if out is None else out.update_(result)
    return lazy_stack(items, dim, out=out)


def _maybe_dense_stack(cls: type, input: Sequence[Any], dim: int = 0, out: Any = None, strict: bool = False) -> Any:
    """A dense stack when the TensorDicts agree on keys and leaf shapes, else a lazy one.

    ``strict`` is accepted for compatibility: keys that differ always give a lazy stack.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> a, b = TensorDict(x=torch.zeros(2), batch_size=[2]), TensorDict(y=torch.zeros(2), batch_size=[2])
        >>> type(TensorDict.maybe_dense_stack([a, b])).__name__
        'LazyStackedTensorDict'
    """
    return maybe_dense_stack(input, dim, out=out)


def _from_list(
    cls: type,
    input: list[Any],
    *,
    auto_batch_size: bool | None = None,
    batch_size: Any = None,
    device: Any = None,
    batch_dims: int | None = None,
    names: list[str] | None = None,
    lazy: bool | None = None,
) -> Any:
    """A TensorDict from a list of mappings (one per element of the first batch dim), stacked.

    Args:
        cls: the class it is called on (``LazyStackedTensorDict`` stacks lazily by default).
        input: mappings (or TensorDicts) of the same keys.
        auto_batch_size: find the batch size from the leaves (up to ``batch_dims`` dims).
        batch_size: the batch size of the result (its first dim is the list's length).
        device: where the leaves go.
        batch_dims: the number of batch dims for ``auto_batch_size``.
        names: the names of the batch dims.
        lazy: a lazy stack of the elements (the default for ``LazyStackedTensorDict.from_list``).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict.from_list([{"a": torch.zeros(3)}, {"a": torch.ones(3)}])
        >>> td.batch_size, td["a"].shape
        (torch.Size([2]), torch.Size([2, 3]))
    """
    if not isinstance(input, (list, tuple)) or not input:
        raise TypeError("from_list expects a non-empty list of mappings")
    dense = TensorDictBase._dense_cls
    members = []
    for i, item in enumerate(input):
        if is_td(item):
            members.append(item)
        elif isinstance(item, Mapping):
            members.append(dense.from_dict(item, batch_size=[], device=device))
        else:
            raise TypeError(f"from_list: element {i} is a {type(item).__name__}, not a mapping")
    if lazy is None:
        lazy = issubclass(cls, LazyStackedTensorDict)
    if lazy and batch_size is None and (auto_batch_size or batch_dims is not None):
        # each member finds its own batch size (members may differ: the stack reads -1 there, as tensordict)
        members = [m.auto_batch_size_(batch_dims) for m in members]
        auto_batch_size, batch_dims = False, None
    out = lazy_stack(members, 0) if lazy else stack(members, 0)
    if device is not None:
        out = out.to(device)
    if batch_size is not None:
        out.batch_size = batch_size
    elif auto_batch_size or batch_dims is not None:
        out.auto_batch_size_(batch_dims)
    if names is not None:
        out.names = names
    return out


def _lazy_stack_items(cls: type, items: Sequence[Any], dim: int = 0, **kwargs: Any) -> Any:
    """``LazyStackedTensorDict.lazy_stack(items, dim, ...)``: see :meth:`TensorDictBase.lazy_stack`."""
    return _lazy_stack(cls, items, dim, **kwargs)


def _maybe_dense_stack_items(
    cls: type, items: Sequence[Any], dim: int = 0, out: Any = None, strict: bool = False
) -> Any:
    """``LazyStackedTensorDict.maybe_dense_stack(items, dim, ...)``: see :meth:`TensorDictBase.maybe_dense_stack`."""
    return maybe_dense_stack(items, dim, out=out)


def to_lazystack(self: Any, dim: int = 0) -> Any:
    """A lazy stack of this TensorDict's slices along batch dim ``dim`` (a lazy stack along ``dim`` is itself).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> s = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3]).to_lazystack(1)
        >>> type(s).__name__, len(s.tensordicts)
        ('LazyStackedTensorDict', 3)
    """
    nd = self.batch_dims
    if not -nd <= dim < nd:  # "Incompatible dim": tensordict's phrase
        raise IndexError(
            f"to_lazystack: dim {dim} is out of range for batch_size {list(self.batch_size)}: "
            f"Incompatible dim {dim} for tensordict with batch dims {nd}"
        )
    d = dim % nd
    members = self._stacked_members()
    if members is not None and members[0] == d:
        return self
    return LazyStackedTensorDict(*self.unbind(d), stack_dim=d)


def install(cls: type) -> None:
    """Attach the stacking constructors and ``to_lazystack`` to ``cls``."""
    for name, fn in (("lazy_stack", _lazy_stack), ("maybe_dense_stack", _maybe_dense_stack), ("from_list", _from_list)):
        fn.__name__ = fn.__qualname__ = name
        setattr(cls, name, classmethod(fn))
    cls.to_lazystack = to_lazystack  # type: ignore[attr-defined]


install(TensorDictBase)
# tensordict names the first argument ``items`` on the lazy stack class, ``input`` elsewhere
for _name, _fn in (("lazy_stack", _lazy_stack_items), ("maybe_dense_stack", _maybe_dense_stack_items)):
    _fn.__name__ = _fn.__qualname__ = _name
    setattr(LazyStackedTensorDict, _name, classmethod(_fn))
