"""Batch indexing: normalise the index once, then apply it to every leaf.

Batch dims lead every leaf, so a normalised index (Ellipsis expanded against the batch dims)
can be applied to the leaves as is; their trailing dims are untouched.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .._compat import dynamo_compiling
from .._errors import add_path_note, fmt_path, fmt_shape, locked
from .._keys import is_key, key_tuple
from .._unbatched import UnbatchedTensor
from . import ragged
from .pointwise import map_inplace
from .rows import check_fits
from .traverse import (
    GET_DEFAULT,
    MISSING,
    NO_DEFAULT,
    NON_TENSOR_TYPES,
    apply_leaves,
    flat_leaves,
    from_leaves,
    is_node,
    is_td,
    map_leaves,
    named_leaves,
    paired_leaves,
    source_items,
)

_Tensor = torch.Tensor
_NON_TENSOR = "non-tensor"  # marks a planned write into a non-tensor leaf
_WHOLE = "whole"  # marks a planned write of a whole UnbatchedTensor (shared by the batch: no index applies)
_Size = torch.Size
MANY_ROWS = 256
"""From this many rows on, ``td[long_tensor]`` takes one ``index_select`` per leaf (several times faster than
advanced indexing there; below it, advanced indexing is cheaper)."""


def normalize(td: Any, index: Any, with_names: bool = True) -> tuple[tuple[Any, ...], torch.Size | None, Any]:
    """Return ``(index tuple, new batch size or None, new names)`` for a batch index.

    The new batch size is None when it depends on tensor values (masks, index tensors). The names
    are None when ``with_names`` is False (a lazy stack's members name their own results).
    """
    bs = td.batch_size
    names = td._maybe_names() if with_names else None
    if type(index) is int and bs and names is None:  # the common case, kept cheap
        size = bs[0]
        if not -size <= index < size:
            raise IndexError(f"index {index} is out of bounds for dimension 0 with size {size}")
        return (index,), bs[1:], None
    if (
        type(index) is _Tensor and bs and names is None and index.ndim == 1 and index.dtype == torch.int64
    ):  # td[long_tensor]: the size is known without indexing
        return (index,), _Size((index.shape[0], *bs[1:])), None
    if type(index) is slice and bs and names is None:  # td[a:b:c], also common
        step = index.step
        if step is None or step > 0:
            size = bs[0]
            if type(size) is not int or dynamo_compiling():  # symbolic (compile, export): slice.indices specializes it
                return (index,), None, None  # the sliced leaves tell
            return (index,), _Size((len(range(*index.indices(size))), *bs[1:])), None
    items = index if type(index) is tuple else (index,)
    nd = len(bs)
    if not nd and any(i is not None and i is not Ellipsis for i in items):
        raise RuntimeError(f"indexing a TensorDict with batch_size [] is not permitted, got index {index!r}")
    conv: list[Any] = []
    used = 0
    ellipsis_at = -1
    for item in items:
        if item is Ellipsis:
            if ellipsis_at >= 0:
                raise IndexError("an index can only have a single ellipsis ('...')")
            ellipsis_at = len(conv)
        elif item is None:
            pass
        elif item is True or item is False:  # like None, with a size of 1 or 0: let torch say
            item = torch.tensor(item)
        elif isinstance(item, _Tensor):
            used += item.ndim if item.dtype == torch.bool else 1
        elif isinstance(item, (list, tuple, range, np.ndarray)) and not is_key(item):  # (0, 2): as [0, 2]
            item = torch.as_tensor(item)
            used += max(item.ndim, 1) if item.dtype == torch.bool else 1
        elif isinstance(item, (np.integer, np.bool_)):
            item = item.item()
            used += 1
        elif isinstance(item, (str, tuple)):
            raise IndexError(f"invalid index {index!r}: keys and batch indices cannot be mixed")
        else:
            used += 1
        conv.append(item)
    if used > nd:
        raise IndexError(
            f"too many indices for TensorDict with batch_size {fmt_shape(bs)}: {used} indexed dims, {nd} batch dims"
        )
    if ellipsis_at >= 0:
        conv[ellipsis_at : ellipsis_at + 1] = [slice(None)] * (nd - used)
    return tuple(conv), _static_size(conv, bs), None if names is None else _new_names(conv, names)


def _static_size(conv: list[Any], bs: torch.Size) -> torch.Size | None:
    out = []
    dim = 0
    for item in conv:
        if item is None:
            out.append(1)
            continue
        if isinstance(item, _Tensor):
            if item.ndim == 0 and item.dtype != torch.bool:
                item = int(item)
            else:
                return None
        size = bs[dim]
        if isinstance(item, int):
            if not -size <= item < size:
                raise IndexError(f"index {item} is out of bounds for dimension {dim} with size {size}")
        elif isinstance(item, slice):
            if item.step is not None and item.step <= 0:
                raise ValueError("step must be greater than zero")
            if type(size) is not int or dynamo_compiling():  # symbolic (compile, export): slice.indices specializes it
                return None
            out.append(len(range(*item.indices(size))))
        else:
            raise IndexError(f"unsupported index type {type(item).__name__}: {item!r}")
        dim += 1
    out.extend(bs[dim:])
    return _Size(out)


def _new_names(conv: list[Any], names: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Dim names after indexing with ``conv``, as tensordict gives them.

    A single 1-d index tensor or 1-d mask keeps its dim's name; the dims made by several index tensors
    (or by a multi-dim one) are unnamed, and placed as torch places them.
    """
    advanced = [
        i for i, item in enumerate(conv) if isinstance(item, _Tensor) and (item.ndim or item.dtype == torch.bool)
    ]
    block: list[Any] = []  # the dims the index tensors make together
    if len(advanced) == 1 and conv[advanced[0]].ndim == 1:
        block = [names[sum(_consumed(item) for item in conv[: advanced[0]])]]
    elif advanced:
        shapes = [(int(t.sum()),) if t.dtype == torch.bool else t.shape for t in (conv[i] for i in advanced)]
        block = [None] * len(torch.broadcast_shapes(*shapes))  # type: ignore[no-untyped-call]
    front = len(advanced) > 1 and advanced[-1] - advanced[0] != len(advanced) - 1  # apart: torch puts them first
    out: list[Any] = block if front else []
    dim = 0
    for i, item in enumerate(conv):
        if item is None:
            out.append(None)
        elif isinstance(item, slice):
            out.append(names[dim])
        elif advanced and i == advanced[0] and not front:
            out.extend(block)
        dim += _consumed(item)
    out.extend(names[dim:])
    return tuple(out) if any(n is not None for n in out) else None


def _consumed(item: Any) -> int:
    """How many batch dims an index item uses up."""
    if item is None:
        return 0
    if isinstance(item, _Tensor) and item.dtype == torch.bool:
        return item.ndim
    return 1


def _result_size(td: Any, idx: tuple[Any, ...], leaves: list[Any], out: list[Any]) -> torch.Size:
    """Batch size after a value-dependent index: read it off the first indexed leaf (or a proxy)."""
    res: torch.Tensor  # the leaf indexed (only read when the leaf is a tensor)
    for leaf, res in zip(leaves, out, strict=False):
        if isinstance(leaf, _Tensor):
            return res.shape[: res.ndim - (leaf.ndim - td.batch_dims)]
    device = next((i.device for i in idx if isinstance(i, _Tensor)), None)
    return torch.zeros((), device=device).expand(td.batch_size)[idx].shape


def _take_rows(td: Any, idx: torch.Tensor, names: Any) -> Any:
    """``td[long_tensor]`` for many rows: ``index_select`` is several times faster than advanced indexing."""
    n = td.batch_size[0]
    lo, hi = (int(v) for v in torch.aminmax(idx))
    if lo < -n or hi >= n:
        raise IndexError(f"index {hi if hi >= n else lo} is out of bounds for dimension 0 with size {n}")
    return _select_rows(td, idx if lo >= 0 else torch.where(idx < 0, idx + n, idx), names)


def _select_rows(td: Any, rows: torch.Tensor, names: Any) -> Any:
    """Rows ``rows`` (valid, non-negative) of the first batch dim, one ``index_select`` per leaf."""
    out = [
        leaf.index_select(0, rows if rows.device == leaf.device else rows.to(leaf.device))
        for leaf in flat_leaves(td, follow=True)
    ]
    return from_leaves(td, out, batch_size=_Size((len(rows), *td.batch_size[1:])), names=names, follow=True)


def getitem(td: Any, index: Any) -> Any:
    """``td[index]`` for any torch index on the batch dims (``td[...]`` and ``td[()]`` return ``td``)."""
    if index is Ellipsis or (type(index) is tuple and (not index or index == (Ellipsis,))):
        return td
    return td._read_index(index)  # (a storage hook: in memory, index_leaves)


def takes_all(index: Any, batch_dims: int) -> bool:
    """Whether ``index`` is ``:``s (at most one per batch dim) and at most one ``...``: every element, in order.

    An in-memory TensorDict indexed so is itself, as in tensordict (``td[:] is td``). The bounds are
    tested one by one (an ``is`` test of the whole slice fixes them under ``torch.compile``).
    """
    items = index if type(index) is tuple else (index,)
    slices = ellipses = 0
    for item in items:
        if type(item) is slice:
            if item.start is not None or item.stop is not None or item.step is not None:
                return False
            slices += 1
        elif item is Ellipsis:
            ellipses += 1
        else:
            return False
    return slices <= batch_dims and ellipses <= 1


def index_leaves(td: Any, index: Any) -> Any:
    """``td[index]`` done on the leaves in memory (the default of the ``_read_rows`` hook too)."""
    try:
        return _index_leaves(td, index)
    except RuntimeError:  # torch indexes no nested tensor along its dim 0 (but ints): do it here
        if not any(map(ragged.is_ragged, flat_leaves(td))):
            raise
    idx, new_bs, names = normalize(td, index)
    leaf_idx = idx[0] if len(idx) == 1 else idx

    def fn(x: Any) -> Any:
        return ragged.getitem(x, leaf_idx) if x.is_nested else x[leaf_idx]

    return map_leaves(td, fn, what="indexing", batch_size=_target_size(td, idx, new_bs), names=names, follow=True)


def _index_leaves(td: Any, index: Any) -> Any:
    idx, new_bs, names = normalize(td, index)
    leaf_idx = idx[0] if len(idx) == 1 else idx
    if (
        type(leaf_idx) is _Tensor
        and leaf_idx.ndim == 1
        and leaf_idx.numel() >= MANY_ROWS
        and (leaf_idx.dtype == torch.int64 or leaf_idx.dtype == torch.int32)
    ):
        return _take_rows(td, leaf_idx, names)
    if new_bs is not None:
        return map_leaves(
            td, operator.itemgetter(leaf_idx), what="indexing", batch_size=new_bs, names=names, follow=True
        )
    if (
        type(leaf_idx) is _Tensor
        and leaf_idx.dtype == torch.bool
        and leaf_idx.ndim == 1
        and leaf_idx.shape[0] == td.batch_size[0]
    ):  # td[mask]: find the rows once, not once per leaf
        return _select_rows(td, leaf_idx.nonzero().squeeze(-1), names)
    leaves = flat_leaves(td, follow=True)
    try:
        out = [leaf[leaf_idx] for leaf in leaves]
    except Exception:
        apply_leaves(td, lambda x: x[idx], what="indexing")
        raise
    if new_bs is None:
        new_bs = _result_size(td, idx, leaves, out)
    return from_leaves(td, out, batch_size=new_bs, names=names, follow=True)


def _target_size(td: Any, idx: tuple[Any, ...], new_bs: torch.Size | None) -> torch.Size:
    """Batch shape selected by ``idx`` (cheap for one index tensor or one mask)."""
    if new_bs is not None:
        return new_bs
    bs = td.batch_size
    if len(idx) == 1 and type(idx[0]) is _Tensor and idx[0].dtype is not torch.bool:  # td[long_tensor]
        return _Size((*idx[0].shape, *bs[1:]))
    tensors = [i for i, item in enumerate(idx) if isinstance(item, _Tensor)]
    if len(tensors) == 1 and all(
        isinstance(item, slice) and item == slice(None) for item in idx if not isinstance(item, _Tensor)
    ):
        pos = tensors[0]
        item = idx[pos]
        if item.dtype == torch.bool:
            return _Size((*bs[:pos], int(item.sum()), *bs[pos + item.ndim :]))
        return _Size((*bs[:pos], *item.shape, *bs[pos + 1 :]))
    return _result_size(td, idx, [], [])


def _fits(value_shape: Any, target: torch.Size) -> bool:
    if value_shape == target:
        return True
    try:
        return torch.broadcast_shapes(value_shape, target) == target  # type: ignore[no-untyped-call, no-any-return]
    except RuntimeError:
        return False


def _check_fits(path: tuple[str, ...], value: Any, target: torch.Size) -> None:
    if isinstance(value, _Tensor) and not _fits(value.shape, target):
        check_fits(path, value.shape, target)  # raises, naming the path


def _plan_writes(node: Any, source: Any, new_bs: torch.Size, nd: int, writes: list[Any]) -> None:
    """Pair every leaf of ``source`` (TensorDict or nested mapping) with its target, checking shapes."""
    last = vnd = same_batch = None
    for prefix, key, target, value, src in paired_leaves(node, source, "writing at an index"):
        if src is not last:  # a new source node: its batch dims
            last = src
            vnd, same_batch = (len(src.batch_size), src.batch_size == new_bs) if is_td(src) else (len(new_bs), False)
        if type(value) is _Tensor and type(target) is _Tensor:
            # common case: a leaf into a leaf; cheap check when the batch parts already agree
            if not (same_batch and value.shape[vnd:] == target.shape[nd:]):
                _check_fits((*prefix, key), value, _Size((*new_bs, *target.shape[nd:])))
            writes.append((prefix, key, target, value, None))
            continue
        path = (*prefix, key)
        if type(target) in NON_TENSOR_TYPES or type(value) in NON_TENSOR_TYPES or type(value) is str:
            _plan_non_tensor(path, target, value, writes)
            continue
        if is_td(value) or isinstance(value, Mapping):  # the walk stopped: a tensor leaf there
            raise TypeError(f"cannot write a TensorDict into leaf {fmt_path(path)}")
        if not isinstance(value, _Tensor):
            try:
                value = torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError):  # strings, ragged lists: non-tensor values
                _plan_non_tensor(path, target, value, writes)
                continue
        if isinstance(target, UnbatchedTensor) or (target is MISSING and isinstance(value, UnbatchedTensor)):
            if target is not MISSING and value.shape != target.shape:
                raise RuntimeError(
                    f"cannot write a value of shape {fmt_shape(value.shape)} into the UnbatchedTensor "
                    f"{fmt_path(path)} of shape {fmt_shape(target.shape)}: the whole batch shares it, so it is "
                    "written whole whatever the index (same shape required)"
                )
            writes.append((prefix, key, None if target is MISSING else target, value, _WHOLE))
            continue
        if target is MISSING:  # a new key: created (zeros elsewhere), as tensordict does
            feat = value.shape[vnd:]
            _check_fits(path, value, _Size((*new_bs, *feat)))
            writes.append((prefix, key, None, value, feat))
            continue
        if is_td(target):
            raise TypeError(f"cannot write a tensor into the TensorDict at {fmt_path(path)}")
        if value.shape != target.shape:
            _check_fits(path, value, _Size((*new_bs, *target.shape[nd:])))
        writes.append((prefix, key, target, value, None))


