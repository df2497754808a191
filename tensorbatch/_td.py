"""TensorDict: the in-memory backend, a plain ``dict`` of leaves plus batch facts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, SupportsIndex

import torch

from . import _errors
from ._base.coerce import as_device as _as_device
from ._base.coerce import as_size as _as_size
from ._base.coerce import checked_names as _checked_names
from ._base.transfer import accelerators_of, settle
from ._compat import allow_in_weights_only_load, dynamo_compiling
from ._keys import key_tuple
from ._ops.index import MANY_ROWS
from ._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES, index_dense, is_td, leaf_shape, named_nodes, unfit_keys
from ._unbatched import is_unbatched
from .base import TensorDictBase

_Tensor = torch.Tensor
_Size = torch.Size
_NO_DIMS = torch.Size(())
_LONG = torch.int64


class TensorDict(TensorDictBase):
    """A batched, nested dictionary of tensors held in memory.

    Args:
        source: a mapping of keys to tensors, nested mappings or TensorDicts.
        batch_size: leading dims shared by every leaf (int, list or ``torch.Size``; default ``[]``).
        device: when set, every leaf is moved there; None allows leaves on mixed devices.
        names: names of the batch dims.
        non_blocking: passed to device moves.
        lock: lock the result.
        **kwargs: more entries (merged with ``source``).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"obs": torch.zeros(4, 3), "next": {"obs": torch.zeros(4, 3)}}, batch_size=[4])
        >>> td["next", "obs"].shape
        torch.Size([4, 3])
        >>> td[1:3].batch_size
        torch.Size([2])
    """

    __slots__ = ("__weakref__", "_batch_size", "_device", "_is_locked", "_names", "_tensordict")
    _named_by_copy = True  # (see TensorDictBase._named_by_copy)

    def __init__(
        self,
        source: Mapping[Any, Any] | None = None,
        batch_size: Any = None,
        device: Any = None,
        names: Sequence[str | None] | None = None,
        non_blocking: bool | None = None,
        lock: bool = False,
        **kwargs: Any,
    ) -> None:
        path_prefix: tuple[str, ...] = kwargs.pop("_path", ()) if kwargs else ()
        if source is None:
            source = kwargs
        elif kwargs:
            source = {**source, **kwargs}
        elif type(source) is not dict and not isinstance(source, Mapping) and not is_td(source):
            raise ValueError(f"TensorDict source must be a mapping, got {type(source).__name__}")
        self._batch_size = _as_size(batch_size)
        self._device = _as_device(device)
        self._is_locked = False
        self._names: tuple[str | None, ...] | None = None
        if names is not None:  # before the entries: their non-tensor leaves are named as they are set
            checked = _checked_names(names, self._batch_size)
            self._names = checked if any(n is not None for n in checked) else None
        if type(source) is not dict:
            source = dict(source._items_str() if is_td(source) else source.items())  # type: ignore[union-attr]
        todo = unfit_keys(source, self._batch_size, self._device)
        if todo is not None and not todo:  # every entry fits as it is: the common call, no further call
            self._tensordict = dict(source)
        elif non_blocking is None and self._device is not None and not dynamo_compiling():
            # copies non-blocking, then one wait where the host reads them (as to()); (a wait breaks a graph)
            self._fill(source, todo, path_prefix, True)
            if self._device.type in ("cpu", "meta"):
                settle(_accelerators_in(source.values()))
        else:
            self._fill(source, todo, path_prefix, bool(non_blocking))
        if self._names is not None:
            self._name_nodes(self._names, fresh=True)
        if lock:
            self.lock_()

    def _fill(
        self, source: dict[Any, Any], todo: list[Any] | None, path_prefix: tuple[str, ...], non_blocking: bool
    ) -> None:
        """Store ``source``'s entries, validating ``todo`` (``unfit_keys``'s list; None: nested keys)."""
        bs, dev = self._batch_size, self._device
        if todo is not None:  # string keys: store the source, then fix what does not fit as it is
            self._tensordict = data = dict(source)
            for key in todo:
                value = data[key]
                if type(value) is dict:  # a nested plain dict: a node with this batch size and device
                    node = object.__new__(TensorDict)  # (both already normalised: no constructor call)
                    node._batch_size, node._device, node._is_locked, node._names = bs, dev, False, self._names
                    node._fill(value, unfit_keys(value, bs, dev), (*path_prefix, key), non_blocking)
                    data[key] = node
                else:
                    data[key] = self._validate(value, (*path_prefix, key), self, non_blocking)
        else:  # nested keys create their levels in order
            self._tensordict = {}
            for key, value in source.items():
                path = (key,) if type(key) is str else key_tuple(key)
                node = self._walk_to(path, create=True)  # type: ignore[assignment]  # dense nodes
                node._tensordict[path[-1]] = node._validate(value, (*path_prefix, *path), node, non_blocking)

    @classmethod
    def _new_unsafe(
        cls, source: dict[str, Any], batch_size: torch.Size, device: Any = None, names: Any = None, lock: bool = False
    ) -> TensorDict:
        """Build without any validation (internal results whose leaves are known to fit)."""
        self = object.__new__(cls)
        self._tensordict = source
        self._batch_size = batch_size
        self._device = device
        self._names = names
        self._is_locked = lock
        return self

    def _new_node(self, source: dict[str, Any]) -> TensorDictBase:
        """:meth:`TensorDictBase._new_node` without the generic property reads.

        ``_new_unsafe``'s body: one call less on the path of every op that returns a TensorDict.
        """
        node = object.__new__(TensorDict)
        node._tensordict = source
        node._batch_size = self._batch_size
        node._device = self._device
        node._names = self._names
        node._is_locked = False
        return node

    @classmethod
    def _from_state(cls, source: dict[str, Any], batch_size: Any, device: Any, names: Any, locked: bool) -> TensorDict:
        out = cls(source, batch_size=batch_size, device=device)
        if names is not None:  # (the leaves and nodes kept their own names: set as they are)
            checked = _checked_names(names, out._batch_size)
            out._names = checked if any(n is not None for n in checked) else None
        return out.lock_() if locked else out  # type: ignore[return-value]  # lock_ returns self

    # ------------------------------------------------------------------ primitives
    @property
    def batch_size(self) -> torch.Size:
        """The leading dimensions shared by every leaf."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._change_batch_size(_as_size(value))

    def _change_batch_size(self, new_size: torch.Size) -> None:
        n = len(new_size)
        # the in-memory nodes that a longer batch size extends (a nested one is shorter than n only
        # when every node above it is); other short collections follow through their own setter
        grown = [
            (path, node)
            for path, node in named_nodes(self)
            if node is self or (type(node) is TensorDict and len(node._batch_size) < n)
        ]
        followers = []
        unbatched = []  # (node, key, leaf): re-stamped with the new batch size
        for path, node in grown:  # the whole tree first: nothing changes on failure
            for key, value in node._items_str():
                if type(value) is not torch.Tensor and is_unbatched(value):  # any shape fits
                    unbatched.append((node, key, value))
                    continue
                try:
                    shape = value.batch_size if is_td(value) else value.shape
                except RuntimeError:  # a strided nested tensor has no .shape
                    shape = leaf_shape(value)
                if shape[:n] == new_size:
                    continue
                if is_td(value) and len(shape) < n and tuple(new_size[: len(shape)]) == tuple(shape):
                    if type(value) in NON_TENSOR_TYPES and not value._uniform():  # per-element values
                        raise _errors.batch_size_refused(new_size, (*path, key), shape, type(value).__name__)
                    if type(value) is not TensorDict:
                        followers.append(value)
                    continue
                raise _errors.batch_size_refused(new_size, (*path, key), shape, type(value).__name__)
        for value in followers:  # another backend, a wrapper or a non-tensor leaf: through its public setter
            value.batch_size = new_size
        for node, key, value in unbatched:
            node._tensordict[key] = value._with_batch_size(new_size)
        for _, node in grown:
            if node._names is not None and len(node._names) != n:
                node._names = None
            node._batch_size = new_size

    @property
    def device(self) -> torch.device | None:
        """The device of every leaf, or None."""
        return self._device

    @device.setter
    def device(self, value: Any) -> None:
        raise RuntimeError("device cannot be set directly: use td.to(device) or td.clear_device_()")

    def _adopt_device(self, device: torch.device | None) -> None:
        self._device = device

    def _maybe_names(self) -> tuple[Any, ...] | None:
        return self._names

    @property
    def names(self) -> list[str | None]:
        """Names of the batch dims (None for unnamed dims)."""
        names = self._names
        return list(names) if names is not None else [None] * len(self._batch_size)

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        value = (None,) * len(self._batch_size) if value is None else _checked_names(value, self._batch_size)
        self._names = value if any(n is not None for n in value) else None
        self._name_nodes(value, fresh=False)

    def _name_nodes(self, value: tuple[str | None, ...], fresh: bool) -> None:
        """Nested nodes and non-tensor leaves take the names ``value`` for the root's dims.

        ``fresh`` (the constructor): this node's non-tensor leaves, and those of the nodes it built, were
        named as they were set (a stack made of a list is left unnamed, as tensordict's): only nodes given
        named otherwise are renamed, with their non-tensor leaves.
        """
        n = len(value)
        for _, node in named_nodes(self):  # nested nodes take these names for the root's dims
            if node is not self:
                names = (*value, *node.names[n:])
                if type(node) is TensorDict:
                    names = _checked_names(names, node._batch_size)
                    new = names if any(x is not None for x in names) else None
                    if fresh and node._names == new:
                        continue
                    node._names = new
                else:  # another backend or a wrapper: through its own setter
                    node.names = names
            elif fresh:
                continue
            if type(node) is TensorDict:
                _name_non_tensor(node, value)

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        if default is NO_DEFAULT:
            try:
                return self._tensordict[key]
            except KeyError:
                raise _errors.missing_key((key,), self._tensordict) from None
        return self._tensordict.get(key, default)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        if not validated:
            value = self._validate(value, (key,))
        if inplace:
            current = self._tensordict.get(key)
            if current is not None:
                if type(current) in NON_TENSOR_TYPES:  # a non-tensor leaf takes the new value(s)
                    self._tensordict[key] = value
                elif is_td(current):
                    current.update_(value)
                elif current is not value:
                    current.copy_(value)
                return
        self._tensordict[key] = value

    def _set_tensor_str(self, key: str, value: torch.Tensor) -> None:
        """``set(key, value)`` for a str key and a plain tensor (checked by the caller): straight in when it fits."""
        bs = self._batch_size
        if (
            not self._is_locked
            and value.shape[: len(bs)] == bs
            and (self._device is None or value.device == self._device)
        ):
            self._tensordict[key] = value
        else:
            self.set(key, value)

    def _del_str(self, key: str) -> None:
        del self._tensordict[key]

    def _keys_str(self) -> Any:
        return self._tensordict.keys()

    def _has_str(self, key: str) -> bool:
        return key in self._tensordict

    def _items_str(self) -> Any:
        return self._tensordict.items()

    _meta_items = _items_str  # leaves in memory carry their metadata (the hook's default, one call less)

    def _values_str(self) -> Any:
        return self._tensordict.values()

    @property
    def is_locked(self) -> bool:
        """True when keys cannot be added or removed; assigning True or False locks or unlocks (``lock_()``)."""
        return self._is_locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        self.lock_() if value else self.unlock_()

    def _set_lock(self, value: bool) -> None:
        self._is_locked = value

    # ------------------------------------------------------------------ fast paths
    # These skip the generic machinery for the most common calls (str keys, tensor values);
    # anything unusual falls through to TensorDictBase, which owns the semantics.
    def __getitem__(self, index: Any) -> Any:
        if type(index) is str:
            try:
                out = self._tensordict[index]
            except KeyError:
                raise _errors.missing_key((index,), self._tensordict) from None
            return out if type(out) is _Tensor or type(out) not in NON_TENSOR_TYPES else out._value()
        if type(index) is tuple and index and type(index[0]) is str:
            node: Any = self
            try:
                for key in index:
                    node = node._tensordict[key]
                return node if type(node) is _Tensor or type(node) not in NON_TENSOR_TYPES else node._value()
            except (KeyError, AttributeError, TypeError):
                pass
        elif type(index) is int or type(index) is slice or type(index) is _Tensor:
            out = self._index_flat(index)
            if out is not None:
                return out
        return TensorDictBase.__getitem__(self, index)

    def _index_flat(self, index: Any) -> TensorDict | None:
        """``td[index]`` for the common case, or None: an int, a forward slice or a short long tensor.

        Only TensorDicts of tensors (and nested TensorDicts of tensors) without dim names are handled
        (what the generic indexing builds for them, without its walk); anything else, errors included, is
        left to the generic ``td[index]``.
        """
        if self._names is not None:
            return None
        bs = self._batch_size
        if not bs:
            return None
        kind = type(index)
        if kind is slice:
            step = index.step
            if step is None and index.start is None and index.stop is None:  # td[:] is td (as tensordict)
                return self
            size = bs[0]
            if (step is not None and step <= 0) or type(size) is not int or dynamo_compiling():  # see normalize
                return None
            size = len(range(*index.indices(size)))
            new_bs = _Size((size,)) if len(bs) == 1 else _Size((size, *bs[1:]))
        elif kind is int:
            if not -bs[0] <= index < bs[0]:
                return None
            new_bs = _NO_DIMS if len(bs) == 1 else bs[1:]
        elif kind is _Tensor and index.dtype is _LONG and index.ndim == 1 and index.shape[0] < MANY_ROWS:
            new_bs = _Size((index.shape[0], *bs[1:]))  # (many rows take the generic index_select path)
        else:
            return None
        try:
            return index_dense(self, index, new_bs)  # type: ignore[no-any-return]  # a TensorDict
        except (IndexError, RuntimeError):  # an index out of range, on another device...: the generic path says it
            return None

    def __setitem__(self, index: Any, value: Any) -> None:
        node: Any = self
        path = index
        if type(index) is tuple and index and type(index[0]) is str:
            for key in index[:-1]:
                node = node._tensordict.get(key) if type(key) is str else None
                if type(node) is not TensorDict:
                    return TensorDictBase.__setitem__(self, index, value)
            index = index[-1]
        if type(index) is str and not node._is_locked:
            bs = node._batch_size
            try:
                if (
                    type(value) is _Tensor
                    and (shape[0] == bs[0] if len(bs) == 1 and (shape := value.shape) else value.shape[: len(bs)] == bs)
                    and (node._device is None or value.device == node._device)
                ):
                    node._tensordict[index] = value
                    return None
            except RuntimeError:  # a strided nested tensor has no shape: _validate reads its sizes
                pass
            node._tensordict[index] = node._validate(value, path if type(path) is tuple else (index,))
            return None
        return TensorDictBase.__setitem__(self, index, value)

    def update(self, input_dict_or_td: Any = None, clone: bool = False, inplace: bool = False, **kwargs: Any) -> Any:
        """:meth:`TensorDictBase.update`, with a fast path for a flat mapping of fitting tensors."""
        if clone or inplace or kwargs or self._is_locked or input_dict_or_td is None:
            return TensorDictBase.update(self, input_dict_or_td, clone, inplace, **kwargs)
        source = input_dict_or_td._tensordict if type(input_dict_or_td) is TensorDict else input_dict_or_td
        bs, n, device = self._batch_size, len(self._batch_size), self._device
        one = n == 1
        b0 = bs[0] if one else -1
        try:
            items = source.items()
        except AttributeError:  # not a mapping: the general path refuses it, naming the type
            return TensorDictBase.update(self, input_dict_or_td)
        try:
            for key, value in items:  # all plain tensors at this level? else the general path
                if (
                    type(key) is not str
                    or type(value) is not _Tensor
                    or not (shape[0] == b0 if one and (shape := value.shape) else value.shape[:n] == bs)
                    or (device is not None and value.device != device)
                ):
                    return TensorDictBase.update(self, input_dict_or_td)
        except RuntimeError:  # a strided nested tensor has no .shape: the general path
            return TensorDictBase.update(self, input_dict_or_td)
        self._tensordict.update(source)
        return self

    def __getstate__(self) -> dict[str, Any]:
        return {
            "tensordict": self._tensordict,
            "batch_size": self._batch_size,
            "device": self._device,
            "names": self._names,
            "locked": self._is_locked,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._tensordict = state["tensordict"]
        self._batch_size = state["batch_size"]
        self._device = state["device"]
        self._names = state["names"]
        self._is_locked = state["locked"]

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        consolidated = self._reduce_consolidated()  # one buffer instead of one tensor per leaf
        if consolidated is not None:
            return consolidated
        return (_rebuild, (type(self), self._tensordict, self._batch_size, self._device, self._names, self._is_locked))


def _name_non_tensor(node: TensorDict, names: tuple[str | None, ...]) -> None:
    """Give the non-tensor leaves of ``node`` the names ``names`` for its first dims, as tensordict."""
    n = len(names)
    for value in node._tensordict.values():
        if type(value) in NON_TENSOR_TYPES:
            value.names = (*names, *value.names[n:])


def _rebuild(cls: Any, source: Any, batch_size: Any, device: Any, names: Any, locked: Any) -> TensorDict:
    """Unpickle a TensorDict (what its ``__reduce_ex__`` names, allowed in ``torch.load(weights_only=True)``).

    The arguments may be crafted: ``cls`` must be TensorDict or a subclass (a user's subclass is named in the
    pickle, so a weights-only load needs it allowlisted by ``torch.serialization.add_safe_globals``), and the
    leaves go through the checking constructor.

    Raises:
        TypeError: for a ``cls`` that is no TensorDict class, a ``source`` that is no dict or ``locked`` no bool.
    """
    if not (isinstance(cls, type) and issubclass(cls, TensorDict)):
        raise TypeError(f"unpickling a TensorDict: expected a TensorDict class, got {cls!r}")
    if type(source) is not dict or type(locked) is not bool:
        raise TypeError(
            f"unpickling a TensorDict: malformed state (a {type(source).__name__} of leaves, locked={locked!r})"
        )
    return cls._from_state(source, batch_size, device, names, locked)


def _accelerators_in(values: Any) -> set[torch.device]:
    """The accelerators holding the tensors among ``values`` (plain dicts and TensorDicts searched)."""
    found: set[torch.device] = set()
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.device.type not in ("cpu", "meta"):
                found.add(value.device)
        elif type(value) is dict:
            found |= _accelerators_in(value.values())
        elif is_td(value):
            found.update(accelerators_of(value))
    return found


TensorDictBase._dense_cls = TensorDict
allow_in_weights_only_load(TensorDict, _rebuild)
