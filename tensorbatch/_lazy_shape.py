"""Shape operations on a lazy stack: one table says how each op moves the stack dim; the result stays lazy.

As tensordict 0.15.3, a shape operation on a :class:`~tensorbatch.LazyStackedTensorDict` gives a lazy
stack again (members kept apart, heterogeneous members too). Each op of :data:`TABLE` has a *kind* and a
*plan* (from :mod:`tensorbatch._ops.shape`, which also checks the arguments); the kind's function turns
the plan into the lazy result:

* ``order`` (permute, transpose, movedim, swapaxes...): a permutation of the batch dims. The stack dim goes
  where the permutation puts it; each member is permuted by the order of the other dims.
* ``split`` (split, chunk, tensor_split, unbind): pieces along one dim. Along the stack dim a piece is a run
  of members (unbind: the members); along another dim each member is split and piece ``k`` stacks the
  members' ``k``-th pieces.
* ``shape`` (reshape, view, flatten, unflatten): a new batch size. One that merges a run of dims into one
  stacks the run's elements (row-major) at its place; one that splits a dim into several nests stacks of
  its chunks. Any other shape has no lazy form: reshape gives a dense TensorDict, and so does view
  (tensordict raises: a view of a lazy stack's members cannot be one tensor view).
* ``lead`` (atleast_1d/2d/3d): leading dims of size 1, added by the stack's ``unsqueeze``.
* ``expand``: each member expanded, then stacked as ``maybe_dense_stack`` does (dense when the members agree
  in keys and shapes, as tensordict); a stack dim of size 1 repeats its member.
* ``mask`` (masked_fill, where): a condition over the batch dims, expanded to the batch size and split along
  the stack dim, one piece per member.

An empty stack, one whose members' batch sizes differ (but for ``order``, ``lead`` and ``expand``) and arguments an op
has no lazy form for take the generic path (a dense TensorDict). ``torch.stack``/``torch.cat`` of lazy
stacks (:func:`join`) and a batch index with ``None``, an index tensor of several dims or a mask over several
dims (:func:`getitem`) stay lazy too; :func:`dense_top` is ``maybe_dense_stack``'s level-by-level stack.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._ops import shape as _shape
from ._ops import torch_function as _torch_function
from ._ops.index import check_mask, normalize
from ._ops.traverse import NON_TENSOR_TYPES, is_node, is_td
from .base import TensorDictBase

_Size = torch.Size
_Tensor = torch.Tensor
_Lazy: Any = None  # LazyStackedTensorDict (set by install): results are lazy stacks in memory, also of a subclass
maybe_dense_stack: Any = None  # _lazy's (set by install)
_stackable: Any = None  # _lazy's (set by install)


# ---------------------------------------------------------------------- the kinds: plan -> lazy result
def _reorder(s: Any, order: tuple[int, ...]) -> Any:
    """``order`` permutes the batch dims: the stack dim moves, the members permute the others."""
    if order == tuple(range(len(order))):
        return s
    d = s._stack_dim
    rest = tuple(o if o < d else o - 1 for o in order if o != d)
    members = list(s._tds) if rest == tuple(range(len(rest))) else [td.permute(rest) for td in s._tds]
    return _Lazy._new(members, order.index(d), None, s._stack_name)


def _pieces(s: Any, plan: tuple[int, list[int]]) -> tuple[Any, ...]:
    """Pieces of sizes ``plan[1]`` along dim ``plan[0]`` (``-1``: unbind, the dim is removed)."""
    dim, sizes = plan
    d, cls = s._stack_dim, _Lazy
    unbind = bool(sizes) and sizes[0] == -1
    if dim == d:
        if unbind:
            return tuple(s._tds)
        out, start = [], 0
        for size in sizes:
            if size:
                out.append(cls._new(s._tds[start : start + size], d, None, s._stack_name))
            else:  # an empty piece: no member
                out.append(cls(batch_size=(*s._batch_size[:d], 0, *s._batch_size[d + 1 :]), stack_dim=d))
            start += size
        return tuple(out)
    member_dim = dim if dim < d else dim - 1
    if unbind:
        parts = [td.unbind(member_dim) for td in s._tds]
        return tuple(cls._new(list(p), d if dim > d else d - 1) for p in zip(*parts, strict=True))
    parts = [td.split(sizes, member_dim) for td in s._tds]
    return tuple(cls._new(list(p), d, None, s._stack_name) for p in zip(*parts, strict=True))


def _merged_run(new: torch.Size, old: torch.Size) -> tuple[int, int] | None:
    """``(i, j)`` when ``new`` is ``old`` with its dims ``i..j`` merged into one (tensordict's test), else None."""
    if not new or not old or new.numel() != old.numel():
        return None
    n = min(len(new), len(old))
    i = next((k for k in range(n) if new[k] != old[k]), n - 1)
    j = next((k for k in range(n) if new[-1 - k] != old[-1 - k]), n - 1)
    return (i, len(old) - j - 1) if i == len(new) - j - 1 else None


def _regroup(s: Any, new: torch.Size) -> Any:
    """A lazy stack of batch size ``new`` made of the elements of ``s``, or None (no lazy form)."""
    bs = s._batch_size
    if new == bs:
        return s
    run = _merged_run(new, bs)
    if run is not None:  # dims i..j merge: their elements, row-major, stacked at i
        i, j = run
        parts = [s]
        for _ in range(i, j + 1):
            parts = [p for part in parts for p in part.unbind(i)]
        return _Lazy._new(parts, i)
    run = _merged_run(bs, new)
    if run is None:
        return None
    i, j = run  # dim i splits into new[i..j]: stack chunks of it, dim by dim
    out = s
    for k in range(i, j):
        size = math.prod(new[k + 1 : j + 1])
        out = _Lazy._new(list(out.split(size, k)), k)
    return out if out.batch_size == new else None


def _reshape_plan(s: Any, *shape: Any, size: Any = None, inplace: bool = False) -> torch.Size | None:
    return None if inplace else _shape.view_shape(s, *shape, size=size, what="reshape")


def _view_plan(s: Any, *shape: Any, size: Any = None, batch_size: Any = None) -> torch.Size | None:
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return None
    return _shape.view_shape(s, *shape, size=size, batch_size=batch_size)


def _flatten_plan(
    s: Any, start_dim: int | None = None, end_dim: int | None = None, *, inplace: bool = False
) -> torch.Size | None:
    if inplace or not s.batch_dims:
        return None
    start = _shape._dim(s, 0 if start_dim is None else start_dim)
    return _shape.flatten_shape(s, start, _shape._dim(s, -1 if end_dim is None else end_dim))


def _unflatten_plan(s: Any, dim: int, unflattened_size: Sequence[int], *, inplace: bool = False) -> Any:
    if inplace:
        return None
    d, sizes = _shape.unflatten_sizes(s, dim, unflattened_size)
    bs = s._batch_size
    return _Size([*bs[:d], *sizes, *bs[d + 1 :]])


def _lead(s: Any, n: int) -> Any:
    while s.batch_dims < n:
        s = s.unsqueeze(0)
    return s


def _expand_plan(s: Any, *shape: Any) -> tuple[torch.Size, int]:
    new, lead = _shape.expanded_size(s, shape)
    return new, lead + s._stack_dim


def _expand(s: Any, plan: tuple[torch.Size, int]) -> Any:
    """Each member expanded, then stacked as ``maybe_dense_stack`` does: dense when they agree (as tensordict)."""
    new, d = plan
    n = new[d]
    if not n:
        return None
    tds = s._tds if n == len(s._tds) else [s._tds[0].copy() for _ in range(n)]  # (a stack dim of size 1)
    member = _Size((*new[:d], *new[d + 1 :]))
    out = maybe_dense_stack([td.expand(member) for td in tds], d)
    if s._stack_name is not None:  # the stack dim keeps its name
        if type(out) is _Lazy:
            out._stack_name = s._stack_name
        else:
            names = list(out.names)
            names[d] = s._stack_name
            with contextlib.suppress(ValueError, RuntimeError):  # (a name a member dim has too: left unnamed)
                out.names = names
    return out


def _full_mask(s: Any, mask: Any, beyond: bool = False) -> Any:
    """``mask`` over the leading batch dims, expanded to the batch size; None when it is no such mask.

    ``beyond``: a mask longer than the batch dims (``where``'s condition over the leaves' dims) whose leading
    dims are the batch size is taken as it is (it splits along the stack dim like the leaves).
    """
    if (
        beyond
        and isinstance(mask, _Tensor)
        and mask.ndim > s.batch_dims
        and mask.shape[: s.batch_dims] == s._batch_size
    ):
        return mask
    if not isinstance(mask, _Tensor) or not 0 < mask.ndim <= s.batch_dims or mask.shape != s._batch_size[: mask.ndim]:
        return None
    return mask.reshape(*mask.shape, *[1] * (s.batch_dims - mask.ndim)).expand(s._batch_size)


def _masked_fill_plan(s: Any, mask: Any, value: Any) -> Any:
    check_mask(s, mask, RuntimeError)
    full = _full_mask(s, mask)
    return None if full is None else (lambda td, m: td.masked_fill(m, value), full, None)


def _where_plan(s: Any, condition: Any, other: Any, *, out: Any = None, pad: Any = None) -> Any:
    full = _full_mask(s, condition, beyond=True)
    if full is None or out is not None:
        return None
    if is_td(other):  # each member meets its slice of ``other``
        if other.batch_size != s._batch_size:
            return None
        return (lambda td, m, o: td.where(m, o, pad=pad)), full, other.unbind(s._stack_dim)
    if isinstance(other, _Tensor) and other.ndim:
        # It aligns with each leaf from the right (as TensorDict.where): a member can take its slice only when
        # ``other`` spans every leaf's dims, batch dims first; else the generic (dense) where.
        if other.shape[: s.batch_dims] != s._batch_size or not _spans_leaves(s, other.ndim):
            return None
        return (lambda td, m, o: td.where(m, o, pad=pad)), full, other.unbind(s._stack_dim)
    return (lambda td, m: td.where(m, other, pad=pad)), full, None


def _spans_leaves(s: Any, ndim: int) -> bool:
    """True when every leaf of the stack is a tensor with ``ndim`` dims (its members' with one fewer)."""
    leaves = s._tds[0].values(True, True)
    return all(isinstance(v, _Tensor) and v.ndim + 1 == ndim for v in leaves)


def _masked(s: Any, plan: Any) -> Any:
    fn, full, others = plan
    masks = full.unbind(s._stack_dim)
    if others is None:
        others = [None] * len(masks)
    members = [_masked_member(fn, td, m, o) for td, m, o in zip(s._tds, masks, others, strict=True)]
    return _Lazy._new(members, s._stack_dim, None, s._stack_name)


def _masked_member(fn: Callable[..., Any], td: Any, mask: _Tensor, other: Any) -> Any:
    if mask.ndim:
        return fn(td, mask) if other is None else fn(td, mask, other)
    # a member without batch dims: its one element, as a dim of size 1 (a mask needs a batch dim)
    one = fn(td.unsqueeze(0), mask[None]) if other is None else fn(td.unsqueeze(0), mask[None], other.unsqueeze(0))
    return one.squeeze(0)


_KINDS: dict[str, Callable[[Any, Any], Any]] = {
    "order": _reorder,
    "split": _pieces,
    "shape": _regroup,
    "lead": _lead,
    "expand": _expand,
    "mask": _masked,
}

# the table's ops whose results a locked stack does not lock (tensordict's expand: a new stack of the members')
DROP_LOCK = frozenset({"expand"})

# op name -> (kind, plan(stack, *args, **kwargs) -> the kind's argument, or None for the generic path)
TABLE: dict[str, tuple[str, Callable[..., Any]]] = {
    "permute": ("order", _shape.permute_order),
    "transpose": ("order", _shape.transpose_order),
    "swapaxes": ("order", _shape.transpose_order),
    "swapdims": ("order", _shape.transpose_order),
    "movedim": ("order", _shape.movedim_order),
    "moveaxis": ("order", _shape.movedim_order),
    "split": ("split", _shape.split_sizes),
    "chunk": ("split", _shape.chunk_sizes),
    "tensor_split": ("split", _shape.tensor_split_sizes),
    "unbind": ("split", _shape.unbind_sizes),
    "reshape": ("shape", _reshape_plan),
    "view": ("shape", _view_plan),
    "flatten": ("shape", _flatten_plan),
    "unflatten": ("shape", _unflatten_plan),
    "expand": ("expand", _expand_plan),
    "atleast_1d": ("lead", lambda s: 1),
    "atleast_2d": ("lead", lambda s: 2),
    "atleast_3d": ("lead", lambda s: 3),
    "masked_fill": ("mask", _masked_fill_plan),
    "where": ("mask", _where_plan),
}


def _method(name: str, kind: str, plan: Callable[..., Any]) -> Callable[..., Any]:
    generic = getattr(TensorDictBase, name)
    run = _KINDS[kind]
    ragged_ok = kind in ("order", "lead", "expand")  # they need no size of a dim where the members differ (-1)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._tds and (ragged_ok or -1 not in self._batch_size):
            arg = plan(self, *args, **kwargs)
            if arg is not None:
                out = run(self, arg)
                if out is not None:
                    return out
        return generic(self, *args, **kwargs)

    functools.update_wrapper(method, generic)  # its signature and docs (here the result is a lazy stack)
    return method


# ---------------------------------------------------------------------- torch.stack / torch.cat
def _parts(td: Any, cls: Any, d: int) -> Sequence[Any]:
    parts: Sequence[Any] = td._tds if type(td) is cls else td.unbind(d)
    return parts


def join(what: str, tds: list[Any], dim: int) -> Any:
    """``torch.stack``/``torch.cat`` (``what``) along ``dim`` (normalised) when lazy stacks are joined, else None.

    As tensordict: lazy stacks of one stack dim stack to a lazy stack of their members' stacks, and cat (with
    dense TensorDicts too) to a lazy stack (along the stack dim: all the members; else the members' cats).
    Lazy stacks of different stack dims join densely (tensordict refuses them).
    """
    cls = _Lazy
    lazy = [td for td in tds if type(td) is cls]
    if not lazy or not all(is_td(td) and type(td) not in NON_TENSOR_TYPES for td in tds):
        return None
    d = lazy[0]._stack_dim
    if any(s._stack_dim != d or -1 in s._batch_size or not s._tds for s in lazy):
        return None
    if what == "stack":
        if len(lazy) < len(tds):  # a dense one among them: a dense stack, as tensordict
            return None
        member_dim, new_d = (dim, d + 1) if dim <= d else (dim - 1, d)
        try:
            members = [torch.stack([s._tds[i] for s in tds], member_dim) for i in range(len(tds[0]._tds))]
        except (RuntimeError, KeyError):
            return None
        return cls._new(members, new_d)
    first = tds[0].batch_size
    if any(len(td.batch_size) != len(first) or _without(td.batch_size, dim) != _without(first, dim) for td in tds):
        return None  # (the generic path says why)
    parts = [_parts(td, cls, d) for td in tds]
    if dim == d:  # (the stack dim's name is dropped, as tensordict)
        return cls._new([m for p in parts for m in p], d)
    member_dim = dim if dim < d else dim - 1
    try:
        members = [torch.cat([p[i] for p in parts], member_dim) for i in range(len(parts[0]))]
    except (RuntimeError, KeyError):  # members whose keys differ: the common keys, densely
        return None
    return cls._new(members, d)


def _without(size: torch.Size, dim: int) -> tuple[int, ...]:
    return (*size[:dim], *size[dim + 1 :])


# ---------------------------------------------------------------------- indexing
def getitem(s: Any, index: Any) -> Any:
    """``s[index]`` for the indices the member split leaves: with ``None`` (new dims) or a mask over several dims.

    ``None`` adds a dim of size 1 (the stack's ``unsqueeze``); a mask that covers the stack dim picks the
    elements it selects (row-major) as the members of a stack at its place, another mask indexes every member.
    Anything else takes the generic path.
    """
    conv, _, _ = normalize(s, index, with_names=False)
    if any(i is None for i in conv) and not any(isinstance(i, _Tensor) for i in conv):
        kept = tuple(i for i in conv if i is not None)
        out = s[kept] if kept else s
        pos, new_dims = 0, []
        for item in conv:
            if item is None:
                new_dims.append(pos)
            if not isinstance(item, int):
                pos += 1
        for dim in new_dims:
            out = out.unsqueeze(dim)
        return out
    tensors = [i for i, item in enumerate(conv) if isinstance(item, _Tensor)]
    if len(tensors) == 1 and s._tds and -1 not in s._batch_size:
        at = tensors[0]
        t = conv[at]
        if t.ndim > 1 and all(i == slice(None) for i in conv if i is not t):
            if t.dtype == torch.bool and t.shape == s._batch_size[at : at + t.ndim]:
                return _mask_index(s, at, t)
            if not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool):
                return _long_index(s, at, t)
    return TensorDictBase.__getitem__(s, index)