def _plan_non_tensor(path: tuple[str, ...], target: Any, value: Any, writes: list[Any]) -> None:
    """A write into (or creating) a non-tensor leaf: its values are rebuilt, the node replaced."""
    if isinstance(target, _Tensor) or is_node(value):
        raise TypeError(f"cannot write a {type(value).__name__} into the tensor leaf {fmt_path(path)}")
    if isinstance(value, _Tensor) or is_node(target):
        raise TypeError(f"cannot write a {type(value).__name__} into the non-tensor leaf {fmt_path(path)}")
    writes.append((path[:-1], path[-1], target, value, _NON_TENSOR))


def setitem(td: Any, index: Any, value: Any) -> None:
    """``td[index] = value`` with a TensorDict, mapping, tensor or number; validated before any write."""
    td._write_index(index, value)  # (a storage hook: in memory, setitem_memory)


def setitem_memory(td: Any, index: Any, value: Any) -> None:
    """:func:`setitem` on leaves held in memory (written in place)."""
    idx, new_bs, _ = normalize(td, index)
    leaf_idx = idx[0] if len(idx) == 1 else idx
    nd = td.batch_dims
    writes: list[Any] = []
    if is_td(value) or isinstance(value, dict):
        new_bs = _target_size(td, idx, new_bs)
        _plan_writes(td, value, new_bs, nd, writes)
        if td.is_locked and any(w[2] is None for w in writes):
            raise locked()
    else:
        if not isinstance(value, (_Tensor, int, float, bool)):
            value = torch.as_tensor(value)
        if isinstance(value, _Tensor) and value.ndim:
            new_bs = _target_size(td, idx, new_bs)
        for path, leaf in named_leaves(td):
            if type(leaf) is not _Tensor and isinstance(leaf, UnbatchedTensor):
                continue  # not a per-element value: a write at a batch index leaves it alone
            if isinstance(value, _Tensor) and value.ndim:
                _check_fits(path, value, _Size((*new_bs, *leaf.shape[nd:])))  # type: ignore[misc]  # not None here
            writes.append((path[:-1], path[-1], leaf, value, None))
    for prefix, key, target, leaf, feat in writes:
        try:
            if feat is _NON_TENSOR:
                node = td._walk_to((*prefix, key))
                if target is MISSING and type(leaf) not in NON_TENSOR_TYPES and not isinstance(leaf, list):
                    node._set_str(key, node._validate(leaf, (*prefix, key), node), inplace=False, validated=True)
                    continue  # a new key with one value: that value everywhere, as tensordict does
                if target is MISSING:  # a new key with one value per position: None elsewhere
                    target = node._validate(None, (*prefix, key), node)
                node._set_str(key, target._written(leaf_idx, leaf), inplace=False, validated=True)
            elif feat is _WHOLE:
                if target is None:
                    td.set((*prefix, key), leaf)
                else:
                    target.copy_(leaf)
            elif target is None:
                target = leaf.new_zeros((*td.batch_size, *feat))
                target[leaf_idx] = leaf
                td.set((*prefix, key), target)
            else:
                try:
                    target[leaf_idx] = leaf
                except RuntimeError:  # index_put does not cast: cast, then write (it failed before writing)
                    if type(leaf) is not _Tensor or leaf.dtype == target.dtype:
                        raise
                    target[leaf_idx] = leaf.to(target.dtype)
        except Exception as err:
            add_path_note(err, "writing at an index", (*prefix, key))
            raise


