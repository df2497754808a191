"""TensorDictStore: TensorDicts on a Redis-compatible server (Redis, Valkey, Dragonfly, KeyDB), shared by
processes and machines. redis-py is the ``redis`` extra; this package imports it when used.

The server layout is tensordict 0.15.3's (``_format.py``): a store written by either library reads in the
other. One synchronous client per process and server, explicit pipelines (one round trip per operation), no
threads; a forked child reconnects. See ``docs/store.md``.
"""

from __future__ import annotations

from typing import Any

from ..base import TensorDictBase


def to_store(self: TensorDictBase, **kwargs: Any) -> Any:
    """Upload this TensorDict to a Redis-compatible server; a ``TensorDictStore`` over the copy.

    Keyword arguments are ``TensorDictStore``'s (``host``, ``port``, ``db``, ``prefix``, ``device``, ...).
    """
    from ._build import to_store as build

    return build(self, **kwargs)


def __getattr__(name: str) -> Any:
    if name in ("TensorDictStore", "StoreConnectionError", "StoreTimeoutError", "StoreLostError"):
        from . import _build  # noqa: F401  # attaches the constructors
        from . import _conn, _node

        return getattr(_node, name, None) or getattr(_conn, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TensorDictBase.to_store = to_store  # type: ignore[attr-defined]  # attached here: base.py imports no feature

__all__ = ["StoreConnectionError", "StoreLostError", "StoreTimeoutError", "TensorDictStore"]
