"""Value operations over every leaf: apply, device and dtype moves, copies, grads, locks, checks.

Functions here are TensorDictBase methods: ``base.py`` attaches them to the class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from .._compat import dynamo_compiling, transforms_active
from .._keys import NestedKey, key_of
from .._ops import pointwise as _pointwise
from .._ops import reduce as _reduce
from .._ops.meta import common_batch
from .._ops.traced import lean_map
from .._ops.traverse import (
    NO_DEFAULT,
    apply_leaves,
    flat_leaves,
    is_non_tensor,
    is_non_tensor_type,
    is_td,
    leaf_shape,
    map_leaves,
    named_leaves,
    named_nodes,
)
from .._unbatched import is_unbatched
from .coerce import as_device as _as_device

if TYPE_CHECKING:
    from ..base import TensorDictBase

_Tensor = torch.Tensor
_Size = torch.Size

_FOREACH_CLONE = getattr(torch, "_foreach_clone", None)


def fill_(self: TensorDictBase, key: NestedKey, value: float | bool) -> TensorDictBase:
    """Fill the leaf (or every leaf of the nested TensorDict) at ``key`` with ``value``."""
    target = self._get(key)
    if is_td(target):
        target.apply_(lambda x: x.fill_(value))
    else:
        target.fill_(value)
        self._write_back_leaf(key, target)  # (a storage hook: the leaf may be a copy read from storage)
    return self


def auto_batch_size_(self: TensorDictBase, batch_dims: int | None = None) -> TensorDictBase:
    """Set the batch size to the longest leading shape shared by every leaf (nested ones first).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict({"a": torch.zeros(3, 4), "b": torch.zeros(3, 4, 5)}).auto_batch_size_().batch_size
        torch.Size([3, 4])
    """
    for _, node in named_nodes(self, post_order=True):  # the nested nodes first: their sizes count
        _fit_batch_size(node, batch_dims)
    return self


def _fit_batch_size(node: Any, batch_dims: int | None) -> None:
    """Set one node's batch size to the longest leading shape its entries share."""
    # non-tensor leaves and unbatched tensors follow the batch size; they do not decide it (as in tensordict)
    shapes = [
        v.batch_size if is_td(v) else leaf_shape(v)
        for v in node._values_str()
        if not is_non_tensor(v) and not is_unbatched(v)
    ]
    size = common_batch(shapes, batch_dims)
    for key, value in list(node._items_str()):
        if is_non_tensor(value) and value.batch_size[: len(size)] != size:
            node._set_str(key, value._follow(size), inplace=False, validated=True)
    node.batch_size = size


def apply(
    self: TensorDictBase,
    fn: Callable[..., Any],
    *others: Any,
    batch_size: Sequence[int] | None = None,
    device: Any = NO_DEFAULT,
    names: Any = NO_DEFAULT,
    inplace: bool = False,
    default: Any = NO_DEFAULT,
    filter_empty: bool | None = None,
    propagate_lock: bool = False,
    call_on_nested: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    out: TensorDictBase | None = None,
    named: bool = False,
    nested_keys: bool = False,
    prefix: tuple[str, ...] = (),
    call_on_unbatched: bool = False,
) -> TensorDictBase | None:
    """Apply ``fn`` to every leaf (with the matching leaves of ``others``) into a new TensorDict.

    A leaf for which ``fn`` returns None is dropped; if every leaf is dropped, None is returned.
    With ``named=True``, ``fn`` gets the key first: the leaf's own name, or with ``nested_keys=True``
    its path (a string at the first level, else a tuple, ``prefix`` in front). ``is_leaf`` (on a
    value's type) makes a nested TensorDict or a non-tensor value a leaf that ``fn`` is called on.
    An unknown keyword raises ``TypeError``.

    Note:
        Differs from tensordict 0.15: an unknown keyword raises ``TypeError`` (tensordict warns and ignores it).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.ones(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> td.apply(lambda x, y: x + y, td)["a"]
        tensor([2., 2.])
        >>> seen = []
        >>> _ = td.apply(lambda key, x: seen.append(key), named=True, nested_keys=True)
        >>> seen
        ['a', ('n', 'b')]
    """
    if (
        dynamo_compiling()
        and len(others) < 2
        and batch_size is None
        and device is NO_DEFAULT
        and (
            names is NO_DEFAULT
            and not inplace
            and out is None
            and not call_on_nested
            and not propagate_lock
            and not named
            and is_leaf is None
        )
    ):
        lean, fn = lean_map(self, fn, others[0] if others else None)  # traced.py: lean under dynamo
        if lean is not None:
            return lean  # type: ignore[no-any-return]  # an in-memory TensorDict
    if call_on_nested:

        def is_leaf(cls: type) -> bool:
            return True

    dev = _as_device(device) if device is not NO_DEFAULT else NO_DEFAULT
    result = apply_leaves(  # in place too: all results first, then the writes (no half-applied state)
        self,
        fn,
        *others,
        batch_size=batch_size,
        names=names,
        device=dev,
        inplace=False,
        is_leaf=is_leaf,
        filter_empty=True if filter_empty is None else filter_empty,
        default=default,
        what="applying fn",
        check=True,  # a user function may change leading dims: refuse that
        named=_key_maker(nested_keys, prefix) if named else None,
        call_on_unbatched=call_on_unbatched,
    )
    if not len(result._keys_str()) and filter_empty is not False and not self.is_empty():
        return None
    if inplace:
        return self.update_(result)
    if out is not None:
        out.update(result, inplace=True)
        return out
    if propagate_lock and self.is_locked:
        result.lock_()
    return result


