"""Registration of TensorDict with ``torch.utils._pytree`` (for compile, export and vmap).

The context keeps each tensor leaf's number of feature dims, so ``unflatten`` can rebuild the
right batch size when a transform (``vmap``) added or removed batch dims, and non-tensor
placeholders (vmap unflattens with ints/None) keep the original batch size.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _compat
from ._td import TensorDict


def _flatten(td: TensorDict) -> tuple[list[Any], Any]:
    values = list(td._tensordict.values())
    nd = len(td._batch_size)
    feats = tuple(
        v.ndim - nd if isinstance(v, torch.Tensor) else len(v.batch_size) - nd if hasattr(v, "batch_size") else None
        for v in values
    )
    return values, (tuple(td._tensordict.keys()), td._batch_size, td._device, td._names, feats)


def _flatten_with_keys(td: TensorDict) -> tuple[list[tuple[Any, Any]], Any]:
    values, context = _flatten(td)
    return [(_compat.mapping_key(k), v) for k, v in zip(context[0], values, strict=True)], context


def _batch_size(values: list[Any], context: Any) -> torch.Size:
    batch_size: torch.Size
    _keys, batch_size, _, _, feats = context
    for value, feat in zip(values, feats, strict=True):
        if feat is None:
            continue
        if isinstance(value, torch.Tensor):
            return value.shape[: value.ndim - feat]
        if hasattr(value, "batch_size"):
            return value.batch_size[: len(value.batch_size) - feat]  # type: ignore[no-any-return]  # a collection
    return batch_size


def _unflatten(values: Any, context: Any) -> TensorDict:
    values = list(values)
    keys, batch_size, device, names, _ = context
    new_bs = _batch_size(values, context)
    if new_bs != batch_size:
        names = None
    return TensorDict._new_unsafe(dict(zip(keys, values, strict=True)), torch.Size(new_bs), device, names)


def _to_dumpable(context: Any) -> Any:
    keys, batch_size, device, names, feats = context
    return [list(keys), list(batch_size), None if device is None else str(device),
            None if names is None else list(names), list(feats)]


def _from_dumpable(dumped: Any) -> Any:
    keys, batch_size, device, names, feats = dumped
    return (tuple(keys), torch.Size(batch_size), None if device is None else torch.device(device),
            None if names is None else tuple(names), tuple(feats))


_compat.register_pytree_node(TensorDict, _flatten, _unflatten, _flatten_with_keys, _to_dumpable, _from_dumpable)
