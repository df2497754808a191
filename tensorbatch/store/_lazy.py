"""LazyStackedTensorDictStore: a lazy stack whose elements may differ in shape, living on a Redis-compatible server.

The layout is tensordict 0.15.3's: ``__type__ = "lazy_stack"``, ``__count__``, ``__stack_dim__``,
``__inner_batch_size__`` (JSON), ``__device__``, ``__keys__`` (the leaf paths). Each leaf is one string for the
whole stack, ``d:<path>``: the elements one after another (stack dim first, ``layout = "stack"``), so the number
of keys does not grow with the number of elements. Its hash ``m:<path>`` holds ``shape`` (``[count, *shape of
element 0]``), ``dtype`` and ``homogeneous``: ``"1"`` when every element has that shape, else ``"0"`` with the
element shapes in ``shapes`` (a JSON list) and their byte offsets in ``d:<path>:idx`` (``count + 1``
little-endian int64). ``__epoch__`` and ``__order__`` are added as for the dense store (tensordict ignores them).

The elements are views (``_StoreElement``) reading and writing their byte ranges on the server; the stack is a
:class:`~tensorbatch.LazyStackedTensorDict` of them, so everything a lazy stack does works here, element by
element. Reading a leaf of the whole stack, ``clone()`` (into memory), and writing a whole leaf are one round trip.
Only tensor leaves are stored (as in tensordict). Writes of several elements or keys are one guarded script.
"""

from __future__ import annotations

import contextlib
import json
import math
import struct
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import torch

from .._base.coerce import as_device
from .._errors import StackDimError, batch_mismatch, locked, missing_key
from .._lazy import LazyStackedTensorDict, _stack_values, _unbind
from .._ops.meta import NODE, TENSOR, LeafMeta
from .._ops.rows import RowPlan, check_fits
from .._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES, is_td, named_leaves, named_nodes
from ..base import TensorDictBase
from ..stored._copies import CopyOnRead
from . import _format as fmt
from . import _rows as rows
from ._conn import Connection, _connect
from ._tree import Tree, rank

_Size = torch.Size
Commands = list[tuple[str, list[str], list[Any]]]
GLOBALS = ("__type__", "__count__", "__stack_dim__", "__inner_batch_size__", "__device__")


class Leaf(NamedTuple):
    """A stored leaf: its dtype, each element's shape and the ``count + 1`` byte offsets of the elements."""

    dtype: torch.dtype
    shapes: tuple[torch.Size, ...]
    offsets: tuple[int, ...]


class State:
    """What the handle of a stored lazy stack and its element views share."""

    __slots__ = ("conn", "count", "inner", "leaves", "locked", "stack_dim", "tree")

    def __init__(self, conn: Connection, count: int, stack_dim: int, inner: torch.Size) -> None:
        self.conn, self.count, self.stack_dim, self.inner = conn, count, stack_dim, inner
        self.leaves: dict[str, Leaf] = {}
        self.tree = Tree(inner)  # (children only: which keys each node holds, in insertion order)
        self.locked: dict[tuple[int, tuple[str, ...]], bool] = {}

    def idx_key(self, joined: str) -> str:
        return self.conn.data_key(f"{joined}:idx")

    def load(self, operation: str) -> None:
        """Read the layout: the leaf paths and order, then every leaf's metadata and offsets (2 round trips)."""
        conn = self.conn
        raw_keys, raw_order = conn.read(
            operation,
            lambda pipe: (
                pipe.smembers(conn.key("__keys__")),
                pipe.zrange(conn.key("__order__"), 0, -1, withscores=True),
            ),
        )
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
        self._emit_meta(joined, meta, commands)
        self.leaves[joined] = Leaf(dtype, shapes, offsets)
        self.tree.add(path, TENSOR)

    def emit_alloc(self, path: tuple[str, ...], shape: torch.Size, dtype: torch.dtype, commands: Commands) -> None:
        """A new homogeneous leaf of zeros, every element of ``shape`` (allocated by the server)."""
        joined, conn = fmt.SEP.join(path), self.conn
        commands += self.drop(path)
        size = dtype.itemsize * math.prod(shape)
        commands.append(("DEL", [conn.data_key(joined)], []))
        if size * self.count:
            commands.append(("SETRANGE", [conn.data_key(joined)], [size * self.count - 1, b"\x00"]))
        else:
            commands.append(("SET", [conn.data_key(joined)], [b""]))
        meta = {
            "shape": json.dumps([self.count, *shape]),
            "dtype": fmt.dtype_str(dtype),
            "homogeneous": "1",
            "layout": "stack",
        }
        self._emit_meta(joined, meta, commands)
        self.leaves[joined] = Leaf(dtype, (_Size(shape),) * self.count, tuple(i * size for i in range(self.count + 1)))
        self.tree.add(path, TENSOR)

    def _emit_meta(self, joined: str, meta: dict[str, str], commands: Commands) -> None:
        conn = self.conn
        commands.append(("HSET", [conn.meta_key(joined)], [v for kv in meta.items() for v in kv]))
        commands.append(("SADD", [conn.key("__keys__")], [joined]))
        commands.append(("ZADD", [conn.key("__order__")], ["NX", rank(), joined]))

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


