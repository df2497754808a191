"""Inferring the batch sizes of a file that records none: from the datasets' shapes, without reading data."""

from __future__ import annotations

from typing import Any

import torch

from .._ops.meta import NODE, common_batch
from ._file import OutsideDataError


def auto_batch(td: Any, batch_dims: int | None) -> None:
    """Give each node the longest leading shape its entries share, from metadata only (nested nodes first)."""
    shapes = []
    for key in td._keys_str():
        try:
            obj, kind = td._entry(key)
        except OutsideDataError:  # refused when read; it does not decide the batch size
            continue
        if kind is NODE:
            child = td._child(key, obj)
            auto_batch(child, batch_dims)
            shapes.append(child.batch_size)
        elif kind is not None:  # (non-tensor values follow the batch size; they do not decide it)
            shapes.append(torch.Size(obj.shape))
    size = common_batch(shapes, batch_dims)
    td._shared.batch[td._name] = size  # (not written to the file: opening a file leaves it unchanged)
