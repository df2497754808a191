"""Shape operations on the batch dims: compute the new batch size once, then map one leaf function.

Each function takes the TensorDict first and is attached to ``TensorDictBase`` as a method.
Leaves keep their trailing (feature) dims untouched.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import torch

from .._errors import fmt_path
from . import ragged
from .traverse import check_leaves, flat_leaves, from_leaves, is_non_tensor, is_td, map_leaves, named_leaves

_Size = torch.Size


def _shape_args(shape: Any) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)):
        return tuple(shape[0])
    return tuple(shape)


def _dim(td: Any, dim: int, extra: int = 0, error: type[Exception] = IndexError) -> int:
    """Normalise a batch dim (``extra`` = 1 for unsqueeze-like ops that may point one past the end)."""
    nd: int = td.batch_dims + extra
    if not -nd <= dim < nd:
        raise error(  # "Incompatible dim": tensordict's phrase, which users match on
            f"dim {dim} is out of range for batch_size {list(td.batch_size)} "
            f"(expected a dim in [{-nd}, {nd - 1}]): Incompatible dim {dim} for tensordict with shape {td.batch_size}"
        )
    return dim % nd


def _infer_shape(td: Any, shape: tuple[int, ...], what: str) -> torch.Size:
    numel = td.batch_size.numel()
    if shape.count(-1) > 1:
        raise RuntimeError(f"{what}: only one dimension can be inferred, got shape {list(shape)}")
    known = math.prod([s for s in shape if s != -1])  # a list: dynamo cannot trace a generator here
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(
                f"{what}: shape {list(shape)} is invalid for batch_size {list(td.batch_size)}"
                f" (invalid shape {list(shape)} for a batch of {numel} elements)"
            )
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(  # "invalid shape ... for a batch of N elements": tensordict's phrase
            f"{what}: shape {list(shape)} is invalid for batch_size {list(td.batch_size)} ({numel} elements): "
            f"invalid shape {list(shape)} for a batch of {numel} elements"
        )
    return _Size(shape)


def _renamed(td: Any, new_names: Any) -> Any:
    names = td._maybe_names()
    return None if names is None else tuple(new_names(list(names)))


def view(td: Any, *shape: Any, size: Any = None, batch_size: Any = None) -> Any:
    """View with a new batch shape (leaves must be viewable), e.g. ``td.view(-1)``.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict({"a": torch.zeros(2, 3, 5)}, batch_size=[2, 3]).view(-1)["a"].shape
        torch.Size([6, 5])
    """
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        out = td._map(lambda x: x.view(shape[0]), "viewing as dtype")
        check_leaves(out)  # a dtype of another size changes the last dim: it must not be a batch dim
        return out
    new = view_shape(td, *shape, size=size, batch_size=batch_size)
    if new == td.batch_size:
        return td
    nd = td.batch_dims
    return td._map(lambda x: x.view(*new, *x.shape[nd:]), "view", batch_size=new, follow=True)


def view_shape(td: Any, *shape: Any, size: Any = None, batch_size: Any = None, what: str = "view") -> torch.Size:
    """The batch size ``td.view(*shape)`` (or ``reshape``: ``what``) gives, ``-1`` inferred."""
    return _infer_shape(td, _shape_args(shape or (size or batch_size,)), what)


def _done(td: Any, result: Any, inplace: bool) -> Any:
    """``result``, or (``inplace``) ``td`` after taking ``result``'s leaves and batch size."""
    return td._take_result(result) if inplace else result


def reshape(td: Any, *shape: Any, size: Any = None, inplace: bool = False) -> Any:
    """Reshape the batch dims (copies where a view is impossible); ``inplace`` reshapes ``td`` itself."""
    if inplace:
        return td._take_result(reshape(td, *shape, size=size))
    new = _infer_shape(td, _shape_args(shape or (size,)), "reshape")
    if new == td.batch_size:  # as view (and tensordict's reshape): the TensorDict itself (ragged leaves included)
        return td
    nd = td.batch_dims
    return td._map(lambda x: x.reshape(*new, *x.shape[nd:]), "reshape", batch_size=new, follow=True)


