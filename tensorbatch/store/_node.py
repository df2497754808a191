"""TensorDictStore: a TensorDict whose leaves live on a Redis / Valkey server (see the package docstring)."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .._base.coerce import as_device, checked_names
from .._errors import batch_mismatch, missing_key
from .._ops.meta import NODE, NON_TENSOR, TENSOR, LeafMeta
from .._ops.rows import RowPlan, check_fits
from .._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES, is_td
from ..base import TensorDictBase
from . import _format as fmt
from . import _rows as rows
from ._conn import Connection
from ._tree import Tree, load, rank

_Size = torch.Size
Commands = list[tuple[str, list[str], list[Any]]]


class TensorDictStore(TensorDictBase):
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

    __slots__ = ("__weakref__", "_conn", "_path")
    _leaves_in_memory = False

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
        conn = Connection(
            backend=backend,
            host=host,
            port=port,
            db=db,
            unix_socket_path=unix_socket_path,
            namespace=prefix,
            td_id=td_id or str(uuid.uuid4()),
            device=as_device(device),
            cache_metadata=cache_metadata,
            options=client_kwargs,
            client=client,
        )
        conn.allow_pickle = bool(allow_pickle)
        self._conn: Connection = conn
        self._path: tuple[str, ...] = ()
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

    @classmethod
    def _view(cls, conn: Connection, path: tuple[str, ...]) -> TensorDictStore:
        out = object.__new__(cls)
        out._conn, out._path = conn, path
        return out

    # ------------------------------------------------------------------ server
    def _tree(self) -> Tree:
        conn = self._conn
        if conn.tree is None or not conn.cache_metadata or conn.closed:
            conn.tree = load(conn, "reading the layout")  # (a closed handle raises)
        tree: Tree = conn.tree
        return tree

    def _joined(self, key: str) -> str:
        return fmt.SEP.join((*self._path, key))

    def _write(self, operation: str, commands: Commands) -> None:
        try:
            self._conn.write(operation, commands)
        except BaseException:
            self._conn.tree = None  # the local layout may be ahead of the server's: read it again
            raise

    def close(self) -> None:
        """Stop using the server from this handle (and its views). The data stays on the server."""
        self._conn.closed = True

    def clear_redis(self) -> None:
        """Delete every key of this store (of this node, for a nested view) from the server."""
        conn = self._conn
        if self._path:
            parent = TensorDictStore._view(conn, self._path[:-1])
            parent._write("clear_redis", parent._drop(self._path[-1]))
            return
        tree = self._tree()
        commands: Commands = []
        for path in tree.leaves:
            commands.append(("DEL", [conn.data_key(path), conn.meta_key(path)], []))
        commands.append(("DEL", [conn.key(s) for s in ("__keys__", *fmt.GLOBAL_SUFFIXES) if s != "__epoch__"], []))
        epoch = conn.new_epoch()  # the handle stays usable: new entries start a new store under the same id
        commands.append(("SET", [conn.key("__epoch__")], [epoch]))
        self._write("clear_redis", commands)
        conn.tree, conn.epoch = Tree(_Size(())), epoch

    def __enter__(self) -> TensorDictStore:
        return TensorDictBase.__enter__(self)  # type: ignore[return-value]  # self

    _exit_plain = close  # a plain ``with td:`` closes (a ``with td.lock_():`` undoes the lock: the base __exit__)

    # ------------------------------------------------------------------ primitives
    @property
    def batch_size(self) -> torch.Size:
        return self._tree().node_batch(self._path)

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        TensorDictBase.batch_size.fset(self, value)  # type: ignore[attr-defined]  # the base setter

    def _change_batch_size(self, new_size: torch.Size) -> None:
        self._check_batch(new_size)
        commands: Commands = []
        self._apply_batch(new_size, commands)
        self._write("setting the batch size", commands)

    def _check_batch(self, new_size: torch.Size) -> None:
        n = len(new_size)
        for key in self._keys_str():
            shape, _, kind = self._leaf_meta(key)
            if kind == NON_TENSOR or tuple(shape[:n]) == tuple(new_size):
                continue
            if kind == NODE and len(shape) < n and tuple(new_size[: len(shape)]) == tuple(shape):
                self._get_str(key)._check_batch(new_size)
                continue
            raise batch_mismatch(new_size, (*self._path, key), shape)

    def _apply_batch(self, new_size: torch.Size, commands: Commands) -> None:
        tree, conn = self._tree(), self._conn
        for key, kind in tree.children.get(self._path, {}).items():
            if kind == NODE:
                child = TensorDictStore._view(conn, (*self._path, key))
                if len(child.batch_size) < len(new_size):
                    child._apply_batch(new_size, commands)
        joined = fmt.SEP.join(self._path)
        names = tree.names.get(joined)
        if names is not None and len(names) != len(new_size):  # names follow the dims they name
            self._emit_names(None, commands)
        if self._path:
            tree.nodes[joined] = new_size
            commands.append(("HSET", [conn.key("__nodes__")], [joined, json.dumps(list(new_size))]))
        else:
            tree.batch = new_size
            commands.append(("SET", [conn.key("__batch_size__")], [json.dumps(list(new_size))]))

    def _maybe_names(self) -> tuple[Any, ...] | None:
        return self._tree().names.get(fmt.SEP.join(self._path))

    @property
    def names(self) -> list[str | None]:
        """Names of the batch dims (None for unnamed dims), kept on the server (``__names__``)."""
        names = self._maybe_names()
        return list(names) if names is not None else [None] * self.batch_dims

    @names.setter
    def names(self, value: Any) -> None:
        names = None if value is None else checked_names(value, self.batch_size)
        commands: Commands = []
        self._emit_names(names, commands)
        self._write("setting the dim names", commands)

    def _emit_names(self, names: Any, commands: Commands) -> None:
        """Record the dim names of this node (None, or all None: unnamed)."""
        joined, conn = fmt.SEP.join(self._path), self._conn
        if names is not None and any(n is not None for n in names):
            self._tree().names[joined] = tuple(names)
            commands.append(("HSET", [conn.key("__names__")], [joined, json.dumps(list(names))]))
        elif self._tree().names.pop(joined, None) is not None:
            commands.append(("HDEL", [conn.key("__names__")], [joined]))

    @property
    def device(self) -> torch.device | None:
        device: torch.device | None = self._conn.device
        return device

    def _kind(self, key: Any) -> str | None:
        return self._tree().children.get(self._path, {}).get(key) if type(key) is str else None

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        kind = self._kind(key)
        if kind is None:
            if default is NO_DEFAULT:
                raise missing_key((*self._path, key), self._keys_str(), type(self).__name__)
            return default
        if kind == NODE:
            return TensorDictStore._view(self._conn, (*self._path, key))
        conn, joined = self._conn, self._joined(key)
        (data,) = conn.fetch(f"reading {joined!r}", [("GET", conn.data_key(joined))])
        return self._decode(key, joined, data)

    def _decode(self, key: str, joined: str, data: bytes | None) -> Any:
        kind, shape, dtype, meta = self._tree().leaves[joined]
        device = self._conn.device
        if data is None:
            raise KeyError(f"{(*self._path, key)!r}: its data is missing on the server (deleted by another handle?)")
        if kind == NON_TENSOR:
            conn = self._conn
            return fmt.decode_non_tensor(data, meta, self.batch_size, device, conn.allow_pickle, conn.where(joined))
        out = fmt.from_bytes(data, shape, dtype)  # type: ignore[arg-type]
        return out if device is None or device.type == "cpu" else out.to(device)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        fmt.check_key(key, self._path)
        if not validated:
            value = self._validate(value, (key,))
        commands: Commands = []
        self._emit_set(key, value, inplace, commands)
        self._write(f"writing {self._joined(key)!r}", commands)

    def _emit_set(self, key: str, value: Any, inplace: bool, commands: Commands) -> None:
        conn, tree, joined, path = self._conn, self._tree(), self._joined(key), (*self._path, key)
        kind = self._kind(key)
        if isinstance(value, torch.Tensor):
            if inplace and kind == TENSOR:
                _, shape, dtype, _ = tree.leaves[joined]
                value = value.to(dtype)
                if value.shape != shape:
                    value = value.expand(shape)
                commands.append(("SET", [conn.data_key(joined)], [fmt.to_bytes(value)]))
                return
            data = fmt.to_bytes(value)  # converted before the old entry goes
            commands += self._drop(key)
            meta = fmt.tensor_meta(value.shape, value.dtype)
            self._emit_leaf(joined, data, meta, commands)
            tree.put(path, (TENSOR, value.shape, value.dtype, meta))
        elif type(value) in NON_TENSOR_TYPES or not is_td(value):
            data, meta = fmt.encode_non_tensor(value, conn.allow_pickle, conn.where(joined))
            commands += self._drop(key)
            self._emit_leaf(joined, data, meta, commands)
            tree.put(path, (NON_TENSOR, None, None, meta))
        elif inplace and kind == NODE:
            TensorDictStore._view(conn, path).update_(value)
        else:
            if isinstance(value, TensorDictStore) and value._conn is conn:
                value = value.to_tensordict()  # read before a node written onto itself is dropped
            items = list(value._items_str())
            commands += self._drop(key)
            commands.append(("HSET", [conn.key("__nodes__")], [joined, json.dumps(list(value.batch_size))]))
            commands.append(("ZADD", [conn.key("__order__")], ["NX", rank(), joined]))
            tree.add(path, NODE)
            tree.nodes[joined] = value.batch_size
            child = TensorDictStore._view(conn, path)
            child._emit_names(getattr(value, "_maybe_names", lambda: None)(), commands)
            for sub_key, sub_value in items:
                fmt.check_key(sub_key, path)
                child._emit_set(sub_key, sub_value, False, commands)

    def _emit_leaf(self, joined: str, data: bytes, meta: dict[str, str], commands: Commands) -> None:
        conn = self._conn
        commands.append(("SET", [conn.data_key(joined)], [data]))
        commands.append(("DEL", [conn.meta_key(joined)], []))
        commands.append(("HSET", [conn.meta_key(joined)], [v for kv in meta.items() for v in kv]))
        commands.append(("SADD", [conn.key("__keys__")], [joined]))
        commands.append(("ZADD", [conn.key("__order__")], ["NX", rank(), joined]))

    def _drop(self, key: str) -> Commands:
        """The commands deleting the entry ``key`` (everything under it for a node); the layout forgets it."""
        conn = self._conn
        leaves, nodes = self._tree().remove((*self._path, key))
        commands: Commands = []
        for path in leaves:
            commands.append(("DEL", [conn.data_key(path), conn.meta_key(path)], []))
            commands.append(("SREM", [conn.key("__keys__")], [path]))
        if nodes:
            commands.append(("HDEL", [conn.key("__nodes__")], nodes))
            commands.append(("HDEL", [conn.key("__names__")], nodes))
        if leaves or nodes:
            commands.append(("ZREM", [conn.key("__order__")], leaves + nodes))
        return commands

    def _del_str(self, key: str) -> None:
        if self._kind(key) is None:
            raise missing_key((*self._path, key), self._keys_str(), type(self).__name__)
        self._write(f"deleting {self._joined(key)!r}", self._drop(key))

    def _keys_str(self) -> Any:
        return self._tree().children.get(self._path, {}).keys()

    def _has_str(self, key: str) -> bool:
        return self._kind(key) is not None

    @property
    def is_locked(self) -> bool:
        return self._conn.locked.get(self._path, False)

    def _set_lock(self, value: bool) -> None:
        self._conn.locked[self._path] = value

    # ------------------------------------------------------------------ storage hooks
    def _leaf_meta(self, key: str) -> LeafMeta:
        kind = self._kind(key)
        if kind == TENSOR:
            _, shape, dtype, _ = self._tree().leaves[self._joined(key)]
            return LeafMeta(shape, dtype, TENSOR)  # type: ignore[arg-type]
        if kind == NODE:
            return LeafMeta(self._tree().node_batch((*self._path, key)), None, NODE)
        if kind == NON_TENSOR:
            return LeafMeta(self.batch_size, None, NON_TENSOR)
        raise missing_key((*self._path, key), self._keys_str(), type(self).__name__)

    def _read_rows(self, plan: RowPlan, keys: Iterable[str] | None = None) -> TensorDictBase:
        conn, leaves = self._conn, self._tree().leaves
        keys = list(self._keys_str()) if keys is None else list(keys)
        wanted: list[tuple[tuple[str, ...], str]] = []  # (path, joined) of every leaf read, depth first
        self._collect(keys, wanted)
        commands: list[Any] = []
        counts: list[int] = []
        steps: list[Any] = []
        for _, joined in wanted:
            kind, shape, dtype, _ = leaves[joined]
            if kind == NON_TENSOR:
                commands.append(("GET", conn.data_key(joined)))
                counts.append(1)
                steps.append(None)
                continue
            ranges, step = rows.byte_ranges(plan, dtype.itemsize * math.prod(shape[1:]))  # type: ignore[union-attr,index]
            found = rows.read_commands(conn.data_key(joined), ranges)
            commands += found
            counts.append(len(found))
            steps.append(step)
        results = conn.fetch("reading rows", commands) if wanted else []
        values: dict[tuple[str, ...], Any] = {}
        at = 0
        device = conn.device
        on_cpu = device is None or device.type == "cpu"
        for (path, joined), count, step in zip(wanted, counts, steps, strict=True):
            kind, shape, dtype, _ = leaves[joined]
            parts = results[at : at + count]
            at += count
            if kind == NON_TENSOR:
                node = TensorDictStore._view(conn, path[:-1])
                values[path] = node._decode(path[-1], joined, parts[0])[plan.index]
                continue
            leaf = rows.assemble(parts, shape, dtype, plan, step)  # type: ignore[arg-type]
            values[path] = leaf if on_cpu else leaf.to(device)
        return self._build(plan, keys, values)

    def _collect(self, keys: list[str], out: list[tuple[tuple[str, ...], str]]) -> None:
        children = self._tree().children.get(self._path, {})
        for key in keys:
            kind = children.get(key)
            if kind is None:
                raise missing_key((*self._path, key), self._keys_str(), type(self).__name__)
            if kind == NODE:
                child = TensorDictStore._view(self._conn, (*self._path, key))
                child._collect(list(child._keys_str()), out)
            else:
                path = (*self._path, key)
                out.append((path, fmt.SEP.join(path)))

    def _build(self, plan: RowPlan, keys: list[str], values: dict[tuple[str, ...], Any]) -> TensorDictBase:
        out: dict[str, Any] = {}
        for key in keys:
            if self._kind(key) == NODE:
                child = TensorDictStore._view(self._conn, (*self._path, key))
                out[key] = child._build(plan, list(child._keys_str()), values)
            else:
                out[key] = values[(*self._path, key)]
        names = self._maybe_names()
        if names is not None:  # as indexing in memory: dim 0's name stays when the index keeps one dim there
            lead = () if plan.kind == "int" else (names[0],) if len(plan.shape) == 1 else (None,) * len(plan.shape)
            names = (*lead, *names[1:])
        return self._dense_cls._new_unsafe(out, plan.target_shape(self.batch_size), self._conn.device, names)  # type: ignore[no-any-return]

    def _are_tensor_leaves(self, paths: Iterable[tuple[str, ...]]) -> bool:
        tree, conn, base = self._tree(), self._conn, self._path
        cached = tree.rows
        return all(
            (base + path if base else path) in cached or tree.row_leaf(base + path, conn) is not None for path in paths
        )

    def _write_rows(self, plan: RowPlan, values: Mapping[tuple[str, ...], Any]) -> None:
        conn, tree, base = self._conn, self._tree(), self._path
        cached = tree.rows
        commands: Commands = []
        for path, value in values.items():  # everything checked before the first write
            full = base + path if base else path
            leaf = cached.get(full) or tree.row_leaf(full, conn)
            if leaf is None:
                self._get(path)  # the KeyError naming a missing path
                raise TypeError(f"cannot write rows into {path!r}: it is not a tensor leaf")
            shape, dtype = leaf.shape, leaf.dtype
            target = plan.target_shape(shape)
            if not isinstance(value, torch.Tensor):
                value = torch.as_tensor(value, dtype=dtype)
            if value.shape != target:
                check_fits(path, value.shape, target)
                value = value.expand(target)
            if value.dtype != dtype:
                value = value.to(dtype)
            commands += rows.write_commands(leaf.key, shape, plan, value, leaf.row_bytes)
        self._write("writing rows", commands)

    def _merge_non_tensor(self, key: str, index: Any, value: Any) -> None:
        """Element writes of a non-tensor leaf as an optimistic transaction on the server.

        The value is read, merged here and written back only if no other handle wrote it meanwhile (else read
        again): writers of different elements lose nothing. JSON values are re-encoded by Python, exactly,
        which a Lua cjson round trip would not do.
        """
        conn, joined = self._conn, self._joined(key)
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

    # ------------------------------------------------------------------ multi-key writes: one script each
    def update(self, *args: Any, **kwargs: Any) -> Any:
        return self._conn.atomic("update", lambda: TensorDictBase.update(self, *args, **kwargs))

    def update_(self, *args: Any, **kwargs: Any) -> Any:
        return self._conn.atomic("update_", lambda: TensorDictBase.update_(self, *args, **kwargs))

    def update_at_(self, *args: Any, **kwargs: Any) -> Any:
        return self._conn.atomic("update_at_", lambda: TensorDictBase.update_at_(self, *args, **kwargs))

    def _write_index(self, index: Any, value: Any) -> None:
        self._conn.atomic("writing at an index", lambda: TensorDictBase._write_index(self, index, value))

    def _update_at(self, source: Any, index: Any, clone: bool, wanted: Any) -> None:
        self._conn.atomic("update_at_", lambda: TensorDictBase._update_at(self, source, index, clone, wanted))

    def _alloc_leaf(self, key: str, shape: Any, dtype: torch.dtype) -> None:
        commands: Commands = []
        self._emit_alloc(key, _Size(shape), dtype, commands)
        self._write(f"allocating {self._joined(key)!r}", commands)

    def _emit_alloc(self, key: str, shape: torch.Size, dtype: torch.dtype, commands: Commands) -> None:
        """Zero-filled on the server (SETRANGE of the last byte): no data goes through Python."""
        fmt.check_key(key, self._path)
        conn, tree, joined = self._conn, self._tree(), self._joined(key)
        commands += self._drop(key)
        nbytes = shape.numel() * fmt.item_size(dtype)
        meta = fmt.tensor_meta(shape, dtype)
        commands.append(("DEL", [conn.data_key(joined), conn.meta_key(joined)], []))
        if nbytes:
            commands.append(("SETRANGE", [conn.data_key(joined)], [nbytes - 1, b"\x00"]))
        else:
            commands.append(("SET", [conn.data_key(joined)], [b""]))
        commands.append(("HSET", [conn.meta_key(joined)], [v for kv in meta.items() for v in kv]))
        commands.append(("SADD", [conn.key("__keys__")], [joined]))
        commands.append(("ZADD", [conn.key("__order__")], ["NX", rank(), joined]))
        tree.put((*self._path, key), (TENSOR, shape, dtype, meta))

    # ------------------------------------------------------------------ pickling
    def __reduce__(self) -> Any:
        """Pickled as the server, the store's identity and the node path: unpickling reconnects to the data."""
        conn = self._conn
        state = (
            conn.backend,
            conn.host,
            conn.port,
            conn.db,
            conn.unix_socket_path,
            conn.namespace,
            conn.td_id,
            conn.device,
            conn.cache_metadata,
            conn.options,
            conn.epoch,
            self._path,
            dict(conn.locked),
            conn.allow_pickle,
        )
        return (_reconnect, state)

    def __repr__(self) -> str:
        conn = self._conn
        return (
            f"TensorDictStore(td_id={conn.td_id!r}, address={conn.address!r}, prefix={conn.namespace!r}, "
            f"path={self._path!r}, keys={list(self._keys_str())}, batch_size={self.batch_size}, "
            f"device={conn.device})"
        )


def _reconnect(
    backend: str,
    host: str,
    port: int,
    db: int,
    unix_socket_path: str | None,
    namespace: str,
    td_id: str,
    device: Any,
    cache_metadata: bool,
    options: dict[str, Any],
    epoch: bytes | None,
    path: tuple[str, ...],
    locked: dict[tuple[str, ...], bool],
    allow_pickle: bool = False,
) -> TensorDictStore:
    conn = Connection(
        backend=backend,
        host=host,
        port=port,
        db=db,
        unix_socket_path=unix_socket_path,
        namespace=namespace,
        td_id=td_id,
        device=device,
        cache_metadata=cache_metadata,
        options=options,
    )
    conn.allow_pickle = allow_pickle
    conn.epoch = epoch
    conn.locked.update(locked)
    return TensorDictStore._view(conn, path)
