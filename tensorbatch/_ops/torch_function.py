"""The one ``__torch_function__`` table: ``HANDLED`` maps torch functions to implementations.

Add a torch function by decorating its implementation with ``@implements(torch.fn)``; the
conformance tests walk ``HANDLED`` to prove each entry works.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .._base.coerce import as_device
from .._base.locks import keep_lock
from .._errors import add_path_note, fmt_path, fmt_shape, key_sets_differ
from .._unbatched import UnbatchedTensor, check_shared
from . import ragged
from .pointwise import TORCH_FUNCTIONS
from .traverse import (
    COLLECTION_TYPES,
    NO_DEFAULT,
    NON_TENSOR_TYPES,
    dense_columns,
    flat_leaves,
    flat_leaves_like,
    from_leaves,
    is_node,
    is_td,
    map_leaves,
    named_leaves,
    named_nodes,
)

HANDLED: dict[Callable[..., Any], Callable[..., Any]] = {}
# ``LAZY_JOIN(what, tds, dim)``: stack or cat (``what``) of TensorDicts among which a lazy stack keeps the result
# lazy, or None to join them here; set by the lazy stack's module (tensorbatch/_lazy_shape.py).
LAZY_JOIN: Callable[[str, list[Any], int], Any] | None = None


def implements(torch_fn: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as the TensorDict implementation of ``torch_fn``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        HANDLED[torch_fn] = fn
        return fn

    return register


def dispatch(func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
    """Body of ``TensorDictBase.__torch_function__``."""
    impl = HANDLED.get(func)
    if impl is None:
        for method, method_impl in PYTHON_TENSOR_METHODS:  # not dict keys: see there
            if func is method:
                return method_impl(*args, **(kwargs or {}))
        return NotImplemented
    return impl(*args, **(kwargs or {}))


def _check_same_batch(tds: Sequence[Any], what: str, skip_dim: int | None = None) -> None:
    sizes = [td.batch_size for td in tds]
    first = sizes[0]
    if skip_dim is None:
        if sizes.count(first) == len(sizes):  # one C loop instead of a generator
            return
    elif len(first) == 1:  # one batch dim, the cat dim: only the number of dims must agree
        if all(len(td.batch_size) == 1 for td in tds):
            return
    else:
        head, tail = first[:skip_dim], first[skip_dim + 1 :]
        n = len(first)
        if all(len(bs) == n and bs[:skip_dim] == head and bs[skip_dim + 1 :] == tail for bs in sizes):
            return
    for i, td in enumerate(tds):
        bs = td.batch_size
        if len(bs) != len(first) or any(
            a != b for d, (a, b) in enumerate(zip(bs, first, strict=False)) if d != skip_dim
        ):
            raise RuntimeError(  # "congruent batch sizes": tensordict's phrase for stack, which users match on
                f"{what}: TensorDict {i} has batch_size {fmt_shape(bs)} but TensorDict 0 has "
                f"{fmt_shape(first)}"
                + ("" if skip_dim is None else f" (they may differ only in dim {skip_dim})")
                + ("; stacking tensordicts requires them to have congruent batch sizes" if what == "stack" else "")
            )


def _dense_dicts(tds: list[Any], skip_dim: int | None) -> list[dict[str, Any]] | None:
    """The storage dicts when every TensorDict is in-memory with fitting batch sizes, else None.

    One pass does the type and batch-size checks of the common case (``_check_same_batch`` and
    ``_columns`` each pay a walk over the list otherwise); None leaves both to the generic path.
    """
    first = tds[0]
    dense = first._dense_cls
    if type(first) is not dense:
        return None
    bs = first._batch_size
    if skip_dim is None:
        dicts = [td._tensordict for td in tds if type(td) is dense and td._batch_size == bs]
    elif len(bs) == 1:  # cat along the only batch dim: any length fits
        dicts = [td._tensordict for td in tds if type(td) is dense and len(td._batch_size) == 1]
    else:
        return None
    return dicts if len(dicts) == len(tds) else None


def _columns(tds: Sequence[Any], what: str, dicts: list[dict[str, Any]] | None = None) -> list[list[Any]]:
    """Leaves of every TensorDict, grouped by key path (in the first one's walk order): see :func:`_gather`."""
    cols = _gather(tds, what, dicts)
    assert cols is not None  # (only lazy_nodes=True gives None)
    return cols


def _gather(
    tds: Sequence[Any], what: str, dicts: list[dict[str, Any]] | None = None, lazy_nodes: bool = False
) -> list[list[Any]] | None:
    """Leaves of every TensorDict, grouped by key path (in the first one's walk order).

    Args:
        tds: the TensorDicts.
        what: the operation, for errors.
        dicts: their storage, from :func:`_dense_dicts`, when the caller has it.
        lazy_nodes: return None when the first TensorDict holds a lazy stack below its root (the caller
            then stacks key by key, keeping it lazy); off the fast path only.

    Raises:
        RuntimeError: when the key sets differ (as tensordict's stack does).
    """
    if dicts is None:
        dense = tds[0]._dense_cls
        dicts = [td._tensordict for td in tds if type(td) is dense]
    try:
        if len(dicts) == len(tds):
            cols = dense_columns(dicts, tds[0]._dense_cls)
            if cols is not None:
                return cols
        first = tds[0]
        if lazy_nodes and holds_lazy(first):
            return None
        rows = [flat_leaves_like(td, first, nodes=True) for td in tds]
    except KeyError as err:
        if what == "cat":  # tensordict's cat raises KeyError (its phrase added), its stack RuntimeError
            raise KeyError(f"{err.args[0]}; all tensordicts must have the same keys") from None
        raise _keys_differ(what, err.args[0]) from None
    cols = [list(col) for col in zip(*rows, strict=True)]
    for i, col in enumerate(cols):  # (off the fast path: dense_columns returns None for any unbatched leaf)
        if isinstance(col[0], UnbatchedTensor):
            cols[i] = _unbatched_column(col, what, [p for p, _ in named_leaves(first)][i])
    return cols


def holds_lazy(td: Any) -> bool:
    """True when a node below ``td``'s root is a lazy stack (it holds member TensorDicts)."""
    for path, node in named_nodes(td, members=True):  # (members=True: a lazy stack's leaves are not read)
        members = getattr(node, "_stacked_members", None) if path else None
        if members is not None and members() is not None:
            return True
    return False


def _stack_by_key(tds: list[Any], dim: int, batch_size: torch.Size, names: Any) -> Any:
    """``torch.stack`` entry by entry: a nested lazy stack stacks as one (a lazy stack of its members' stacks).

    As tensordict: TensorDicts holding lazy stacks whose members differ in shape or keys still stack densely
    at the top, and the lazy stacks stay lazy in the result.
    """
    first = tds[0]
    keys = list(first._keys_str())
    for td in tds[1:]:
        theirs = list(td._keys_str())
        if set(theirs) != set(keys):
            raise _keys_differ("stack", key_sets_differ((), keys, theirs).args[0])
    entries: dict[str, Any] = {}
    for key in keys:
        col = [td._get_str(key, NO_DEFAULT) for td in tds]
        if is_td(col[0]):
            entries[key] = stack(col, dim)
            continue
        try:
            entries[key] = torch.stack(col, dim)
        except Exception as err:
            add_path_note(err, "stacking leaves", (key,))
            raise
    return first._dense_cls(entries, batch_size=batch_size, device=first.device, names=names)


def _unbatched_column(col: list[Any], what: str, path: tuple[str, ...]) -> list[Any]:
    """The positions of an ``UnbatchedTensor`` column: the result keeps the first one's data."""
    check_shared(col, what, fmt_path(path))
    return [item._positions() for item in col]


def _keys_differ(what: str, detail: str) -> RuntimeError:
    # the first sentence is tensordict's stack message, which users match on
    return RuntimeError(
        f"{what}: The sets of keys in the tensordicts to stack are exclusive; "
        f"the TensorDicts have different keys ({detail})"
    )


def _per_column(fn: Callable[..., Any], cols: list[list[Any]], dim: int, first: Any, what: str) -> list[Any]:
    out = []
    for col in cols:
        try:
            out.append(fn(col, dim))
        except Exception as err:
            path = [p for p, _ in named_leaves(first)][len(out)]
            node = next((t for t in col if is_node(t)), None)
            if node is not None:  # a leaf in the first, a node in another: a key mismatch, said as one
                mismatch = key_sets_differ(path, (), node._keys_str())
                if what == "cat":
                    raise mismatch from None
                raise _keys_differ(what, mismatch.args[0]) from None
            if any(map(ragged.is_ragged, col)):
                out.append(_ragged_column(col, dim, what, path, err))
                continue
            shapes = ", ".join(fmt_shape(t.shape) for t in col[:4]) + (", ..." if len(col) > 4 else "")
            add_path_note(err, f"{what}ing leaves of shapes {shapes}", path)
            raise
    return out


def _ragged_column(col: list[Any], dim: int, what: str, path: tuple[str, ...], err: Exception) -> Any:
    """Nested tensors torch refused to stack or cat: cat along dim 0 is done here, stack cannot be."""
    if what == "cat" and dim == 0:
        try:
            return ragged.cat(col)
        except RuntimeError as refused:  # mixed layouts, or a nested tensor with a plain one
            add_path_note(refused, "concatenating nested tensors", path)
            raise
    if what == "stack":
        # "Cannot stack the tensordicts": tensordict's phrase, which users match on
        raise RuntimeError(
            f"Cannot stack the tensordicts: the leaf {fmt_path(path)} is a nested tensor, and stacking nested "
            "tensors would need a second ragged dim. Use torch.cat, or lazy_stack to keep the TensorDicts apart."
        ) from err
    shapes = ", ".join(fmt_shape(ragged.shape(t) if ragged.is_ragged(t) else t.shape) for t in col[:4])
    add_path_note(err, f"{what}ing leaves of shapes {shapes}", path)
    raise err


@implements(torch.stack)
def stack(
    input: Sequence[Any],
    dim: int = 0,
    *,
    out: Any = None,
    device: Any = None,
    strict: bool = False,
    contiguous: bool = False,
) -> Any:
    """Stack TensorDicts with equal batch sizes and keys along a new batch dim.

    The result is dense (``contiguous=True`` asks for that; the keys must always match, as ``strict=True``
    asks), but for lazy stacks of one stack dim: a lazy stack of their members' stacks, as tensordict;
    ``device`` moves the result there.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(3, 2)}, batch_size=[3])
        >>> torch.stack([td, td], 1).batch_size
        torch.Size([3, 2])
    """
    if device is not None:
        return stack(input, dim, out=out).to(device)
    tds = list(input)
    if not tds:
        raise RuntimeError("stack expects a non-empty sequence of TensorDicts")
    if not COLLECTION_TYPES.issuperset(map(type, tds)):
        raise TypeError("stack expects a sequence of TensorDicts")
    dicts = _dense_dicts(tds, None)
    if dicts is None:
        _check_same_batch(tds, "stack")
        if type(tds[0]) in NON_TENSOR_TYPES:
            return _non_tensor_cat(tds, dim, cat=False)
    nd = tds[0].batch_dims
    if not -nd - 1 <= dim <= nd:
        raise IndexError(f"stack: dim {dim} is out of range for {nd} batch dims")
    d = dim % (nd + 1)
    if dicts is None and out is None and not contiguous and LAZY_JOIN is not None:
        joined = LAZY_JOIN("stack", tds, d)
        if joined is not None:
            return joined
    bs = list(tds[0].batch_size)
    bs.insert(d, len(tds))
    if out is not None:
        return _stack_into(tds, d, out, torch.Size(bs))
    names = tds[0]._maybe_names()
    if names is not None:
        names = (*names[:d], None, *names[d:])
    cols = _gather(tds, "stack", dicts, lazy_nodes=not contiguous and LAZY_JOIN is not None)
    if cols is None:  # a lazy stack below the root: it stays lazy
        return _stack_by_key(tds, d, torch.Size(bs), names)
    leaves = _per_column(torch.stack, cols, d, tds[0], "stack")
    return from_leaves(tds[0], leaves, batch_size=torch.Size(bs), names=names, follow=True)


def _stack_into(tds: list[Any], dim: int, out: Any, batch_size: torch.Size) -> Any:
    """``torch.stack(tds, dim, out=out)``: each leaf of ``out`` that the TensorDicts hold gets their stack.

    As tensordict: leaves of ``out`` that no TensorDict holds keep their values (TorchRL's collector writes its
    rollout into a buffer that has more keys than each step), entries only the TensorDicts hold are not written.
    """
    if out.batch_size != batch_size:
        raise RuntimeError(
            f"out.batch_size and stacked batch size must match, got out.batch_size={out.batch_size} "
            f"and batch_size={batch_size}"
        )
    stored = out._stacked_members() is None  # a lazy stack's leaves are read stacked: write through its members
    for path, target in named_leaves(out):
        key = path[0] if len(path) == 1 else path
        col = [td.get(key, None) for td in tds]
        if all(v is None for v in col):
            continue
        if isinstance(target, torch.Tensor) and all(isinstance(v, torch.Tensor) for v in col):
            if stored:
                torch.stack(col, dim, out=target)
            else:
                out.set_(key, torch.stack(col, dim))
        else:
            out.set(key, torch.stack(col, dim))
    return out


def _non_tensor_cat(tds: list[Any], dim: int, cat: bool) -> Any:
    if not all(type(td) in NON_TENSOR_TYPES for td in tds):
        raise RuntimeError(f"{'cat' if cat else 'stack'}: cannot mix non-tensor leaves with tensor collections")
    return type(tds[0])._stack_members(tds, dim, cat)  # the non-tensor leaf classes stack themselves


@implements(torch.cat)
def cat(input: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
    """Concatenate TensorDicts along an existing batch dim."""
    tds = list(input)
    if not tds:
        raise RuntimeError("cat expects a non-empty sequence of TensorDicts")
    nd = tds[0].batch_dims
    if not -nd <= dim < nd:
        raise RuntimeError(
            f"cat: dim {dim} is out of range for batch_size {fmt_shape(tds[0].batch_size)} "
            f"(dim must be in the range 0 <= dim < len(batch_size), got dim={dim})"
        )
    d = dim % nd
    dicts = _dense_dicts(tds, d)
    if dicts is None:
        joined = LAZY_JOIN("cat", tds, d) if out is None and LAZY_JOIN is not None else None
        if joined is not None:
            return joined
        _check_same_batch(tds, "cat", skip_dim=d)
        if type(tds[0]) in NON_TENSOR_TYPES:
            return _non_tensor_cat(tds, d, cat=True)
    bs = list(tds[0].batch_size)
    bs[d] = sum([td._batch_size[d] for td in tds] if dicts is not None else [td.batch_size[d] for td in tds])
    if out is not None:
        for col, target in zip(_columns(tds, "cat"), flat_leaves_like(out, tds[0]), strict=True):
            torch.cat(col, d, out=target)
        return out
    leaves = _per_column(torch.cat, _columns(tds, "cat", dicts), d, tds[0], "cat")
    return from_leaves(tds[0], leaves, batch_size=torch.Size(bs), names=tds[0]._maybe_names(), follow=True)


for _alias in (torch.concat, torch.concatenate):
    HANDLED[_alias] = cat


def _method(name: str) -> Callable[..., Any]:
    def call(td: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_td(td):
            raise TypeError(f"torch.{name} takes a TensorDict as its first argument, got {type(td).__name__}")
        return getattr(td, name)(*args, **kwargs)

    call.__name__ = name
    return call


for _name in (
    "unbind",
    "split",
    "chunk",
    "permute",
    "reshape",
    "squeeze",
    "unsqueeze",
    "flatten",
    "unflatten",
    "transpose",
    "gather",
    "clone",
    "masked_select",
    "masked_fill",
    "sum",
    "mean",
    "nansum",
    "nanmean",
    "prod",
    "std",
    "var",
    "amax",
    "amin",
    "all",
    "any",
    "repeat_interleave",
    "flip",
    "fliplr",
    "flipud",
    "roll",
    "movedim",
    "moveaxis",
    "swapaxes",
    "swapdims",
    "narrow",
    "tile",
    "tensor_split",
    "rot90",
    "broadcast_to",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "softmax",
    "logsumexp",
    "cummax",
    "cummin",
    "quantile",
):
    HANDLED[getattr(torch, _name)] = _method(_name)
for _fn, _name in TORCH_FUNCTIONS.items():  # every pointwise table method torch has as a function
    HANDLED[_fn] = _method(_name)


# Tensor methods whose operands are a tensor and a TensorDict (``tensor * td``) -> the TensorDict method giving
# ``tensor <op> td``. Eager Python gets there without them (NotImplemented, then the TensorDict's reflected
# operator); dynamo does not, and calls the tensor's method for ``td * tensor`` too (``Tensor.mul(tensor, td)``,
# ``Tensor.__rsub__(tensor, td)`` for ``td - tensor``).
TENSOR_METHODS: dict[str, str] = {
    "add": "__radd__",
    "sub": "__rsub__",
    "mul": "__rmul__",
    "div": "__rtruediv__",
    "true_divide": "__rtruediv__",
    "floor_divide": "__rfloordiv__",
    "remainder": "__rmod__",
    "pow": "__rpow__",
    "bitwise_and": "__rand__",
    "bitwise_or": "__ror__",
    "bitwise_xor": "__rxor__",
    "eq": "__eq__",
    "ne": "__ne__",
    "lt": "__gt__",
    "gt": "__lt__",
    "le": "__ge__",
    "ge": "__le__",
    **{
        f"__{op}__": f"__r{op}__"
        for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
    },
    **{
        f"__r{op}__": f"__{op}__"
        for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
    },
    "__eq__": "__eq__",
    "__ne__": "__ne__",
    "__lt__": "__gt__",
    "__gt__": "__lt__",
    "__le__": "__ge__",
    "__ge__": "__le__",
}


def _tensor_method(name: str, reflected: str) -> Callable[..., Any]:
    def call(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        if is_td(a):  # Tensor.<name>(td, other): the TensorDict's own method
            return getattr(a, name)(b, *args, **kwargs)
        return getattr(b, reflected)(a, *args, **kwargs)

    call.__name__ = name
    return call


# The Python-level ones among them (``Tensor.__rsub__``, ``__rtruediv__``, ``__rpow__``, ``__floordiv__``...)
# with their implementations, apart from HANDLED: dispatch finds them by identity. Dynamo hands them to
# ``__torch_function__`` as functions it built itself (no source), whose hash is a fake id while tracing: a
# dict lookup misses them there, and the guard dynamo then installs (the function is not a key) would fail.
PYTHON_TENSOR_METHODS: tuple[tuple[Callable[..., Any], Callable[..., Any]], ...] = ()
for _name, _reflected in TENSOR_METHODS.items():
    _fn = getattr(torch.Tensor, _name)
    if not isinstance(_fn, types.FunctionType):
        HANDLED[_fn] = _tensor_method(_name, _reflected)
    elif all(_fn is not fn for fn, _ in PYTHON_TENSOR_METHODS):  # __rtruediv__ is __rdiv__
        PYTHON_TENSOR_METHODS += ((_fn, _tensor_method(_name, _reflected)),)


@implements(torch.where)
def where(condition: Any, input: Any, other: Any, *, out: Any = None) -> Any:
    """``torch.where(cond, td, other)``; ``other`` may be a TensorDict, tensor or number."""
    if is_td(input):
        return input.where(condition, other, out=out)
    flipped = other.where(~condition, input)
    if out is not None:
        out.update_(flipped)
        return out
    return flipped


def _like(name: str) -> Callable[..., Any]:
    fn = getattr(torch, name)

    def like(td: Any, *args: Any, **kwargs: Any) -> Any:
        # device= moves every leaf, so the result's device follows (as a tensor's would)
        device = as_device(kwargs["device"]) if kwargs.get("device") is not None else NO_DEFAULT
        return td._map(lambda x: fn(x, *args, **kwargs), name, device=device)

    like.__name__ = name
    return like


for _name in ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"):
    HANDLED[getattr(torch, _name)] = keep_lock(_like(_name))


# ------------------------------------------------------------------------------------ losses
_REDUCTIONS = ("none", "mean", "sum")


def _loss(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A leaf-wise ``torch.nn.functional`` loss: ``fn(input_leaf, target_leaf, ...)`` per key.

    ``reduction="none"`` keeps the batch size; ``"mean"``/``"sum"`` reduce each leaf on its own, so
    the result has batch size ``()`` (one scalar per key, as tensordict does). Every other keyword
    (``beta``, the legacy ``size_average``/``reduce``) goes to ``fn`` on each leaf.
    """

    def loss(input: Any, target: Any, *args: Any, reduction: str = "mean", **kwargs: Any) -> Any:
        size_average, reduce = kwargs.get("size_average"), kwargs.get("reduce")
        if size_average is not None or reduce is not None:  # torch's legacy arguments decide the reduction
            reduction = torch.nn._reduction.legacy_get_string(size_average, reduce, emit_warning=False)
            kwargs.pop("size_average", None), kwargs.pop("reduce", None)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{fn.__name__}: invalid reduction {reduction!r}; expected one of {list(_REDUCTIONS)}")
        if not is_td(input) or not is_td(target):
            raise TypeError(
                f"{fn.__name__} of a TensorDict needs a TensorDict target (and input), got "
                f"{type(input).__name__} and {type(target).__name__}"
            )
        batch_size = None if reduction == "none" else torch.Size(())
        return map_leaves(
            input,
            lambda x, y: fn(x, y, *args, reduction=reduction, **kwargs),
            target,
            what=fn.__name__,
            batch_size=batch_size,
        )

    loss.__name__ = fn.__name__
    return loss


for _fn in (torch.nn.functional.l1_loss, torch.nn.functional.mse_loss, torch.nn.functional.smooth_l1_loss):
    HANDLED[_fn] = _loss(_fn)


# ------------------------------------------------------------------------------------ autograd
def _one_td(value: Any, what: str) -> Any:
    """``value`` or the only member of a 1-tuple, which must be a TensorDict (tensordict's rule)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"torch.autograd.grad for TensorDict only supports a single {what} (got {len(value)})")
        value = value[0]
    if not is_td(value):
        raise ValueError(
            f"torch.autograd.grad for TensorDict only supports TensorDictBase as {what} (got {type(value).__name__})"
        )
    return value


@implements(torch.autograd.grad)
def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, **kwargs: Any) -> Any:
    """``torch.autograd.grad`` of one TensorDict with respect to another: a TensorDict shaped like ``inputs``.

    ``grad_outputs`` (a TensorDict) is matched to ``outputs`` by key; leaves without a gradient
    (``allow_unused=True``) are left out of the result.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> x = TensorDict({"a": torch.ones(2)}, batch_size=[2]).requires_grad_()
        >>> y = x * 3
        >>> torch.autograd.grad(y, x, torch.ones_like(y))["a"]
        tensor([3., 3.])
    """
    outputs = _one_td(outputs, "output")
    inputs = _one_td(inputs, "input")
    out_leaves = [x for x in flat_leaves(outputs) if isinstance(x, torch.Tensor)]
    if grad_outputs is not None:
        grad_outputs = _one_td(grad_outputs, "grad_output")
        grad_leaves: Any = [x for x in flat_leaves_like(grad_outputs, outputs) if isinstance(x, torch.Tensor)]
    else:
        grad_leaves = None
    in_leaves = [x for x in flat_leaves(inputs) if isinstance(x, torch.Tensor)]
    grads = iter(torch.autograd.grad(out_leaves, in_leaves, grad_leaves, **kwargs))
    # the walk visits the leaves in flat_leaves' order; non-tensor leaves and unused inputs are dropped
    return inputs.apply(lambda x: next(grads) if isinstance(x, torch.Tensor) else None)
