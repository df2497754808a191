"""The Redis dialect of the stored layer: a store's entries by path, over its :class:`~._conn.Connection`.

Writes are ``(command, keys, args)`` triples. Inside :meth:`RedisDialect.transaction` they are kept and sent
at its end as one guarded script (``Connection.write``: the epoch check, large values staged): all land, or
none. Outside one, each dialect call is its own script. The layout (``_tree.Tree``) is the dialect's: every
write updates it at once, a failed write drops it (read again on next use), and ``cache_metadata=False``
reads it at every use. :class:`RedisState` shows it to the stored layer, which then caches nothing itself.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, Self

import torch

from .._ops.meta import NODE, NON_TENSOR, TENSOR
from .._ops.rows import RowPlan
from ..base import TensorDictBase
from ..stored._dialect import Dialect, Path
from ..stored._node import State
from . import _format as fmt
from . import _rows as rows
from ._conn import Connection
from ._tree import Tree, load, rank

Commands = list[tuple[str, list[str], list[Any]]]


def zeros(conn: Connection, joined: str, nbytes: int) -> Commands:
    """The leaf's data as ``nbytes`` zeros, allocated by the server (SETRANGE of the last byte): no data sent."""
    if nbytes:
        return [("SETRANGE", [conn.data_key(joined)], [nbytes - 1, b"\x00"])]
    return [("SET", [conn.data_key(joined)], [b""])]


def record(conn: Connection, joined: str, meta: dict[str, str]) -> Commands:
    """Record a leaf: its metadata hash, its place among the store's keys and in their insertion order."""
    return [
        ("HSET", [conn.meta_key(joined)], [v for kv in meta.items() for v in kv]),
        ("SADD", [conn.key("__keys__")], [joined]),
        ("ZADD", [conn.key("__order__")], ["NX", rank(), joined]),
    ]