def get_at(td: Any, key: Any, index: Any, default: Any = GET_DEFAULT) -> Any:
    """``td.get(key)[index]``, or ``default`` when the key is missing (as ``get``, without one)."""
    return td._read_at(key, index, default)  # (a storage hook: in memory, get_at_memory)


def get_at_memory(td: Any, key: Any, index: Any, default: Any) -> Any:
    """:func:`get_at` on leaves held in memory."""
    value = td._get(key, MISSING)
    if value is MISSING:
        return td._get(key, default)  # the default, None, or the KeyError
    return value[index]


def set_at_(td: Any, key: Any, value: Any, index: Any) -> Any:
    """Write ``value`` into the existing leaf at ``key``, at ``index`` (in place)."""
    td._set_at(key, value, index)  # (a storage hook: in memory, set_at_memory)
    return td


def set_at_memory(td: Any, key: Any, value: Any, index: Any) -> None:
    """:func:`set_at_` on leaves held in memory."""
    target = td._get(key)
    path = key_tuple(key)
    if type(target) in NON_TENSOR_TYPES:
        td._walk_to(path)._set_str(path[-1], target._written(index, value), inplace=False, validated=True)
        return
    if is_td(target):
        target[index] = value
        return
    if not isinstance(value, _Tensor):
        try:
            value = torch.as_tensor(value, device=target.device)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"cannot write a {type(value).__name__} into the tensor leaf {fmt_path(path)}") from err
    sub = target[index]
    _check_fits(path, value, sub.shape)
    target[index] = value


