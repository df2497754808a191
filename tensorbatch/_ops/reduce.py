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

from .._unbatched import is_unbatched
from .traverse import NO_DEFAULT, apply_leaves, flat_leaves, from_leaves, is_td, map_leaves

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
            raise IndexError(f"dim {d} is out of range for batch_size {list(td.batch_size)} ({nd} batch dims)")
        out.append(d % nd)
    if len(set(out)) != len(out):
        raise ValueError(f"dim {dim!r} repeats a dimension")
    return tuple(sorted(out))


def reduce(
    td: Any,
    name: str,
    dim: Any = NO_DEFAULT,
    keepdim: bool = False,
    *,
    reduce: bool = False,
    return_indices: bool = True,
    **kwargs: Any,
) -> Any:
    """Reduce every leaf of ``td`` with ``torch.<name>``; see the module docstring."""
    op = getattr(torch, name)
    if type(dim) is str:
        if dim != "feature":
            raise ValueError(f"dim must be an int, a tuple of ints or 'feature', got {dim!r}")
        if reduce:  # one reduction over every leaf's features side by side, to the batch shape (as tensordict,
            # whatever keepdim): TorchRL sums composite log-probabilities so
            features = torch.cat([leaf.reshape(*td.batch_size, -1) for leaf in flat_leaves(td)], -1)
            return _call(op, name, features, (features.ndim - 1,), False, kwargs)
        return _reduce_features(td, name, keepdim, kwargs)
    if dim is NO_DEFAULT or dim is None:
        if reduce:
            leaves = [leaf.reshape(-1) for leaf in flat_leaves(td)]
            return _call(op, name, torch.cat(leaves) if leaves else torch.zeros(0), None, False, kwargs)
        return map_leaves(
            td, _leaf_fn(op, name, None, False, kwargs), batch_size=_Size(()), what=f"reducing with {name!r}"
        )
    dims = batch_dims_of(td, dim)
    bs = td.batch_size
    new_bs = _Size(
        [1 if i in dims else s for i, s in enumerate(bs)] if keepdim else [s for i, s in enumerate(bs) if i not in dims]
    )
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
        values = apply_leaves(
            td, values_keeping_indices, batch_size=new_bs, names=names, what=f"reducing with {name!r}"
        )
        if reduce:
            return _fold(op, name, values)
        if not return_indices:
            return values
        found = iter(indices)  # an unbatched leaf was passed through, not reduced: it stands for its indices
        indices = [leaf if is_unbatched(leaf) else next(found) for leaf in flat_leaves(values)]
        return getattr(torch.return_types, name)((values, from_leaves(values, indices)))
    result = map_leaves(
        td, _leaf_fn(op, name, dims, keepdim, kwargs), batch_size=new_bs, names=names, what=f"reducing with {name!r}"
    )
    return _fold(op, name, result) if reduce else result


def _leaf_fn(
    op: Callable[..., Any], name: str, dims: Any, keepdim: bool, kwargs: dict[str, Any]
) -> Callable[[torch.Tensor], Any]:
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
        if not dims or is_unbatched(x):  # (an unbatched leaf has no batch dims to keep: left alone)
            return x
        return _call(op, alias, x, dims, keepdim, kwargs)  # type: ignore[no-any-return]  # amax/amin: no indices

    return apply_leaves(td, fn, what=f"reducing features with {name!r}")