def _key_maker(nested_keys: bool, prefix: tuple[str, ...]) -> Callable[[tuple[str, ...]], Any]:
    """The key ``apply(named=True)`` passes: the last name, or the path (``prefix`` first; a str at the top)."""
    if not nested_keys:
        return _last
    if prefix == ():
        return _path_or_name

    def prefixed(path: tuple[str, ...]) -> Any:
        return prefix + path  # (a str prefix raises TypeError, as in tensordict)

    return prefixed


def _last(path: tuple[str, ...]) -> str:
    return path[-1]


def _path_or_name(path: tuple[str, ...]) -> Any:
    return path if len(path) > 1 else path[0]


def apply_(self: TensorDictBase, fn: Callable[..., Any], *others: Any, **kwargs: Any) -> TensorDictBase:
    """Apply ``fn`` to every leaf and write the results into the existing leaves."""
    return self.apply(fn, *others, inplace=True, **kwargs)  # type: ignore[return-value]


def named_apply(
    self: TensorDictBase,
    fn: Callable[..., Any],
    *others: Any,
    nested_keys: bool = False,
    batch_size: Sequence[int] | None = None,
    device: Any = NO_DEFAULT,
    names: Any = NO_DEFAULT,
    inplace: bool = False,
    default: Any = NO_DEFAULT,
    filter_empty: bool | None = None,
    propagate_lock: bool = False,
    call_on_nested: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    out: TensorDictBase | None = None,
    prefix: tuple[str, ...] = (),
    call_on_unbatched: bool = False,
) -> TensorDictBase | None:
    """Like :meth:`apply`, with the key as first argument of ``fn``.

    The key is the leaf's own name, or its full path when ``nested_keys`` is True.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.ones(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> td.named_apply(lambda key, x: x + 1 if key == "a" else x)["a"]
        tensor([2., 2.])
    """
    return self.apply(
        fn,
        *others,
        batch_size=batch_size,
        device=device,
        names=names,
        inplace=inplace,
        default=default,
        filter_empty=filter_empty,
        propagate_lock=propagate_lock,
        call_on_nested=call_on_nested,
        is_leaf=is_leaf,
        out=out,
        named=True,
        nested_keys=nested_keys,
        prefix=prefix,
        call_on_unbatched=call_on_unbatched,
    )


def _map(
    self: TensorDictBase,
    fn: Callable[[Any], Any],
    what: str,
    batch_size: Any = None,
    names: Any = NO_DEFAULT,
    device: Any = NO_DEFAULT,
    follow: bool = False,
) -> TensorDictBase:
    """Internal leaf map without user-facing options (``follow``: a batch op, see traverse)."""
    if batch_size is not None and type(batch_size) is not _Size:
        batch_size = _Size(batch_size)
    return map_leaves(self, fn, what=what, batch_size=batch_size, names=names, device=device, follow=follow)