def permute_order(td: Any, *dims: Any, **kwargs: Any) -> tuple[int, ...]:
    """The permutation ``td.permute(*dims, **kwargs)`` applies, checked (every batch dim once, non-negative)."""
    if kwargs:
        if dims or set(kwargs) != {"dims"}:
            raise TypeError(
                f"permute takes the dims as integers, one sequence, or the keyword dims; got "
                f"args={dims} and kwargs={kwargs}"
            )
        dims = (kwargs["dims"],)
    nd = td.batch_dims
    order = tuple([d + nd if type(d) is int and d < 0 else d for d in _shape_args(dims)])
    if sorted(order) != list(range(nd)):  # a dim out of range, repeated or missing
        for d in _shape_args(dims):
            _dim(td, d, error=ValueError)  # raises for a dim out of range
        raise ValueError(
            f"permute: dims {list(dims)} are not a permutation of the {nd} batch dims (Cannot compute the permutation)"
        )  # tensordict's phrase, which users match on
    return order


def permute(td: Any, *dims: Any, **kwargs: Any) -> Any:
    """Permute the batch dims, given as integers, one sequence, or the keyword ``dims``.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict({"a": torch.zeros(2, 3, 5)}, batch_size=[2, 3]).permute(1, 0)["a"].shape
        torch.Size([3, 2, 5])
    """
    order = permute_order(td, *dims, **kwargs)
    bs = td.batch_size
    nd = len(bs)
    identity = tuple(range(nd))
    if order == identity:
        return td
    new = _Size([bs[d] for d in order])
    names = _renamed(td, lambda n: [n[d] for d in order])
    swapped = [d for d in identity if order[d] != d]
    if len(swapped) == 2:  # a swap of two dims: one transpose fits leaves of every ndim
        return map_leaves(
            td, operator.methodcaller("transpose", *swapped), what="permute", batch_size=new, names=names, follow=True
        )
    perms: dict[int, tuple[int, ...]] = {}  # leaf ndim -> full permutation (feature dims stay in place)

    def fn(x: torch.Tensor) -> torch.Tensor:
        perm = perms.get(x.ndim)
        if perm is None:
            perm = perms[x.ndim] = (*order, *range(nd, x.ndim))
        return x.permute(*perm)  # varargs: the tuple form parses ~30% slower

    return td._map(fn, "permute", batch_size=new, names=names, follow=True)


def transpose_order(td: Any, dim0: int, dim1: int) -> tuple[int, ...]:
    """The permutation ``td.transpose(dim0, dim1)`` applies."""
    order = list(range(td.batch_dims))
    a, b = _dim(td, dim0, error=ValueError), _dim(td, dim1, error=ValueError)
    order[a], order[b] = order[b], order[a]
    return tuple(order)


def transpose(td: Any, dim0: int, dim1: int) -> Any:
    """Swap two batch dims."""
    return permute(td, *transpose_order(td, dim0, dim1))


def _add_first_dim(x: torch.Tensor) -> torch.Tensor:
    return x[None]  # ~30% cheaper per leaf than x.unsqueeze(0) (an itemgetter would break dynamo graphs)


def unsqueeze(td: Any, dim: int) -> Any:
    """Insert a batch dim of size 1 at ``dim``."""
    bs = td.batch_size
    nd = len(bs)
    if not -nd - 1 <= dim <= nd:
        _dim(td, dim, extra=1, error=RuntimeError)  # raises
    d = dim % (nd + 1)
    names = _renamed(td, lambda n: [*n[:d], None, *n[d:]])
    fn = _add_first_dim if d == 0 else operator.methodcaller("unsqueeze", d)
    return map_leaves(td, fn, what="unsqueeze", batch_size=_Size((*bs[:d], 1, *bs[d:])), names=names, follow=True)


