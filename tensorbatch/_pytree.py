"""Registration of TensorDict with ``torch.utils._pytree`` (for compile, export and vmap).

The context keeps each tensor leaf's number of feature dims, so ``unflatten`` can rebuild the
right batch size when a transform (``vmap``) added or removed batch dims, and non-tensor
placeholders (vmap unflattens with ints/None) keep the original batch size. Outside vmap, leaves
that still start with the batch size keep it (``jacrev`` appends dims to every leaf: batch as tensordict).
"""

from __future__ import annotations

from typing import Any

import torch

from . import _compat
from ._td import TensorDict


def _flatten(td: TensorDict) -> tuple[list[Any], Any]:
    values = list(td._tensordict.values())
    nd = len(td._batch_size)
    # a tensor's feature dims n, a collection's extra batch dims as -1 - n (the kind tells jacobians apart)
    feats = tuple(
        v.ndim - nd if isinstance(v, torch.Tensor) else nd - 1 - len(v.batch_size) if hasattr(v, "batch_size")
        else None
        for v in values
    )
    return values, (tuple(td._tensordict.keys()), td._batch_size, td._device, td._names, feats)


def _flatten_with_keys(td: TensorDict) -> tuple[list[tuple[Any, Any]], Any]:
    values, context = _flatten(td)
    return [(_compat.mapping_key(k), v) for k, v in zip(context[0], values, strict=True)], context


def _batch_size(values: list[Any], context: Any) -> torch.Size:
    batch_size: torch.Size
    _keys, batch_size, _, _, feats = context
    first = None
    for value, feat in zip(values, feats, strict=True):
        if feat is None:
            continue
        if isinstance(value, torch.Tensor):
            return value.shape[: value.ndim - (feat if feat >= 0 else -1 - feat)]
        if hasattr(value, "batch_size"):
            if feat >= 0:  # a tensor became a collection (jacfwd's per-input jacobians): it tells nothing
                first = value.batch_size if first is None else first
                continue
            return value.batch_size[: len(value.batch_size) + 1 + feat]  # type: ignore[no-any-return]  # a collection
    if first is not None:  # only such values: their leading dims, as many as there were (as tensordict)
        return first[: len(batch_size)]  # type: ignore[no-any-return]  # a torch.Size
    return batch_size


def _leads_every_leaf(values: list[Any], batch_size: torch.Size) -> bool:
    nd = len(batch_size)
    for value in values:
        shape = value.shape if isinstance(value, torch.Tensor) else getattr(value, "batch_size", None)
        if shape is not None and shape[:nd] != batch_size:
            return False
    return True


def _unflatten(values: Any, context: Any) -> TensorDict:
    values = list(values)
    keys, batch_size, device, names, _ = context
    new_bs = _batch_size(values, context)
    # Leaves that still start with the batch size keep it (tree_map changing feature dims, jacrev/jacfwd
    # appending the input's dims, as tensordict); under vmap the mapped dims are batch dims.
    if new_bs != batch_size and _leads_every_leaf(values, batch_size) and not _compat.in_vmap():
        new_bs = batch_size
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