_ATTR_FIELDS = ("device", "dtype", "shape")
TENSOR_ATTRS: Any = None  # the TensorAttrs class: tensorclass.py (a layer above this one) sets it on import


def _is_leaf_or_non_tensor(cls: type) -> bool:
    """Tensors and non-tensor data are leaves (utils.is_leaf_nontensor, which imports from above this layer)."""
    return issubclass(cls, _Tensor) or is_non_tensor_type(cls) or bool(getattr(cls, "_pass_through", False))


def attrs(
    self: TensorDictBase, *, fields: Sequence[str] = _ATTR_FIELDS, num_threads: int | None = None
) -> TensorDictBase:
    """A TensorDict describing each tensor leaf by a :class:`~tensorbatch.TensorAttrs` (device, dtype, shape).

    The result has an empty batch size and no device; non-tensor leaves are kept as they are. Give it to
    :meth:`to` to cast another TensorDict leaf by leaf to the matching leaves' devices and dtypes (keys
    it lacks are left alone; shapes are not changed).

    Args:
        fields: the attributes to record, any of ``"device"``, ``"dtype"``, ``"shape"``; the others are None.
        num_threads: accepted for compatibility (the description reads no data: one thread).

    Raises:
        ValueError: a field not among ``("device", "dtype", "shape")`` (tensordict ignores it).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), b=torch.zeros(3, dtype=torch.int32), batch_size=[3])
        >>> target = TensorDict(a=torch.ones(3), b=torch.ones(3), batch_size=[3])
        >>> target.to(td.attrs(fields=("dtype",)))["b"].dtype
        torch.int32
    """
    fields = tuple(fields)
    bad = [f for f in fields if f not in _ATTR_FIELDS]
    if bad:
        raise ValueError(f"attrs(): unknown fields {bad}; fields are any of {list(_ATTR_FIELDS)}")
    if num_threads is not None and (type(num_threads) is not int or num_threads < 0):
        raise ValueError(f"attrs(): num_threads must be a non-negative int, got {num_threads!r}")
    out = self._dense_cls({}, batch_size=())
    for path, value in named_leaves(self, is_leaf=_is_leaf_or_non_tensor):
        # an UnbatchedTensor is kept as it is (as tensordict): ``to`` leaves the matching leaf alone
        described = isinstance(value, _Tensor) and not is_unbatched(value)
        out.set(path, TENSOR_ATTRS.from_tensor(value, fields=fields) if described else value)
    return out  # type: ignore[no-any-return]  # _dense_cls is the TensorDict class


def _attrs_targets(td: TensorDictBase) -> dict[Any, Any]:
    """The ``TensorAttrs`` leaves of ``td`` by key path (none: ``to(td)`` takes ``td``'s device)."""

    def is_leaf(cls: type) -> bool:
        return cls is TENSOR_ATTRS or _is_leaf_or_non_tensor(cls)

    return {key_of(path): v for path, v in named_leaves(td, is_leaf=is_leaf) if type(v) is TENSOR_ATTRS}


def _to_attrs(td: TensorDictBase, targets: dict[Any, Any]) -> TensorDictBase:
    """``td`` with each leaf that ``targets`` names cast to its device and dtype (the others unchanged)."""

    def cast(key: Any, value: _Tensor) -> _Tensor:
        target = targets.get(key)
        return value if target is None else value.to(device=target.tgt_device, dtype=target.tgt_dtype)

    if any(t.tgt_device not in (None, td.device) for t in targets.values()):  # leaves may end on several devices
        return td.named_apply(cast, nested_keys=True, device=None)  # type: ignore[return-value]
    return td.named_apply(cast, nested_keys=True)  # type: ignore[return-value]


