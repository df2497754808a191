"""Reductions (sum, mean, std, max, ...) over batch dims, one implementation for all of them.

Semantics follow tensordict 0.15: with ``dim`` omitted every leaf is reduced over all its
elements (the result has batch size ``[]``); with ``dim`` (an int or a tuple of batch dims) each
leaf is reduced over those dims only; ``reduce=True`` further folds the leaves into one tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .traverse import NO_DEFAULT, apply_leaves, flat_leaves, from_leaves, map_leaves

_Size = torch.Size

_WITH_INDICES = {"max", "min"}
# reductions whose torch op takes ``dim`` (int or tuple) and ``keepdim`` directly
_SIMPLE = {"sum", "mean", "nansum", "nanmean", "std", "var", "amax", "amin"}


def batch_dims_of(td: Any, dim: Any) -> tuple[int, ...]:
    """Normalise ``dim`` (int or tuple, negative allowed) against the batch dims; sorted, unique."""
    nd = td.batch_dims
    if type(dim) is int and -nd <= dim < nd:  # the common call
        return (dim % nd,)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in dims:
        if not -nd <= d < nd:
            raise IndexError(
                f"dim {d} is out of range for batch_size {list(td.batch_size)} ({nd} batch dims)"
            )
        out.append(d % nd)
    if len(set(out)) != len(out):
        raise ValueError(f"dim {dim!r} repeats a dimension")
    return tuple(sorted(out))


def reduce(td: Any, name: str, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool = False,
           return_indices: bool = True, **kwargs: Any) -> Any:
    """Reduce every leaf of ``td`` with ``torch.<name>``; see the module docstring."""
    op = getattr(torch, name)
    if type(dim) is str:
        if dim != "feature":
            raise ValueError(f"dim must be an int, a tuple of ints or 'feature', got {dim!r}")
        return _reduce_features(td, name, keepdim, kwargs)
    if dim is NO_DEFAULT or dim is None:
        if reduce:
            leaves = [leaf.reshape(-1) for leaf in flat_leaves(td)]
            return _call(op, name, torch.cat(leaves) if leaves else torch.zeros(0), None, False, kwargs)
        return map_leaves(td, _leaf_fn(op, name, None, False, kwargs), batch_size=_Size(()),
                          what=f"reducing with {name!r}")
    dims = batch_dims_of(td, dim)
    bs = td.batch_size
    new_bs = _Size([1 if i in dims else s for i, s in enumerate(bs)] if keepdim else
                   [s for i, s in enumerate(bs) if i not in dims])
    names = td._maybe_names()  # the reduced dims' names go, the others stay (kept dims keep theirs)
    if names is not None:
        names = names if keepdim else tuple(n for i, n in enumerate(names) if i not in dims)
    if name in _WITH_INDICES:
        indices: list[torch.Tensor] = []

        def values_keeping_indices(x: torch.Tensor) -> torch.Tensor:
            result = _call(op, name, x, dims, keepdim, kwargs)
            indices.append(result[1])
            return result[0]  # type: ignore[no-any-return]  # a (values, indices) pair

        # one reduction per leaf: the indices, collected in walk order, fill a tree of the same shape
        values = apply_leaves(td, values_keeping_indices, batch_size=new_bs, names=names,
                              what=f"reducing with {name!r}")
        if reduce:
            return _fold(op, name, values)
        if not return_indices:
            return values
        return getattr(torch.return_types, name)((values, from_leaves(values, indices)))
    result = map_leaves(td, _leaf_fn(op, name, dims, keepdim, kwargs), batch_size=new_bs, names=names,
                        what=f"reducing with {name!r}")
    return _fold(op, name, result) if reduce else result


def _leaf_fn(op: Callable[..., Any], name: str, dims: Any, keepdim: bool,
             kwargs: dict[str, Any]) -> Callable[[torch.Tensor], Any]:
    """The per-leaf reduction: a plain ``partial`` of the torch op in the common case (no Python frame)."""
    if name in _SIMPLE and not kwargs:
        if dims is None:
            return op
        return functools.partial(op, dim=dims[0] if len(dims) == 1 else dims, keepdim=keepdim)
    return lambda x: _call(op, name, x, dims, keepdim, kwargs)


def _reduce_features(td: Any, name: str, keepdim: bool, kwargs: dict[str, Any]) -> Any:
    """Reduce each leaf over its feature dims (those past the batch dims); the batch size is kept."""
    nd = td.batch_dims
    alias = {"max": "amax", "min": "amin"}.get(name, name)
    op = getattr(torch, alias)

    def fn(x: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(nd, x.ndim))
        if not dims:
            return x
        return _call(op, alias, x, dims, keepdim, kwargs)  # type: ignore[no-any-return]  # amax/amin: no indices

    return apply_leaves(td, fn, what=f"reducing features with {name!r}")


def _call(op: Callable[..., Any], name: str, x: torch.Tensor, dims: Any, keepdim: bool,
          kwargs: dict[str, Any]) -> Any:
    if name == "norm":
        return torch.linalg.vector_norm(x, dim=dims, keepdim=keepdim, **kwargs)
    if dims is None:
        return op(x, **kwargs)
    if name in _WITH_INDICES:
        if len(dims) != 1:
            raise ValueError(f"{name} with indices reduces one dim at a time, got dims {dims}")
        return op(x, dim=dims[0], keepdim=keepdim)
    if name in {"all", "any", "prod"} and len(dims) == 1:
        return op(x, dim=dims[0], keepdim=keepdim, **kwargs)
    if name in {"all", "any", "prod"}:
        for d in reversed(dims):
            x = op(x, dim=d, keepdim=keepdim, **kwargs)
        return x
    return op(x, dim=dims, keepdim=keepdim, **kwargs)


def _fold(op: Callable[..., Any], name: str, td: Any) -> torch.Tensor:
    leaves = flat_leaves(td)
    stacked = torch.stack(leaves) if leaves else torch.zeros(0)
    # torch.linalg is untyped and ``op`` is looked up by name: their results are Any
    if name in {"norm"}:
        return torch.linalg.vector_norm(stacked, dim=0)  # type: ignore[no-any-return]
    if name in _WITH_INDICES:
        return op(stacked, dim=0).values  # type: ignore[no-any-return]
    return op(stacked, dim=0)  # type: ignore[no-any-return]


def make(name: str) -> Callable[..., Any]:
    """A reduction method for ``name``."""

    def method(self: Any, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool = False,
               **kwargs: Any) -> Any:
        return _reduce(self, name, dim, keepdim, reduce=reduce, **kwargs)

    method.__name__ = name
    method.__doc__ = (
        f"Reduce every leaf with :func:`torch.{name}`: over all elements when ``dim`` is omitted, else over "
        "the given batch dims. ``reduce=True`` folds the leaves into one tensor."
    )
    return method


_reduce = reduce
