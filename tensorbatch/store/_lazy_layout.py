"""The layout of a stored lazy stack and the dialect of one of its elements (see ``_lazy.py`` for the format).

:class:`State` is what every handle on a stored lazy stack shares: the connection, the stack's shape and its
leaves' layout (each element's shape and byte offsets), with the commands writing whole leaves. Each element
is a node of the stored layer over an :class:`ElementDialect`: its byte range of every stacked leaf.
"""

from __future__ import annotations

import contextlib
import json
import math
import struct
from typing import Any, NamedTuple

import torch

from .._errors import batch_size_refused
from .._ops.meta import NODE, TENSOR
from .._ops.rows import RowPlan
from ..stored._dialect import Dialect, Path
from ..stored._node import State as LayerState
from . import _format as fmt
from . import _rows as rows
from ._conn import Connection
from ._dialect import Commands, RedisDialect, RedisState, record, zeros
from ._tree import Tree

_Size = torch.Size


class Leaf(NamedTuple):
    """A stored leaf: its dtype, each element's shape and the ``count + 1`` byte offsets of the elements."""

    dtype: torch.dtype
    shapes: tuple[torch.Size, ...]
    offsets: tuple[int, ...]


class State:
    """What the handle of a stored lazy stack and its element views share."""

    __slots__ = ("_views", "conn", "count", "inner", "leaves", "stack_dim", "tree")

    def __init__(self, conn: Connection, count: int, stack_dim: int, inner: torch.Size) -> None:
        self.conn, self.count, self.stack_dim, self.inner = conn, count, stack_dim, inner
        self.leaves: dict[str, Leaf] = {}
        self.tree = Tree(inner)  # (children only: which keys each node holds, in insertion order)
        self._views: list[ElementState] = []

    def views(self) -> list[ElementState]:
        """Each element's stored-layer state over its :class:`ElementDialect`, made once.

        Every handle on the stack shares them: an element's locks are its own, whichever handle reached it.
        """
        if not self._views:
            self._views = [ElementState(ElementDialect(self, i)) for i in range(self.count)]
        return self._views

    def __reduce__(self) -> Any:
        """Pickled as its connection (what reconnects to the server) and the stack's shape: a copy reads the layout."""
        return _reload, (self.conn, self.count, self.stack_dim, tuple(self.inner))

    def idx_key(self, joined: str) -> str:
        return self.conn.data_key(f"{joined}:idx")

    def load(self, operation: str) -> None:
        """Read the layout: leaf paths, order, batch size, then every leaf's metadata and offsets (2 round trips)."""
        conn = self.conn
        raw_keys, raw_order, raw_inner = conn.read(
            operation,
            lambda pipe: (
                pipe.smembers(conn.key("__keys__")),
                pipe.zrange(conn.key("__order__"), 0, -1, withscores=True),
                pipe.get(conn.key("__inner_batch_size__")),
            ),
        )
        if raw_inner:  # (read again after a failed write: a batch size set in it may not have landed)
            self.inner = _Size(json.loads(raw_inner))
        order = {k.decode(): score for k, score in raw_order}
        paths = sorted((k.decode() for k in raw_keys), key=lambda p: (order.get(p, float("inf")), p))
        found = (
            conn.read(
                operation, lambda pipe: [(pipe.hgetall(conn.meta_key(p)), pipe.get(self.idx_key(p))) for p in paths]
            )
            if paths
            else []
        )
        self.leaves, self.tree = {}, Tree(self.inner)
        for i, path in enumerate(paths):
            meta, idx = fmt.decode(found[2 * i]), found[2 * i + 1]
            if not meta:
                continue  # deleted by another handle meanwhile
            dtype = fmt.str_dtype(meta["dtype"])
            shape = json.loads(meta["shape"])
            if meta.get("homogeneous", "1") == "1":
                if meta.get("layout") == "batch" and self.stack_dim and shape[:1] != [self.count]:
                    raise NotImplementedError(
                        f"{path!r} of the stored lazy stack is in the batch layout (written "
                        f"by tensordict's set() with stack_dim={self.stack_dim}): not read "
                        f"here"
                    )
                shapes = (_Size(shape[1:]),) * self.count
                size = dtype.itemsize * math.prod(shape[1:])
                offsets = tuple(i * size for i in range(self.count + 1))
            else:
                shapes = tuple(_Size(s) for s in json.loads(meta["shapes"]))
                offsets = struct.unpack(f"<{self.count + 1}q", idx)
            self.leaves[path] = Leaf(dtype, shapes, offsets)
            self.tree.add(tuple(path.split(fmt.SEP)), TENSOR)

    # ------------------------------------------------------------------ writes (commands, layout updated)
    def write(self, operation: str, commands: Commands) -> None:
        """``conn.write``; on failure the layout is read again (it may be ahead of the server's)."""
        self.atomic(operation, lambda: self.conn.write(operation, commands))

    def atomic(self, operation: str, body: Any) -> Any:
        """``conn.atomic``; on failure the layout is read again (it may be ahead of the server's)."""
        try:
            return self.conn.atomic(operation, body)
        except BaseException:
            if getattr(self.conn.local, "pending", None) is None:  # (an outer atomic body reloads once)
                with contextlib.suppress(Exception):  # the server is unreachable: the original error says so
                    self.load(operation)
            raise

    def drop(self, path: tuple[str, ...]) -> Commands:
        """The commands deleting the entry at ``path`` (every leaf under a node)."""
        conn = self.conn
        commands: Commands = []
        leaves, _ = self.tree.remove(path)
        for joined in leaves:
            self.leaves.pop(joined, None)
            commands.append(("DEL", [conn.data_key(joined), self.idx_key(joined), conn.meta_key(joined)], []))
            commands.append(("SREM", [conn.key("__keys__")], [joined]))
        if leaves:
            commands.append(("ZREM", [conn.key("__order__")], leaves))
        return commands

    def emit_whole(self, path: tuple[str, ...], elements: list[torch.Tensor], commands: Commands) -> None:
        """Write a whole leaf from its ``count`` elements (a new leaf replacing whatever was at ``path``)."""
        joined = fmt.SEP.join(path)
        dtypes = {t.dtype for t in elements}
        if len(dtypes) != 1 or len(elements) != self.count:
            raise ValueError(
                f"the elements of {path!r} must be {self.count} tensors of one dtype, got "
                f"{len(elements)} of {sorted(map(str, dtypes))}"
            )
        dtype = elements[0].dtype
        shapes = tuple(t.shape for t in elements)
        sizes = [dtype.itemsize * t.numel() for t in elements]
        offsets = (0, *[sum(sizes[: i + 1]) for i in range(len(sizes))])
        flat = torch.cat([t.detach().reshape(-1).cpu() for t in elements]) if elements else torch.empty(0)
        meta = {"shape": json.dumps([self.count, *shapes[0]]), "dtype": fmt.dtype_str(dtype), "layout": "stack"}
        homogeneous = all(s == shapes[0] for s in shapes)
        meta["homogeneous"] = "1" if homogeneous else "0"
        if not homogeneous:
            meta["shapes"] = json.dumps([list(s) for s in shapes])
        commands += self.drop(path)
        conn = self.conn
        commands.append(("SET", [conn.data_key(joined)], [fmt.to_bytes(flat)]))
        if not homogeneous:
            commands.append(("SET", [self.idx_key(joined)], [struct.pack(f"<{len(offsets)}q", *offsets)]))
        commands += record(self.conn, joined, meta)
        self.leaves[joined] = Leaf(dtype, shapes, offsets)
        self.tree.add(path, TENSOR)

    def emit_alloc(self, path: tuple[str, ...], shape: torch.Size, dtype: torch.dtype, commands: Commands) -> None:
        """A new homogeneous leaf of zeros, every element of ``shape`` (allocated by the server)."""
        joined, conn = fmt.SEP.join(path), self.conn
        commands += self.drop(path)
        size = dtype.itemsize * math.prod(shape)
        commands.append(("DEL", [conn.data_key(joined)], []))
        commands += zeros(conn, joined, size * self.count)
        meta = {
            "shape": json.dumps([self.count, *shape]),
            "dtype": fmt.dtype_str(dtype),
            "homogeneous": "1",
            "layout": "stack",
        }
        commands += record(self.conn, joined, meta)
        self.leaves[joined] = Leaf(dtype, (_Size(shape),) * self.count, tuple(i * size for i in range(self.count + 1)))
        self.tree.add(path, TENSOR)

    def read_whole(self, operation: str, joined_paths: list[str]) -> dict[str, list[torch.Tensor]]:
        """The elements of whole leaves, one GET each, one round trip."""
        conn = self.conn
        datas = conn.fetch(operation, [("GET", conn.data_key(j)) for j in joined_paths]) if joined_paths else []
        out: dict[str, list[torch.Tensor]] = {}
        device = conn.device
        for joined, data in zip(joined_paths, datas, strict=True):
            if data is None:
                raise KeyError(f"{joined!r}: its data is missing on the server (deleted by another handle?)")
            leaf = self.leaves[joined]
            buffer = bytearray(data)
            elements = [
                fmt.from_bytes(memoryview(buffer)[start:stop], shape, leaf.dtype)
                for start, stop, shape in zip(leaf.offsets[:-1], leaf.offsets[1:], leaf.shapes, strict=True)
            ]
            out[joined] = elements if device is None or device.type == "cpu" else [t.to(device) for t in elements]
        return out