def clone(self: TensorDictBase, recurse: bool = True, **kwargs: Any) -> TensorDictBase:
    """A copy; ``recurse=False`` copies the structure only and shares the leaves.

    Non-tensor values are copied as tensordict copies them: ``copy.deepcopy`` of each value (a value
    that cannot be deep-copied raises ``deepcopy``'s error); with ``recurse=False``, new
    ``dict``/``list``/``tuple`` containers over the same items.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.ones(2)}, batch_size=[2])
        >>> td.clone(False)["a"] is td["a"], td.clone()["a"] is td["a"]
        (True, False)
    """
    if recurse:
        cloned: TensorDictBase = _pointwise.map_dense(
            self, _FOREACH_CLONE, torch.clone, "cloning", cpu=True, copy_values=True
        )
        return cloned
    return self._copy_tree(True)


def clone_tensors(td: TensorDictBase) -> TensorDictBase:
    """A copy with cloned tensor leaves (``to_tensordict``).

    As tensordict's, the non-tensor leaves of in-memory nodes are the same leaf objects (a lazy stack's
    are new leaves over the same values).
    """
    cloned: TensorDictBase = _pointwise.map_dense(
        td, _FOREACH_CLONE, torch.clone, "cloning", cpu=True, keep_non_tensor=True
    )
    return cloned


def copy(self: TensorDictBase) -> TensorDictBase:
    """Shallow copy (``clone(recurse=False)``)."""
    return self.clone(False)


def __copy__(self: TensorDictBase) -> TensorDictBase:
    return self.clone(False)


def __deepcopy__(self: TensorDictBase, memo: Any) -> TensorDictBase:
    return self.clone()


