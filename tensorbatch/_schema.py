"""``TensorDictBase.from_schema``: zero-filled leaves from ``{key: (element_shape, dtype)}``.

In memory or in a storage backend. Each storage backend registers itself (``register``); ``storage=`` picks it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .base import TensorDictBase

# storage -> its builder, or "module:function" imported on first use (backends import their server library
# only when used): build(schema, batch_size=..., device=..., **kwargs)
_STORAGES: dict[str, Callable[..., Any] | str] = {
    "redis": "tensorbatch.store._node:schema_store",
    "h5": "tensorbatch.persistent._node:from_schema",
}


def register(storage: str, build: Callable[..., Any] | str) -> None:
    """Make ``TensorDict.from_schema(..., storage=storage, **kwargs)`` call ``build``.

    ``build(schema, batch_size=..., device=..., **kwargs)``: a function, or ``"module:function"`` imported on
    first use.
    """
    _STORAGES[storage] = build


def from_schema(
    cls: Any,
    /,
    schema: Mapping[Any, tuple[Any, torch.dtype]],
    *,
    batch_size: Any = None,
    storage: str | None = None,
    device: Any = None,
    **kwargs: Any,
) -> Any:
    """Zero-filled leaves ``[*batch_size, *shape]`` from ``{key: (shape, dtype)}``.

    ``storage=None`` builds them in memory; ``"redis"`` allocates a ``TensorDictStore`` on the server (keyword
    arguments: its connection), ``"h5"`` a ``PersistentTensorDict`` (``filename=``), ``"memmap"`` memory-mapped
    leaves (``prefix=``: the folder, else shared memory; as ``memmap_like``), without writing data.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict.from_schema({"obs": ([2], torch.uint8), ("n", "r"): ([], torch.float32)}, batch_size=[3])
        >>> td["obs"].shape, td["n", "r"].dtype
        (torch.Size([3, 2]), torch.float32)
    """
    size = torch.Size(() if batch_size is None else batch_size)
    if storage is not None:
        build = _STORAGES.get(storage)
        if build is None:
            raise ValueError(f"from_schema: unknown storage {storage!r} (None or one of {sorted(_STORAGES)})")
        if isinstance(build, str):
            module, _, name = build.partition(":")
            build = _STORAGES[storage] = getattr(importlib.import_module(module), name)
        return build(schema, batch_size=size, device=device, **kwargs)
    if kwargs:
        raise TypeError(f"from_schema: unexpected keyword arguments {sorted(kwargs)} (no storage given)")
    out = cls._dense_cls({}, batch_size=size, device=device)  # (an in-memory TensorDict, whatever ``cls``)
    for key, (shape, dtype) in schema.items():
        out.set(key, torch.zeros((*size, *shape), dtype=dtype, device=device))
    return out


setattr(TensorDictBase, "from_schema", classmethod(from_schema))  # noqa: B010  # base imports no feature
