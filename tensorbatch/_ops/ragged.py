"""Nested (ragged) tensor leaves: ``torch.nested`` tensors of either layout along the batch dim.

A nested tensor's dim 0 is the batch dim it shares with its TensorDict, but torch indexes, splits and
concatenates nested tensors only along their inner dims. These functions do the dim-0 work for both
layouts: ``torch.jagged`` (one ``values`` tensor plus ``offsets``: slices stay views of the values,
other selections gather rows) and ``torch.strided`` (the selected components are nested again).

Callers reach this module only after the ordinary path failed, or behind a cheap ``t.is_nested``,
so that plain tensors never pay for it.

The storage form (``to_flat``/``from_flat``) is the same for both layouts: the components' elements
one after the other, plus one row of sizes per component (the memmap folders of tensordict store
nested tensors that way too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .._compat import nested_view_from_buffer

_Tensor = torch.Tensor
_LONG = torch.int64


def is_ragged(value: Any) -> bool:
    """True for a nested tensor (either layout)."""
    return isinstance(value, _Tensor) and value.is_nested


def shape(t: torch.Tensor) -> torch.Size:
    """The shape of a nested tensor, -1 where the components' sizes differ (tensordict's convention).

    Examples:
        >>> import torch
        >>> nt = torch.nested.nested_tensor([torch.zeros(1, 2), torch.zeros(3, 2)], layout=torch.jagged)
        >>> shape(nt)
        torch.Size([2, -1, 2])
    """
    if t.layout is torch.jagged:
        return torch.Size([s if type(s) is int else -1 for s in t.shape])
    sizes = t._nested_tensor_size()
    if not len(sizes):
        return torch.Size([0, *([-1] * sizes.shape[1])])
    first = sizes[0]
    same = (sizes == first).all(0).tolist()
    return torch.Size([len(sizes), *(int(s) if eq else -1 for s, eq in zip(first.tolist(), same, strict=True))])


def same_sizes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` are nested tensors of one layout whose components have the same shapes."""
    if not (is_ragged(a) and is_ragged(b)) or a.layout != b.layout:
        return False
    pa, pb = _jagged_parts(a), _jagged_parts(b)
    if pa is not None and pb is not None:
        return pa[0].shape[1:] == pb[0].shape[1:] and torch.equal(pa[2].cpu(), pb[2].cpu())
    return torch.equal(to_sizes(a), to_sizes(b))


def to_sizes(t: torch.Tensor) -> torch.Tensor:
    """The shapes of the components of a nested tensor, one row each (int64, on the CPU)."""
    if t.layout is torch.strided:
        return t._nested_tensor_size()
    return torch.tensor([list(c.shape) for c in t.unbind(0)], dtype=_LONG).reshape(t.size(0), t.dim() - 1)


