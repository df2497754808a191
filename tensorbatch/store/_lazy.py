"""LazyStackedTensorDictStore: a lazy stack whose elements may differ in shape, living on a Redis-compatible server.

The layout is tensordict 0.15.3's: ``__type__ = "lazy_stack"``, ``__count__``, ``__stack_dim__``,
``__inner_batch_size__`` (JSON), ``__device__``, ``__keys__`` (the leaf paths). Each leaf is one string for the
whole stack, ``d:<path>``: the elements one after another (stack dim first, ``layout = "stack"``), so the number
of keys does not grow with the number of elements. Its hash ``m:<path>`` holds ``shape`` (``[count, *shape of
element 0]``), ``dtype`` and ``homogeneous``: ``"1"`` when every element has that shape, else ``"0"`` with the
element shapes in ``shapes`` (a JSON list) and their byte offsets in ``d:<path>:idx`` (``count + 1``
little-endian int64). ``__epoch__`` and ``__order__`` are added as for the dense store (tensordict ignores them).

The elements are views (``_StoreElement``, the stored layer over an :class:`ElementDialect`) reading and writing
their byte ranges on the server; the stack is a :class:`~tensorbatch.LazyStackedTensorDict` of them, so everything
a lazy stack does works here, element by element. Reading a leaf of the whole stack, ``clone()`` (into memory),
and writing a whole leaf are one round trip. Only tensor leaves are stored (as in tensordict). Writes of several
elements or keys are one guarded script.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from .._base.coerce import as_device
from .._errors import StackDimError, locked, missing_key
from .._lazy import LazyStackedTensorDict, _stack_values, _unbind
from .._ops.meta import NODE, TENSOR
from .._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES, is_td, named_leaves, named_nodes
from ..stored._dialect import Path
from ..stored._node import State as LayerState
from ..stored._node import StoredTensorDict
from . import _format as fmt
from ._conn import Connection, _connect
from ._dialect import Commands, ServerHandle
from ._lazy_layout import ElementDialect, ElementState, State
from ._tree import Tree

_Size = torch.Size
GLOBALS = ("__type__", "__count__", "__stack_dim__", "__inner_batch_size__", "__device__")


class _StoreElement(StoredTensorDict):
    """Element ``index`` of a stored lazy stack (a node of it, at ``path``): reads and writes on the server.

    The stored layer over the element's :class:`ElementDialect` (its byte ranges of the stacked leaves).
    """

    __slots__ = ("__weakref__",)

    def __init__(self, state: ElementState, path: Path = ()) -> None:  # (the layer's _view, for the stack's members)
        self._state, self._path = state, path

    @classmethod
    def _new_state(cls, dialect: Any, batch_dims: int | None, infer: bool) -> LayerState:
        """The element's state, shared by every handle on the stack (its locks are the element's)."""
        return dialect.lazy.views()[dialect.index]  # type: ignore[no-any-return]

    def _del_str(self, key: str) -> None:
        raise RuntimeError(
            f"cannot delete {(*self._path, key)!r} from one element of a stored lazy stack (the "
            f"server keeps one set of keys for all): delete it from the stack"
        )

    def __repr__(self) -> str:
        dialect: ElementDialect = self._state.dialect  # type: ignore[assignment]
        return (
            f"{type(self).__name__}(element={dialect.index}, path={self._path!r}, keys={list(self._keys_str())}, "
            f"batch_size={self.batch_size}, td_id={dialect.conn.td_id!r})"
        )


class LazyStackedTensorDictStore(ServerHandle, LazyStackedTensorDict):
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
        self._init([_StoreElement(view, path) for view in state.views()], state.stack_dim, state.inner)
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
    def _connection(self) -> Connection:
        return self._state.conn

    def _repr_facts(self) -> str:
        return f"count={self._state.count}, stack_dim={self._state.stack_dim}, "

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

    def __reduce__(self) -> Any:
        """Pickled as its layout's state (which pickles as what reconnects) and its path: a copy reaches the data."""
        return _reconnect, (self._state, self._path)


def _reconnect(state: State, path: tuple[str, ...]) -> LazyStackedTensorDictStore:
    return LazyStackedTensorDictStore._attached(state, path)