def _call(op: Callable[..., Any], name: str, x: torch.Tensor, dims: Any, keepdim: bool, kwargs: dict[str, Any]) -> Any:
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

    def method(
        self: Any,
        dim: Any = NO_DEFAULT,
        keepdim: bool = False,
        *,
        reduce: bool = False,
        key_transform: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        result = _reduce(self, name, dim, keepdim, reduce=reduce, **kwargs)
        return result if key_transform is None else _renamed_keys(result, key_transform)

    method.__name__ = name
    method.__doc__ = (
        f"Reduce every leaf with :func:`torch.{name}`: over all elements when ``dim`` is omitted, else over "
        "the given batch dims. ``reduce=True`` folds the leaves into one tensor; ``key_transform`` renames every "
        "key of the result, level by level."
    )
    return method


_reduce = reduce


# ------------------------------------------------------------------ softmax, logsumexp, scans, quantiles
def _one_dim(td: Any, dim: int) -> int:
    nd = td.batch_dims
    if type(dim) is not int or not -nd <= dim < nd:  # "Incompatible dim": tensordict's phrase
        raise IndexError(
            f"dim {dim} is out of range for batch_size {list(td.batch_size)}: Incompatible dim {dim} "
            f"for tensordict with shape {td.batch_size}"
        )
    return dim % nd  # type: ignore[no-any-return]  # ``td`` is Any


def logsumexp(td: Any, dim: Any = None, keepdim: bool = False, *, out: Any = None) -> Any:
    """:func:`torch.logsumexp` of every leaf over batch dims (all of them when ``dim`` is None).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.zeros(2, 3), batch_size=[2]).logsumexp()["a"]
        tensor([0.6931, 0.6931, 0.6931])
    """
    nd = td.batch_dims
    try:
        dims = tuple(range(nd)) if dim is None else batch_dims_of(td, dim)
    except IndexError as err:
        raise ValueError(f"logsumexp: {err.args[0]}") from None
    bs = td.batch_size
    new_bs = _Size(
        [1 if i in dims else s for i, s in enumerate(bs)] if keepdim else [s for i, s in enumerate(bs) if i not in dims]
    )
    names = td._maybe_names()
    if names is not None and not keepdim:
        names = tuple(n for i, n in enumerate(names) if i not in dims)
    result = map_leaves(
        td, lambda x: torch.logsumexp(x, dims, keepdim), batch_size=new_bs, names=names, what="logsumexp"
    )
    return result if out is None else out.update_(result)


def softmax(td: Any, dim: int, dtype: torch.dtype | None = None) -> Any:
    """:func:`torch.softmax` of every leaf along batch dim ``dim`` (cast to ``dtype`` first when given).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.zeros(2), batch_size=[2]).softmax(0)["a"]
        tensor([0.5000, 0.5000])
    """
    d = _one_dim(td, dim)
    return map_leaves(td, lambda x: torch.softmax(x, d, dtype=dtype), names=td._maybe_names(), what="softmax")


def _folded(td: Any, d: int | None) -> torch.Tensor:
    """The leaves as one tensor for ``reduce=True``: concatenated along ``d``, or flattened when None."""
    leaves = flat_leaves(td)
    if d is None:
        return torch.cat([leaf.reshape(-1) for leaf in leaves])
    return torch.cat(leaves, d)


def scan(td: Any, name: str, dim: int, *, reduce: bool | None = None, return_indices: bool = True) -> Any:
    """``torch.cummax``/``torch.cummin`` of every leaf along batch dim ``dim``: ``(values, indices)`` TensorDicts.

    ``return_indices=False`` gives the values only; ``reduce=True`` scans the leaves concatenated along ``dim``.
    """
    op = getattr(torch, name)
    d = _one_dim(td, dim)
    if reduce:
        result = op(_folded(td, d), d)
        return result if return_indices else result.values
    indices: list[torch.Tensor] = []

    def values_keeping_indices(x: torch.Tensor) -> torch.Tensor:
        result = op(x, d)
        indices.append(result.indices)
        return result.values  # type: ignore[no-any-return]

    values = apply_leaves(td, values_keeping_indices, names=td._maybe_names(), what=name)
    if not return_indices:
        return values
    return getattr(torch.return_types, name)((values, from_leaves(values, indices)))


def _scan_method(name: str) -> Callable[..., Any]:
    def method(self: Any, dim: int, *, reduce: bool | None = None, return_indices: bool = True) -> Any:
        return scan(self, name, dim, reduce=reduce, return_indices=return_indices)

    method.__name__ = name
    method.__doc__ = (
        f":func:`torch.{name}` of every leaf along batch dim ``dim``: a ``(values, indices)`` pair of "
        "TensorDicts (values only with ``return_indices=False``)."
    )
    return method


cummax, cummin = _scan_method("cummax"), _scan_method("cummin")


def quantile(
    td: Any,
    q: Any,
    dim: Any = NO_DEFAULT,
    keepdim: bool = False,
    *,
    interpolation: str = "linear",
    reduce: bool | None = None,
    key_transform: Callable[[Any], Any] | None = None,
) -> Any:
    """:func:`torch.quantile` of every leaf, over all its elements, batch dims or feature dims.

    Without ``dim``: over all the leaf's elements; with ``dim``: over those batch dims; with
    ``dim="feature"``: over the dims past the batch dims.

    A 1-d ``q`` adds a leading batch dim of its length (as torch adds a leading dim). ``reduce=True``
    takes the quantile of the leaves concatenated (flattened without ``dim``); ``key_transform``
    renames every key of the result.

    Note:
        Differs from tensordict: a tuple ``dim`` takes the quantile over those batch dims together.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.arange(4.0).view(2, 2), batch_size=[2]).quantile(0.5, 0)["a"]
        tensor([1., 2.])
    """
    q_t = torch.as_tensor(q, dtype=torch.get_default_dtype())
    lead = tuple(q_t.shape)
    kwargs: dict[str, Any] = {"interpolation": interpolation}
    if dim is NO_DEFAULT or dim is None:
        if reduce:
            return torch.quantile(_folded(td, None), q_t, **kwargs)
        # batch size [] even for a 1-d q (as tensordict): the q dim stays a feature dim
        result = map_leaves(td, lambda x: _quantile(x, q_t, None, False, kwargs), batch_size=_Size(()), what="quantile")
    elif type(dim) is str:
        if dim != "feature":
            raise ValueError(f"quantile: dim must be an int, a tuple of ints or 'feature', got {dim!r}")
        nd = td.batch_dims
        result = map_leaves(
            td,
            lambda x: _quantile(x.reshape(*x.shape[:nd], -1), q_t, -1, keepdim, kwargs),
            batch_size=_Size(lead + tuple(td.batch_size)),
            what="quantile",
        )
    else:
        dims = (_one_dim(td, dim),) if type(dim) is int else batch_dims_of(td, dim)
        if reduce:
            if len(dims) != 1:
                raise ValueError(f"quantile: reduce=True takes one dim, got {dim!r}")
            return torch.quantile(_folded(td, dims[0]), q_t, dims[0], keepdim, **kwargs)
        bs = td.batch_size
        kept = (
            [1 if i in dims else s for i, s in enumerate(bs)]
            if keepdim
            else [s for i, s in enumerate(bs) if i not in dims]
        )
        result = map_leaves(
            td,
            lambda x: _quantile_dims(x, q_t, dims, keepdim, kwargs),
            batch_size=_Size(lead + tuple(kept)),
            what="quantile",
        )
    if key_transform is not None:
        result = _renamed_keys(result, key_transform)
    return result


def _quantile(x: torch.Tensor, q: torch.Tensor, dim: int | None, keepdim: bool, kwargs: dict[str, Any]) -> Any:
    return torch.quantile(x, q.to(x.dtype) if x.is_floating_point() else q, dim, keepdim, **kwargs)


def _quantile_dims(
    x: torch.Tensor, q: torch.Tensor, dims: tuple[int, ...], keepdim: bool, kwargs: dict[str, Any]
) -> Any:
    if len(dims) == 1:
        return _quantile(x, q, dims[0], keepdim, kwargs)
    rest = [i for i in range(x.ndim) if i not in dims]
    moved = x.permute(*rest, *dims).reshape(*(x.shape[i] for i in rest), -1)  # the dims together, last
    out = _quantile(moved, q, -1, False, kwargs)
    if keepdim:
        for i in dims:
            out = out.unsqueeze(i + q.ndim)
    return out


def _renamed_keys(td: Any, transform: Callable[[Any], Any]) -> Any:
    """A copy of ``td`` with ``transform`` applied to every key at every level."""
    out = td.empty()
    for key, value in td._items_str():
        out._set_str(
            transform(key), _renamed_keys(value, transform) if is_td(value) else value, inplace=False, validated=True
        )
    return out