def update_at_(
    td: Any,
    input_dict_or_td: Any,
    index: Any,
    clone: bool = False,
    *,
    non_blocking: bool = False,
    keys_to_update: Any = None,
) -> Any:
    """Write every entry of a mapping/TensorDict into the matching leaves at ``index``."""
    wanted = None if keys_to_update is None else {key_tuple(k) for k in keys_to_update}
    td._update_at(input_dict_or_td, index, clone, wanted)  # (a storage hook: in memory, update_at_memory)
    return td


def update_at_memory(td: Any, source: Any, index: Any, clone: bool, wanted: set[Any] | None) -> None:
    """:func:`update_at_` on leaves held in memory (``wanted``: the paths to write, None for all)."""
    items = (
        named_leaves(source, is_leaf=NON_TENSOR_TYPES.__contains__)
        if is_td(source)
        else source_items(source, "update_at_")
    )  # (non-tensor leaves are written too)
    plan: list[tuple[Any, Any]] = []  # (tensor leaf, value) or (path, new non-tensor leaf)
    for key, value in items:
        path = key_tuple(key)
        if wanted is not None and path not in wanted:
            continue
        target = td._get(path)
        value = value.clone() if clone else value
        if type(target) in NON_TENSOR_TYPES:  # a new leaf with the values written (applied below)
            plan.append((path, target._written(index, value)))
            continue
        if isinstance(target, _Tensor):
            _check_fits(path, torch.as_tensor(value), target[index].shape)
        plan.append((target, value))
    for target, value in plan:
        if type(target) is tuple:
            td._walk_to(target)._set_str(target[-1], value, inplace=False, validated=True)
        else:
            target[index] = value