def squeeze(td: Any, dim: int | None = None) -> Any:
    """Remove batch dims of size 1 (all of them, or ``dim`` only)."""
    bs = td.batch_size
    if dim is None:
        dims = tuple(i for i, s in enumerate(bs) if s == 1)
    else:
        d = _dim(td, dim)
        dims = (d,) if bs[d] == 1 else ()
    if not dims:
        return td
    new = [s for i, s in enumerate(bs) if i not in dims]
    names = _renamed(td, lambda n: [x for i, x in enumerate(n) if i not in dims])
    return td._map(operator.methodcaller("squeeze", dims), "squeeze", batch_size=new, names=names, follow=True)


def flatten_shape(td: Any, start_dim: int, end_dim: int) -> torch.Size:
    """The batch size of ``td.flatten(start_dim, end_dim)`` (normalised dims, ``td`` has batch dims)."""
    if start_dim > end_dim:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    bs = td.batch_size
    return _Size([*bs[:start_dim], math.prod(bs[start_dim : end_dim + 1]), *bs[end_dim + 1 :]])


def flatten(td: Any, start_dim: int | None = None, end_dim: int | None = None, *, inplace: bool = False) -> Any:
    """Merge the batch dims ``start_dim..end_dim`` (default: all) into one; ``inplace`` changes ``td`` itself."""
    if inplace:
        return td._take_result(flatten(td, start_dim, end_dim))
    start_dim = 0 if start_dim is None else start_dim
    end_dim = -1 if end_dim is None else end_dim
    if td.batch_dims == 0 and start_dim in (0, -1):  # (a non-tensor leaf on its own keeps its class, as tensordict's)
        return (
            td._map(_add_first_dim, "reshape", batch_size=(1,), follow=True) if is_non_tensor(td) else unsqueeze(td, 0)
        )
    if td.batch_dims == 0:
        return td
    s, e = _dim(td, start_dim), _dim(td, end_dim)
    new = flatten_shape(td, s, e)
    names = _renamed(td, lambda n: [*n[:s], n[s] if s == e else None, *n[e + 1 :]])  # the merged dim is unnamed
    return td._map(operator.methodcaller("flatten", s, e), "flatten", batch_size=new, names=names, follow=True)