def _long_index(s: Any, at: int, index: _Tensor) -> Any:
    """An index tensor of several dims at dim ``at``: members picked into nested stacks, or each member indexed."""
    d, k = s._stack_dim, index.ndim
    if at != d:
        member_at = at if d > at else at - 1
        members = [td[(*(slice(None),) * member_at, index)] for td in s._tds]
        return _Lazy._new(members, d if d < at else d + k - 1, None, s._stack_name)
    n = len(s._tds)
    if index.numel() and not -n <= int(index.min()) <= int(index.max()) < n:
        raise IndexError(f"an index in {index.tolist()} is out of bounds for the stack dim {d} of size {n}")
    if not index.numel():
        return TensorDictBase.__getitem__(s, (*(slice(None),) * at, index))

    def nest(rows: Any) -> Any:
        if isinstance(rows[0], int):
            return _Lazy._new([s._tds[i] for i in rows], d)
        return _Lazy._new([nest(r) for r in rows], d)

    return nest(index.tolist())


def _mask_index(s: Any, at: int, mask: _Tensor) -> Any:
    d, k, cls = s._stack_dim, mask.ndim, _Lazy
    lead = (slice(None),) * at
    if not at <= d < at + k:  # the mask is over member dims: each member takes it
        member_at = at if d > at else at - 1
        members = [td[(*(slice(None),) * member_at, mask)] for td in s._tds]
        return cls._new(members, d if d < at else d - k + 1, None, s._stack_name)
    rows = mask.nonzero().tolist()
    if not rows:
        return TensorDictBase.__getitem__(s, (*lead, mask))
    elements = []
    for row in rows:
        member = row.pop(d - at)
        elements.append(s._tds[member][(*lead, *row)])
    return cls._new(elements, at)