class RedisDialect(Dialect):
    """A store on a Redis-compatible server, spoken by path (see the module docstring).

    Args:
        conn: the connection the store's handles share (server, keys, cached layout, epoch).
    """

    name = "redis"
    copy_reads = True
    lazy_index = False  # ``store[rows]`` reads the rows at once: every leaf in one round trip
    objects_in_rows = True  # (non-tensor leaves read in the same round trip)
    writable = True  # (a class fact here: checked before each write)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.device = conn.device  # (reads are cast to it)
        # ``body()`` as one guarded script, run again when a value it checked was written meanwhile (the layout
        # is read again after a failure); bound once: no call of ours on the path of every multi-key write
        self.atomic = conn.atomic  # type: ignore[method-assign]

    # ------------------------------------------------------------------ layout
    @property
    def tree(self) -> Tree:
        """The store's layout: cached, or read from the server (after a failed write, or at each use).

        With ``cache_metadata=False`` it is read at each use, but once per transaction (which sees its writes).
        """
        conn = self.conn
        tree: Tree | None = conn.tree
        if tree is None or conn.closed or (not conn.cache_metadata and not _pinned(conn, tree)):
            tree = conn.tree = load(conn, "reading the layout")  # (a closed handle raises)
            if getattr(conn.local, "pending", None) is not None:
                conn.local.pin = tree
        return tree

    def entries(self, path: Path) -> dict[str, str]:
        return self.tree.children.get(path, {})

    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        _, shape, dtype, _ = self.tree.leaves[fmt.SEP.join(path)]
        return shape, dtype  # type: ignore[return-value]  # (a tensor leaf's)

    def node_facts(self, path: Path) -> tuple[torch.Size | None, tuple[Any, ...] | None]:
        tree = self.tree
        return tree.node_batch(path), tree.names.get(path)

    def set_node_facts(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        commands = self._emit_batch(path, batch_size) if self.tree.node_batch(path) != batch_size else []
        operation = "setting the batch size" if commands else "setting the dim names"
        if names is not None and any(n is not None for n in names):
            commands += self._emit_names(path, names)
        else:  # (the layer may have forgotten them already)
            self.tree.names.pop(path, None)
            commands.append(("HDEL", [self.conn.key("__names__")], [fmt.SEP.join(path)]))
        self.send(operation, commands)

    def _emit_batch(self, path: Path, batch_size: torch.Size) -> Commands:
        tree, conn = self.tree, self.conn
        if not path:
            tree.batch = batch_size
            return [("SET", [conn.key("__batch_size__")], [json.dumps(list(batch_size))])]
        joined = fmt.SEP.join(path)
        tree.nodes[joined] = batch_size
        return [("HSET", [conn.key("__nodes__")], [joined, json.dumps(list(batch_size))])]

    def _emit_names(self, path: Path, names: tuple[Any, ...] | None) -> Commands:
        """Record the dim names of a node (None, or all None: unnamed)."""
        tree, key = self.tree, self.conn.key("__names__")
        joined = fmt.SEP.join(path)
        if names is not None and any(n is not None for n in names):
            tree.names[path] = tuple(names)
            return [("HSET", [key], [joined, json.dumps(list(names))])]
        if tree.names.pop(path, None) is not None:
            return [("HDEL", [key], [joined])]
        return []

    def create_node(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        fmt.check_key(path[-1], path[:-1])
        tree, conn, joined = self.tree, self.conn, fmt.SEP.join(path)
        commands: Commands = [
            ("HSET", [conn.key("__nodes__")], [joined, json.dumps(list(batch_size))]),
            ("ZADD", [conn.key("__order__")], ["NX", rank(), joined]),
        ]
        tree.add(path, NODE)
        tree.nodes[joined] = batch_size
        commands += self._emit_names(path, names)
        self.send(f"writing {joined!r}", commands)

    def delete(self, path: Path) -> None:
        self.send(f"deleting {fmt.SEP.join(path)!r}", self.drop(path))

    def drop(self, path: Path) -> Commands:
        """The commands deleting the entry at ``path`` (everything under it for a node); the layout forgets it."""
        conn = self.conn
        leaves, nodes = self.tree.remove(path)
        commands: Commands = []
        for joined in leaves:
            commands.append(("DEL", [conn.data_key(joined), conn.meta_key(joined)], []))
            commands.append(("SREM", [conn.key("__keys__")], [joined]))
        if nodes:
            commands.append(("HDEL", [conn.key("__nodes__")], nodes))
            commands.append(("HDEL", [conn.key("__names__")], nodes))
        if leaves or nodes:
            commands.append(("ZREM", [conn.key("__order__")], leaves + nodes))
        return commands

    # ------------------------------------------------------------------ tensor leaves
    def read(self, path: Path) -> torch.Tensor:
        return self.read_object(path, torch.Size())  # type: ignore[no-any-return]  # (a tensor leaf: its data)

    def decode(self, path: Path, data: bytes | None, batch_size: torch.Size, tree: Tree | None = None) -> Any:
        """The value of the leaf at ``path`` from its data (a tensor on the store's device, or a non-tensor)."""
        joined = fmt.SEP.join(path)
        kind, shape, dtype, meta = (tree or self.tree).leaves[joined]
        conn = self.conn
        device = conn.device
        if data is None:
            raise KeyError(f"{path!r}: its data is missing on the server (deleted by another handle?)")
        if kind == NON_TENSOR:
            return fmt.decode_non_tensor(data, meta, batch_size, device, conn.allow_pickle, conn.where(joined))
        out = fmt.from_bytes(data, shape, dtype)  # type: ignore[arg-type]
        return out if device is None or device.type == "cpu" else out.to(device)

    def read_rows(self, path: Path, plan: RowPlan) -> torch.Tensor:
        return self.read_many([path], plan)[0]  # type: ignore[no-any-return]  # (a tensor leaf's rows)

    def read_many(self, paths: list[Path], plan: RowPlan) -> list[Any]:
        """The rows of every leaf in ``paths`` in one round trip: byte ranges of tensors, non-tensors whole."""
        conn, tree = self.conn, self.tree
        commands: list[Any] = []
        found: list[tuple[Any, int, Any]] = []  # (row leaf or None, command count, step) per path
        for path in paths:
            leaf = tree.row_leaf(path, conn)
            if leaf is None:  # a non-tensor leaf: read whole, its rows taken here
                commands.append(("GET", conn.data_key(fmt.SEP.join(path))))
                found.append((None, 1, None))
                continue
            ranges, step = rows.byte_ranges(plan, leaf.row_bytes)
            reads = rows.read_commands(leaf.key, ranges)
            commands += reads
            found.append((leaf, len(reads), step))
        results = conn.fetch("reading rows", commands) if paths else []
        out: list[Any] = []
        at, device = 0, conn.device
        on_cpu = device is None or device.type == "cpu"
        for path, (leaf, count, step) in zip(paths, found, strict=True):
            parts = results[at : at + count]
            at += count
            if leaf is None:
                out.append(self.decode(path, parts[0], tree.node_batch(path[:-1]), tree)[plan.index])
                continue
            value = rows.assemble(parts, leaf.shape, leaf.dtype, plan, step)
            out.append(value if on_cpu else value.to(device))
        return out

    def write(self, path: Path, value: torch.Tensor) -> None:
        fmt.check_key(path[-1], path[:-1])
        joined = fmt.SEP.join(path)
        data = fmt.to_bytes(value)
        meta = fmt.tensor_meta(value.shape, value.dtype)
        self.tree.put(path, (TENSOR, value.shape, value.dtype, meta))
        self.send(f"writing {joined!r}", self._leaf(joined, data, meta))

    def _leaf(self, joined: str, data: Any, meta: dict[str, str]) -> Commands:
        conn = self.conn
        return [
            ("SET", [conn.data_key(joined)], [data]),
            ("DEL", [conn.meta_key(joined)], []),
            *record(conn, joined, meta),
        ]

    def write_into(self, path: Path, value: torch.Tensor) -> None:
        shape, dtype = self.tensor_meta(path)
        value = value.to(dtype)
        if value.shape != shape:
            value = value.expand(shape)
        joined = fmt.SEP.join(path)
        self.send(f"writing {joined!r}", [("SET", [self.conn.data_key(joined)], [fmt.to_bytes(value)])])

    def write_rows(self, path: Path, plan: RowPlan, value: torch.Tensor) -> None:
        self.write_many(plan, [(path, value)])

    def write_many(self, plan: RowPlan, values: list[tuple[Path, torch.Tensor]]) -> None:
        """The rows of every leaf, as one script."""
        conn = self.conn
        tree = conn.tree  # (the layout the layer checked the paths on just before: not read again)
        if tree is None or conn.closed:
            tree = self.tree
        commands: Commands = []
        for path, value in values:
            leaf = tree.rows.get(path) or tree.row_leaf(path, conn)
            assert leaf is not None, path
            commands += rows.write_commands(leaf.key, leaf.shape, plan, value, leaf.row_bytes)
        self.send("writing rows", commands)

    def alloc(self, path: Path, shape: torch.Size, dtype: torch.dtype) -> None:
        """Zero-filled on the server (SETRANGE of the last byte): no data goes through Python."""
        fmt.check_key(path[-1], path[:-1])
        conn, joined = self.conn, fmt.SEP.join(path)
        nbytes = shape.numel() * fmt.item_size(dtype)
        meta = fmt.tensor_meta(shape, dtype)
        commands: Commands = [("DEL", [conn.data_key(joined), conn.meta_key(joined)], [])]
        commands += zeros(conn, joined, nbytes) + record(conn, joined, meta)
        self.tree.put(path, (TENSOR, shape, dtype, meta))
        self.send(f"allocating {joined!r}", commands)

    # ------------------------------------------------------------------ non-tensor leaves
    def read_object(self, path: Path, batch_size: torch.Size) -> Any:
        """The leaf at ``path`` in one round trip (the epoch checked too), decoded by :meth:`decode`."""
        joined = fmt.SEP.join(path)
        conn = self.conn
        (data,) = conn.fetch(f"reading {joined!r}", [("GET", conn.data_key(joined))])
        return self.decode(path, data, batch_size)

    def object_shape(self, path: Path, batch_size: torch.Size) -> torch.Size:
        return batch_size  # (a non-tensor value follows its node's batch size)

    def write_object(self, path: Path, value: Any) -> None:
        fmt.check_key(path[-1], path[:-1])
        conn, joined = self.conn, fmt.SEP.join(path)
        data, meta = fmt.encode_non_tensor(value, conn.allow_pickle, conn.where(joined))
        self.tree.put(path, (NON_TENSOR, None, None, meta))
        self.send(f"writing {joined!r}", self._leaf(joined, data, meta))

    def leaf_id(self, path: Path) -> int:
        """The leaf's insertion rank on the server: a replaced leaf gets a new one."""
        conn = self.conn
        score = conn.client.zscore(conn.key("__order__"), fmt.SEP.join(path))
        return int(score or 0)

    # ------------------------------------------------------------------ life
    def send(self, operation: str, commands: Commands) -> None:
        """Write ``commands``: kept for the running transaction, else sent now as one guarded script.

        A failed write drops the cached layout (it may be ahead of the server's).
        """
        try:
            self.conn.write(operation, commands)
        except BaseException:
            self.forget_layout()
            raise

    def forget_layout(self) -> None:
        """After a failed write: the cached layout may be ahead of the server's (read again on next use)."""
        self.conn.tree = None

    @contextlib.contextmanager
    def transaction(self, operation: str = "writing") -> Iterator[None]:
        """The writes inside it go as one guarded script at its end: all land, or none (nested ones join)."""
        conn = self.conn
        local = conn.local
        if getattr(local, "pending", None) is not None:
            yield
            return
        local.pending, local.checks, local.pin = [], [], None
        try:
            yield
            commands, checks = local.pending, local.checks
        except BaseException:
            self.forget_layout()  # the layout may hold entries whose writes are never sent
            raise
        finally:
            local.pending = None
        try:
            conn._guarded(operation, commands, checks)
        except BaseException:
            self.forget_layout()
            raise

    def check_value(self, path: Path, value: Any) -> None:
        fmt.check_key(path[-1], path[:-1])

    def same_storage(self, other: Dialect) -> bool:
        return getattr(other, "conn", None) is self.conn  # (each handle has its dialect; they share the connection)

    def close(self) -> None:
        self.conn.closed = True

    def describe(self, path: Path) -> str:
        return self.conn.where(fmt.SEP.join(path))


def _pinned(conn: Connection, tree: Tree) -> bool:
    """True inside a transaction that read the layout already (``cache_metadata=False``): it is kept."""
    local = conn.local
    return getattr(local, "pending", None) is not None and getattr(local, "pin", None) is tree


class _Unkept(dict):  # type: ignore[type-arg]
    """A cache of the layer's that a store keeps in its tree instead: always empty, what is put in is dropped."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


_UNKEPT = _Unkept()


class RedisState(State):
    """The stored layer's view of a store's layout: the dialect's :class:`~._tree.Tree`, never a copy.

    The layer reads it through ``entries``/``tensor_meta``/``batch_of``/``names``/``tensor_at``; what it records
    after a write (a kind, a batch size) the dialect has recorded already. Its own caches of batch sizes and
    row layouts stay empty: the tree may change under them (read again, or a lazy stack's through other elements).
    """

    __slots__ = ("conn",)

    def __init__(self, dialect: RedisDialect) -> None:  # (the slots of the cached layout stay unset)
        self.dialect, self.conn = dialect, dialect.conn
        self.batch_dims, self.infer, self.given = None, False, True
        self.locked = {}
        self.batch = self.layouts = _UNKEPT

    def entries(self, path: Path) -> dict[str, str]:
        return self.dialect.tree.children.get(path, {})  # type: ignore[attr-defined,no-any-return]

    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        return self.dialect.tensor_meta(path)

    def batch_of(self, path: Path) -> torch.Size:
        conn = self.conn
        tree = conn.tree  # (the dialect's ``tree`` inline when the cached one is good: a hot path)
        if tree is None or not conn.cache_metadata or conn.closed:
            tree = self.dialect.tree  # type: ignore[attr-defined]
        return tree.node_batch(path) if path else tree.batch  # type: ignore[no-any-return]

    def tensor_at(self, path: Path) -> Any:
        conn = self.conn
        tree = conn.tree  # (as in batch_of: a hot path of row writes)
        if tree is None or not conn.cache_metadata or conn.closed:
            tree = self.dialect.tree  # type: ignore[attr-defined]
        return tree.rows.get(path) or tree.row_leaf(path, conn)  # (a RowLeaf: shape and dtype first)

    @property
    def names(self) -> dict[Path, tuple[Any, ...]]:  # type: ignore[override]
        conn = self.conn
        tree = conn.tree  # (read with the batch size just before: not read again with cache_metadata=False)
        return (self.dialect.tree if tree is None or conn.closed else tree).names  # type: ignore[attr-defined,no-any-return]

    def forget(self, path: Path) -> None:
        """Nothing: the dialect's tree forgot ``path`` when it was deleted."""


class ServerHandle(TensorDictBase):
    """What both store classes are besides their TensorDict kind: a handle on a store on a server.

    ``with store:`` closes it; its repr names the server, the store and the node (``_path``), never credentials.
    """

    __slots__ = ()
    _path: Path

    def _connection(self) -> Connection:
        raise NotImplementedError

    def _repr_facts(self) -> str:
        """What the class adds to its repr after the path (``"name=value, "`` parts)."""
        return ""

    def close(self) -> None:
        """Stop using the server from this handle (and its views). The data stays on the server."""
        self._connection().closed = True

    _exit_plain = close  # a plain ``with td:`` closes (a ``with td.lock_():`` undoes the lock: the base __exit__)

    def __enter__(self) -> Self:
        return TensorDictBase.__enter__(self)  # type: ignore[return-value]  # self

    def __repr__(self) -> str:
        conn = self._connection()
        return (
            f"{type(self).__name__}(td_id={conn.td_id!r}, address={conn.address!r}, prefix={conn.namespace!r}, "
            f"path={self._path!r}, {self._repr_facts()}keys={list(self._keys_str())}, batch_size={self.batch_size}, "
            f"device={conn.device})"
        )
