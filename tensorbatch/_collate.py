"""``collate``: a ``collate_fn`` for ``torch.utils.data.DataLoader`` over TensorDicts and TensorClasses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import default_collate

from ._base.collection import TensorCollection
from ._compat import register_default_collate
from ._keys import unravel_key
from ._lazy import LazyStackedTensorDict, maybe_dense_stack
from ._ops.traverse import is_td
from .functional import pad_sequence
from .tensorclass import is_tensorclass

if TYPE_CHECKING:
    from ._keys import NestedKey


def collate(
    batch: Any,
    *,
    pad_keys: Mapping[NestedKey, float] | None = None,
    nested_keys: Sequence[NestedKey] | None = None,
    mask_key: NestedKey | None = None,
) -> Any:
    """Collate a list of samples into a batch: pass it as a DataLoader's ``collate_fn``.

    Samples are collated by the type of the first one: TensorDicts and TensorClasses through
    :func:`maybe_dense_stack` (dense when keys and shapes agree, else a lazy stack; a TensorClass keeps its
    class), tensors through :func:`torch.stack`, mappings into a dict and tuples into a tuple (a named tuple
    keeps its type) entry by entry, anything else through ``torch.utils.data.default_collate``. Anything but a
    non-empty list is returned as it is.

    Args:
        batch: the samples of one batch.
        pad_keys: entries of the (batch-size ``[]``) samples to pad along their first dim to the longest,
            each mapped to its padding value (as :func:`pad_sequence`).
        nested_keys: entries to stack as ``torch.jagged`` nested tensors (ragged first dim); the other
            entries must then stack densely.
        mask_key: where to store, for each ``pad_keys`` entry, a mask that is True at the valid positions.

    Raises:
        KeyError: if a sample lacks a key of ``pad_keys`` or ``nested_keys``.
        ValueError: for ``mask_key`` without ``pad_keys`` or naming an entry of a sample, a key in both
            ``pad_keys`` and ``nested_keys``, ``pad_keys`` with samples that have batch dims, or
            ``nested_keys`` when the other entries do not stack densely.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict, collate
        >>> samples = [TensorDict(ids=torch.ones(n, dtype=torch.long)) for n in (2, 3)]
        >>> batch = collate(samples, pad_keys={"ids": 7}, mask_key="mask")
        >>> batch["ids"].tolist(), batch["mask", "ids"].tolist()
        ([[1, 1, 7], [1, 1, 1]], [[True, True, False], [True, True, True]])
    """
    if not isinstance(batch, list) or not batch:
        return batch
    first = batch[0]
    if is_td(first):
        if pad_keys is None and nested_keys is None and mask_key is None:
            return maybe_dense_stack(batch)
        return _collate_keys(batch, pad_keys or {}, nested_keys or (), mask_key)
    if isinstance(first, torch.Tensor):
        return torch.stack(batch)
    options: dict[str, Any] = {"pad_keys": pad_keys, "nested_keys": nested_keys, "mask_key": mask_key}
    if isinstance(first, Mapping):
        return {key: collate([sample[key] for sample in batch], **options) for key in first}
    if isinstance(first, tuple):
        items = [collate(list(column), **options) for column in zip(*batch, strict=True)]
        return type(first)(*items) if hasattr(first, "_fields") else tuple(items)
    return default_collate(batch)


def _collate_keys(
    batch: list[Any], pad_keys: Mapping[NestedKey, float], nested_keys: Sequence[NestedKey], mask_key: NestedKey | None
) -> Any:
    """Stack the samples without the named entries, then add those padded or nested (checked first)."""
    pads = {unravel_key(key): value for key, value in pad_keys.items()}
    nested = [unravel_key(key) for key in nested_keys]
    if mask_key is not None and not pads:
        raise ValueError("collate: mask_key is given but no pad_keys to mask")
    both = [key for key in nested if key in pads]
    if both:
        raise ValueError(f"collate: the keys {both} are in both pad_keys and nested_keys")
    if pads and batch[0].batch_dims:
        raise ValueError(
            f"collate(pad_keys=...) pads the first dim of each entry, a batch dim of these samples "
            f"(batch_size={list(batch[0].batch_size)}): give the samples an empty batch size, or "
            f"call pad_sequence"
        )
    mask = None if mask_key is None else unravel_key(mask_key)
    for i, sample in enumerate(batch):
        keys = set(sample.keys(True))
        for key in (*pads, *nested):
            if key not in keys:
                raise KeyError(f"collate: sample {i} has no entry {key!r}")
        if mask is not None and mask in keys:
            raise ValueError(f"collate: mask_key={mask!r} is an entry of sample {i}")
    out = maybe_dense_stack([sample.exclude(*pads, *nested) for sample in batch])
    if nested and isinstance(getattr(out, "_tensordict", out), LazyStackedTensorDict):
        raise ValueError(
            f"collate(nested_keys={nested}): the other entries of the samples differ in shape and "
            f"stack lazily; name the entries that vary in length in pad_keys or nested_keys"
        )
    if pads:
        plain = [(sample._tensordict if is_tensorclass(sample) else sample).select(*pads) for sample in batch]
        padded = pad_sequence(plain, padding_value=pads, return_mask=False if mask is None else mask)
        for key in pads:
            out.set(key, padded.get(key))
        if mask is not None:
            out.set(mask, padded.get(mask))
    for key in nested:
        out.set(key, torch.nested.as_nested_tensor([sample.get(key) for sample in batch], layout=torch.jagged))
    return out


def _default_collate(batch: Any, *, collate_fn_map: Any = None) -> Any:
    """The entry of torch's ``default_collate`` for TensorDicts and TensorClasses (registered below).

    A batch a dataset read at once (``__getitems__``: a TensorDict or TensorClass) is returned as it is; a
    list of samples is stacked as :func:`collate` stacks them (densely when keys and shapes agree, else
    lazily; a TensorClass keeps its class), as tensordict 0.15.3 does.

    Raises:
        TypeError: for samples that cannot be stacked together (as tensordict 0.15.3, whose callers fall
            back on TypeError): different TensorClasses, TensorClasses mixed with TensorDicts or with
            other types, different numbers of batch dims, or batch sizes that do not stack.
    """
    if isinstance(batch, TensorCollection):
        return batch
    types = {type(item) for item in batch}
    if not all(issubclass(t, TensorCollection) for t in types):
        raise TypeError(
            f"Cannot collate a batch that mixes tensordicts or tensorclasses with other types: got "
            f"{sorted(t.__name__ for t in types)}."
        )
    classes = [t for t in types if is_tensorclass(t)]
    if classes and len(classes) < len(types):
        raise TypeError(
            f"Cannot collate a batch that mixes tensorclass instances with tensordicts: got "
            f"{sorted(t.__name__ for t in types)}."
        )
    if len(classes) > 1 and not any(
        all(issubclass(t, base) and t._field_specs.keys() == base._field_specs.keys() for t in classes)
        for base in classes
    ):
        raise TypeError(
            f"Cannot collate a batch of different tensorclasses: got {sorted(t.__name__ for t in classes)}."
        )
    dims = {item.batch_dims for item in batch}
    if len(dims) > 1:
        raise TypeError(
            f"Cannot collate a batch of tensordicts or tensorclasses with different numbers of batch "
            f"dims: got {sorted(dims)}."
        )
    try:
        return maybe_dense_stack(batch)
    except RuntimeError as err:
        raise TypeError(f"Cannot collate a batch of tensordicts or tensorclasses that do not stack: {err}") from err


# TensorClass is a virtual subclass of TensorCollection: one entry covers every backend and every TensorClass
register_default_collate(TensorCollection, _default_collate)