def _expand_mask(mask: _Tensor, leaf: _Tensor) -> _Tensor:
    extra = leaf.ndim - mask.ndim
    return mask.reshape(*mask.shape, *([1] * extra)).expand(leaf.shape)


def check_mask(td: Any, mask: _Tensor, error: type[Exception] = IndexError) -> None:
    """Raise ``error`` unless ``mask`` covers the leading batch dims of ``td``."""
    if mask.shape != td.batch_size[: mask.ndim] or mask.ndim == 0:
        raise error(f"mask of shape {fmt_shape(mask.shape)} does not match batch_size {fmt_shape(td.batch_size)}")


def masked_fill(td: Any, mask: _Tensor, value: Any) -> Any:
    """Leaf-wise ``masked_fill`` with a mask over the leading batch dims."""
    check_mask(td, mask, RuntimeError)
    return td._map(lambda x: x.masked_fill(_expand_mask(mask, x), value), "masked_fill")


def masked_fill_(td: Any, mask: _Tensor, value: Any) -> Any:
    """In-place :func:`masked_fill`; every leaf is checked to take ``value`` before any is written."""
    check_mask(td, mask, RuntimeError)

    def fill(leaf: _Tensor) -> Any:
        return leaf.masked_fill_(_expand_mask(mask, leaf), value)

    return map_inplace(td, "masked_fill", fill, check=lambda td, leaves: _check_fill_value(td, leaves, value))


