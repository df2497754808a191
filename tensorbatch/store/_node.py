"""TensorDictStore: the stored layer over the Redis dialect (see the package docstring).

The TensorDict API (keys, get/set/delete, batch size, names, lock, ``with``) is the stored layer's
(:class:`~tensorbatch.stored.StoredTensorDict`); the server is spoken by :class:`~._dialect.RedisDialect`. What
stays here is what a server adds: the constructors' arguments, the device reads go to, row reads and writes of
every leaf in one round trip (``_rows``), multi-key writes as one guarded script, element writes of a
non-tensor value as an optimistic transaction, pickling as what reconnects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from ..stored._dialect import Path
from ..stored._node import State, StoredTensorDict
from . import _build
from . import _format as fmt
from ._conn import Connection, _connect
from ._dialect import Commands, RedisDialect, RedisState, ServerHandle
from ._tree import Tree, load

_Size = torch.Size


class TensorDictStore(ServerHandle, StoredTensorDict):
    """A TensorDict stored on a Redis-compatible server (Redis, Valkey, Dragonfly, KeyDB).

    Shared by every process that connects to the same ``host``/``port``/``db``, ``prefix`` and ``td_id``.

    Reading a key fetches the leaf (a new tensor); a nested key gives a view of that node. Writes go to the
    server; indexing reads and writes only the rows asked for, every leaf in one round trip.

    Keyword Args:
        backend: a label for the kind of server (``"redis"``, ``"valkey"``, ``"dragonfly"``, ``"keydb"``).
        host, port, db: the server (default ``localhost:6379``, db 0).
        unix_socket_path: a Unix socket of a server on this machine (``host``/``port`` are then ignored).
        prefix: the namespace of the store's keys on the server (default ``"tensordict"``).
        batch_size: the leading dims shared by every leaf (default ``[]``).
        device: the device reads are cast to (default None: the CPU).
        client: a ``redis.Redis`` client to use instead of making one (TLS, cluster: untested).
        td_id: the store's identifier (default: a new UUID); the same ``td_id`` reaches the same data.
        cache_metadata: keep the layout (keys, shapes, dtypes) in this process (default); ``False`` reads it
            from the server at each operation, to see keys other handles add.
        allow_pickle: keep non-tensor values that are not JSON values with pickle, and unpickle the values
            that the server holds pickled (default False: both raise, naming the key). Unpickling runs code
            chosen by whoever wrote the server's data: only for servers whose writers you trust. Same
            meaning as ``load_memmap(allow_pickle=...)``; copies (pickles) of the handle keep it.
        **client_kwargs: options of ``redis.Redis`` (``socket_timeout`` default 10 s, ``socket_connect_timeout``
            default 1 s, ``password``, ...).

    Examples:
        >>> import torch
        >>> from tensorbatch.store import TensorDictStore
        >>> store = TensorDictStore(batch_size=[3], **server)  # doctest: +SKIP
        >>> store["obs"] = torch.zeros(3, 2)  # doctest: +SKIP
        >>> store[1] = {"obs": torch.ones(2)}  # doctest: +SKIP
        >>> store["obs"][:, 0]  # doctest: +SKIP
        tensor([0., 1., 0.])
    """

    __slots__ = ("__weakref__",)

    def __init__(
        self,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        batch_size: Any = None,
        device: Any = None,
        client: Any = None,
        td_id: str | None = None,
        cache_metadata: bool = True,
        allow_pickle: bool = False,
        **client_kwargs: Any,
    ) -> None:
        size = _Size(() if batch_size is None else batch_size)
        conn = _connect(
            backend=backend,
            host=host,
            port=port,
            db=db,
            unix_socket_path=unix_socket_path,
            prefix=prefix,
            device=device,
            client=client,
            td_id=td_id,
            cache_metadata=cache_metadata,
            allow_pickle=allow_pickle,
            **client_kwargs,
        )
        self._state: State = RedisState(RedisDialect(conn))
        self._path: Path = ()
        epoch = conn.new_epoch()

        def fill(pipe: Any) -> None:  # one round trip: adopt the store's epoch or start one, record the batch
            pipe.set(conn.key("__epoch__"), epoch, nx=True)
            pipe.get(conn.key("__epoch__"))
            pipe.set(conn.key("__batch_size__"), json.dumps(list(size)))
            pipe.set(conn.key("__device__"), "" if conn.device is None else str(conn.device))

        _, conn.epoch, _, _ = conn.read("creating the store", fill)
        if conn.epoch == epoch and td_id is None:
            conn.tree = Tree(size)  # a new store: nothing to read
        elif conn.tree is None:
            conn.tree = load(conn, "opening the store") if cache_metadata else None
            if conn.tree is not None:
                conn.tree.batch = size

    from_tensordict = classmethod(_build.from_tensordict)
    from_dict = classmethod(_build.from_dict)  # type: ignore[assignment]  # (its own keywords: the server's)
    from_schema = classmethod(_build.from_schema)
    from_store = classmethod(_build.from_store)

    @classmethod
    def _over(cls, conn: Connection, path: Path) -> TensorDictStore:
        """A handle on the node ``path`` of the store ``conn`` reaches (its own state: locks are per handle)."""
        return cls._view(RedisState(RedisDialect(conn)), path)  # type: ignore[return-value]

    @property
    def _conn(self) -> Connection:
        return self._state.dialect.conn  # type: ignore[attr-defined,no-any-return]

    def _connection(self) -> Connection:
        return self._conn

    @property
    def _redis(self) -> RedisDialect:
        return self._state.dialect  # type: ignore[return-value]  # (always a RedisDialect)

    def clear_redis(self) -> None:
        """Delete every key of this store (of this node, for a nested view) from the server."""
        dialect, conn = self._redis, self._conn
        if self._path:
            dialect.send("clear_redis", dialect.drop(self._path))
            return
        tree = dialect.tree
        commands: Commands = []
        for path in tree.leaves:
            commands.append(("DEL", [conn.data_key(path), conn.meta_key(path)], []))
        commands.append(("DEL", [conn.key(s) for s in ("__keys__", *fmt.GLOBAL_SUFFIXES) if s != "__epoch__"], []))
        epoch = conn.new_epoch()  # the handle stays usable: new entries start a new store under the same id
        commands.append(("SET", [conn.key("__epoch__")], [epoch]))
        dialect.send("clear_redis", commands)
        conn.tree, conn.epoch = Tree(_Size(())), epoch

    # ------------------------------------------------------------------ writes
    def _merge_non_tensor(self, key: str, index: Any, value: Any) -> None:
        """Element writes of a non-tensor leaf as an optimistic transaction on the server.

        The value is read, merged here and written back only if no other handle wrote it meanwhile (else read
        again): writers of different elements lose nothing. JSON values are re-encoded by Python, exactly,
        which a Lua cjson round trip would not do.
        """
        conn, joined = self._conn, fmt.SEP.join((*self._path, key))
        data_key, meta_key = conn.data_key(joined), conn.meta_key(joined)
        operation = f"writing elements of {joined!r}"

        def merge() -> None:
            data, meta = conn.read(operation, lambda pipe: (pipe.get(data_key), pipe.hgetall(meta_key)))
            conn.check(data_key, data)
            current = fmt.decode_non_tensor(
                data, fmt.decode(meta), self.batch_size, conn.device, conn.allow_pickle, conn.where(joined)
            )
            self._set_str(key, current._written(index, value), inplace=False, validated=True)

        conn.atomic(operation, merge)

    # ------------------------------------------------------------------ pickling
    def __reduce__(self) -> Any:
        """Pickled as its connection (what reconnects to the server), the node path and its locks."""
        return _reconnect, (self._conn, self._path, dict(self._state.locked))


def _reconnect(conn: Connection, path: tuple[str, ...], locked: dict[tuple[str, ...], bool]) -> TensorDictStore:
    out = TensorDictStore._over(conn, path)
    out._state.locked.update(locked)
    return out


def schema_store(schema: Mapping[Any, tuple[Any, torch.dtype]], **kwargs: Any) -> TensorDictStore:
    """``TensorDict.from_schema(schema, storage="redis", ...)``."""
    store: TensorDictStore = TensorDictStore.from_schema(schema, **kwargs)
    return store
