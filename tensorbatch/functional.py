"""Module-level functions that work on any TensorDict type.

``pad`` and ``pad_sequence`` grow batch dims, ``merge_tensordicts`` unions key sets, ``group_by``
splits rows by the value of one entry, ``make_tensordict`` builds from a dict or keywords. ``stack``
and ``cat`` are the ``torch.stack``/``torch.cat`` implementations.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence as _torch_pad_sequence

from . import _convert
from ._errors import add_path_note, fmt_path, fmt_shape, locked
from ._keys import NestedKey, key_of, key_tuple
from ._lazy import dense_stack_tds as dense_stack_tds
from ._nontensor import is_non_tensor, is_non_tensor_type, stack_non_tensor
from ._ops.torch_function import cat, stack
from ._ops.traverse import MISSING, NON_TENSOR_TYPES, apply_leaves, is_node, is_td, named_leaves, named_nodes
from ._unbatched import UnbatchedTensor, check_shared
from .base import TensorDictBase

__all__ = [
    "cat",
    "dense_stack_tds",
    "group_by",
    "make_tensordict",
    "merge_tensordicts",
    "pad",
    "pad_sequence",
    "stack",
    "unpad_sequence",
]

_Tensor = torch.Tensor


def _drop(leaf: Any) -> None:
    """Leaf function that drops every leaf: ``apply_leaves`` with it gives the empty skeleton."""
    return None


def _skeleton(td: Any, batch_size: Any = None) -> Any:
    """An in-memory tree with ``td``'s nested TensorDicts and no leaves (non-tensor ones dropped too)."""
    if batch_size is None:
        return apply_leaves(td, _drop, is_leaf=is_non_tensor_type)
    return apply_leaves(td, _drop, batch_size=batch_size, names=None, is_leaf=is_non_tensor_type)


def _check_tds(tds: Sequence[Any], what: str) -> None:
    for i, td in enumerate(tds):
        if not is_td(td):
            raise TypeError(f"{what} expects TensorDicts, got {type(td).__name__} at position {i}")