def _check_fill_value(td: Any, leaves: list[Any], value: Any) -> None:
    """Refuse a fill value that some leaf cannot hold (it overflows the dtype, a tensor that is not 0-dim).

    The value is tried on a one-element tensor per leaf dtype and device: torch's own check, without a write.
    """
    seen = set()
    for i, leaf in enumerate(leaves):
        kind = (leaf.dtype, leaf.device)
        if kind in seen:
            continue
        seen.add(kind)
        try:
            torch.zeros(1, dtype=leaf.dtype, device=leaf.device).masked_fill_(
                torch.ones(1, dtype=torch.bool, device=leaf.device), value
            )
        except Exception as err:
            add_path_note(err, "masked_fill_", next(p for j, (p, _) in enumerate(named_leaves(td)) if j == i))
            err.add_note("masked_fill_: nothing was modified")
            raise


def masked_select(td: Any, mask: _Tensor, *, inplace: bool = False) -> Any:
    """Select the batch elements where ``mask`` is True; masked dims collapse into one.

    ``inplace=True`` changes ``td`` itself (its leaves and batch size) and returns it.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.arange(3), batch_size=[3])
        >>> td.masked_select(torch.tensor([True, False, True]), inplace=True) is td, td.batch_size
        (True, torch.Size([2]))
    """
    if inplace:
        return td._take_result(masked_select(td, mask))
    check_mask(td, mask)
    n = int(mask.sum())
    new = _Size([n, *td.batch_size[mask.ndim :]])
    return td._map(lambda x: x[mask], "masked_select", batch_size=new, follow=True)


