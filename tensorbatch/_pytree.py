"""Registration of the TensorDict types with ``torch.utils._pytree`` (for compile, export and vmap).

The context keeps each child's shape (a tensor) or batch size (a TensorDict), so ``unflatten`` can
rebuild the right batch size when a transform (``vmap``) added or removed a dim, and check that the
removed dim was a batch dim shared by every child (pytree applies ``in_dims`` to each tensor: a dim
beyond the batch dims raises instead of giving a TensorDict whose batch size lies). Non-tensor leaves
have no pytree leaves: their value is in the context, and they follow the batch size of their parent.
vmap unflattens with ints/None placeholders: such trees keep the original batch size. Outside vmap,
leaves that still start with their whole former shape keep the batch size (``jacrev`` appends dims to
every leaf: batch as tensordict). A lazy stack is flattened as the dense TensorDict of its stacked
leaves and rebuilt as a lazy stack when its stack dim is still there.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree

from . import _compat
from ._lazy import LazyStackedTensorDict, lazy_stack
from ._nontensor import NonTensorData, NonTensorStack
from ._ops.traverse import NON_TENSOR_TYPES
from ._td import TensorDict

_Tensor = torch.Tensor
_Size = torch.Size
_is_compiling = torch.compiler.is_compiling

IN_DIMS_MSG = (
    "vmap over a TensorDict of batch_size {bs}: the mapped dim is not one batch dim shared by every entry "
    "({why}). in_dims on a TensorDict must be a batch dim counted from the front (0 <= in_dims < batch_dims): "
    "pytree applies it to each tensor, so a negative in_dims counts from each tensor's last dim"
)


def _shape(v: Any) -> Any:
    if isinstance(v, _Tensor):
        return None if v.is_nested else v.shape
    if type(v) in NON_TENSOR_TYPES or (type(v) is TensorDict and not _has_tensor(v)):
        return None  # it tells nothing about the batch: it follows its parent's (_fit)
    return getattr(v, "batch_size", None)


def _has_tensor(td: TensorDict) -> bool:
    values = td._tensordict.values()
    return any(isinstance(v, _Tensor) for v in values) or any(
        type(v) is TensorDict and _has_tensor(v) for v in values)


def _flatten(td: TensorDict) -> tuple[list[Any], Any]:
    values = list(td._tensordict.values())
    nd = len(td._batch_size)
    # a tensor's feature dims n, a collection's extra batch dims as -1 - n (the kind tells jacobians apart)
    feats = tuple(
        v.ndim - nd if isinstance(v, _Tensor) else None if type(v) in NON_TENSOR_TYPES
        else nd - 1 - len(v.batch_size) if hasattr(v, "batch_size") else None
        for v in values
    )
    shapes = tuple(map(_shape, values))
    return values, (tuple(td._tensordict.keys()), td._batch_size, td._device, td._names, feats, shapes)


def _flatten_with_keys(td: TensorDict) -> tuple[list[tuple[Any, Any]], Any]:
    values, context = _flatten(td)
    return [(_compat.mapping_key(k), v) for k, v in zip(context[0], values, strict=True)], context


def _batch_size(values: list[Any], batch_size: torch.Size, feats: Any) -> torch.Size:
    first = None
    for value, feat in zip(values, feats, strict=True):
        if feat is None:
            continue
        if isinstance(value, _Tensor):
            return value.shape[: value.ndim - (feat if feat >= 0 else -1 - feat)]
        if hasattr(value, "batch_size") and type(value) not in NON_TENSOR_TYPES:
            if feat >= 0:  # a tensor became a collection (jacfwd's per-input jacobians): it tells nothing
                first = value.batch_size if first is None else first
                continue
            return value.batch_size[: len(value.batch_size) + 1 + feat]  # type: ignore[no-any-return]  # a collection
    if first is not None:  # only such values: their leading dims, as many as there were (as tensordict)
        return first[: len(batch_size)]  # type: ignore[no-any-return]  # a torch.Size
    return batch_size


def _pairs(values: list[Any], feats: Any, shapes: Any) -> list[tuple[Any, Any]] | None:
    """(former, new) shape of each child that tells its shape; None when ``values`` are placeholders.

    A tensor that became a collection (jacfwd's per-input jacobians) tells nothing.
    """
    out = []
    for value, feat, old in zip(values, feats, shapes, strict=True):
        if isinstance(value, _Tensor):
            if old is not None and feat >= 0 and not value.is_nested:
                out.append((old, value.shape))
        elif hasattr(value, "batch_size"):
            if old is not None and feat is not None and feat < 0 and type(value) not in NON_TENSOR_TYPES:
                out.append((old, value.batch_size))
        elif value is None or type(value) is int:  # vmap's in_dims/out_dims placeholders
            return None
    return out


def _prefixed(pairs: list[tuple[Any, Any]]) -> bool:
    """True when one same shape was put in front of every child's former shape (vmap's out_dims=0)."""
    prefix = None
    for old, new in pairs:
        k = len(new) - len(old)
        if k <= 0 or new[k:] != old or (prefix is not None and new[:k] != prefix):
            return False
        prefix = new[:k]
    return prefix is not None


def _removed_dim(values: list[Any], pairs: list[tuple[Any, Any]], batch_size: torch.Size) -> set[int]:
    """The batch dims whose removal gives every child's new shape (vmap's mapped dim); raises if none."""
    nd = len(batch_size)
    dims = set(range(nd))
    for old, new in pairs:
        dims = {d for d in dims if old[:d] + old[d + 1:] == new}
    if not dims:
        why = "the entries lost different dims, or a dim beyond the batch dims"
        raise ValueError(IN_DIMS_MSG.format(bs=list(batch_size), why=why))
    if not _is_compiling():  # the exact mapped dim of a batched tensor (not traceable: eager only)
        leaf = next((v for v in values if isinstance(v, _Tensor) and _compat.is_batched(v)), None)
        if leaf is not None:
            bdim, physical = _compat.batched_dim(leaf)
            # only when vmap has just mapped it (its physical shape is the former one), not for a tensor
            # batched by an enclosing vmap that lost a dim otherwise (tree_map inside the function)
            if physical not in {o for o, _ in pairs}:
                return dims
            if bdim not in dims:
                why = f"dim {bdim} of a tensor is mapped"
                raise ValueError(IN_DIMS_MSG.format(bs=list(batch_size), why=why))
            dims = {bdim}
    return dims


def _names_after(names: Any, batch_size: torch.Size, new_bs: torch.Size, removed: set[int] | None) -> Any:
    """Names for the new batch size: the mapped dim's name dropped, a new dim unnamed; None if ambiguous."""
    if names is None:
        return None
    if removed is not None:
        options = {names[:d] + names[d + 1:] for d in removed}
    elif len(new_bs) == len(batch_size) + 1:
        options = {(*names[:p], None, *names[p:]) for p in range(len(new_bs))
                   if new_bs[:p] + new_bs[p + 1:] == batch_size}
    else:
        return None
    return options.pop() if len(options) == 1 else None


