"""StoredTensorDict: the TensorDict API over any storage dialect, written once.

A :class:`StoredTensorDict` is a node of a stored tree viewed by its path. Its primitives (batch size, keys,
get/set/delete), storage hooks (leaf metadata, row reads and writes, allocation), batch-size checks, names,
lock, ``with``/close and pickling live here; the storage itself is a :class:`~tensorbatch.stored.Dialect`.
What the layer learns of the layout (kinds, shapes, batch sizes) is cached in the tree's :class:`State`, which
every view of it shares: the layer assumes it is the storage's only writer while the tree is open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .._base.coerce import checked_names
from .._errors import fmt_path, missing_key
from .._ops.meta import NODE, NON_TENSOR, TENSOR, LeafMeta, common_batch
from .._ops.rows import RowPlan, check_fits, plan_rows
from .._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES, is_td
from ..base import TensorDictBase
from ._copies import CopyOnRead
from ._dialect import Dialect, Path, ReadOnlyStorageError, RefusedEntry
from ._view import IndexedView

_Size = torch.Size

__all__ = ["ReadOnlyStorageError", "State", "StoredTensorDict"]


class State:
    """What every view of one stored tree shares: the dialect and the layout cached from it."""

    __slots__ = ("batch", "batch_dims", "children", "dialect", "given", "infer", "layouts", "locked", "meta", "names")

    def __init__(self, dialect: Dialect, batch_dims: int | None = None, infer: bool = False) -> None:
        self.dialect = dialect
        self.batch_dims = batch_dims  # for nodes that record no batch size: at most this many inferred dims
        self.infer = infer  # infer every node's batch size, ignoring the recorded ones
        self.given = False  # the root's batch size was given: a node recording none takes its parent's
        self.children: dict[Path, dict[str, str]] = {}
        self.meta: dict[Path, tuple[torch.Size, torch.dtype]] = {}
        self.batch: dict[Path, torch.Size] = {}
        self.names: dict[Path, tuple[Any, ...]] = {}
        self.locked: dict[Path, bool] = {}
        self.layouts: dict[Path, tuple[list[Path], list[tuple[str, Any]]]] = {}  # row reads of whole nodes: _rows

    def entries(self, path: Path) -> dict[str, str]:
        found = self.children.get(path)
        if found is None:
            found = self.children[path] = dict(self.dialect.entries(path))
        return found

    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        found = self.meta.get(path)
        if found is None:
            shape, dtype = self.dialect.tensor_meta(path)
            found = self.meta[path] = (torch.Size(shape), dtype)
        return found

    def batch_of(self, path: Path) -> torch.Size:
        found = self.batch.get(path)
        if found is not None:
            return found
        recorded, names = (None, None) if self.infer else self.dialect.node_facts(path)
        if recorded is None and path and self.given:  # under a batch size the caller gave: the parent's
            recorded = self.batch_of(path[:-1])
        elif recorded is None:  # inferred from the entries' shapes: the longest leading shape they share
            shapes = []
            for key, kind in self.entries(path).items():
                try:
                    if kind == TENSOR:
                        shapes.append(self.tensor_meta((*path, key))[0])
                    elif kind == NODE:
                        shapes.append(self.batch_of((*path, key)))
                except RefusedEntry:  # listed, but not opened: it does not decide the batch size
                    continue
            recorded = common_batch(shapes, self.batch_dims)
        elif names is not None and any(n is not None for n in names):
            self.names[path] = tuple(names)
        self.batch[path] = recorded
        return recorded

    def tensor_at(self, path: Path) -> tuple[torch.Size, torch.dtype] | None:
        """``(shape, dtype, ...)`` of the tensor leaf at ``path``, from the layout; None when there is none there."""
        node: Path = ()
        for key in path[:-1]:
            if self.entries(node).get(key) != NODE:
                return None
            node = (*node, key)
        return self.tensor_meta(path) if self.entries(node).get(path[-1]) == TENSOR else None

    def forget(self, path: Path) -> None:
        """Drop what is cached at and below ``path`` (after a delete or a replacement)."""
        n = len(path)
        self.layouts.clear()
        for table in (self.children, self.meta, self.batch, self.names, self.locked):
            for known in [p for p in table if p[:n] == path]:
                del table[known]


class StoredTensorDict(CopyOnRead):
    """A TensorDict whose entries live in a storage, reached through a :class:`~tensorbatch.stored.Dialect`.

    Reads go to the storage on access (a tensor read is a copy unless the dialect shares memory); writes go
    to it at once, validated first (a failed write leaves it unchanged). Results of generic operations are
    in-memory TensorDicts. Nested TensorDicts are views of the same storage. The batch size of a node that
    records none is the longest leading shape its entries share (at most ``batch_dims`` dims).

    Args:
        dialect: the storage.
        batch_size: when given, checked against the entries and recorded (else read or inferred).
        batch_dims: the most dims an inferred batch size may have.
        auto_batch_size: infer every node's batch size from its entries, ignoring the recorded ones.
    """

    __slots__ = ("_path", "_state")

    def __init__(
        self, dialect: Dialect, *, batch_size: Any = None, batch_dims: int | None = None, auto_batch_size: bool = False
    ) -> None:
        self._state = State(dialect, batch_dims, auto_batch_size)
        self._path: Path = ()
        if batch_size is not None:
            size = torch.Size(batch_size)
            state = self._state
            state.given, state.batch[()] = True, size  # (taken for this session: a read-only storage is not written)
            try:
                self._check_batch(size, opening=True)
            except BaseException:
                state.given = False
                state.batch.clear()
                raise

    @classmethod
    def _view(cls, state: State, path: Path) -> StoredTensorDict:
        out = object.__new__(cls)
        out._state, out._path = state, path
        return out

    @classmethod
    def _new_state(cls, dialect: Dialect, batch_dims: int | None, infer: bool) -> State:
        """The :class:`State` an unpickled view keeps over ``dialect`` (a backend keeping the layout: its own)."""
        return State(dialect, batch_dims, infer)

    @property
    def dialect(self) -> Dialect:
        """The storage this TensorDict reads and writes."""
        return self._state.dialect

    # ------------------------------------------------------------------ life
    def close(self) -> None:
        """Close the storage; the TensorDict (and its views) cannot be used after it."""
        self._state.dialect.close()

    def flush(self) -> None:
        """Make the writes so far durable."""
        self._state.dialect.flush()

    _exit_plain = close  # a plain ``with td:`` closes (a ``with td.lock_():`` undoes the lock: the base __exit__)

    def _check_writable(self, key: Any) -> None:
        dialect = self._state.dialect
        if not dialect.writable:
            raise dialect.refuse_write(key, self._path)

    def __reduce__(self) -> Any:
        """Pickled as its dialect (which pickles as what reopens it) and its path."""
        state = self._state
        return (
            _reopen,
            (
                type(self),
                state.dialect,
                self._path,
                state.batch_dims,
                state.infer,
                state.given,
                dict(state.batch),
                dict(state.names),
                dict(state.locked),
            ),
        )

    # ------------------------------------------------------------------ primitives
    @property
    def batch_size(self) -> torch.Size:
        state = self._state
        found = state.batch.get(self._path)  # (batch_of's cache, looked up here: a hot path of row reads)
        return found if found is not None else state.batch_of(self._path)

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        TensorDictBase.batch_size.fset(self, value)  # type: ignore[attr-defined]  # the base setter

    def _change_batch_size(self, new_size: torch.Size) -> None:
        self._check_batch(new_size)  # the whole tree first: nothing changes on failure
        if self._in_memory_facts():
            self._apply_batch(new_size, record=False)
            return
        self._check_writable("batch_size")
        with self._state.dialect.transaction():
            self._apply_batch(new_size)

    def _in_memory_facts(self) -> bool:
        """A batch size or names set on a read-only storage whose dialect keeps them in memory (``read_only_facts``)."""
        dialect = self._state.dialect
        return dialect.read_only_facts and not dialect.writable

    def _check_batch(self, new_size: torch.Size, opening: bool = False) -> None:
        n = len(new_size)
        for key in self._keys_str():
            shape, _, kind = self._leaf_meta(key)
            if kind == NON_TENSOR or tuple(shape[:n]) == tuple(new_size):
                continue  # (a non-tensor value follows the batch size)
            if kind == NODE and len(shape) < n and tuple(new_size[: len(shape)]) == tuple(shape):
                self._get_str(key)._check_batch(new_size, opening)
                continue
            kind_name = "TensorDict" if kind == NODE else "Tensor"
            raise self._state.dialect.batch_mismatch(new_size, (*self._path, key), shape, kind_name, opening)

    def _apply_batch(self, new_size: torch.Size, record: bool = True) -> None:
        state = self._state
        for key, kind in list(state.entries(self._path).items()):
            if kind == NODE and len(state.batch_of((*self._path, key))) < len(new_size):
                self._get_str(key)._apply_batch(new_size, record)
            elif kind == NON_TENSOR and record:
                shape = self._leaf_meta(key).shape
                if len(shape) < len(new_size):  # a value stored with the node's old batch: it follows
                    value = self._get_str(key)._follow(new_size)
                    state.dialect.delete((*self._path, key))
                    state.dialect.write_object((*self._path, key), value)
        names = state.names.get(self._path)
        if names is not None and len(names) != len(new_size):
            del state.names[self._path]
            names = None
        state.batch[self._path] = new_size
        if record:
            state.dialect.set_node_facts(self._path, new_size, names)

    @property
    def device(self) -> torch.device | None:
        return self._state.dialect.device

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        state = self._state
        kind = state.entries(self._path).get(key)
        if kind is None:
            if default is NO_DEFAULT:
                raise missing_key((*self._path, key), self._keys_str(), type(self).__name__)
            return default
        path = (*self._path, key)
        if kind == TENSOR:
            return state.dialect.read(path)
        if kind == NODE:
            return type(self)._view(state, path)
        return state.dialect.read_object(path, self.batch_size)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        state = self._state
        path = (*self._path, key)
        state.dialect.check_value(path, value)
        if not validated:
            value = self._validate(value, (key,))
        self._check_writable(key)
        kind = state.entries(self._path).get(key)
        if inplace or (kind is not None and state.dialect.keeps_entries):  # written into the entry there
            if kind == TENSOR and isinstance(value, torch.Tensor):
                state.dialect.write_into(path, _plain(value))
                return
            if kind == NODE and is_td(value) and type(value) not in NON_TENSOR_TYPES:
                node = type(self)._view(state, path)
                if inplace:
                    node.update_(value)
                    return
                with state.dialect.transaction():  # (keeps_entries: a node's entries merged, new ones added)
                    node.update(value)
                return
        with state.dialect.transaction(f"writing {fmt_path(path)}"):
            if isinstance(value, torch.Tensor):
                self._replace(key, kind, TENSOR, lambda: state.dialect.write(path, _plain(value)))
            elif type(value) in NON_TENSOR_TYPES or not is_td(value):
                self._replace(key, kind, NON_TENSOR, lambda: state.dialect.write_object(path, value))
            else:
                if isinstance(value, StoredTensorDict) and state.dialect.same_storage(value._state.dialect):
                    value = value.to_tensordict()  # read before a node written onto itself is dropped
                items = list(value.items())
                names = value._maybe_names()
                self._replace(key, kind, NODE, lambda: state.dialect.create_node(path, value.batch_size, names))
                node = type(self)._view(state, path)
                for sub_key, sub_value in items:
                    node._set_str(sub_key, sub_value, inplace=False, validated=True)

    # (several writes each: one ``dialect.atomic``, which a server sends as one script)
    def update(self, *args: Any, **kwargs: Any) -> Any:
        return self._state.dialect.atomic("update", lambda: TensorDictBase.update(self, *args, **kwargs))

    def update_(self, *args: Any, **kwargs: Any) -> Any:
        return self._state.dialect.atomic("update_", lambda: TensorDictBase.update_(self, *args, **kwargs))

    def _write_index(self, index: Any, value: Any) -> None:
        self._state.dialect.atomic("writing at an index", lambda: CopyOnRead._write_index(self, index, value))

    def _update_at(self, source: Any, index: Any, clone: bool, wanted: Any) -> None:
        self._state.dialect.atomic("update_at_", lambda: CopyOnRead._update_at(self, source, index, clone, wanted))

    def _replace(self, key: str, old: str | None, kind: str, write: Any) -> None:
        """Delete what ``key`` holds (if anything), write the new entry, record its kind."""
        state, path = self._state, (*self._path, key)
        state.layouts.clear()
        if old is not None:
            state.dialect.check_replace(path)
            state.dialect.delete(path)
            state.forget(path)
            state.entries(self._path).pop(key, None)  # (a dialect keeping the layout itself forgot it already)
        write()
        state.entries(self._path)[key] = kind

    def _del_str(self, key: str) -> None:
        self._check_writable(key)
        state = self._state
        if key not in state.entries(self._path):
            raise missing_key((*self._path, key), self._keys_str(), type(self).__name__)
        path = (*self._path, key)
        state.dialect.delete(path)
        state.forget(path)
        state.layouts.clear()
        state.entries(self._path).pop(key, None)

    def _keys_str(self) -> Any:
        return self._state.entries(self._path).keys()

    def _has_str(self, key: str) -> bool:
        return key in self._state.entries(self._path)

    @property
    def is_locked(self) -> bool:
        return self._state.locked.get(self._path, False)

    def _set_lock(self, value: bool) -> None:
        self._state.locked[self._path] = value

    def _maybe_names(self) -> tuple[Any, ...] | None:
        self.batch_size  # noqa: B018  # a node's names are read with its batch size
        return self._state.names.get(self._path)

    @property
    def names(self) -> list[str | None]:
        """Names of the batch dims (None for unnamed dims), recorded in the storage."""
        names = self._maybe_names()
        return list(names) if names is not None else [None] * self.batch_dims

    @names.setter
    def names(self, value: Any) -> None:
        state = self._state
        names = None if value is None else checked_names(value, self.batch_size)
        if names is not None and not any(n is not None for n in names):
            names = None
        if not self._in_memory_facts():
            self._check_writable("names")
            state.dialect.set_node_facts(self._path, self.batch_size, names)
        if names is None:
            state.names.pop(self._path, None)
        else:
            state.names[self._path] = names

    # ------------------------------------------------------------------ storage hooks
    def _leaf_meta(self, key: str) -> LeafMeta:
        state = self._state
        kind = state.entries(self._path).get(key)
        path = (*self._path, key)
        if kind == TENSOR:
            shape, dtype = state.tensor_meta(path)
            return LeafMeta(shape, dtype, TENSOR)
        if kind == NODE:
            return LeafMeta(state.batch_of(path), None, NODE)
        if kind == NON_TENSOR:
            return LeafMeta(state.dialect.object_shape(path, self.batch_size), None, NON_TENSOR)
        raise missing_key(path, self._keys_str(), type(self).__name__)

    def _read_rows(self, plan: RowPlan, keys: Iterable[str] | None = None) -> TensorDictBase:
        return self._rows(plan, keys)

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDictBase:
        """An in-memory TensorDict of every leaf: all rows as one slice (one read per leaf, in one ``read_many``).

        For a storage whose reads are copies and whose indexed views read on access (HDF5, zarr); otherwise the
        rows are gathered (a slice read may be a view of the storage's memory).
        """
        dialect = self._state.dialect
        if not self.batch_dims or not (dialect.copy_reads and dialect.lazy_index):
            return super().to_tensordict(retain_none=retain_none)
        n = self.batch_size[0]
        return self._read_rows(plan_rows(slice(0, n), n))

    def _read_slab(self, index: tuple[Any, ...], lead: tuple[int, ...]) -> TensorDictBase:
        """``self[index]`` read into memory for an int or a slice ``index[0]`` (checked already: an indexed view's).

        ``lead`` is what the index leaves of dim 0 (``()`` for an int, ``(n,)`` for a slice). The hot path of
        views: with the node's layout known, one ``read_slabs`` call and no row plan.
        """
        state, i = self._state, index[0]
        batch = state.batch.get(self._path)  # (self.batch_size inline)
        n = (batch if batch is not None else state.batch_of(self._path))[0]
        found = state.layouts.get(self._path)
        if found is None:
            plan = RowPlan("int", n, i) if type(i) is int else RowPlan("slice", n, i, shape=lead)
            return self._rows(plan, None)
        paths, layout = found
        reads = iter(state.dialect.read_slabs(paths, i, n))
        return self._rows_build(_Size(lead), type(i) is not int, layout, reads)

    def _rows(self, plan: RowPlan, keys: Iterable[str] | None) -> TensorDictBase:
        """The rows ``plan`` selects of ``keys`` (all by default), every tensor leaf below read in one ``read_many``."""
        state = self._state
        found = state.layouts.get(self._path) if keys is None else None
        if found is None:
            paths: list[Path] = []
            layout = self._rows_layout(plan, keys, paths)
            if keys is None and _tensors_only(layout):  # kept until an entry changes (``_replace``, ``forget``)
                state.layouts[self._path] = paths, layout
        else:
            paths, layout = found
        reads = iter(state.dialect.read_many(paths, plan))
        return self._rows_build(plan.shape, plan.kind != "int", layout, reads)

    def _rows_layout(self, plan: RowPlan, keys: Iterable[str] | None, paths: list[Path]) -> list[tuple[str, Any]]:
        """``(key, what)`` per entry: None for a tensor leaf (its path appended to ``paths``).

        ``what`` is ``(node, its layout)`` for a node, the rows of a non-tensor value.
        """
        state = self._state
        out: list[tuple[str, Any]] = []
        entries = state.entries(self._path)
        for key in entries if keys is None else keys:
            kind = entries.get(key)
            if kind == TENSOR:
                paths.append((*self._path, key))
                out.append((key, None))
            elif kind == NODE:
                node = type(self)._view(state, (*self._path, key))
                out.append((key, (node, node._rows_layout(plan, None, paths))))
            elif kind == NON_TENSOR and state.dialect.objects_in_rows:  # read by read_many with the tensors
                paths.append((*self._path, key))
                out.append((key, None))
            elif kind == NON_TENSOR:
                out.append((key, self._get_str(key)[plan.index]))
            else:
                raise missing_key((*self._path, key), self._keys_str(), type(self).__name__)
        return out

    def _rows_build(self, lead: torch.Size, named: bool, layout: list[tuple[str, Any]], reads: Any) -> TensorDictBase:
        """The in-memory TensorDict of the rows read: ``lead`` replaces dim 0 (``named``: not an int index)."""
        out = {}
        for key, what in layout:  # (a loop, not a comprehension: one call less per node on the hot path)
            if what is None:
                out[key] = next(reads)
            elif type(what) is tuple:
                out[key] = what[0]._rows_build(lead, named, what[1], reads)
            else:
                out[key] = what
        state = self._state
        batch = state.batch.get(self._path)  # (self.batch_size inline; it reads the node's names with it)
        if batch is None:
            batch = state.batch_of(self._path)
        size = lead if len(batch) == 1 else _Size((*lead, *batch[1:]))  # plan.target_shape(batch), inline
        names = state.names.get(self._path)
        if names is not None:  # as indexing in memory: dim 0's name stays when the index keeps one dim there
            names = (*((names[0],) if named and len(lead) == 1 else (None,) * len(lead)), *names[1:])
            if not any(n is not None for n in names):
                names = None
        if names is None:
            return self._dense_cls._new_unsafe(out, size, state.dialect.device)  # type: ignore[no-any-return]
        result: TensorDictBase = self._dense_cls(out, batch_size=size, device=state.dialect.device, names=names)
        return result

    def _write_rows(self, plan: RowPlan, values: Mapping[tuple[str, ...], Any]) -> None:
        state, checked, base = self._state, [], self._path
        for path, value in values.items():  # everything checked before the first write
            full = base + path if base else path
            found = state.tensor_at(full)
            if found is None:
                self._get(path)  # KeyError naming a missing path
                raise TypeError(f"cannot write rows into {path!r}: it is not a tensor leaf")
            shape, dtype = found[0], found[1]
            target = plan.target_shape(shape)
            if isinstance(value, torch.Tensor):
                if value.shape != target:
                    check_fits(path, value.shape, target)
                    value = value.expand(target)
                if value.requires_grad or not value.is_cpu:
                    value = _plain(value)
            else:
                value = torch.as_tensor(value, dtype=dtype).expand(target)
            checked.append((full, value if value.dtype == dtype else value.to(dtype)))
        dialect = state.dialect
        if not dialect.writable:
            raise dialect.refuse_write(next(iter(values), "rows"), self._path)
        dialect.write_many(plan, checked)

    def _are_tensor_leaves(self, paths: Iterable[tuple[str, ...]]) -> bool:
        base, tensor_at = self._path, self._state.tensor_at
        return all(tensor_at(base + path if base else path) is not None for path in paths)

    def _read_index(self, index: Any, materialize: bool = False) -> Any:
        """``self[index]``: a view reading its rows on access and writing through (the dialect's ``lazy_index``).

        Else (or with ``materialize``) the rows are read at once.
        """
        if materialize or not self._state.dialect.lazy_index:
            return CopyOnRead._read_index(self, index)
        return IndexedView(self, index)

    def _alloc_leaf(self, key: str, shape: Any, dtype: torch.dtype) -> None:
        state, path = self._state, (*self._path, key)
        state.dialect.check_value(path, None)
        self._check_writable(key)
        with state.dialect.transaction():  # (the old entry goes with the new one's allocation)
            self._replace(
                key,
                state.entries(self._path).get(key),
                TENSOR,
                lambda: state.dialect.alloc(path, torch.Size(shape), dtype),
            )


def _plain(value: torch.Tensor) -> torch.Tensor:
    """``value`` as a dialect takes it: a CPU tensor outside autograd (itself when it is one already)."""
    if value.requires_grad:
        value = value.detach()
    return value if value.is_cpu else value.cpu()


def _tensors_only(layout: list[tuple[str, Any]]) -> bool:
    """True when a ``_rows_layout`` holds tensor leaves and nodes only (the rows of a non-tensor are per read)."""
    return all(what is None or (type(what) is tuple and _tensors_only(what[1])) for _, what in layout)


def _reopen(
    cls: type[StoredTensorDict],
    dialect: Dialect,
    path: Path,
    batch_dims: int | None,
    infer: bool,
    given: bool,
    batch: dict[Path, torch.Size],
    names: dict[Path, Any],
    locked: dict[Path, bool],
) -> StoredTensorDict:
    state = cls._new_state(dialect, batch_dims, infer)
    state.given = given
    state.batch.update(batch)
    state.names.update(names)
    state.locked.update(locked)
    return cls._view(state, path)