class _StoreElement(CopyOnRead):
    """Element ``index`` of a stored lazy stack (a node of it, at ``path``): reads and writes on the server."""

    __slots__ = ("__weakref__", "_index", "_path", "_state")

    def __init__(self, state: State, index: int, path: tuple[str, ...] = ()) -> None:
        self._state, self._index, self._path = state, index, path

    # ------------------------------------------------------------------ facts
    @property
    def batch_size(self) -> torch.Size:
        return self._state.inner

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        TensorDictBase.batch_size.fset(self, value)  # type: ignore[attr-defined]  # the base setter

    def _change_batch_size(self, new_size: torch.Size) -> None:
        """Every element's batch size (the server records one for all): the stack sets each, the first counts."""
        state = self._state
        if new_size == state.inner:
            return
        for joined, leaf in state.leaves.items():
            for shape in leaf.shapes:
                if tuple(shape[: len(new_size)]) != tuple(new_size):
                    raise batch_mismatch(new_size, tuple(joined.split(fmt.SEP)), shape)
        state.write(
            "setting the batch size", [("SET", [state.conn.key("__inner_batch_size__")], [json.dumps(list(new_size))])]
        )
        state.inner = state.tree.batch = new_size

    @property
    def device(self) -> torch.device | None:
        device: torch.device | None = self._state.conn.device
        return device

    @property
    def is_locked(self) -> bool:
        return self._state.locked.get((self._index, self._path), False)

    def _set_lock(self, value: bool) -> None:
        self._state.locked[(self._index, self._path)] = value

    def _kind(self, key: Any) -> str | None:
        return self._state.tree.children.get(self._path, {}).get(key) if type(key) is str else None

    def _keys_str(self) -> Any:
        return self._state.tree.children.get(self._path, {}).keys()

    def _has_str(self, key: str) -> bool:
        return self._kind(key) is not None

    def _missing(self, key: str) -> KeyError:
        return missing_key((*self._path, key), self._keys_str(), type(self).__name__)

    # ------------------------------------------------------------------ entries
    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        kind = self._kind(key)
        if kind is None:
            if default is NO_DEFAULT:
                raise self._missing(key)
            return default
        if kind == NODE:
            return _StoreElement(self._state, self._index, (*self._path, key))
        return self._read_rows(None, (key,))[key]

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        fmt.check_key(key, self._path)
        if not validated:
            value = self._validate(value, (key,))
        conn = self._state.conn

        def write() -> None:
            commands: Commands = []
            self._emit_set(key, value, commands)
            conn.write(operation, commands)

        operation = f"writing {fmt.SEP.join((*self._path, key))!r} of element {self._index}"
        self._state.atomic(operation, write)

    def _emit_set(self, key: str, value: Any, commands: Commands) -> None:
        path = (*self._path, key)
        if is_td(value) and type(value) not in NON_TENSOR_TYPES:
            if self._kind(key) not in (None, NODE):
                commands += self._state.drop(path)
            self._state.tree.add(path, NODE)  # (a node exists on the server through the leaves under it)
            child = _StoreElement(self._state, self._index, path)
            for sub_key, sub_value in value._items_str():
                fmt.check_key(sub_key, path)
                child._emit_set(sub_key, sub_value, commands)
            return
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"a stored lazy stack holds tensors only: {path!r} got {type(value).__name__}")
        joined = fmt.SEP.join(path)
        leaf = self._state.leaves.get(joined)
        if leaf is None:
            self._state.emit_alloc(path, value.shape, value.dtype, commands)
            leaf = self._state.leaves[joined]
        shape = leaf.shapes[self._index]
        if value.shape != shape:
            try:
                value = value.expand(shape)
            except RuntimeError:
                raise ValueError(
                    f"cannot write a value of shape {list(value.shape)} into {path!r} of element "
                    f"{self._index} of a stored lazy stack, whose shape there is {list(shape)} (the "
                    f"server keeps each element's shape: set the key on the stack to reshape it)"
                ) from None
        commands.append(
            (
                "SETRANGE",
                [self._state.conn.data_key(joined)],
                [leaf.offsets[self._index], fmt.to_bytes(value.to(leaf.dtype))],
            )
        )

    def _del_str(self, key: str) -> None:
        raise RuntimeError(
            f"cannot delete {(*self._path, key)!r} from one element of a stored lazy stack (the "
            f"server keeps one set of keys for all): delete it from the stack"
        )

    # ------------------------------------------------------------------ storage hooks
    def _leaf_meta(self, key: str) -> LeafMeta:
        kind = self._kind(key)
        if kind == TENSOR:
            leaf = self._state.leaves[fmt.SEP.join((*self._path, key))]
            return LeafMeta(leaf.shapes[self._index], leaf.dtype, TENSOR)
        if kind == NODE:
            return LeafMeta(self._state.inner, None, NODE)
        raise self._missing(key)

    def _read_rows(self, plan: RowPlan | None, keys: Iterable[str] | None = None) -> Any:
        """The rows of ``plan`` (None: the whole element) of every leaf under ``keys``, in one round trip."""
        state, conn = self._state, self._state.conn
        keys = list(self._keys_str()) if keys is None else list(keys)
        wanted: list[tuple[str, ...]] = []
        self._collect(keys, wanted)
        commands: list[Any] = []
        counts, steps = [], []
        for path in wanted:
            joined = fmt.SEP.join(path)
            leaf = state.leaves[joined]
            shape, base = leaf.shapes[self._index], leaf.offsets[self._index]
            if plan is None:
                ranges, step = [(base, leaf.offsets[self._index + 1] - base)], None
            else:
                ranges, step = rows.byte_ranges(plan, leaf.dtype.itemsize * math.prod(shape[1:]))
                ranges = [(base + offset, length) for offset, length in ranges]
            found = rows.read_commands(conn.data_key(joined), [r for r in ranges if r[1]])
            commands += found
            counts.append(len(found))
            steps.append(step)
        results = conn.fetch("reading an element of a stored lazy stack", commands) if commands else []
        values: dict[tuple[str, ...], Any] = {}
        at, device = 0, conn.device
        for path, count, step in zip(wanted, counts, steps, strict=True):
            leaf = state.leaves[fmt.SEP.join(path)]
            parts, at = results[at : at + count], at + count
            shape = leaf.shapes[self._index]
            value = (
                fmt.from_bytes(b"".join(parts), shape, leaf.dtype)
                if plan is None
                else rows.assemble(parts or [b""], shape, leaf.dtype, plan, step)
            )
            values[path] = value if device is None or device.type == "cpu" else value.to(device)
        return self._build(plan, keys, values)

    def _collect(self, keys: list[str], out: list[tuple[str, ...]]) -> None:
        for key in keys:
            kind = self._kind(key)
            if kind is None:
                raise self._missing(key)
            if kind == NODE:
                child = _StoreElement(self._state, self._index, (*self._path, key))
                child._collect(list(child._keys_str()), out)
            else:
                out.append((*self._path, key))

    def _build(self, plan: RowPlan | None, keys: list[str], values: dict[tuple[str, ...], Any]) -> Any:
        out: dict[str, Any] = {}
        for key in keys:
            if self._kind(key) == NODE:
                child = _StoreElement(self._state, self._index, (*self._path, key))
                out[key] = child._build(plan, list(child._keys_str()), values)
            else:
                out[key] = values[(*self._path, key)]
        size = self.batch_size if plan is None else plan.target_shape(self.batch_size)
        return self._dense_cls._new_unsafe(out, size, self.device)

    def _write_rows(self, plan: RowPlan, values: Mapping[tuple[str, ...], Any]) -> None:
        state, commands = self._state, []
        for path, value in values.items():  # everything checked before the first write
            full = (*self._path, *path)
            leaf = state.leaves.get(fmt.SEP.join(full))
            if leaf is None:
                self._get(path)  # the KeyError naming a missing path
                raise TypeError(f"cannot write rows into {path!r}: it is not a tensor leaf")
            shape, base = leaf.shapes[self._index], leaf.offsets[self._index]
            target = plan.target_shape(shape)
            value = torch.as_tensor(value, dtype=leaf.dtype) if not isinstance(value, torch.Tensor) else value
            if value.shape != target:
                check_fits(path, value.shape, target)
                value = value.expand(target)
            for name, keys, args in rows.write_commands(
                state.conn.data_key(fmt.SEP.join(full)), shape, plan, value.to(leaf.dtype)
            ):
                commands.append((name, keys, [a + base if i % 2 == 0 else a for i, a in enumerate(args)]))
        state.write("writing rows of an element of a stored lazy stack", commands)

    def _alloc_leaf(self, key: str, shape: Any, dtype: torch.dtype) -> None:
        commands: Commands = []
        fmt.check_key(key, self._path)
        self._state.emit_alloc((*self._path, key), _Size(shape), dtype, commands)
        self._state.write(f"allocating {key!r}", commands)

    def __reduce__(self) -> Any:
        stack = LazyStackedTensorDictStore._attached(self._state)
        return (_element_of, (stack, self._index, self._path))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(element={self._index}, path={self._path!r}, keys={list(self._keys_str())}, "
            f"batch_size={self.batch_size}, td_id={self._state.conn.td_id!r})"
        )