class ElementDialect(RedisDialect):
    """Element ``index`` of a stored lazy stack, spoken by path: its byte range of every stacked leaf.

    The layout (the stack's :class:`State`) is every element's: a new leaf is created for all of them (zeros,
    each of this element's shape), a replaced entry is replaced for all, and a value written to an existing
    entry goes into this element's bytes (``keeps_entries``). The batch size is the stack's inner one; no dim
    names are recorded. A failed write reads the layout again.
    """

    keeps_entries = True

    def __init__(self, lazy: State, index: int) -> None:
        super().__init__(lazy.conn)
        self.lazy, self.index = lazy, index
        self.atomic = lazy.atomic  # type: ignore[method-assign]  # (the stack's layout is read again on failure)

    def __reduce__(self) -> Any:
        return _element_dialect, (self.lazy, self.index)

    @property
    def tree(self) -> Tree:
        return self.lazy.tree

    def close(self) -> None:
        """Nothing: the connection is the stack's (a plain ``with element:`` leaves it open; close the stack)."""

    def forget_layout(self) -> None:
        with contextlib.suppress(Exception):  # the server is unreachable: the original error says so
            self.lazy.load("reading the layout again")

    def _stacked(self, path: Path) -> tuple[Leaf, str]:
        joined = fmt.SEP.join(path)
        return self.lazy.leaves[joined], joined

    # ------------------------------------------------------------------ structure
    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        leaf, _ = self._stacked(path)
        return leaf.shapes[self.index], leaf.dtype

    def node_facts(self, path: Path) -> tuple[torch.Size | None, tuple[Any, ...] | None]:
        return self.lazy.inner, None

    def set_node_facts(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        """Every element's batch size (the server records one for all): each element's leaves are checked."""
        if names is not None and any(n is not None for n in names):
            raise RuntimeError("_StoreElement cannot name its batch dims")
        lazy = self.lazy
        if batch_size == lazy.inner:
            return
        for joined, leaf in lazy.leaves.items():
            for shape in leaf.shapes:
                if tuple(shape[: len(batch_size)]) != tuple(batch_size):
                    raise batch_size_refused(batch_size, tuple(joined.split(fmt.SEP)), shape)
        key = self.conn.key("__inner_batch_size__")
        self.send("setting the batch size", [("SET", [key], [json.dumps(list(batch_size))])])
        lazy.inner = lazy.tree.batch = batch_size

    def create_node(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        self.tree.add(path, NODE)  # (a node exists on the server through the leaves under it)

    def delete(self, path: Path) -> None:
        self.send(f"deleting {fmt.SEP.join(path)!r}", self.lazy.drop(path))

    # ------------------------------------------------------------------ tensor leaves
    def read(self, path: Path) -> torch.Tensor:
        return self.read_many([path], None)[0]

    def read_rows(self, path: Path, plan: RowPlan) -> torch.Tensor:
        return self.read_many([path], plan)[0]

    def read_many(self, paths: list[Path], plan: RowPlan | None) -> list[torch.Tensor]:
        """The rows of ``plan`` (None: the whole element) of every leaf in ``paths``, in one round trip."""
        conn, index = self.conn, self.index
        commands: list[Any] = []
        counts, steps = [], []
        for path in paths:
            leaf, joined = self._stacked(path)
            shape, base = leaf.shapes[index], leaf.offsets[index]
            if plan is None:
                ranges, step = [(base, leaf.offsets[index + 1] - base)], None
            else:
                ranges, step = rows.byte_ranges(plan, leaf.dtype.itemsize * math.prod(shape[1:]))
                ranges = [(base + offset, length) for offset, length in ranges]
            found = rows.read_commands(conn.data_key(joined), [r for r in ranges if r[1]])
            commands += found
            counts.append(len(found))
            steps.append(step)
        results = conn.fetch("reading an element of a stored lazy stack", commands) if commands else []
        out: list[torch.Tensor] = []
        at, device = 0, conn.device
        for path, count, step in zip(paths, counts, steps, strict=True):
            leaf, _ = self._stacked(path)
            parts, at = results[at : at + count], at + count
            shape = leaf.shapes[index]
            value = (
                fmt.from_bytes(b"".join(parts), shape, leaf.dtype)
                if plan is None
                else rows.assemble(parts or [b""], shape, leaf.dtype, plan, step)
            )
            out.append(value if device is None or device.type == "cpu" else value.to(device))
        return out

    def write(self, path: Path, value: torch.Tensor) -> None:
        """A new leaf: zeros of ``value``'s shape in every element, ``value`` in this one."""
        commands: Commands = []
        self.lazy.emit_alloc(path, value.shape, value.dtype, commands)
        self.send(f"writing {path!r} of element {self.index}", commands + self._into(path, value))

    def write_into(self, path: Path, value: torch.Tensor) -> None:
        self.send(f"writing {path!r} of element {self.index}", self._into(path, value))

    def _into(self, path: Path, value: torch.Tensor) -> Commands:
        leaf, joined = self._stacked(path)
        shape = leaf.shapes[self.index]
        if value.shape != shape:
            try:
                value = value.expand(shape)
            except RuntimeError:
                raise ValueError(
                    f"cannot write a value of shape {list(value.shape)} into {path!r} of element "
                    f"{self.index} of a stored lazy stack, whose shape there is {list(shape)} (the "
                    f"server keeps each element's shape: set the key on the stack to reshape it)"
                ) from None
        data = fmt.to_bytes(value.to(leaf.dtype))
        return [("SETRANGE", [self.conn.data_key(joined)], [leaf.offsets[self.index], data])]

    write_many = Dialect.write_many  # (one write_rows per leaf, in one transaction)

    def write_rows(self, path: Path, plan: RowPlan, value: torch.Tensor) -> None:
        leaf, joined = self._stacked(path)
        base, found = (
            leaf.offsets[self.index],
            rows.write_commands(self.conn.data_key(joined), leaf.shapes[self.index], plan, value),
        )
        commands = [
            (name, keys, [a + base if i % 2 == 0 else a for i, a in enumerate(args)]) for name, keys, args in found
        ]
        self.send("writing rows of an element of a stored lazy stack", commands)

    def alloc(self, path: Path, shape: torch.Size, dtype: torch.dtype) -> None:
        commands: Commands = []
        self.lazy.emit_alloc(path, shape, dtype, commands)
        self.send(f"allocating {path[-1]!r}", commands)

    def write_object(self, path: Path, value: Any) -> None:
        raise TypeError(f"a stored lazy stack holds tensors only: {path!r} got {type(value).__name__}")


class ElementState(RedisState):
    """The stored layer's view of an element: the stack's layout, whose every node has the stack's inner batch size."""

    __slots__ = ()

    def entries(self, path: Path) -> dict[str, str]:
        return self.dialect.lazy.tree.children.get(path, {})  # type: ignore[attr-defined,no-any-return]

    def batch_of(self, path: Path) -> torch.Size:
        return self.dialect.lazy.inner  # type: ignore[attr-defined,no-any-return]

    tensor_at = LayerState.tensor_at  # (the stack's layout: kinds in its tree, shapes per element)

    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        dialect: ElementDialect = self.dialect  # type: ignore[assignment]
        leaf = dialect.lazy.leaves[fmt.SEP.join(path)]
        return leaf.shapes[dialect.index], leaf.dtype


def _element_dialect(lazy: State, index: int) -> ElementDialect:
    return lazy.views()[index].dialect  # type: ignore[return-value]  # (an ElementDialect)


def _reload(conn: Connection, count: int, stack_dim: int, inner: tuple[int, ...]) -> State:
    state = State(conn, count, stack_dim, torch.Size(inner))
    state.load("unpickling")
    return state