def replace(self: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
    """A shallow copy with some entries replaced: ``self.copy().update(...)``; ``self`` if none are given.

    Nested TensorDicts are merged (as ``update`` does); this TensorDict does not change.

    Args:
        *args: at most one dict or TensorDict of entries to write.
        **kwargs: top-level entries, by key (merged into a copy of the positional argument).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> out = td.replace({"n": {"c": torch.ones(2)}}, a=torch.ones(2))
        >>> list(out.keys(True, True)), td["a"].sum().item()
        (['a', ('n', 'b'), ('n', 'c')], 0.0)
    """
    if len(args) > 1:
        raise TypeError(f"replace() takes at most one positional argument (a dict or TensorDict), got {len(args)}")
    entries: Any = args[0] if args else {}
    if not is_td(entries) and not isinstance(entries, Mapping):
        raise TypeError(f"replace() expects a dict or a TensorDict, got {type(entries).__name__}")
    if kwargs:
        entries = entries.copy().update(kwargs) if is_td(entries) else {**entries, **kwargs}
    if not len(entries):
        return self
    return self.copy().update(entries)


def copy_at_(
    self: TensorDictBase, tensordict: Any, idx: Any, non_blocking: bool = False, *, fast: bool = True
) -> TensorDictBase:
    """Copy ``tensordict``'s values into this one's leaves at ``idx`` (see :meth:`update_at_`).

    ``fast`` is accepted for compatibility: every write here checks all leaves first, then writes.
    """
    out: TensorDictBase = self.update_at_(tensordict, idx, non_blocking=non_blocking)
    return out


def copy_(self: TensorDictBase, tensordict: Any, non_blocking: bool = False) -> TensorDictBase:
    """Copy the values of ``tensordict`` into this one's leaves."""
    return self.update_(tensordict, non_blocking=non_blocking)


def detach(self: TensorDictBase) -> TensorDictBase:
    """Detached copy of every leaf (shares storage)."""
    return self._map(torch.Tensor.detach, "detaching")


def detach_(self: TensorDictBase) -> TensorDictBase:
    """Detach every leaf in place."""
    for leaf in flat_leaves(self):
        leaf.detach_()
    return self


def requires_grad_(self: TensorDictBase, requires_grad: bool = True) -> TensorDictBase:
    """Set ``requires_grad`` on every leaf."""
    for leaf in flat_leaves(self):
        leaf.requires_grad_(requires_grad)
    return self


def requires_grad(self: TensorDictBase) -> bool:
    """True when any leaf requires grad."""
    return any(leaf.requires_grad for leaf in flat_leaves(self))


def zero_(self: TensorDictBase) -> TensorDictBase:
    """Fill every leaf with zeros in place."""
    leaves = flat_leaves(self)
    if leaves:
        if transforms_active() or dynamo_compiling():  # no foreach (see _ops/pointwise.py _NO_BATCHING)
            for leaf in leaves:
                leaf.zero_()
        else:
            try:
                torch._foreach_zero_(leaves)
            except RuntimeError:  # no foreach kernel for nested tensors (refused before any write)
                for leaf in leaves:
                    leaf.zero_()
        self._write_back(leaves)  # (a storage hook: the leaves may be copies read from storage)
    return self


def zero_grad(self: TensorDictBase, set_to_none: bool = True) -> TensorDictBase:
    """Reset the ``grad`` of every leaf."""
    for leaf in flat_leaves(self):
        if leaf.grad is not None:
            if set_to_none:
                leaf.grad = None
            else:
                leaf.grad.zero_()
    return self


def data(self: TensorDictBase) -> TensorDictBase:
    """A TensorDict of the leaves' ``.data``."""
    return self._map(lambda x: x.data, "reading data")


def grad(self: TensorDictBase) -> TensorDictBase | None:
    """A TensorDict of the leaves' gradients (leaves without grad are dropped)."""
    return self._map(lambda x: x.grad, "reading grad")


def _canonical(x: Any) -> Any:
    """``x`` with row-major strides: ``is_contiguous()`` also says True for other strides of size-1 dims."""
    if not isinstance(x, torch.Tensor) or x.is_nested:
        return x.contiguous()
    stride, expected = x.stride(), []
    step = 1
    for size in reversed(x.shape):
        expected.append(step)
        step *= max(size, 1)
    if stride == tuple(reversed(expected)):
        return x
    return x.clone(memory_format=torch.contiguous_format)


def contiguous(self: TensorDictBase, *, canonical: bool = False, inplace: bool = False) -> TensorDictBase:
    """Every leaf made contiguous: a contiguous leaf is shared, the others are copied.

    Args:
        canonical: also copy a leaf whose strides are not the row-major strides of its shape (torch
            calls some such tensors contiguous, when a dim has size 1).
        inplace: replace the non-contiguous leaves of ``self`` and return ``self``.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(3, 1, 2).transpose(1, 2)}, batch_size=[3])
        >>> td.contiguous()["a"].stride(), td.contiguous(canonical=True)["a"].stride()
        ((2, 1, 2), (2, 1, 1))
    """
    fn = _canonical if canonical else torch.Tensor.contiguous
    if inplace:
        if all(fn(leaf) is leaf for leaf in flat_leaves(self)):
            return self  # nothing to replace (a locked TensorDict with contiguous leaves is fine, as tensordict)
        return self._take_result(self._map(fn, "making contiguous"))
    return self._map(fn, "making contiguous")


def is_contiguous(self: TensorDictBase) -> bool:
    """True when every leaf is contiguous."""
    return all(leaf.is_contiguous() for leaf in flat_leaves(self))


def _new_leaves(
    self: TensorDictBase, size: Any, make: Callable[[Any, tuple[int, ...]], Any], what: str, device: Any = NO_DEFAULT
) -> TensorDictBase:
    if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)):
        size = tuple(size[0])
    size = _Size(size)
    nd = self.batch_dims
    return self._map(lambda x: make(x, (*size, *x.shape[nd:])), what, batch_size=size, device=device)


