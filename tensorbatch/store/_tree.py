"""A store's layout read from the server and cached by its handles: leaves, nodes, their order, batch sizes."""

from __future__ import annotations

import json
import math
import time
from typing import Any, NamedTuple

import torch

from .._ops.meta import NODE, NON_TENSOR, TENSOR
from . import _format as fmt
from ._conn import Connection

_LAST = [0]


def rank() -> int:
    """An insertion rank: microseconds since the epoch, strictly increasing in this process."""
    now = time.time_ns() // 1000
    _LAST[0] = now = max(now, _LAST[0] + 1)
    return now


Entry = tuple[str, torch.Size | None, torch.dtype | None, dict[str, str]]  # (kind, shape, dtype, meta) of a leaf


class RowLeaf(NamedTuple):
    """What row reads and writes of a tensor leaf need: shape, dtype (first: ``State.tensor_at``), key, row size."""

    shape: torch.Size
    dtype: torch.dtype
    key: str
    joined: str
    row_bytes: int


class Tree:
    """A store's layout.

    ``leaves``: path -> ``(kind, shape, dtype, meta)``; ``nodes``: nested node path -> batch size (None: its
    parent's); ``children``: node path tuple -> ``{key: kind}`` in insertion order; ``batch``: the root's.
    ``rows``: leaf path tuple -> :class:`RowLeaf`, what a row read or write of a tensor leaf needs, resolved
    once (the hot paths look a leaf up by its path tuple, with no string joins); emptied by every change of
    the entries (``put``, ``add``, ``remove``).
    """

    __slots__ = ("batch", "children", "leaves", "names", "nodes", "rows")

    def __init__(self, batch: torch.Size) -> None:
        self.batch = batch
        self.leaves: dict[str, Entry] = {}
        self.nodes: dict[str, torch.Size | None] = {}
        self.children: dict[tuple[str, ...], dict[str, str]] = {(): {}}
        self.names: dict[tuple[str, ...], tuple[Any, ...]] = {}  # node path -> dim names (named nodes only)
        self.rows: dict[tuple[str, ...], RowLeaf] = {}

    def put(self, path: tuple[str, ...], entry: Entry) -> None:
        """Record the leaf at ``path`` (``leaves`` entry ``(kind, shape, dtype, meta)``) and its place."""
        self.leaves[fmt.SEP.join(path)] = entry
        self.add(path, entry[0])

    def add(self, path: tuple[str, ...], kind: str) -> None:
        self.rows.clear()
        for i in range(len(path) - 1):  # implied ancestors
            parent, key = path[:i], path[i]
            if key not in self.children.setdefault(parent, {}):
                self.children[parent][key] = NODE
                self.children.setdefault(path[: i + 1], {})
                self.nodes.setdefault(fmt.SEP.join(path[: i + 1]), None)
        self.children.setdefault(path[:-1], {})[path[-1]] = kind
        if kind == NODE:
            self.children.setdefault(path, {})

    def remove(self, path: tuple[str, ...]) -> tuple[list[str], list[str]]:
        """Forget ``path`` and what is under it; the leaf paths and node paths that went."""
        self.rows.clear()
        kind = self.children.get(path[:-1], {}).pop(path[-1], None)
        joined = fmt.SEP.join(path)
        if kind is None:
            return [], []
        if kind != NODE:
            self.leaves.pop(joined, None)
            return [joined], []
        leaves, nodes = [], [joined]
        for key in list(self.children.get(path, {})):
            sub_leaves, sub_nodes = self.remove((*path, key))
            leaves += sub_leaves
            nodes += sub_nodes
        self.children.pop(path, None)
        self.nodes.pop(joined, None)
        self.names.pop(path, None)
        return leaves, nodes

    def row_leaf(self, path: tuple[str, ...], conn: Connection) -> RowLeaf | None:
        """The :class:`RowLeaf` of the tensor leaf at ``path`` (None when there is none), cached in ``rows``."""
        found = self.rows.get(path)
        if found is None:
            joined = fmt.SEP.join(path)
            entry = self.leaves.get(joined)
            if entry is None or entry[0] != TENSOR or self.children.get(path[:-1], {}).get(path[-1]) != TENSOR:
                return None
            _, shape, dtype, _ = entry
            found = self.rows[path] = RowLeaf(
                shape,  # type: ignore[arg-type]
                dtype,  # type: ignore[arg-type]
                conn.data_key(joined),
                joined,
                dtype.itemsize * math.prod(shape[1:]),  # type: ignore[union-attr,index]
            )
        return found

    def node_batch(self, path: tuple[str, ...]) -> torch.Size:
        while path:
            found = self.nodes.get(fmt.SEP.join(path))
            if found is not None:
                return found
            path = path[:-1]
        return self.batch


def load(conn: Connection, operation: str) -> Tree:
    """Read the layout of the store: 2 round trips (global keys, then every leaf's metadata)."""

    def first(pipe: Any) -> None:
        pipe.smembers(conn.key("__keys__"))
        pipe.hgetall(conn.key("__nodes__"))
        pipe.hgetall(conn.key("__names__"))
        pipe.zrange(conn.key("__order__"), 0, -1, withscores=True)
        pipe.get(conn.key("__batch_size__"))

    raw_keys, raw_nodes, raw_names, raw_order, raw_batch = conn.read(operation, first)
    paths = sorted(k.decode() for k in raw_keys)
    metas = conn.read(operation, lambda pipe: [pipe.hgetall(conn.meta_key(p)) for p in paths]) if paths else []
    tree = Tree(torch.Size(json.loads(raw_batch)) if raw_batch else torch.Size(()))
    order = {k.decode(): score for k, score in raw_order}
    nodes = {k.decode(): torch.Size(json.loads(v)) for k, v in raw_nodes.items()}
    entries = [(p, NODE) for p in nodes] + [(p, None) for p in paths]
    entries.sort(key=lambda e: (order.get(e[0], float("inf")), e[0]))
    by_path = dict(zip(paths, metas, strict=True))
    for path, kind in entries:
        if kind is None:
            meta = fmt.decode(by_path[path])
            if not meta:
                continue  # deleted by another handle meanwhile
            if meta.get("is_non_tensor") == "1":
                tree.put(tuple(path.split(fmt.SEP)), (NON_TENSOR, None, None, meta))
            else:
                tree.put(
                    tuple(path.split(fmt.SEP)),
                    (TENSOR, torch.Size(json.loads(meta["shape"])), fmt.str_dtype(meta["dtype"]), meta),
                )
            continue
        tree.add(tuple(path.split(fmt.SEP)), kind)
    tree.nodes.update(nodes)
    tree.names.update((_split(k.decode()), tuple(json.loads(v))) for k, v in raw_names.items())
    return tree


def _split(joined: str) -> tuple[str, ...]:
    """The path tuple of a joined node path (``""``: the root)."""
    return tuple(joined.split(fmt.SEP)) if joined else ()