def _fit(key: str, value: Any, old: Any, new_bs: torch.Size, nd: int) -> Any:
    """``value`` as an entry of a node of batch size ``new_bs`` (was ``nd`` dims): it must lead with it.

    Non-tensor data (and a TensorDict of it only) follows the new batch size. An in-memory TensorDict whose
    leaves all lead with ``new_bs`` takes it (its own unflatten cannot tell a dim put in front from one put at
    the end when its leaves had no batch dims).
    """
    if type(value) in NON_TENSOR_TYPES:
        target = _Size((*new_bs, *value.batch_size[nd:]))
        return value if value.batch_size == target else value._follow(target)
    n = len(new_bs)
    if isinstance(value, _Tensor):
        shape = value.shape if not value.is_nested else None
    else:
        shape = getattr(value, "batch_size", None)
    if shape is None or (shape[:n] == new_bs and old is not None):
        return value
    if type(value) is TensorDict:
        extra = old[nd:] if old is not None else value.batch_size[nd:]
        fitted = _refit(value, _Size((*new_bs, *extra)))
        if fitted is not None:
            return fitted
    raise RuntimeError(
        f"pytree unflatten: entry {key!r} of shape {list(shape)} does not start with the rebuilt batch size "
        f"{list(new_bs)} (a transform, e.g. vmap with out_dims other than 0, moved dims differently in the "
        "entries)"
    )


def _refit(td: TensorDict, batch_size: torch.Size) -> TensorDict | None:
    """``td`` rebuilt with ``batch_size`` (its nested nodes likewise), or None when a leaf does not lead with it."""
    n, nd = len(batch_size), len(td._batch_size)
    entries = {}
    for key, value in td._tensordict.items():
        if isinstance(value, _Tensor):
            if not value.is_nested and value.shape[:n] != batch_size:
                return None
        elif type(value) in NON_TENSOR_TYPES:
            value = value._follow(_Size((*batch_size, *value.batch_size[nd:])))
        elif type(value) is TensorDict:
            value = _refit(value, _Size((*batch_size, *value._batch_size[nd:])))
            if value is None:
                return None
        elif getattr(value, "batch_size", batch_size)[:n] != batch_size:
            return None
        entries[key] = value
    return TensorDict._new_unsafe(entries, batch_size, td._device, None)


