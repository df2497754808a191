"""Row reads and writes of a store: byte ranges of dim 0, every leaf in one round trip.

A leaf of shape ``[n, *rest]`` holds ``n`` rows of ``prod(rest) * itemsize`` bytes. An int or a forward slice is
one contiguous range (a stepped slice reads its covering range and steps in memory): one GETRANGE / SETRANGE per
leaf. Scattered rows (sorted, unique: ``RowPlan.rows``) are coalesced into runs of consecutive rows; up to
``FEW_RUNS`` runs are GETRANGEs, more go to one Lua call per leaf (``GETRANGES``, registered once, EVALSHA) that
returns the runs concatenated. Writes are SETRANGEs inside the store's guarded write script (atomic): the runs of
one leaf (one for an int or a slice) go as one ``SETRANGES`` entry (``(offset, bytes)`` pairs) that the script
loops over.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._ops.rows import RowPlan
from . import _format as fmt
from ._conn import GETRANGES, SHA

FEW_RUNS = 4


def runs(rows: torch.Tensor) -> list[tuple[int, int]]:
    """``(first_row, count)`` of each run of consecutive rows in a sorted unique 1-d tensor."""
    if rows.numel() == 0:
        return []
    breaks = (torch.nonzero(rows[1:] - rows[:-1] != 1).reshape(-1) + 1).tolist()
    starts = [0, *breaks]
    ends = [*breaks, rows.numel()]
    values = rows.tolist()
    return [(values[s], e - s) for s, e in zip(starts, ends, strict=True)]


def byte_ranges(plan: RowPlan, row_bytes: int) -> tuple[list[tuple[int, int]], Any]:
    """The ``(offset, length)`` ranges a read of ``plan`` fetches, and the in-memory step to apply after.

    The step is a slice step, or None.
    """
    if plan.kind == "int":
        return [(plan.index * row_bytes, row_bytes)], None
    if plan.kind == "slice":
        start, stop, step = plan.index.start, plan.index.stop, plan.index.step or 1
        count = len(range(start, stop, step))
        if count == 0:
            return [], None
        last = start + (count - 1) * step
        return [(start * row_bytes, (last - start + 1) * row_bytes)], (slice(None, None, step) if step > 1 else None)
    return [(r * row_bytes, n * row_bytes) for r, n in runs(plan.rows)], None


def read_commands(key: str, ranges: list[tuple[int, int]]) -> list[tuple[Any, ...]]:
    """The commands reading ``ranges`` of ``key``: a GETRANGE each when few, else one GETRANGES script call."""
    if len(ranges) <= FEW_RUNS:
        return [("GETRANGE", key, offset, offset + length - 1) for offset, length in ranges]
    return [("EVALSHA", SHA[GETRANGES], 1, key, *[v for r in ranges for v in r])]


def assemble(parts: list[bytes], shape: torch.Size, dtype: torch.dtype, plan: RowPlan, step: Any) -> torch.Tensor:
    """The rows read (in ``plan``'s order and shape) from the bytes of the ranges."""
    rest = tuple(shape[1:])
    data = b"".join(parts) if len(parts) != 1 else parts[0]
    if plan.kind == "int":
        return fmt.from_bytes(data, rest, dtype)
    out = fmt.from_bytes(data, (-1, *rest) if data else (0, *rest), dtype)
    if plan.kind == "slice":
        return out if step is None else out[step]
    if plan.inverse is not None:
        out = out[plan.inverse]
    return out.reshape(*plan.shape, *rest) if plan.inverse is None else out


def write_commands(
    key: str, shape: torch.Size, plan: RowPlan, value: torch.Tensor, row_bytes: int | None = None
) -> list[tuple[str, list[str], list[Any]]]:
    """The SETRANGES entry (``(offset, bytes)`` pairs) writing ``value`` at ``plan``'s rows of the leaf ``key``.

    ``value`` is already broadcast to ``plan.target_shape(shape)``; for repeated rows, the last value wins.
    ``row_bytes``: the size of a row, when known.
    """
    rest = tuple(shape[1:])
    if row_bytes is None:
        row_bytes = value.dtype.itemsize * math.prod(rest)
    kind = plan.kind
    if kind == "int":
        return [("SETRANGES", [key], [plan.index * row_bytes, fmt.to_bytes(value)])]
    if kind == "slice" and (plan.index.step or 1) == 1:
        if plan.index.stop <= plan.index.start:
            return []
        return [("SETRANGES", [key], [plan.index.start * row_bytes, fmt.to_bytes(value)])]
    flat = value.reshape(-1, *rest)
    if kind == "rows":
        positions = plan.last_positions()
        if positions is not None:
            flat = flat[positions]
    data = fmt.to_bytes(flat)
    args: list[Any] = []
    at = 0
    for first, count in runs(plan.rows):
        size = count * row_bytes
        args += (first * row_bytes, data[at : at + size])
        at += size
    return [("SETRANGES", [key], args)] if args else []  # one command per leaf: the guard script loops
