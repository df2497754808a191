"""Questions about the leaves and whole-tree conversions of them (sizes, pointers, device, numpy, autograd).

Functions here are TensorDictBase methods: ``base.py`` attaches them to the class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .._keys import key_tuple
from .._ops import pointwise as _pointwise
from .._ops.traverse import flat_leaves, flat_leaves_like, is_non_tensor_type, is_td, named_leaves, plain_value_of

if TYPE_CHECKING:
    from ..base import TensorDictBase

_Tensor = torch.Tensor
_NO_DIMS = torch.Size(())


def _tensors(td: Any) -> list[tuple[tuple[str, ...], _Tensor]]:
    return [(path, leaf) for path, leaf in named_leaves(td) if isinstance(leaf, _Tensor)]


def _count(td: Any, size: Callable[[_Tensor], int], count_duplicates: bool) -> int:
    seen: set[Any] = set()
    total = 0
    for _, leaf in _tensors(td):
        if not count_duplicates:
            # the same view of the same memory counts once (a leaf stored under two keys)
            ident = (leaf.data_ptr(), leaf.dtype, tuple(leaf.shape), tuple(leaf.stride()))
            if ident in seen:
                continue
            seen.add(ident)
        total += size(leaf)
    return total


def nbytes(self: TensorDictBase, *, count_duplicates: bool = True) -> int:
    """Bytes held by the tensor leaves (elements times element size, views counted by their own size).

    Args:
        count_duplicates: count a leaf stored under several keys once per key; ``False`` counts it once.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.zeros(3, 2), b=torch.zeros(3, dtype=torch.int8), batch_size=[3]).bytes()
        27
    """
    return _count(self, lambda x: x.numel() * x.element_size(), count_duplicates)


def param_count(self: TensorDictBase, *, count_duplicates: bool = True) -> int:
    """Number of elements in the tensor leaves (see :meth:`bytes` for ``count_duplicates``)."""
    return _count(self, _Tensor.numel, count_duplicates)


def data_ptr(self: TensorDictBase, *, storage: bool = False) -> TensorDictBase:
    """A TensorDict (batch size ``[]``) of each tensor leaf's data pointer (its storage's with ``storage``).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> x = torch.zeros(3)
        >>> TensorDict(a=x, batch_size=[3]).data_ptr()["a"].item() == x.data_ptr()
        True
    """
    out = self._dense_cls(batch_size=_NO_DIMS)
    for path, leaf in _tensors(self):
        ptr = leaf.untyped_storage().data_ptr() if storage else leaf.data_ptr()
        out.set(path, torch.tensor(ptr, dtype=torch.int64))
    return out  # type: ignore[no-any-return]


def _device_is(kind: str) -> Callable[[TensorDictBase], bool]:
    def check(self: TensorDictBase) -> bool:
        device = self.device
        return device is not None and device.type == kind

    check.__doc__ = f"True when the TensorDict has a device and it is a {kind} device."
    return check


is_cpu = _device_is("cpu")
is_cuda = _device_is("cuda")
is_meta = _device_is("meta")


def is_floating_point(self: TensorDictBase) -> bool:
    """True when every tensor leaf is floating point (an empty TensorDict is)."""
    return all(leaf.is_floating_point() for _, leaf in _tensors(self))


def numpy(self: TensorDictBase) -> Any:
    """Nested dicts of numpy arrays (non-tensor leaves give their data).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a={"b": torch.ones(2)}, batch_size=[2]).numpy()
        {'a': {'b': array([1., 1.], dtype=float32)}}
    """
    out: dict[str, Any] = {}
    for path, leaf in named_leaves(self, is_leaf=is_non_tensor_type):
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = leaf.numpy(force=True) if isinstance(leaf, _Tensor) else plain_value_of(leaf)
    return out


def as_tensor(self: TensorDictBase) -> TensorDictBase:
    """Every tensor leaf as a plain ``torch.Tensor``; non-tensor leaves are dropped.

    Subclasses such as memory-mapped tensors become plain tensors over the same memory.
    """
    return self.filter_non_tensor_data()._map(_plain, "as_tensor")


def _plain(x: Any) -> Any:
    return x if type(x) is _Tensor else x.as_subclass(_Tensor)


def cast_type(self: TensorDictBase, dst_type: torch.dtype, *, cast_filter: Callable[..., bool] | None = None) -> Any:
    """Cast every tensor leaf to ``dst_type`` (``td.type(torch.float64)``); ``cast_filter(key, leaf)`` picks them."""
    return _pointwise.cast(self, dst_type, cast_filter=cast_filter)


def auto_device_(self: TensorDictBase) -> TensorDictBase:
    """Set the device to the one every leaf is on (None when they differ). Returns self."""
    devices = {leaf.device for _, leaf in _tensors(self)}
    self._adopt_device(devices.pop() if len(devices) == 1 else None)
    return self


def backward(
    self: TensorDictBase,
    gradient: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Any = None,
) -> None:
    """Backpropagate from every tensor leaf (gradients from ``gradient``, a TensorDict, matched by key).

    A batch size ``[]`` TensorDict of scalars needs no ``gradient``, as for a scalar tensor.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> x = torch.ones(2, requires_grad=True)
        >>> TensorDict(a=x * 2, b=x.sum(), batch_size=[]).sum().backward()
        >>> x.grad
        tensor([3., 3.])
    """
    leaves = [leaf for _, leaf in _tensors(self)]
    grads = None
    if gradient is not None:
        if not is_td(gradient):
            raise TypeError(f"backward: gradient must be a TensorDict, got {type(gradient).__name__}")
        grads = flat_leaves_like(gradient, self)
    if is_td(inputs):
        inputs = flat_leaves(inputs)
    torch.autograd.backward(leaves, grads, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)


def record_stream(self: TensorDictBase, stream: Any) -> TensorDictBase:
    """Mark every tensor leaf as used by ``stream`` (see :meth:`torch.Tensor.record_stream`). Returns self."""
    for _, leaf in _tensors(self):
        leaf.record_stream(stream)
    return self


def _joined(self: TensorDictBase, fn: Callable[..., _Tensor], dim: int, sorted: Any, out: Any) -> _Tensor:
    pairs = _tensors(self)
    if sorted is True:
        pairs.sort(key=lambda p: p[0])
    elif sorted:  # an explicit key order
        leaves = dict(pairs)
        paths = [key_tuple(k) for k in sorted]
        missing = [p for p in paths if p not in leaves]
        if missing:
            self._get(missing[0])  # raises the KeyError naming the key
        pairs = [(p, leaves[p]) for p in paths]
    values = [leaf for _, leaf in pairs]
    return fn(values, dim, out=out) if out is not None else fn(values, dim)


def cat_from_tensordict(self: TensorDictBase, dim: int = 0, *, sorted: Any = None, out: Any = None) -> _Tensor:
    """One tensor: the tensor leaves concatenated along ``dim`` (a tensor dim), in key order or ``sorted``.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.zeros(2, 1), b=torch.ones(2, 2), batch_size=[2]).cat_from_tensordict(-1).shape
        torch.Size([2, 3])
    """
    return _joined(self, torch.cat, dim, sorted, out)


def stack_from_tensordict(self: TensorDictBase, dim: int = 0, *, sorted: Any = None, out: Any = None) -> _Tensor:
    """One tensor: the tensor leaves stacked along a new ``dim``, in key order or ``sorted``."""
    return _joined(self, torch.stack, dim, sorted, out)


def check_layout(layout: Any) -> None:
    """Refuse a ``densify`` layout other than strided or jagged."""
    if layout is not torch.strided and layout is not torch.jagged:
        raise ValueError(f"densify: layout must be torch.strided or torch.jagged, got {layout}")


def densify(self: TensorDictBase, layout: Any = torch.strided) -> TensorDictBase:
    """This TensorDict with the lazy stacks it holds made dense (itself when it holds none).

    Examples:
        >>> from tensorbatch import TensorDict, lazy_stack
        >>> s = lazy_stack([TensorDict(a=torch.zeros(3)), TensorDict(a=torch.ones(4))])
        >>> dense = TensorDict(s=s).densify()
        >>> type(dense["s"]).__name__, dense["s", "a"].is_nested
        ('TensorDict', True)
    """
    check_layout(layout)
    changed = {}
    for key, value in self._items_str():
        if is_td(value) and not is_non_tensor_type(type(value)):
            dense = value.densify(layout=layout)
            if dense is not value:
                changed[key] = dense
    if not changed:
        return self
    out = self.empty()
    for key, value in self._items_str():
        out._set_str(key, changed.get(key, value), inplace=False, validated=True)
    return out