# ---------------------------------------------------------------------------------------------- pad
def _pad_widths(pads: list[int]) -> Callable[[int], list[int]]:
    """``ndim -> widths for F.pad``: F.pad lists the last dim first, ``pad_size`` the first dim first."""
    reverse = [w for i in reversed(range(len(pads) // 2)) for w in (pads[2 * i], pads[2 * i + 1])]
    cache: dict[int, list[int]] = {}

    def widths(ndim: int) -> list[int]:
        out = cache.get(ndim)
        if out is None:
            out = cache[ndim] = [0, 0] * (ndim - len(pads) // 2) + reverse
        return out

    return widths


def _padded_batch_size(batch_size: torch.Size, pads: list[int], safe: bool) -> torch.Size:
    if len(pads) > 2 * len(batch_size):
        raise RuntimeError(
            f"pad: pad_size has {len(pads)} entries but the TensorDict has {len(batch_size)} batch dims "
            f"(batch_size {fmt_shape(batch_size)}): the length of pad_size must be <= 2 * the number of "
            "batch dimensions"
        )
    if len(pads) % 2:
        raise RuntimeError(f"pad: pad_size must have an even number of entries (before/after pairs), got {pads}")
    new = list(batch_size)
    for dim in range(len(pads) // 2):
        new[dim] += pads[2 * dim] + pads[2 * dim + 1]
        if safe and new[dim] < 0:
            raise RuntimeError(
                f"pad: padding ({pads[2 * dim]}, {pads[2 * dim + 1]}) on batch dim {dim} of size "
                f"{batch_size[dim]} (batch_size {fmt_shape(batch_size)}) would give a negative size"
            )
    return torch.Size(new)


def pad(tensordict: Any, pad_size: Sequence[int], value: float = 0.0, inplace: bool = False, safe: bool = True) -> Any:
    """Pad every leaf along the batch dims with a constant value.

    Args:
        tensordict: the TensorDict to pad.
        pad_size: ``(dim0_before, dim0_after, dim1_before, dim1_after, ...)``, starting from the
            *first* batch dim (:func:`torch.nn.functional.pad` starts from the last). Its length must
            be even and at most twice the number of batch dims. Negative widths crop.
        value: the value of the padded elements (cast to each leaf's dtype).
        inplace: replace the leaves of ``tensordict`` (which keeps its identity and its nested
            TensorDicts) and return it.
        safe: check the resulting sizes first, for a clear error on a bad ``pad_size``.

    Returns:
        The padded TensorDict: a new one, or ``tensordict`` itself when ``inplace``.

    Raises:
        RuntimeError: for a bad ``pad_size``, a negative resulting size, or an in-place pad of a
            locked TensorDict.
        TypeError: if ``pad_size`` holds anything but integers.

    Note:
        Differs from tensordict: every leaf is padded before anything is written, so an in-place pad
        that fails leaves ``tensordict`` unchanged whatever ``safe`` is.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.ones(3, 4, 1)}, batch_size=[3, 4])
        >>> pad(td, [0, 1, 0, 2]).batch_size
        torch.Size([4, 6])
        >>> pad(td, [1, 0], value=-1.0)["a"][:2, 0, 0]
        tensor([-1.,  1.])
    """
    if not is_td(tensordict):
        raise TypeError(f"pad expects a TensorDict, got {type(tensordict).__name__}")
    pads = [operator.index(p) for p in pad_size]
    batch_size = tensordict.batch_size
    new_size = _padded_batch_size(batch_size, pads, safe)
    nodes = []
    if inplace:
        nodes = [node for _, node in named_nodes(tensordict, post_order=True)]
        if any(node.is_locked for node in nodes):
            raise locked()
    widths = _pad_widths(pads)
    names = tensordict._maybe_names()

    def pad_leaf(x: Any) -> Any:
        if type(x) in NON_TENSOR_TYPES:
            return _pad_non_tensor(x, widths)
        return F.pad(x, widths(x.ndim), value=value)

    padded = apply_leaves(
        tensordict, pad_leaf, batch_size=new_size, names=names, is_leaf=is_non_tensor_type, what="padding"
    )
    if not inplace:
        if names is not None:
            padded.names = names  # the setter names the nested batch dims too
        return padded
    # every leaf is padded: now swap them in, then fix the batch sizes from the deepest node up
    for path, leaf in named_leaves(padded, is_leaf=is_non_tensor_type):
        tensordict._walk_to(path)._set_str(path[-1], leaf, inplace=False, validated=True)
    nd = len(batch_size)
    for node in nodes:
        node.batch_size = torch.Size((*new_size, *node.batch_size[nd:]))
    return tensordict


def _pad_non_tensor(leaf: Any, widths: Callable[[int], list[int]]) -> Any:
    """Pad a non-tensor leaf along its batch dims: the new slots hold None (as in tensordict)."""
    if not leaf.batch_dims:
        return leaf
    w = widths(leaf.batch_dims)
    positions = leaf._positions()
    new_slots = F.pad(torch.zeros(positions.shape, dtype=torch.bool), w, value=True)
    out = leaf._from_positions(F.pad(positions, w, value=0))
    return out._written(new_slots, None) if bool(new_slots.any()) else out


# ------------------------------------------------------------------------------------- pad_sequence
def _leaf_columns(tds: Sequence[Any]) -> tuple[list[tuple[str, ...]], list[list[Any]]]:
    """Leaf paths of the first TensorDict (non-tensor leaves included) and, per path, every input's leaf."""
    first = dict(named_leaves(tds[0], is_leaf=is_non_tensor_type))
    rows = [first]
    for i, td in enumerate(tds[1:], 1):
        row = dict(named_leaves(td, is_leaf=is_non_tensor_type))
        if row.keys() != first.keys():
            only0 = sorted(map(key_of, first.keys() - row.keys()), key=str)
            only_i = sorted(map(key_of, row.keys() - first.keys()), key=str)
            raise KeyError(
                f"pad_sequence: tensordict {i} and tensordict 0 have different leaves: only in tensordict 0: "
                f"{only0}, only in tensordict {i}: {only_i}; all tensordicts must have the same keys"
            )
        rows.append(row)
    paths = list(first)
    for path in paths:
        kinds = {isinstance(row[path], _Tensor) for row in rows}
        if len(kinds) > 1 or not all(isinstance(row[path], _Tensor) or is_non_tensor(row[path]) for row in rows):
            got = [type(row[path]).__name__ for row in rows]
            raise TypeError(
                f"pad_sequence: the leaf {fmt_path(path)} must be a tensor in every tensordict, or "
                f"non-tensor data in every tensordict; got {got}"
            )
    return paths, [[row[path] for row in rows] for path in paths]


def _stack_non_tensor(col: list[Any], grow_dim: int | None, length: int, left: bool) -> Any:
    """Stack non-tensor leaves; when the batch was padded along ``grow_dim``, short ones get None slots."""
    if grow_dim is not None:
        items = []
        for leaf in col:
            missing = length - leaf.batch_size[grow_dim]
            if missing > 0:
                pads = [0, 0] * grow_dim + ([missing, 0] if left else [0, missing])
                leaf = _pad_non_tensor(leaf, _pad_widths(pads))
            items.append(leaf)
        col = items
    return stack_non_tensor(col, 0, collapse=False)


def _check_column(path: tuple[str, ...], col: list[_Tensor], pos: int, pad_dim: int) -> None:
    """Leaves of one key must agree in every dim but the padded one."""
    ref = col[0].shape
    for i, x in enumerate(col[1:], 1):
        shape = x.shape
        differ = len(shape) != len(ref) or any(
            n != m for d, (n, m) in enumerate(zip(shape, ref, strict=True)) if d != pos
        )
        if differ:
            raise RuntimeError(
                f"pad_sequence: leaf {fmt_path(path)} has shape {fmt_shape(shape)} in tensordict {i} but "
                f"{fmt_shape(ref)} in tensordict 0; shapes may differ only in the padded dim {pos} "
                f"(pad_dim={pad_dim})"
            )


def _pad_positions(
    tds: Sequence[Any], paths: list[tuple[str, ...]], cols: list[list[_Tensor]], pad_dim: int, has_out: bool
) -> tuple[list[int], torch.Size, int | None]:
    """The padded dim of each tensor leaf, the batch size of the result and the padded batch dim (or None)."""
    batch_size = list(tds[0].batch_size)
    positions: list[int] = []
    grow_batch, batch_dims_hit, longer, longest, grow_dim = True, set(), None, 0, None
    dims = [td.batch_dims for td in tds]
    fewest, most = min(dims), max(dims)
    for path, col in zip(paths, cols, strict=True):
        ndim = col[0].ndim
        if ndim == 0:
            raise RuntimeError(f"pad_sequence: cannot pad scalars: the leaf {fmt_path(path)} is 0-dim")
        pos = pad_dim if pad_dim >= 0 else ndim + pad_dim
        if not 0 <= pos < ndim:
            raise IndexError(
                f"pad_sequence: pad_dim={pad_dim} is out of range for the leaf {fmt_path(path)} of shape "
                f"{fmt_shape(col[0].shape)}"
            )
        if any(x.ndim != ndim for x in col):
            _check_column(path, col, pos, pad_dim)
        positions.append(pos)
        most_here = max([x.shape[pos] for x in col])
        longest = max(longest, most_here)
        if pos >= fewest:  # a feature dim of some input
            grow_batch = False
        if pos < most:  # a batch dim of some input
            batch_dims_hit.add(pos)
        if pos < len(batch_size) and most_here > batch_size[pos]:
            longer = (path, pos)
    if batch_dims_hit and (len(batch_dims_hit) > 1 or not grow_batch):
        if pad_dim < 0 and longer is not None and not has_out:
            raise ValueError(
                f"pad_sequence: pad_dim={pad_dim} counts from the last dim of each leaf and lands on batch "
                f"dims {sorted(batch_dims_hit)}"
                + ("" if grow_batch else " and on feature dims")
                + " of the leaves, so the batch cannot be padded along it, but the leaf "
                f"{fmt_path(longer[0])} is longer than the batch of tensordict 0 along dim {longer[1]}"
            )
        grow_batch = False
    if grow_batch and batch_size:
        if not paths:  # no leaf: pad the batch to the longest one
            try:
                longest = max(td.batch_size[pad_dim] for td in tds)
            except IndexError:
                raise IndexError(
                    f"pad_sequence: pad_dim={pad_dim} is out of range for batch_size {fmt_shape(batch_size)}"
                ) from None
            grow_dim = pad_dim % len(batch_size)
        else:
            (grow_dim,) = batch_dims_hit
        batch_size[grow_dim] = longest
    return positions, torch.Size([len(tds), *batch_size]), grow_dim


def _pad_stack(path: tuple[str, ...], col: list[_Tensor], pos: int, value: Any, left: bool, pad_dim: int) -> _Tensor:
    """Stack ``col`` along a new first dim, padding dim ``pos`` to the longest (dtype of the first).

    torch's own ``pad_sequence`` does the work; when it refuses, the shapes are checked to name the key.
    """
    try:
        if pos == 0:
            return _torch_pad_sequence(col, True, value, "left" if left else "right")
        moved = [x.movedim(pos, 0) for x in col]
        return _torch_pad_sequence(moved, True, value, "left" if left else "right").movedim(1, pos + 1)
    except RuntimeError:
        _check_column(path, col, pos, pad_dim)
        raise


def _padding_values(padding_value: Any, paths: list[tuple[str, ...]]) -> tuple[Any, dict[tuple[str, ...], Any]]:
    if not isinstance(padding_value, Mapping):
        return padding_value, {}
    values = {key_tuple(k): v for k, v in padding_value.items()}
    missing = [key_of(k) for k in values if k not in set(paths)]
    if missing:
        raise KeyError(
            f"pad_sequence: padding_value has keys {missing} that name no leaf of the tensordicts, whose "
            f"leaves are {sorted(map(key_of, paths), key=str)}"
        )
    return 0.0, values


def _masks(
    tds: Sequence[Any],
    paths: list[tuple[str, ...]],
    cols: list[list[_Tensor]],
    positions: list[int],
    mask_key: tuple[str, ...],
    left: bool,
) -> dict[tuple[str, ...], _Tensor]:
    """One boolean mask per leaf, True where the value is data (not padding)."""
    out = {}
    for path, col, pos in zip(paths, cols, positions, strict=True):
        ones, dim = [], 0
        for td, x in zip(tds, col, strict=True):
            extra = (x.shape[pos],) if pos >= td.batch_dims else ()
            ones.append(torch.ones((*td.batch_size, *extra), dtype=torch.bool, device=x.device))
            dim = min(pos, td.batch_dims)
        key = (*mask_key, *path)
        _check_column(key, ones, dim, dim)
        out[key] = _pad_stack(key, ones, dim, False, left, dim)
    return out


def _check_mask_room(target: Any, leaves: Any, masks: Any) -> None:
    """Raise before writing if a mask key is a padded leaf's key, or goes through a leaf."""
    existing = {path for path, _ in named_leaves(target, is_leaf=is_non_tensor_type)}
    leaves = set(leaves)
    for path in masks:
        for depth in range(1, len(path) + 1):
            prefix = path[:depth]
            if prefix in leaves or (depth < len(path) and prefix in existing):
                raise RuntimeError(
                    f"pad_sequence: cannot store the mask {fmt_path(path)}: {fmt_path(prefix)} is a leaf of "
                    "the result (pass another key as return_mask)"
                )


def pad_sequence(
    list_of_tensordicts: Sequence[Any],
    pad_dim: int = 0,
    padding_value: float | Mapping[NestedKey, float] = 0.0,
    out: Any = None,
    return_mask: bool | NestedKey = False,
    padding_side: str = "right",
) -> Any:
    """Pad TensorDicts to a common size along one dim and stack them along a new first dim.

    Args:
        list_of_tensordicts: TensorDicts with the same leaf keys; leaf shapes may differ only in
            ``pad_dim``.
        pad_dim: the padded dim of each leaf, counted from its first dim (batch dims included; negative
            counts from the last). When it is a batch dim, the batch size is padded too.
        padding_value: the fill value, or a mapping from leaf key to fill value (unnamed leaves: 0).
        out: a TensorDict to write the result into (existing leaves are written in place).
        return_mask: True, or a key under which to store the masks (default key ``"masks"``): one
            boolean leaf per leaf, True on data and False on padding.
        padding_side: ``"right"`` pads after the data, ``"left"`` before it.

    Returns:
        A TensorDict of batch size ``[len(list_of_tensordicts), *batch_size]``, or ``out``.

    Raises:
        RuntimeError: for an empty list, 0-dim leaves, or shapes that differ outside ``pad_dim``.
        KeyError: if the leaf keys differ, or ``padding_value`` names an unknown key.
        ValueError: for a bad ``padding_side``, or a negative ``pad_dim`` that cannot pad the batch.
        IndexError: if ``pad_dim`` is out of range for a leaf.

    Note:
        Differs from tensordict: TensorDicts with different keys raise a KeyError (tensordict keeps the
        keys they share), and masks are created on the device of their leaf.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> tds = [TensorDict({"a": torch.ones(n, 2)}, batch_size=[n]) for n in (2, 3)]
        >>> padded = pad_sequence(tds, return_mask=True)
        >>> padded.batch_size, padded["masks", "a"].sum(-1)
        (torch.Size([2, 3]), tensor([2, 3]))
    """
    tds = list(list_of_tensordicts)
    if not tds:
        raise RuntimeError("pad_sequence: list_of_tensordicts cannot be empty")
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}")
    _check_tds(tds, "pad_sequence")
    pad_dim = operator.index(pad_dim)
    mask_key = None
    if return_mask is not False:
        mask_key = ("masks",) if return_mask is True else key_tuple(return_mask)
    all_paths, all_cols = _leaf_columns(tds)
    tensor_cols = {
        p: c
        for p, c in zip(all_paths, all_cols, strict=True)
        if isinstance(c[0], _Tensor) and not isinstance(c[0], UnbatchedTensor)
    }
    paths, cols = list(tensor_cols), list(tensor_cols.values())
    default, values = _padding_values(padding_value, all_paths)
    positions, batch_size, grow_dim = _pad_positions(tds, paths, cols, pad_dim, out is not None)
    left = padding_side == "left"
    pos_of = dict(zip(paths, positions, strict=True))
    result = {
        path: _pad_stack(path, col, pos_of[path], values.get(path, default), left, pad_dim)
        if path in pos_of
        else _shared(col, fmt_path(path))
        if isinstance(col[0], UnbatchedTensor)
        else _stack_non_tensor(col, grow_dim, batch_size[grow_dim + 1] if grow_dim is not None else 0, left)
        for path, col in zip(all_paths, all_cols, strict=True)
    }
    if mask_key is not None:
        result.update(_masks(tds, paths, cols, positions, mask_key, left))
    target = out if out is not None else _skeleton(tds[0], batch_size)
    if mask_key is not None:
        _check_mask_room(target, all_paths, [(*mask_key, *p) for p in paths])
    try:  # update() validates every value before writing any: nothing half-written in ``out``
        target.update(result, inplace=out is not None, is_leaf=is_non_tensor_type)
    except RuntimeError as err:
        err.add_note("while writing the result of pad_sequence")
        raise
    except (KeyError, ValueError, TypeError) as err:
        raise RuntimeError(f"pad_sequence: could not write the result: {err}") from err
    return target


def _shared(col: list[Any], where: str) -> Any:
    """An UnbatchedTensor column: not padded nor stacked, the first one's (the result's batch size stamps it)."""
    check_shared(col, "pad_sequence", where)
    return col[0]


# -------------------------------------------------------------------------------- merge_tensordicts
def _leaf_in(td: Any, path: tuple[str, ...], index: int) -> Any:
    """The leaf at ``path`` in ``td`` (MISSING when absent); TypeError when the structures conflict."""
    node = td
    for depth, key in enumerate(path):
        if not is_node(node):
            raise TypeError(
                f"merge_tensordicts: key {fmt_path(path)}: {fmt_path(path[:depth])} is a "
                f"{type(node).__name__} in tensordict {index}, not a TensorDict"
            )
        node = node._get_str(key, MISSING)
        if node is MISSING:
            return MISSING
    if is_node(node):
        raise TypeError(
            f"merge_tensordicts: key {fmt_path(path)} is a TensorDict in tensordict {index} but a leaf in "
            "another tensordict"
        )
    return node


def merge_tensordicts(
    *tensordicts: Any,
    callback_exist: Callable[..., Any] | Mapping[NestedKey, Callable[..., Any]] | None = None,
) -> Any:
    """Merge the entries of several TensorDicts into a new one (values are not copied).

    The result has the batch size, names and device of the first TensorDict. For a key that several
    inputs hold, the first one wins, unless ``callback_exist`` combines the values.

    Args:
        *tensordicts: at least two TensorDicts.
        callback_exist: called as ``callback_exist(*values)`` for a tensor leaf that every input holds;
            its result is stored. A mapping gives one callback per key; other keys take the first value.
            Non-tensor entries always take the first value.

    Raises:
        RuntimeError: for fewer than two TensorDicts, or a value that does not fit the batch size.
        TypeError: if a key is a leaf in one input and a TensorDict in another.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td0 = TensorDict({"a": torch.zeros(2), "c": torch.zeros(2)}, batch_size=[2])
        >>> td1 = TensorDict({"b": torch.ones(2), "c": torch.ones(2)}, batch_size=[2])
        >>> merged = merge_tensordicts(td0, td1, callback_exist=lambda *v: sum(v))
        >>> sorted(merged.keys()), merged["c"]
        (['a', 'b', 'c'], tensor([1., 1.]))
    """
    if len(tensordicts) < 2:
        raise RuntimeError(f"merge_tensordicts: at least 2 tensordicts must be provided, got {len(tensordicts)}")
    _check_tds(tensordicts, "merge_tensordicts")
    callbacks: Mapping[tuple[str, ...], Callable[..., Any]] | None = None
    single: Callable[..., Any] | None = None
    if isinstance(callback_exist, Mapping):
        callbacks = {key_tuple(k): v for k, v in callback_exist.items()}
    else:
        single = callback_exist
    plan: dict[tuple[str, ...], Any] = {}
    nodes: dict[tuple[str, ...], int] = {}  # strict prefixes of planned leaves -> input index
    for i, td in enumerate(tensordicts):
        for path, leaf in named_leaves(td, is_leaf=is_non_tensor_type):
            if path in plan:
                continue
            clash = next((path[:d] for d in range(1, len(path)) if path[:d] in plan), None)
            if clash is not None or path in nodes:
                raise TypeError(
                    f"merge_tensordicts: key {fmt_path(path)} of tensordict {i} conflicts with "
                    f"{fmt_path(clash or path)}, which is a leaf in one input and a TensorDict in another"
                )
            callback = callbacks.get(path) if callbacks is not None else single
            if i == 0:
                others = [_leaf_in(t, path, j) for j, t in enumerate(tensordicts[1:], 1)]
                if callback is not None and all(isinstance(v, _Tensor) for v in (leaf, *others)):
                    try:
                        leaf = callback(leaf, *others)
                    except Exception as err:
                        add_path_note(err, "calling callback_exist", path)
                        raise
            plan[path] = leaf
            for d in range(1, len(path)):
                nodes.setdefault(path[:d], i)
    out = _skeleton(tensordicts[0])
    for path, value in plan.items():
        try:
            out.set(path, value)
        except (RuntimeError, ValueError):
            if type(value) not in NON_TENSOR_TYPES:
                raise
            # as tensordict: a non-tensor value that does not fit the result's batch is left out
    return out


# ---------------------------------------------------------------------------------- make / group_by
def make_tensordict(
    input_dict: Mapping[str, Any] | None = None,
    batch_size: Any = None,
    device: Any = None,
    auto_batch_size: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Build a TensorDict from a dict and/or keyword arguments (``input_dict`` wins on a shared key).

    Nested dicts, tuples, named tuples and dataclasses become nested TensorDicts (as
    :meth:`TensorDict.from_any` converts them).

    Args:
        input_dict: the entries.
        batch_size: the batch size (default ``[]`` unless ``auto_batch_size``).
        device: the device of the result.
        auto_batch_size: set each node's batch size to the longest leading shape its entries share.
        **kwargs: more entries.

    Examples:
        >>> import torch
        >>> td = make_tensordict({"a": torch.zeros(3)}, b={"c": torch.zeros(3, 4)}, auto_batch_size=True)
        >>> td.batch_size, td["b"].batch_size
        (torch.Size([3]), torch.Size([3, 4]))
    """
    if input_dict is not None:
        kwargs.update(input_dict.items())
    return _convert.from_dict(kwargs, batch_size=batch_size, device=device, auto_batch_size=auto_batch_size)


def _hashable(row: Any) -> Any:
    return tuple(map(_hashable, row)) if isinstance(row, list) else row


def _group_values(rows: list[Any], key: NestedKey) -> tuple[list[Any], _Tensor, _Tensor]:
    """``torch.unique`` for the Python values of a non-tensor entry (one per row)."""
    rows = [_hashable(row) for row in rows]
    try:
        values = sorted(set(rows))
    except TypeError as err:
        raise TypeError(f"group_by: the values of the non-tensor entry {key!r} must be hashable and sortable") from err
    index = {value: i for i, value in enumerate(values)}
    inverse = torch.tensor([index[row] for row in rows], dtype=torch.long)
    return values, inverse, torch.bincount(inverse, minlength=len(values))


def group_by(tensordict: Any, key: NestedKey) -> tuple[_Tensor | list[Any], tuple[Any, ...]]:
    """Split the rows (first batch dim) into groups that share the value of one entry.

    Args:
        tensordict: a TensorDict with at least one batch dim.
        key: a tensor entry (rows are compared whole when it has more than one value per row), or a
            non-tensor entry whose values are hashable and sortable.

    Returns:
        ``(values, groups)``: the sorted unique values (a tensor, or a list for a non-tensor entry), and
        one TensorDict per value holding its rows in their original order.

    Raises:
        ValueError: if ``tensordict`` has no batch dim.
        KeyError: if ``key`` is missing.
        TypeError: if the entry is a TensorDict, or holds unhashable or unsortable values.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"uid": torch.tensor([2, 0, 2]), "r": torch.arange(3.0)}, batch_size=[3])
        >>> values, groups = group_by(td, "uid")
        >>> values, [g["r"].tolist() for g in groups]
        (tensor([0, 2]), [[1.0], [0.0, 2.0]])
    """
    if not is_td(tensordict):
        raise TypeError(f"group_by expects a TensorDict, got {type(tensordict).__name__}")
    if not tensordict.batch_dims:
        raise ValueError("group_by: groups rows along the first batch dim, but the tensordict has batch_size []")
    entry = tensordict._get(key, MISSING)
    if entry is MISSING:
        raise KeyError(f"group_by: the tensordict has no entry {key!r}; its keys are {sorted(tensordict.keys())}")
    if type(entry) in NON_TENSOR_TYPES:
        values, inverse, counts = _group_values(entry.tolist(), key)
    elif isinstance(entry, _Tensor):
        values, inverse, counts = torch.unique(
            entry, sorted=True, return_inverse=True, return_counts=True, dim=0 if entry.ndim > 1 else None
        )
    else:
        raise TypeError(f"group_by needs a tensor or non-tensor entry, but {key!r} holds a {type(entry).__name__}")
    order = torch.argsort(inverse, stable=True)
    return values, tuple(tensordict[order].split(counts.tolist(), 0))


# ----------------------------------------------------------------------------------- unpad_sequence
def _run(valid: _Tensor, where: str) -> tuple[int, int]:
    """``(start, length)`` of the one contiguous run of True in a 1-d mask."""
    hits = valid.nonzero().flatten().tolist()
    if not hits:
        return 0, 0
    start, stop = hits[0], hits[-1] + 1
    if stop - start != len(hits):
        raise ValueError(f"unpad_sequence: the valid positions of {where} are not contiguous: {hits}")
    return start, stop - start


def _along(mask: _Tensor, pos: int) -> _Tensor:
    """Reduce a sample's mask to one flag per position of dim ``pos`` (True where any value is valid)."""
    if mask.ndim == 1:
        return mask
    return mask.movedim(min(pos, mask.ndim - 1), 0).reshape(mask.shape[min(pos, mask.ndim - 1)], -1).any(-1)


def unpad_sequence(padded: Any, mask: Any = None, *, pad_dim: int = 0) -> Any:
    """Split a padded batch (from :func:`pad_sequence`) back into its variable-length samples.

    Args:
        padded: the padded batch, samples along its first dim.
        mask: the valid positions: a TensorDict with one mask per entry (the layout
            ``pad_sequence(..., return_mask=True)`` writes), or a bool tensor ``[len(padded), max_len]``
            used for every entry. None reads the ``"masks"`` entry of ``padded`` (and drops it).
        pad_dim: the ``pad_dim`` given to :func:`pad_sequence` (counted from each sample's first dim).

    Returns:
        A lazy stack of the samples; their leaves are views of ``padded``.

    Raises:
        ValueError: without a batch dim, without a mask, or when a row's valid positions are not one run.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> tds = [TensorDict({"a": torch.arange(n)}, batch_size=[n]) for n in (2, 4)]
        >>> samples = unpad_sequence(pad_sequence(tds, return_mask=True))
        >>> [s["a"].tolist() for s in samples.tensordicts]
        [[0, 1], [0, 1, 2, 3]]
    """
    from ._lazy import lazy_stack  # the lazy stack imports this module's neighbours

    if not padded.batch_dims:
        raise ValueError("unpad_sequence: padded needs a batch dim holding the samples")
    source = padded
    if mask is None:
        mask = padded._get("masks", MISSING)
        if mask is MISSING:
            raise ValueError(
                "unpad_sequence needs a mask: pass mask=..., or pad with pad_sequence(..., return_mask=True)"
            )
        source = padded.exclude("masks")
    if isinstance(mask, _Tensor) and (mask.ndim != 2 or mask.shape[0] != padded.batch_size[0]):
        raise ValueError(
            f"unpad_sequence: a mask tensor must have shape [{padded.batch_size[0]}, max_len], "
            f"got {fmt_shape(mask.shape)}"
        )
    entries = [(p, v) for p, v in named_leaves(source, is_leaf=is_non_tensor_type) if not is_td(v) or is_non_tensor(v)]
    tensors = [(p, v) for p, v in entries if isinstance(v, _Tensor)]
    sample_bs = list(padded.batch_size[1:])
    on_batch = pad_dim < len(sample_bs)  # padding went along a batch dim: non-tensor entries are trimmed too
    samples = []
    for i in range(padded.batch_size[0]):
        out: dict[Any, Any] = {}
        bs = list(sample_bs)
        batch_run = None
        for path, leaf in tensors:
            if isinstance(mask, _Tensor):
                row = mask[i]
            else:
                m = mask._get(path, MISSING)
                if m is MISSING:
                    raise KeyError(f"unpad_sequence: no mask for the entry {fmt_path(path)}")
                row = _along(m[i], pad_dim)
            start, length = _run(row, f"row {i} of {fmt_path(path)}")
            out[path] = leaf[i].narrow(pad_dim, start, length)
            if on_batch and batch_run is None:
                batch_run = (start, length)
        if on_batch and batch_run is None and isinstance(mask, _Tensor):
            batch_run = _run(mask[i], f"row {i}")
        if batch_run is not None:
            bs[pad_dim] = batch_run[1]
        for path, leaf in entries:
            if not isinstance(leaf, _Tensor):
                sample = leaf[i]
                if batch_run is not None:
                    start, length = batch_run
                    sample = sample[(slice(None),) * pad_dim + (slice(start, start + length),)]
                out[path] = sample
        samples.append(padded._dense_cls(out, batch_size=bs))
    return lazy_stack(samples, 0)


def _pad_method(
    self: Any, pad_size: Sequence[int], value: float = 0.0, inplace: bool = False, safe: bool = True
) -> Any:
    """Pad every leaf along the batch dims with a constant (see :func:`tensorbatch.functional.pad`)."""
    return pad(self, pad_size, value, inplace, safe)


_pad_method.__name__ = _pad_method.__qualname__ = "pad"
setattr(TensorDictBase, "pad", _pad_method)  # noqa: B010  # attached here: base.py imports no feature