def _factory_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The leaf factory's keyword arguments and the result's device (``NO_DEFAULT``: the source's).

    ``empty_lazy`` (empty the lazy stacks of the result) is accepted and has nothing to do: these
    methods always build in-memory TensorDicts.
    """
    kwargs.pop("empty_lazy", None)
    device = kwargs.get("device", NO_DEFAULT)
    if device is NO_DEFAULT:
        return kwargs, NO_DEFAULT
    device = _as_device(device)
    kwargs["device"] = device
    return kwargs, device


def new_zeros(self: TensorDictBase, *size: Any, **kwargs: Any) -> TensorDictBase:
    """A TensorDict of batch size ``size`` filled with zeros (leaf feature shapes kept).

    Keyword arguments (``dtype``, ``device``, ``requires_grad``, ``layout``, ``pin_memory``) go to
    each leaf's ``new_zeros``; ``device`` is also the result's device.
    """
    kwargs, device = _factory_kwargs(kwargs)
    return self._new_leaves(size, lambda x, s: x.new_zeros(s, **kwargs), "new_zeros", device)


def new_ones(self: TensorDictBase, *size: Any, **kwargs: Any) -> TensorDictBase:
    """A TensorDict of batch size ``size`` filled with ones (keyword arguments as :meth:`new_zeros`)."""
    kwargs, device = _factory_kwargs(kwargs)
    return self._new_leaves(size, lambda x, s: x.new_ones(s, **kwargs), "new_ones", device)


def new_empty(self: TensorDictBase, *size: Any, **kwargs: Any) -> TensorDictBase:
    """A TensorDict of batch size ``size`` with uninitialised leaves (keyword arguments as :meth:`new_zeros`)."""
    kwargs, device = _factory_kwargs(kwargs)
    return self._new_leaves(size, lambda x, s: x.new_empty(s, **kwargs), "new_empty", device)


def new_full(self: TensorDictBase, size: Any, fill_value: Any, **kwargs: Any) -> TensorDictBase:
    """A TensorDict of batch size ``size`` filled with ``fill_value`` (keyword arguments as :meth:`new_zeros`)."""
    kwargs, device = _factory_kwargs(kwargs)
    return self._new_leaves((size,), lambda x, s: x.new_full(s, fill_value, **kwargs), "new_full", device)


def new_tensor(self: TensorDictBase, data: Any, **kwargs: Any) -> TensorDictBase:
    """Every leaf replaced by ``x.new_tensor(d)``: ``d`` is ``data``'s matching leaf, or ``data`` itself.

    The result's batch size is the shape of ``data`` (its batch size for a TensorDict). Keyword
    arguments (``dtype``, ``device``, ``requires_grad``) go to each leaf's ``new_tensor``;
    ``pin_memory=True`` pins the result.
    """
    if kwargs.pop("pin_memory", False):
        pinned: TensorDictBase = self.new_tensor(data, **kwargs).pin_memory()
        return pinned
    if is_td(data):
        out = self.apply(lambda x, d: x.new_tensor(d, **kwargs), data, batch_size=data.batch_size)
        assert out is not None  # apply gives None only with filter_empty
        return out
    # each leaf gets ``data`` as given: a list is not made a tensor first (torch warns when a tensor is
    # copy-constructed); the result's device is the data's unless ``device`` is given, as in tensordict
    as_tensor = data if isinstance(data, torch.Tensor) else torch.as_tensor(data)
    device = _as_device(kwargs["device"]) if "device" in kwargs else as_tensor.device
    return self._map(lambda x: x.new_tensor(data, **kwargs), "new_tensor", batch_size=as_tensor.shape, device=device)


def all_true(self: TensorDictBase, dim: int | None = None) -> bool | TensorDictBase:
    """True when every leaf is all-true; with ``dim``, a TensorDict reduced along that batch dim."""
    if dim is None:
        return all(bool(leaf.all()) for leaf in flat_leaves(self))
    _check_reduce_dim(self, dim)
    out: bool | TensorDictBase = _reduce.reduce(self, "all", dim=dim)
    return out


def any_true(self: TensorDictBase, dim: int | None = None) -> bool | TensorDictBase:
    """True when any leaf has a true element; with ``dim``, reduced along that batch dim."""
    if dim is None:
        return any(bool(leaf.any()) for leaf in flat_leaves(self))
    _check_reduce_dim(self, dim)
    out: bool | TensorDictBase = _reduce.reduce(self, "any", dim=dim)
    return out


def allclose(self: TensorDictBase, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """True when every leaf is close to the matching leaf (or value) of ``other``."""
    others = _pointwise.leaves_of(other, self)
    return all(
        torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
        for a, b in zip(flat_leaves(self), others, strict=True)
    )


def _check_reduce_dim(td: TensorDictBase, dim: int) -> None:
    if not -td.batch_dims <= dim < td.batch_dims:
        raise RuntimeError(f"dim {dim} must be in [-batch_dims, batch_dims) for batch_size {list(td.batch_size)}")