def _unflatten(values: Any, context: Any) -> TensorDict:
    values = list(values)
    keys, batch_size, device, names, feats, shapes = context
    pairs = _pairs(values, feats, shapes)
    if pairs is None:  # placeholders: the tree of in_dims/out_dims that vmap builds
        return TensorDict._new_unsafe(dict(zip(keys, values, strict=True)), batch_size, device, names)
    new_bs = _batch_size(values, batch_size, feats)
    nd = len(batch_size)
    removed = None
    if len(new_bs) == nd - 1:
        removed = _removed_dim(values, pairs, batch_size)
    elif (new_bs != batch_size and all(new[:nd] == batch_size for _, new in pairs)
          and not (_prefixed(pairs) if _is_compiling() else _compat.in_vmap())):
        # every child still starts with the batch size (tree_map changing feature dims, jacrev/jacfwd
        # appending the input's dims, as tensordict): it stays; not under vmap, where the mapped dim in
        # front may have the size of the batch (under compile, where that cannot be asked: when one
        # shape was put in front of every child; and a parent node refits a nested node: _fit)
        new_bs = batch_size
    if new_bs != batch_size:
        names = _names_after(names, batch_size, new_bs, removed)
    if new_bs == batch_size:
        entries = dict(zip(keys, values, strict=True))
    else:
        entries = {k: _fit(k, v, old, new_bs, nd) for k, v, old in zip(keys, values, shapes, strict=True)}
    return TensorDict._new_unsafe(entries, _Size(new_bs), device, names)


def _to_dumpable(context: Any) -> Any:
    keys, batch_size, device, names, feats, shapes = context
    return [list(keys), list(batch_size), None if device is None else str(device),
            None if names is None else list(names), list(feats), [None if s is None else list(s) for s in shapes]]


def _from_dumpable(dumped: Any) -> Any:
    keys, batch_size, device, names, feats, shapes = dumped
    return (tuple(keys), torch.Size(batch_size), None if device is None else torch.device(device),
            None if names is None else tuple(names), tuple(feats),
            tuple(None if s is None else torch.Size(s) for s in shapes))


_compat.register_pytree_node(TensorDict, _flatten, _unflatten, _flatten_with_keys, _to_dumpable, _from_dumpable)


# ----------------------------------------------------------------------------------- non-tensor leaves
def _flatten_non_tensor(leaf: Any) -> tuple[list[Any], Any]:
    return [], leaf  # no pytree leaf: the value rides in the context


def _flatten_non_tensor_with_keys(leaf: Any) -> tuple[list[tuple[Any, Any]], Any]:
    return [], leaf


def _unflatten_non_tensor(values: Any, context: Any) -> Any:
    return context  # immutable for our purposes: its parent makes it follow a new batch size (_fit)


for _cls in (NonTensorData, NonTensorStack):
    _compat.register_pytree_node(_cls, _flatten_non_tensor, _unflatten_non_tensor, _flatten_non_tensor_with_keys,
                                 None, None)


# ----------------------------------------------------------------------------------- lazy stacks
def _flatten_lazy(td: LazyStackedTensorDict) -> tuple[list[Any], Any]:
    try:
        dense = td._map(lambda x: x, "flattening a lazy stack for pytree")  # each leaf stacked (autograd kept)
    except Exception as err:
        raise RuntimeError(
            "pytree (vmap, compile) sees a lazy stack through its stacked leaves: this one's members differ in "
            f"keys or shapes ({err}); densify it or vmap over its members"
        ) from err
    return [dense], (td.stack_dim, td.batch_size)


def _flatten_lazy_with_keys(td: LazyStackedTensorDict) -> tuple[list[tuple[Any, Any]], Any]:
    values, context = _flatten_lazy(td)
    return [(_pytree.GetAttrKey("tensordicts"), values[0])], context


def _placeholders(td: Any) -> bool:
    for value in td._tensordict.values():
        return _placeholders(value) if type(value) is TensorDict else value is None or type(value) is int
    return False


def _unflatten_lazy(values: Any, context: Any) -> Any:
    (dense,) = values
    stack_dim, batch_size = context
    if not hasattr(dense, "batch_size") or _placeholders(dense):  # vmap's in_dims/out_dims tree
        return dense
    new_bs = dense.batch_size
    if new_bs == batch_size or (len(new_bs) == len(batch_size) and new_bs[stack_dim] == batch_size[stack_dim]):
        dim: int | None = stack_dim
    elif len(new_bs) == len(batch_size) - 1:  # vmap removed a dim: the stack dim (a member per call) or another
        gone = [d for d in range(len(batch_size)) if batch_size[:d] + batch_size[d + 1:] == new_bs]
        # the stack dim possibly gone (or no telling which): dense, always a faithful form
        dim = None if stack_dim in gone or not gone else stack_dim - (gone[0] < stack_dim)
    elif len(new_bs) == len(batch_size) + 1:  # a dim was added (vmap's out_dims)
        added = [p for p in range(len(new_bs)) if new_bs[:p] + new_bs[p + 1:] == batch_size]
        dim = stack_dim + (added[0] <= stack_dim) if added else None
    else:
        dim = None
    if dim is None:
        return dense
    return lazy_stack(list(dense.unbind(dim)), dim)


_compat.register_pytree_node(LazyStackedTensorDict, _flatten_lazy, _unflatten_lazy, _flatten_lazy_with_keys,
                             None, None)