def _jagged_parts(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """``(values, starts, lengths)`` of a jagged tensor whose ragged dim is dim 1, else None."""
    if t.layout is not torch.jagged or t._ragged_idx != 1:  # type: ignore[attr-defined]
        return None
    offsets = t.offsets()  # type: ignore[attr-defined]  # a jagged NestedTensor's
    lengths = t.lengths()  # type: ignore[attr-defined]
    return t.values(), offsets[:-1], offsets.diff() if lengths is None else lengths


def _from_rows(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The components ``rows`` (valid, non-negative long indices) of ``t``, as a new nested tensor."""
    parts = _jagged_parts(t)
    if parts is None:  # strided (or a transposed jagged tensor): nest the components again
        comps = t.unbind(0)
        return torch.nested.as_nested_tensor([comps[i] for i in rows.tolist()], layout=t.layout)
    values, starts, lengths = parts
    rows = rows.to(starts.device)
    return _joined(values, starts[rows], lengths[rows])


def _narrow(t: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Components ``start:stop`` of ``t``: a view of the values for a contiguous jagged tensor."""
    if t.layout is torch.jagged and t._ragged_idx == 1 and t.lengths() is None:  # type: ignore[attr-defined]
        offsets = t.offsets()  # type: ignore[attr-defined]  # a jagged NestedTensor's
        lo, hi = int(offsets[start]), int(offsets[stop])
        return torch.nested.nested_tensor_from_jagged(t.values()[lo:hi], offsets[start : stop + 1] - lo)
    return _from_rows(t, torch.arange(start, stop))


def _rows_of(index: Any, n: int) -> torch.Tensor:
    """A dim-0 index (slice, int tensor or list, bool mask) as valid non-negative long rows."""
    if type(index) is slice:
        return torch.arange(*index.indices(n))
    rows = torch.as_tensor(index)
    if rows.dtype == torch.bool:
        if rows.shape != (n,):
            raise IndexError(f"a mask of shape {list(rows.shape)} cannot index a nested tensor of {n} components")
        return rows.nonzero().squeeze(-1)
    if rows.is_floating_point() or rows.ndim != 1:
        raise IndexError(
            "a nested tensor is indexed along its batch dim by an int, a slice, a 1-d list "
            "or tensor of ints, or a 1-d mask"
        )
    rows = rows.to(_LONG)
    if len(rows):
        lo, hi = (int(v) for v in torch.aminmax(rows))
        if lo < -n or hi >= n:
            raise IndexError(f"index {hi if hi >= n else lo} is out of bounds for dimension 0 with size {n}")
    return torch.where(rows < 0, rows + n, rows)


def getitem(t: torch.Tensor, index: Any) -> torch.Tensor:
    """``t[index]`` along dim 0 (the batch dim) for a nested tensor; the rest of a tuple index as torch does.

    Examples:
        >>> import torch
        >>> nt = torch.nested.nested_tensor([torch.ones(1), torch.ones(2), torch.ones(3)], layout=torch.jagged)
        >>> [c.shape[0] for c in getitem(nt, slice(1, None)).unbind()]
        [2, 3]
        >>> [c.shape[0] for c in getitem(nt, [2, 0]).unbind()]
        [3, 1]
    """
    rest: tuple[Any, ...] = ()
    if type(index) is tuple:
        index, rest = (index[0], index[1:]) if index else (slice(None), ())
    if isinstance(index, int) or (isinstance(index, _Tensor) and index.ndim == 0 and index.dtype != torch.bool):
        out = t[int(index)]  # torch does ints: a dense component
        return out[rest] if rest else out
    n = t.size(0)
    if type(index) is slice and index.step in (None, 1):
        start, stop, _ = index.indices(n)
        out = _narrow(t, start, max(start, stop))
    elif index is None or index is Ellipsis:  # (a RuntimeError, as torch's unsqueeze of a nested tensor)
        raise RuntimeError("a nested tensor leaf takes no None or Ellipsis on its batch dim")
    else:
        out = _from_rows(t, _rows_of(index, n))
    if rest and any(not (type(i) is slice and i == slice(None)) for i in rest):
        out = out[(slice(None), *rest)]
    return out


def split(t: torch.Tensor, sizes: Sequence[int]) -> tuple[torch.Tensor, ...]:
    """``t.split(sizes, 0)`` for a nested tensor: pieces of ``sizes`` components (views when jagged)."""
    out = []
    start = 0
    for size in sizes:
        out.append(_narrow(t, start, start + size))
        start += size
    return tuple(out)


def cat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(tensors, 0)`` for nested tensors of one layout (their components one after the other).

    Examples:
        >>> import torch
        >>> nt = torch.nested.nested_tensor([torch.ones(1), torch.ones(2)], layout=torch.jagged)
        >>> [c.shape[0] for c in cat([nt, nt]).unbind()]
        [1, 2, 1, 2]
    """
    layouts = {t.layout for t in tensors}
    if len(layouts) != 1 or not all(is_ragged(t) for t in tensors):
        raise RuntimeError("cat: nested tensors can only be concatenated with nested tensors of the same layout")
    layout = layouts.pop()
    parts = [_jagged_parts(t) for t in tensors]
    if layout is torch.jagged and all(p is not None for p in parts):
        starts, lengths = [], []
        base = 0
        for values, s, lens in parts:  # type: ignore[misc]  # none is None here
            starts.append(s + base)
            lengths.append(lens)
            base += values.shape[0]
        return _joined(torch.cat([p[0] for p in parts]), torch.cat(starts), torch.cat(lengths))  # type: ignore[index]
    return torch.nested.as_nested_tensor([c for t in tensors for c in t.unbind(0)], layout=layout)


def _joined(values: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A contiguous jagged tensor of the rows ``values[starts[i]:starts[i] + lengths[i]]``."""
    offsets = torch.zeros(len(starts) + 1, dtype=_LONG, device=starts.device)
    torch.cumsum(lengths, 0, out=offsets[1:])
    total = int(offsets[-1])
    if total == values.shape[0] and bool((starts == offsets[:-1]).all()):  # already in order: no gather
        return torch.nested.nested_tensor_from_jagged(values, offsets.to(values.device))
    shift = torch.repeat_interleave(starts - offsets[:-1], lengths, output_size=total)
    picked = values.index_select(0, torch.arange(total, device=values.device) + shift.to(values.device))
    return torch.nested.nested_tensor_from_jagged(picked, offsets.to(values.device))


# ------------------------------------------------------------------------------------------ storage
def to_flat(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(data, sizes)``: the components' elements one after the other (1-d) and their shapes (n x d, int64).

    Examples:
        >>> import torch
        >>> nt = torch.nested.nested_tensor([torch.ones(1, 2), torch.zeros(2, 2)], layout=torch.jagged)
        >>> data, sizes = to_flat(nt)
        >>> data.tolist(), sizes.tolist()
        ([1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [[1, 2], [2, 2]])
    """
    parts = _jagged_parts(t)
    if parts is not None:  # sizes from the lengths, data from the values: no loop over the components
        values, starts, lengths = parts
        sizes = torch.empty(len(lengths), values.dim(), dtype=_LONG)
        sizes[:, 0] = lengths.cpu()
        sizes[:, 1:] = torch.tensor(values.shape[1:], dtype=_LONG)
        n = values.shape[0]
        if (
            t.lengths() is None  # type: ignore[attr-defined]
            and values.is_contiguous()
            and (not len(starts) or (int(starts[0]) == 0 and int(starts[-1] + lengths[-1]) == n))
        ):
            return values.reshape(-1), sizes  # the values already are the components one after the other
        return _joined(values, starts, lengths).values().reshape(-1), sizes
    sizes = t._nested_tensor_size()
    comps = t.unbind(0)
    data = torch.cat([c.reshape(-1) for c in comps]) if comps else torch.empty(0, dtype=t.dtype, device=t.device)
    return data, sizes


def from_flat(data: torch.Tensor, sizes: torch.Tensor, layout: torch.layout) -> torch.Tensor:
    """The nested tensor that :func:`to_flat` gave ``(data, sizes)`` for: a view of ``data``."""
    sizes = sizes.to(_LONG)
    if layout is torch.jagged:
        if sizes.ndim != 2 or sizes.shape[1] < 1 or (len(sizes) and bool((sizes[:, 1:] != sizes[0, 1:]).any())):
            raise RuntimeError(f"nested sizes {sizes.tolist()} do not describe a jagged tensor (ragged dim 1 only)")
        offsets = torch.zeros(len(sizes) + 1, dtype=_LONG)
        torch.cumsum(sizes[:, 0], 0, out=offsets[1:])
        rest = sizes[0, 1:].tolist() if len(sizes) else []
        values = data[: int(sizes.prod(1).sum())].view(-1, *rest)
        return torch.nested.nested_tensor_from_jagged(values, offsets.to(data.device))
    return nested_view_from_buffer(data, sizes)