# ---------------------------------------------------------------------- maybe_dense_stack
def dense_top(tds: list[Any], dim: int) -> Any:
    """A dense stack of ``tds`` whose sub-TensorDicts are stacked by ``maybe_dense_stack``, or None.

    As tensordict: TensorDicts with the same keys and leaf shapes at the top stack densely there, even when
    a sub-TensorDict's keys or leaf shapes differ (that one becomes a lazy stack).
    """
    first: Any = tds[0] if tds else None
    if type(first) is not getattr(type(first), "_dense_cls", None):  # (a TensorDict: not a subclass, nor a stack)
        return None
    nodes = [
        k for k, v in first._items_str() if type(v) is not _Tensor and is_node(v) and type(v) not in NON_TENSOR_TYPES
    ]
    if not nodes or any(type(td) is not type(first) for td in tds):
        return None  # (no sub-TensorDict: nothing to stack otherwise than all at once)
    keys = set(first._keys_str())
    if any(set(td._keys_str()) != keys for td in tds):
        return None
    columns = {key: [td._get_str(key) for td in tds] for key in nodes}
    if not all(is_node(v) and type(v) not in NON_TENSOR_TYPES for col in columns.values() for v in col):
        return None
    rest = [td.exclude(*nodes) for td in tds]
    if not _stackable(rest):
        return None
    out: Any = torch.stack(rest, dim)
    for key in nodes:
        out.set(key, maybe_dense_stack(columns[key], dim))
    return out


def install(cls: type, dense_stack: Callable[..., Any], stackable: Callable[..., Any]) -> None:
    """Give the lazy stack class the table's methods; register :func:`join` for ``torch.stack``/``torch.cat``.

    ``dense_stack`` and ``stackable`` are ``_lazy``'s ``maybe_dense_stack`` and ``_stackable``, given here
    (``_lazy`` imports this module: importing them back would make a cycle).
    """
    global _Lazy, maybe_dense_stack, _stackable
    _Lazy, maybe_dense_stack, _stackable = cls, dense_stack, stackable
    for name, (kind, plan) in TABLE.items():
        method = _method(name, kind, plan)
        method.__qualname__ = f"{cls.__name__}.{name}"
        setattr(cls, name, method)
    _torch_function.LAZY_JOIN = join