def _pad_as(pad: Any, leaf: _Tensor) -> _Tensor:
    """``pad`` as a 0-dim tensor of the leaf's dtype: padding keeps the leaf's dtype (as tensordict's)."""
    return torch.as_tensor(pad, dtype=leaf.dtype, device=leaf.device)


def where(td: Any, condition: _Tensor, other: Any, *, out: Any = None, pad: Any = None) -> Any:
    """``torch.where(condition, td, other)`` leaf-wise; ``condition`` covers the leading batch dims.

    With ``pad``, the keys of either TensorDict that the other lacks are kept: ``pad`` stands for the
    missing side (a key only in ``td`` takes ``pad`` where ``condition`` is False, a key only in
    ``other`` where it is True); without it, a missing key raises KeyError.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.arange(3.)}, batch_size=[3])
        >>> td.empty().where(torch.tensor([True, False, True]), td, pad=-1)["a"]
        tensor([-1.,  1., -1.])
    """
    if type(td) in NON_TENSOR_TYPES and out is None:  # a non-tensor leaf on its own: values picked per element
        return td._where(condition, other)

    def pick(x: Any, *rest: Any) -> Any:
        y = rest[0] if rest else other
        if type(x) in NON_TENSOR_TYPES:  # values picked per element from the other non-tensor leaf
            return x._where(condition, y)
        if rest and y is pad:  # a key ``other`` lacks (rest: ``other`` is a TensorDict)
            y = _pad_as(pad, x)
        return torch.where(_expand_mask(condition, x), x, y)

    if is_td(other):
        result = apply_leaves(
            td,
            pick,
            other,
            what="where",
            is_leaf=NON_TENSOR_TYPES.__contains__,
            default=NO_DEFAULT if pad is None else pad,
        )
        extra = other.exclude(*result.keys(True, True))  # the keys only ``other`` has
        if pad is not None:  # pad where the condition picks ``td``
            result.update(
                apply_leaves(
                    extra,
                    lambda y: torch.where(_expand_mask(condition, y), _pad_as(pad, y), y),
                    what="where",
                    batch_size=result.batch_size,
                )
            )
        else:
            first = next(iter(extra.keys(True, True)), None)
            if first is not None:
                path = key_tuple(first)
                raise KeyError(
                    f"where: key {fmt_path(path)} of the other TensorDict is not in this one and "
                    f"no pad value was given (pass pad= to fill the missing side)"
                )
    else:
        result = apply_leaves(td, pick, what="where", is_leaf=NON_TENSOR_TYPES.__contains__)
    if out is not None:
        out.update_(result)
        return out
    return result