def _element_of(stack: LazyStackedTensorDictStore, index: int, path: tuple[str, ...]) -> _StoreElement:
    return _StoreElement(stack._state, index, path)


class LazyStackedTensorDictStore(LazyStackedTensorDict):
    """A lazy stack of ``count`` TensorDicts (elements) whose leaves live on a Redis-compatible server.

    The elements may hold leaves of different shapes (not of different dtypes). ``store[i]`` is element ``i``,
    a view reading and writing on the server; everything a :class:`~tensorbatch.LazyStackedTensorDict` does
    works, element by element. Reading a leaf of the whole stack and writing one are one round trip each.
    The server layout is tensordict 0.15.3's: a store written by either library opens in the other.

    Keyword Args:
        count: the number of elements.
        stack_dim: where the stack dim goes in the batch size (default 0).
        inner_batch_size: the batch size of every element.
        **client_kwargs: ``backend``, ``host``, ``port``, ``db``, ``unix_socket_path``, ``prefix``, ``device``,
            ``client``, ``td_id``, ``cache_metadata``, ``allow_pickle`` and client options, as for
            :class:`~tensorbatch.store.TensorDictStore`.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict, lazy_stack
        >>> from tensorbatch.store import LazyStackedTensorDictStore
        >>> local = lazy_stack([TensorDict(x=torch.zeros(3)), TensorDict(x=torch.zeros(5))])
        >>> store = LazyStackedTensorDictStore.from_lazy_stack(local, **server)  # doctest: +SKIP
        >>> store[0]["x"].shape, store[1]["x"].shape  # doctest: +SKIP
        (torch.Size([3]), torch.Size([5]))
        >>> store[1] = TensorDict(x=torch.ones(5))  # doctest: +SKIP
        >>> store[1]["x"]  # doctest: +SKIP
        tensor([1., 1., 1., 1., 1.])
    """

    __slots__ = ("_path", "_state")

    def __init__(
        self,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        count: int,
        stack_dim: int = 0,
        inner_batch_size: Any,
        device: Any = None,
        client: Any = None,
        td_id: str | None = None,
        cache_metadata: bool = True,
        allow_pickle: bool = False,
        **client_kwargs: Any,
    ) -> None:
        inner = _Size(inner_batch_size)
        if not -len(inner) - 1 <= stack_dim <= len(inner):
            raise StackDimError(f"stack_dim {stack_dim} is out of range for elements with {len(inner)} batch dims")
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
        )  # (allow_pickle: its leaves are tensors, kept for the handle's copies)
        epoch = conn.new_epoch()
        stack_dim %= len(inner) + 1
        values = (
            "lazy_stack",
            str(count),
            str(stack_dim),
            json.dumps(list(inner)),
            "" if conn.device is None else str(conn.device),
        )

        def fill(pipe: Any) -> None:  # one round trip: adopt the store's epoch or start one, record the stack
            pipe.set(conn.key("__epoch__"), epoch, nx=True)
            pipe.get(conn.key("__epoch__"))
            for suffix, value in zip(GLOBALS, values, strict=True):
                pipe.set(conn.key(suffix), value)

        conn.epoch = conn.read("creating the store", fill)[1]
        state = State(conn, count, stack_dim, inner)
        if conn.epoch != epoch or td_id is not None:
            state.load("opening the store")
        self._attach(state)

    def _attach(self, state: State, path: tuple[str, ...] = ()) -> None:
        self._state, self._path = state, path
        self._init([_StoreElement(state, i, path) for i in range(state.count)], state.stack_dim, state.inner)
        self._stack_name = None

    @classmethod
    def _attached(cls, state: State, path: tuple[str, ...] = ()) -> LazyStackedTensorDictStore:
        """A handle on the stored stack (on its nested node at ``path``): a new stack of element views."""
        out = cls.__new__(cls)
        out._attach(state, path)
        return out

    # ------------------------------------------------------------------ making stores
    @classmethod
    def from_lazy_stack(cls, lazy_td: Any, *, device: Any = None, **kwargs: Any) -> LazyStackedTensorDictStore:
        """A new store holding a copy of a lazy stack (its members may differ in shapes), in one atomic write.

        Keyword arguments are the constructor's (``host``, ``port``, ``prefix``, ``td_id``, ...).

        Raises:
            TypeError: ``lazy_td`` is not a lazy stack, or holds non-tensor leaves.
            ValueError: its members differ in keys, or in the dtype of a key.
        """
        members = getattr(lazy_td, "tensordicts", None)
        if members is None or not hasattr(lazy_td, "stack_dim"):
            raise TypeError(f"from_lazy_stack expects a LazyStackedTensorDict, got {type(lazy_td).__name__}")
        leaves = [dict(named_leaves(td)) for td in members]
        for i, found in enumerate(leaves):
            if set(found) != set(leaves[0]):
                raise ValueError(
                    f"member {i} of the lazy stack holds keys {sorted(found)}, member 0 "
                    f"{sorted(leaves[0])}: a stored lazy stack keeps one set of keys"
                )
            for path, value in found.items():
                if not isinstance(value, torch.Tensor):
                    raise TypeError(
                        f"a stored lazy stack holds tensors only: {path!r} of member {i} is a {type(value).__name__}"
                    )
        if device is None:
            device = lazy_td.device
        inner = members[0].batch_size if members else _Size(lazy_td.batch_size[1:])
        store = cls(count=len(members), stack_dim=lazy_td.stack_dim, inner_batch_size=inner, device=device, **kwargs)
        commands: Commands = []
        for path in leaves[0] if leaves else ():
            for i, part in enumerate(path):
                fmt.check_key(part, path[:i])
            store._state.emit_whole(path, [found[path] for found in leaves], commands)
        store._state.conn.write("from_lazy_stack", commands)
        return store

    @classmethod
    def from_store(
        cls, *, td_id: str, prefix: str = "tensordict", device: Any = None, allow_pickle: bool = False, **kwargs: Any
    ) -> LazyStackedTensorDictStore:
        """Connect to the stored lazy stack ``td_id`` (written by any process, or by tensordict).

        Raises:
            KeyError: when the server has no lazy stack with this ``td_id``.
        """
        conn = _connect(prefix=prefix, td_id=td_id, allow_pickle=allow_pickle, **kwargs)
        epoch = conn.new_epoch()

        def fill(pipe: Any) -> None:
            for suffix in GLOBALS:
                pipe.get(conn.key(suffix))
            pipe.set(conn.key("__epoch__"), epoch, nx=True)  # a store tensordict wrote has none yet
            pipe.get(conn.key("__epoch__"))

        kind, count, stack_dim, inner, raw_device, _, conn.epoch = conn.read("from_store", fill)
        if kind != b"lazy_stack":
            if conn.epoch == epoch:
                conn.write("from_store", [("DEL", [conn.key("__epoch__")], [])])
            raise KeyError(
                f"no LazyStackedTensorDictStore with td_id={td_id!r} at {conn.address} db={conn.db} (prefix={prefix!r})"
            )
        if device is None and raw_device:
            device = raw_device.decode()
        conn.device = as_device(device)
        state = State(conn, int(count), int(stack_dim), _Size(json.loads(inner)))
        state.load("from_store")
        return cls._attached(state)

    @classmethod
    def from_dict(cls, *args: Any, **kwargs: Any) -> Any:
        """Not supported (as in tensordict): build the store with :meth:`from_lazy_stack`."""
        raise NotImplementedError(
            f"{cls.__name__}.from_dict is not supported: use {cls.__name__}.from_lazy_stack(lazy_td, ...)"
        )

    # ------------------------------------------------------------------ whole leaves: one round trip
    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        state = self._state
        kind = state.tree.children.get(self._path, {}).get(key) if type(key) is str else None
        if kind == NODE:
            return LazyStackedTensorDictStore._attached(state, (*self._path, key))
        if kind != TENSOR:
            return LazyStackedTensorDict._get_str(self, key, default)
        joined = fmt.SEP.join((*self._path, key))
        elements = state.read_whole(f"reading {joined!r}", [joined])[joined]
        return _stack_values(key, elements, self._stack_dim, self._stack_name)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        fmt.check_key(key, self._path)
        if not validated:
            value = self._validate(value, (key,))
        state, full = self._state, (*self._path, key)
        if inplace and key in state.tree.children.get(self._path, {}):  # the elements keep their shapes
            state.atomic(
                f"writing {full!r}",
                lambda: LazyStackedTensorDict._set_str(self, key, value, inplace=True, validated=True),
            )
            return
        pieces = _unbind(value, self._stack_dim)
        if is_td(value) and type(value) not in NON_TENSOR_TYPES:
            found = [dict(named_leaves(piece)) for piece in pieces]
            paths = list(found[0]) if found else []
            elements = {(*full, *path): [f[path] for f in found] for path in paths}
        else:
            elements = {full: list(pieces)}
        commands = state.drop(full)
        if is_td(value) and type(value) not in NON_TENSOR_TYPES:
            state.tree.add(full, NODE)  # (kept on the server through the leaves under it: an empty one is local)
        for path, parts in elements.items():
            for i, part in enumerate(path):
                fmt.check_key(part, path[:i])
            if not all(isinstance(p, torch.Tensor) for p in parts):
                raise TypeError(f"a stored lazy stack holds tensors only: {path!r} is not a tensor")
            state.emit_whole(path, parts, commands)
        self._write(f"writing {full!r}", commands)

    def _del_str(self, key: str) -> None:
        if key not in self._state.tree.children.get(self._path, {}):
            raise missing_key((*self._path, key), self._keys_str(), type(self).__name__)
        self._write(f"deleting {(*self._path, key)!r}", self._state.drop((*self._path, key)))

    def rename_key_(self, old_key: Any, new_key: Any, safe: bool = False) -> LazyStackedTensorDictStore:
        """Rename an entry (a leaf, or a node with everything under it) for every element, in one write."""
        state = self._state
        old = (*self._path, *((old_key,) if isinstance(old_key, str) else old_key))
        new = (*self._path, *((new_key,) if isinstance(new_key, str) else new_key))
        if state.tree.children.get(old[:-1], {}).get(old[-1]) is None:
            raise missing_key(old, state.tree.children.get(old[:-1], {}).keys(), type(self).__name__)
        if safe and state.tree.children.get(new[:-1], {}).get(new[-1]) is not None:
            raise KeyError(f"key {new_key!r} already exists; rename_key_(safe=True) refuses")
        if self.is_locked:
            raise locked()
        for i, part in enumerate(new):
            fmt.check_key(part, new[:i])
        moved = {joined: tuple(joined.split(fmt.SEP)) for joined in state.leaves}
        moved = {j: p for j, p in moved.items() if p[: len(old)] == old}
        read = state.read_whole(f"renaming {old!r}", list(moved))
        commands = state.drop(old) + state.drop(new)
        for joined, path in moved.items():
            state.emit_whole((*new, *path[len(old) :]), read[joined], commands)
        self._write(f"renaming {old!r} to {new!r}", commands)
        return self

    def _write(self, operation: str, commands: Commands) -> None:
        self._state.write(operation, commands)

    def clone(self, recurse: bool = True, **kwargs: Any) -> Any:
        """An in-memory :class:`~tensorbatch.LazyStackedTensorDict` copy, as every storage backend here clones.

        ``recurse=True`` reads every leaf in one round trip.
        """
        state, n = self._state, len(self._path)
        if not recurse:
            return LazyStackedTensorDict.clone(self, False, **kwargs)
        paths = {
            joined: tuple(joined.split(fmt.SEP))[n:]
            for joined in state.leaves
            if tuple(joined.split(fmt.SEP))[:n] == self._path
        }
        read = state.read_whole("clone", list(paths))
        members = []
        for i in range(state.count):
            member = self._dense_cls(batch_size=state.inner, device=state.conn.device)
            for joined, elements in read.items():
                member.set(paths[joined], elements[i])
            members.append(member)
        return LazyStackedTensorDict._new(members, self._stack_dim, state.inner)

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """As for a lazy stack.

        ``inplace=True`` converts a copy read in one round trip, then rewrites the leaves (one dtype per leaf
        for all elements: they cannot change one by one).
        """
        if kwargs.pop("inplace", False):
            return self._take_result(self.clone().to(*args, **kwargs))
        return LazyStackedTensorDict.to(self, *args, **kwargs)

    def to_tensordict(self, *, retain_none: bool | None = None) -> Any:
        """An in-memory copy: a dense TensorDict (the elements' shapes must agree, as for a lazy stack)."""
        return self.clone().to_tensordict()

    def _take_result(self, other: Any) -> Any:
        """The in-place form of an op that builds a new tree (``roll(..., inplace=True)``): one write."""
        if any(node.is_locked for _, node in named_nodes(self)):
            raise locked()
        if other.batch_size != self._batch_size:
            raise NotImplementedError(
                f"an in-place op changing the batch size {list(self._batch_size)} to {list(other.batch_size)} is "
                "not supported on a lazy stack (its leaves live in its members): call to_tensordict() first or "
                "use inplace=False"
            )
        state = self._state
        found = [dict(named_leaves(piece)) for piece in other.unbind(self._stack_dim)]
        commands: Commands = []
        for key in list(state.tree.children.get(self._path, {})):
            commands += state.drop((*self._path, key))
        for path in found[0] if found else ():
            parts = [f[path] for f in found]
            if not all(isinstance(p, torch.Tensor) for p in parts):
                raise TypeError(f"a stored lazy stack holds tensors only: {path!r} is not a tensor")
            state.emit_whole((*self._path, *path), parts, commands)
        self._write("an in-place op", commands)
        return self

    def insert(self, index: int, tensordict: Any) -> None:
        raise RuntimeError("a stored lazy stack has a fixed number of elements (recorded on the server)")

    def extend(self, tensordicts: Any) -> None:
        raise RuntimeError("a stored lazy stack has a fixed number of elements (recorded on the server)")

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop using the server from this handle (and its elements). The data stays on the server."""
        self._state.conn.closed = True

    def clear_redis(self) -> None:
        """Delete every key of this store from the server (of this node, for a nested view)."""
        state, conn = self._state, self._state.conn
        if self._path:
            self._write("clear_redis", state.drop(self._path))
            return
        commands: Commands = []
        for joined in list(state.leaves):
            commands.append(("DEL", [conn.data_key(joined), state.idx_key(joined), conn.meta_key(joined)], []))
        commands.append(("DEL", [conn.key(s) for s in ("__keys__", "__order__", *GLOBALS)], []))
        epoch = conn.new_epoch()  # the handle stays usable: new entries start a new store under the same id
        commands.append(("SET", [conn.key("__epoch__")], [epoch]))
        self._write("clear_redis", commands)
        conn.epoch = epoch
        state.leaves, state.tree = {}, Tree(state.inner)

    def __enter__(self) -> LazyStackedTensorDictStore:
        return TensorDictBase.__enter__(self)  # type: ignore[return-value]  # self

    _exit_plain = close  # a plain ``with td:`` closes (a ``with td.lock_():`` undoes the lock: the base __exit__)

    def __reduce__(self) -> Any:
        """Pickled as the server, the store's identity and its shape: unpickling reconnects to the data."""
        state, conn = self._state, self._state.conn
        return (
            _reconnect,
            (
                conn.backend,
                conn.host,
                conn.port,
                conn.db,
                conn.unix_socket_path,
                conn.namespace,
                conn.td_id,
                conn.device,
                conn.options,
                conn.epoch,
                state.count,
                state.stack_dim,
                tuple(state.inner),
                self._path,
            ),
        )

    def __repr__(self) -> str:
        state, conn = self._state, self._state.conn
        return (
            f"LazyStackedTensorDictStore(td_id={conn.td_id!r}, address={conn.address!r}, "
            f"prefix={conn.namespace!r}, path={self._path!r}, count={state.count}, stack_dim={state.stack_dim}, "
            f"batch_size={self.batch_size}, keys={list(self._keys_str())}, device={conn.device})"
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
    options: dict[str, Any],
    epoch: bytes | None,
    count: int,
    stack_dim: int,
    inner: tuple[int, ...],
    path: tuple[str, ...] = (),
) -> LazyStackedTensorDictStore:
    conn = Connection(
        backend=backend,
        host=host,
        port=port,
        db=db,
        unix_socket_path=unix_socket_path,
        namespace=namespace,
        td_id=td_id,
        device=device,
        cache_metadata=True,
        options=options,
    )
    conn.epoch = epoch
    state = State(conn, count, stack_dim, _Size(inner))
    state.load("unpickling")
    return LazyStackedTensorDictStore._attached(state, path)