def unflatten_sizes(td: Any, dim: int, unflattened_size: Sequence[int]) -> tuple[int, list[int]]:
    """``(normalised dim, the sizes batch dim dim splits into)``, ``-1`` inferred."""
    d = _dim(td, dim)
    size = td.batch_size[d]
    sizes = list(unflattened_size)
    if -1 in sizes:
        known = math.prod([s for s in sizes if s != -1])
        sizes = [size // known if s == -1 else s for s in sizes]
    if math.prod(sizes) != size:
        raise RuntimeError(f"unflatten: sizes {list(unflattened_size)} don't multiply to dim {dim} of size {size}")
    return d, sizes


def unflatten(td: Any, dim: int, unflattened_size: Sequence[int], *, inplace: bool = False) -> Any:
    """Split batch dim ``dim`` into ``unflattened_size``; ``inplace`` changes ``td`` itself."""
    if inplace:
        return td._take_result(unflatten(td, dim, unflattened_size))
    d, sizes = unflatten_sizes(td, dim, unflattened_size)
    bs = td.batch_size
    new = [*bs[:d], *sizes, *bs[d + 1 :]]
    names = _renamed(td, lambda n: [*n[:d], *[None] * (len(sizes) - 1), *n[d:]])  # the last new dim keeps it
    return td._map(operator.methodcaller("unflatten", d, sizes), "unflatten", batch_size=new, names=names, follow=True)


def expand(td: Any, *shape: Any) -> Any:
    """Expand the batch dims (new leading dims may be added); leaves become expanded views."""
    new, lead = expanded_size(td, shape)
    nd = td.batch_dims
    names = _renamed(td, lambda n: [None] * lead + n)
    return td._map(lambda x: x.expand((*new, *x.shape[nd:])), "expand", batch_size=new, names=names, follow=True)


def expanded_size(td: Any, shape: Any) -> tuple[torch.Size, int]:
    """The batch size ``td.expand(*shape)`` gives (``-1`` keeps a size) and how many dims it adds in front."""
    shape = _shape_args(shape)
    bs = td.batch_size
    nd = td.batch_dims
    if len(shape) < nd:
        raise RuntimeError(  # the second sentence is tensordict's, which users match on
            f"expand: shape {list(shape)} has fewer dims than batch_size {list(bs)}: the number of sizes provided "
            f"({len(shape)}) must be greater or equal to the number of dimensions in the TensorDict ({nd})"
        )
    lead = len(shape) - nd
    new = _Size(bs[i - lead] if (s == -1 and i >= lead) else s for i, s in enumerate(shape))
    for i in range(nd):
        if bs[i] != 1 and bs[i] != new[lead + i]:
            raise RuntimeError(
                f"expand: batch_size {list(bs)} cannot be expanded to {list(new)} (Incompatible expanded shape)"
            )  # tensordict's phrase, which users match on
    return new, lead


def expand_as(td: Any, other: Any) -> Any:
    """Expand to a tensor's shape (the new batch size), or to a TensorDict's leaves.

    With a TensorDict, each leaf is expanded to the shape of ``other``'s leaf at the same key
    (KeyError naming a key ``other`` lacks), as tensordict does.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(3, 1)}, batch_size=[3])
        >>> td.expand_as(TensorDict({"a": torch.zeros(2, 3, 4)}, batch_size=[2, 3]))["a"].shape
        torch.Size([2, 3, 4])
    """
    if not is_td(other):
        return expand(td, *other.shape)
    targets = dict(named_leaves(other))
    leaves = dict(named_leaves(td))
    missing = [path for path in leaves if path not in targets]
    if missing:
        raise KeyError(f"expand_as: key {fmt_path(missing[0])} not found in the TensorDict to expand to")
    out = expand(td, *other.batch_size)
    return from_leaves(
        out,
        [
            leaf.expand_as(targets[path])
            if type(leaf) is torch.Tensor and isinstance(targets[path], torch.Tensor)
            else leaf
            for path, leaf in named_leaves(out)
        ],
    )


def _split_leaves(td: Any, d: int, pieces: list[list[Any]], sizes: list[int]) -> tuple[Any, ...]:
    bs = td.batch_size
    names = td._maybe_names()
    dropped = (
        None
        if names is None or not any(n is not None for i, n in enumerate(names) if i != d)
        else (*names[:d], *names[d + 1 :])
    )
    outs = []
    for i, size in enumerate(sizes):
        new = _Size([*bs[:d], size, *bs[d + 1 :]]) if size >= 0 else _Size([*bs[:d], *bs[d + 1 :]])
        outs.append(
            from_leaves(td, [p[i] for p in pieces], batch_size=new, names=names if size >= 0 else dropped, follow=True)
        )
    return tuple(outs)


def unbind(td: Any, dim: int = 0) -> tuple[Any, ...]:
    """Remove batch dim ``dim``, returning one TensorDict per index."""
    d = _dim(td, dim)
    n = td.batch_size[d]
    pieces = [leaf.unbind(d) for leaf in flat_leaves(td, follow=True)]
    return _split_leaves(td, d, pieces, [-1] * n)


def split_sizes(td: Any, split_size: int | Sequence[int], dim: int = 0) -> tuple[int, list[int]]:
    """``(normalised dim, piece sizes)`` of ``td.split(split_size, dim)``."""
    d = _dim(td, dim)
    total = td.batch_size[d]
    if isinstance(split_size, int):
        if split_size <= 0:
            raise ValueError(f"split_size must be positive, got {split_size}")
        return d, [min(split_size, total - i) for i in range(0, total, split_size)] or [0]
    sizes = list(split_size)
    if sum(sizes) != total:
        raise RuntimeError(
            f"split: sizes {sizes} don't sum to dim {dim} of size {total} "
            f"(split_with_sizes expects split_sizes to sum exactly to {total})"
        )
    return d, sizes


def chunk_sizes(td: Any, chunks: int, dim: int = 0) -> tuple[int, list[int]]:
    """``(normalised dim, piece sizes)`` of ``td.chunk(chunks, dim)``."""
    if chunks <= 0:
        raise ValueError(f"chunks must be positive, got {chunks}")
    size = td.batch_size[_dim(td, dim)]
    return split_sizes(td, max(1, math.ceil(size / chunks)), dim)


def tensor_split_sizes(td: Any, indices_or_sections: Any, dim: int = 0) -> tuple[int, list[int]]:
    """``(normalised dim, piece sizes)`` of ``td.tensor_split(indices_or_sections, dim)``."""
    d = _dim(td, dim)
    return d, [len(p) for p in torch.arange(td.batch_size[d]).tensor_split(indices_or_sections)]


def unbind_sizes(td: Any, dim: int = 0) -> tuple[int, list[int]]:
    """``(normalised dim, [-1] per piece)`` of ``td.unbind(dim)`` (``-1``: the dim is removed)."""
    d = _dim(td, dim)
    return d, [-1] * td.batch_size[d]


def split(td: Any, split_size: int | Sequence[int], dim: int = 0) -> tuple[Any, ...]:
    """Split along batch dim ``dim`` into chunks of ``split_size`` (or the listed sizes)."""
    d, sizes = split_sizes(td, split_size, dim)
    leaves = flat_leaves(td, follow=True)
    try:
        pieces = [leaf.split(sizes, d) for leaf in leaves]
    except RuntimeError:  # torch splits no nested tensor along its dim 0: do it here
        if d or not any(map(ragged.is_ragged, leaves)):
            raise
        pieces = [ragged.split(leaf, sizes) if leaf.is_nested else leaf.split(sizes, d) for leaf in leaves]
    return _split_leaves(td, d, pieces, sizes)


def chunk(td: Any, chunks: int, dim: int = 0) -> tuple[Any, ...]:
    """Split into ``chunks`` nearly equal pieces along batch dim ``dim``."""
    d, sizes = chunk_sizes(td, chunks, dim)
    return split(td, sizes, d)


def repeat(td: Any, *repeats: Any, inplace: bool = False) -> Any:
    """Tile the batch dims ``repeats`` times (as :meth:`torch.Tensor.repeat`); ``inplace`` changes ``td``."""
    if inplace:
        return td._take_result(repeat(td, *repeats))
    reps = _shape_args(repeats)
    nd = td.batch_dims
    if len(reps) != nd:
        raise ValueError(f"repeat: got {len(reps)} repeats for batch_size {list(td.batch_size)} ({nd} dims)")
    bs = [1] * (len(reps) - nd) + list(td.batch_size)
    new = [b * r for b, r in zip(bs, reps, strict=True)]
    return td._map(
        lambda x: x.repeat(*reps, *([1] * (x.ndim - nd))),
        "repeat",
        batch_size=new,
        names=td._maybe_names(),
        follow=True,
    )


def repeat_interleave(
    td: Any, repeats: Any, dim: int | None = None, *, output_size: int | None = None, inplace: bool = False
) -> Any:
    """Repeat each element along batch dim ``dim`` (flattened batch when ``dim`` is None)."""
    if inplace:
        return td._take_result(repeat_interleave(td, repeats, dim, output_size=output_size))
    if dim is None:
        td, dim = flatten(td), 0
    d = _dim(td, dim)
    leaves = flat_leaves(td, follow=True)
    out = [leaf.repeat_interleave(repeats, dim=d, output_size=output_size) for leaf in leaves]
    bs = list(td.batch_size)
    if out:
        bs[d] = out[0].shape[d]
    else:
        bs[d] = int(torch.as_tensor(repeats).expand(bs[d]).sum()) if bs[d] else 0
    return from_leaves(td, out, batch_size=_Size(bs), names=td._maybe_names(), follow=True)


def gather(td: Any, dim: int, index: torch.Tensor, out: Any = None, *, inplace: bool = False) -> Any:
    """Gather along batch dim ``dim`` with an index tensor of ``batch_dims`` dims (``inplace``: into ``td``)."""
    if inplace:
        if out is not None:
            raise ValueError("gather: give out= or inplace=True, not both")
        return td._take_result(gather(td, dim, index))
    d = _dim(td, dim)
    if index.ndim != td.batch_dims:
        raise RuntimeError(
            f"gather: index has {index.ndim} dims but batch_size {list(td.batch_size)} has {td.batch_dims}"
        )
    nd = td.batch_dims

    def fn(x: torch.Tensor) -> torch.Tensor:
        feat = x.shape[nd:]
        idx = index.reshape(*index.shape, *([1] * len(feat))).expand(*index.shape, *feat)
        return torch.gather(x, d, idx)

    result = map_leaves(td, fn, batch_size=index.shape, names=td._maybe_names(), what="gather", follow=True)
    if out is not None:
        out.update_(result)
        return out
    return result


# ------------------------------------------------------------------ tensor-like batch-dim maps
def _dims(td: Any, dims: Any, what: str) -> tuple[int, ...]:
    """Normalise one dim or a sequence of batch dims (IndexError naming the dim when out of range)."""
    out = tuple(_dim(td, d) for d in ((dims,) if isinstance(dims, int) else dims))
    if len(set(out)) != len(out):
        raise RuntimeError(f"{what}: dims {list(dims)} repeat a batch dim")
    return out


def flip(td: Any, dims: int | Sequence[int]) -> Any:
    """Reverse the order of the elements along the given batch dims.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.arange(3), batch_size=[3]).flip(0)["a"]
        tensor([2, 1, 0])
    """
    d = _dims(td, dims, "flip")
    return td._map(lambda x: x.flip(d), "flip", names=td._maybe_names(), follow=True)


def fliplr(td: Any) -> Any:
    """Flip batch dim 1 (left/right); needs two batch dims."""
    if td.batch_dims < 2:
        raise RuntimeError(f"fliplr requires at least 2 batch dimensions, got batch_size {list(td.batch_size)}")
    return flip(td, 1)


def flipud(td: Any) -> Any:
    """Flip batch dim 0 (up/down); needs one batch dim."""
    if td.batch_dims < 1:
        raise RuntimeError("flipud requires at least 1 batch dimension, got batch_size []")
    return flip(td, 0)


def roll(
    td: Any, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None, *, inplace: bool = False
) -> Any:
    """Roll the elements along batch dims (over the flattened batch when ``dims`` is None).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.arange(4).view(2, 2), batch_size=[2, 2]).roll(1)["a"]
        tensor([[3, 0],
                [1, 2]])
    """
    nd = td.batch_dims
    if dims is None:

        def fn(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(-1, *x.shape[nd:]).roll(shifts, 0).reshape(x.shape)
    else:
        d = _dims(td, dims, "roll")

        def fn(x: torch.Tensor) -> torch.Tensor:
            return x.roll(shifts, d)

    return _done(td, td._map(fn, "roll", names=td._maybe_names(), follow=True), inplace)


def _order_moving(nd: int, source: tuple[int, ...], destination: tuple[int, ...]) -> list[int]:
    """The permutation of :func:`torch.movedim`: sources land at their destinations, the rest keep their order."""
    if len(source) != len(destination):
        raise RuntimeError(
            f"movedim: source {list(source)} and destination {list(destination)} must have the same number of dims"
        )
    order: list[int | None] = [None] * nd
    for s, d in zip(source, destination, strict=True):
        order[d] = s
    rest = iter(i for i in range(nd) if i not in source)
    return [next(rest) if o is None else o for o in order]


def movedim_order(td: Any, source: int | Sequence[int], destination: int | Sequence[int]) -> tuple[int, ...]:
    """The permutation ``td.movedim(source, destination)`` applies."""
    src, dst = _dims(td, source, "movedim"), _dims(td, destination, "movedim")
    return tuple(_order_moving(td.batch_dims, src, dst))


def movedim(td: Any, source: int | Sequence[int], destination: int | Sequence[int]) -> Any:
    """Move batch dims ``source`` to positions ``destination`` (as :func:`torch.movedim`).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.zeros(2, 3, 4), batch_size=[2, 3, 4]).movedim(0, -1).batch_size
        torch.Size([3, 4, 2])
    """
    return permute(td, *movedim_order(td, source, destination))


def swapaxes(td: Any, axis0: int, axis1: int) -> Any:
    """Swap two batch dims (numpy's name for :meth:`transpose`)."""
    return transpose(td, axis0, axis1)


def narrow(td: Any, dim: int, start: int, length: int) -> Any:
    """The ``length`` elements from ``start`` along batch dim ``dim`` (views of the leaves).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.arange(5), batch_size=[5]).narrow(0, 1, 2)["a"]
        tensor([1, 2])
    """
    d = _dim(td, dim)
    size = td.batch_size[d]
    first = start + size if start < 0 else start
    if not 0 <= first <= size or length < 0 or first + length > size:
        raise RuntimeError(
            f"narrow: start ({start}) + length ({length}) exceeds dimension size ({size}) of batch "
            f"dim {dim} of batch_size {list(td.batch_size)}"
        )
    new = _Size([*td.batch_size[:d], length, *td.batch_size[d + 1 :]])
    return td._map(lambda x: x.narrow(d, first, length), "narrow", batch_size=new, names=td._maybe_names(), follow=True)


def tile(td: Any, dims: Sequence[int]) -> Any:
    """Repeat the batch ``dims`` times, as :func:`torch.tile` (missing leading repeats are 1, extra ones add dims).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3]).tile((2,)).batch_size
        torch.Size([2, 6])
    """
    reps = (dims,) if isinstance(dims, int) else tuple(dims)
    nd = td.batch_dims
    reps = (1,) * (nd - len(reps)) + reps
    lead = len(reps) - nd
    bs = td.batch_size
    new = _Size([*reps[:lead], *(b * r for b, r in zip(bs, reps[lead:], strict=True))])
    names = _renamed(td, lambda n: [None] * lead + n)
    return td._map(lambda x: x.repeat(*reps, *([1] * (x.ndim - nd))), "tile", batch_size=new, names=names, follow=True)


def tensor_split(td: Any, indices_or_sections: Any, dim: int = 0) -> tuple[Any, ...]:
    """Split along batch dim ``dim`` into ``n`` near-equal parts or at the given indices (:func:`torch.tensor_split`).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> [t.batch_size[0] for t in TensorDict(a=torch.zeros(5), batch_size=[5]).tensor_split(2)]
        [3, 2]
    """
    d, sizes = tensor_split_sizes(td, indices_or_sections, dim)
    pieces = [leaf.tensor_split(indices_or_sections, d) for leaf in flat_leaves(td, follow=True)]
    return _split_leaves(td, d, pieces, sizes)


def rot90(td: Any, k: int = 1, dims: Sequence[int] = (0, 1)) -> Any:
    """Rotate by 90 degrees ``k`` times in the plane of two batch dims (:func:`torch.rot90`).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.arange(4).view(2, 2), batch_size=[2, 2]).rot90()["a"]
        tensor([[1, 3],
                [0, 2]])
    """
    if len(dims) != 2:
        raise RuntimeError(f"rot90: expected two dims, got {list(dims)}")
    a, b = _dims(td, dims, "rot90")
    bs = list(td.batch_size)
    names = td._maybe_names()
    if k % 2:
        bs[a], bs[b] = bs[b], bs[a]
        names = _renamed(td, lambda n: [n[b] if i == a else n[a] if i == b else x for i, x in enumerate(n)])
    return td._map(lambda x: x.rot90(k, (a, b)), "rot90", batch_size=_Size(bs), names=names, follow=True)


def broadcast_to(td: Any, shape: Sequence[int]) -> Any:
    """Expand to the batch ``shape`` by broadcasting (:func:`torch.broadcast_to`); see :meth:`expand`."""
    return expand(td, *shape)


def _atleast(n: int) -> Any:
    def atleast(td: Any) -> Any:
        while td.batch_dims < n:  # new leading dims, as tensordict (not torch's placement for 3-d)
            td = unsqueeze(td, 0)
        return td

    atleast.__name__ = f"atleast_{n}d"
    atleast.__doc__ = (
        f"The TensorDict with leading batch dims of size 1 added up to {n} batch dims (itself if it has them)."
    )
    return atleast


atleast_1d, atleast_2d, atleast_3d = _atleast(1), _atleast(2), _atleast(3)
