"""TensorDictStore: TensorDicts on a Redis-compatible server, shared by processes and machines.

Redis, Valkey, Dragonfly, KeyDB. redis-py is the ``redis`` extra; this package imports it when used.

The server layout is tensordict 0.15.3's (``_format.py``): a store written by either library reads in the
other. One synchronous client per process and server, explicit pipelines (one round trip per operation), no
threads; a forked child reconnects. See ``docs/store.md``.
"""

from __future__ import annotations

from typing import Any

from ..base import TensorDictBase


def to_store(
    self: TensorDictBase,
    *,
    backend: str = "redis",
    host: str = "localhost",
    port: int = 6379,
    db: int = 0,
    unix_socket_path: str | None = None,
    prefix: str = "tensordict",
    device: Any = None,
    **kwargs: Any,
) -> Any:
    """Upload this TensorDict to a Redis-compatible server; a ``TensorDictStore`` over the copy.

    Other keyword arguments are ``TensorDictStore``'s (``td_id``, ``cache_metadata``, client options).
    """
    from ._node import TensorDictStore

    return TensorDictStore.from_tensordict(
        self,
        backend=backend,
        host=host,
        port=port,
        db=db,
        unix_socket_path=unix_socket_path,
        prefix=prefix,
        device=device,
        **kwargs,
    )


def __getattr__(name: str) -> Any:
    if name in (
        "TensorDictStore",
        "LazyStackedTensorDictStore",
        "StoreConnectionError",
        "StoreTimeoutError",
        "StoreLostError",
    ):
        from . import _conn, _lazy, _node

        return getattr(_node, name, None) or getattr(_lazy, name, None) or getattr(_conn, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


setattr(TensorDictBase, "to_store", to_store)  # noqa: B010  # attached here: base.py imports no feature (mypy: no method-assign)

__all__ = [
    "LazyStackedTensorDictStore",
    "StoreConnectionError",
    "StoreLostError",
    "StoreTimeoutError",
    "TensorDictStore",
]
