"""TensorDictBase: the backend primitives and the generic API written once on top of them.

A backend implements the primitives (``batch_size``, ``device``, ``_get_str``, ``_set_str``,
``_del_str``, ``_keys_str``/``_items_str``/``_values_str``, ``_change_batch_size``, lock state)
and inherits everything else. Shape, index, reduction, pointwise and torch-function support live
in :mod:`tensorbatch._ops` and are attached here; this module imports no backend.
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from . import _errors
from ._keys import NestedKey, is_key, key_of, unravel_key_to_tuple
from ._ops import index as _index
from ._ops import pointwise as _pointwise
from ._ops import reduce as _reduce
from ._ops import shape as _shape
from ._ops import torch_function as _torch_function
from ._ops.traverse import (
    COLLECTION_TYPES,
    MISSING,
    NO_DEFAULT,
    NON_TENSOR_TYPES,
    apply_leaves,
    flat_leaves,
    is_td,
    map_leaves,
    named_leaves,
    source_items,
)

_Tensor = torch.Tensor
_Size = torch.Size


_FOREACH_CLONE = getattr(torch, "_foreach_clone", None)


def _as_size(batch_size: Any) -> torch.Size:
    if type(batch_size) is _Size:
        return batch_size
    if batch_size is None:
        return _Size(())
    if isinstance(batch_size, int):
        return _Size((batch_size,))
    try:
        return _Size(batch_size)
    except TypeError:
        raise ValueError(f"batch_size must be an int or a sequence of ints, got {batch_size!r}") from None


def _checked_names(value: Any, batch_size: torch.Size) -> tuple[str | None, ...]:
    """``value`` as a tuple of dim names, one per batch dim and unique (ValueError otherwise)."""
    names = tuple(value)
    if len(names) != len(batch_size):
        raise ValueError(f"names {list(names)} must have one entry per batch dim (batch_size {list(batch_size)})")
    named = [n for n in names if n is not None]
    if len(set(named)) != len(named):
        raise ValueError(f"names must be unique, got {list(names)}")
    return names


def _as_device(device: Any) -> torch.device | None:
    if device is None or type(device) is torch.device:
        return device
    return torch.device(device)


class TensorDictBase(abc.ABC):
    """Abstract base of every TensorDict type: a batched mapping from keys to tensors.

    Subclasses implement a handful of primitives; everything else is generic.
    """

    __slots__ = ()
    _is_tensor_collection: ClassVar[bool] = True
    # The in-memory class used for results of generic ops; set by ``_td.py`` (no import here).
    _dense_cls: ClassVar[Any] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        COLLECTION_TYPES.add(cls)

    # ------------------------------------------------------------------ primitives
    @property
    @abc.abstractmethod
    def batch_size(self) -> torch.Size:
        """The leading dimensions shared by every leaf."""

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._change_batch_size(_as_size(value))

    @abc.abstractmethod
    def _change_batch_size(self, new_size: torch.Size) -> None:
        """Validate and set a new batch size."""

    @property
    @abc.abstractmethod
    def device(self) -> torch.device | None:
        """The device of every leaf, or None when leaves may live on different devices."""

    @abc.abstractmethod
    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        """Value stored under ``key`` at this level; ``default`` (or KeyError) when missing."""

    @abc.abstractmethod
    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        """Store ``value`` under ``key`` at this level (``inplace``: copy into the existing leaf)."""

    @abc.abstractmethod
    def _del_str(self, key: str) -> None:
        """Remove ``key`` from this level."""

    @abc.abstractmethod
    def _keys_str(self) -> Any:
        """The keys of this level (a sized, iterable view)."""

    def _items_str(self) -> Any:
        return ((k, self._get_str(k)) for k in self._keys_str())

    def _values_str(self) -> Any:
        return (self._get_str(k) for k in self._keys_str())

    @property
    @abc.abstractmethod
    def is_locked(self) -> bool:
        """True when keys cannot be added or removed."""

    @abc.abstractmethod
    def _set_lock(self, value: bool) -> None:
        """Set this node's own lock flag."""

    def _maybe_names(self) -> tuple[Any, ...] | None:
        return None

    # ------------------------------------------------------------------ shape facts
    @property
    def shape(self) -> torch.Size:
        """Alias of :attr:`batch_size`."""
        return self.batch_size

    @property
    def batch_dims(self) -> int:
        """Number of batch dimensions."""
        return len(self.batch_size)

    @property
    def ndim(self) -> int:
        """Number of batch dimensions."""
        return len(self.batch_size)

    def ndimension(self) -> int:
        """Number of batch dimensions."""
        return len(self.batch_size)

    def dim(self) -> int:
        """Number of batch dimensions."""
        return len(self.batch_size)

    def size(self, dim: int | None = None) -> torch.Size | int:
        """The batch size, or one of its dims.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> TensorDict({"a": torch.zeros(3, 4)}, batch_size=[3, 4]).size(1)
            4
        """
        return self.batch_size if dim is None else self.batch_size[dim]

    def numel(self) -> int:
        """Number of elements in the batch (product of the batch size)."""
        return self.batch_size.numel()

    @property
    def names(self) -> list[str | None]:
        """Names of the batch dims (None for unnamed dims)."""
        names = self._maybe_names()
        return list(names) if names is not None else [None] * self.batch_dims

    @names.setter
    def names(self, value: Any) -> None:
        raise RuntimeError(f"{type(self).__name__} cannot name its batch dims")

    @property
    def depth(self) -> int:
        """Number of nesting levels below this one (0 when no value is a TensorDict)."""
        return max((len(p) - 1 for p, _ in named_leaves(self)), default=0)

    @property
    def sorted_keys(self) -> list[str]:
        """The keys of this level, sorted."""
        return sorted(self._keys_str())

    @property
    def dtype(self) -> torch.dtype | None:
        """The common dtype of all leaves, or None when they differ."""
        dtypes = {leaf.dtype for leaf in flat_leaves(self) if isinstance(leaf, _Tensor)}
        return dtypes.pop() if len(dtypes) == 1 else None

    def __len__(self) -> int:
        """Size of the first batch dim (0 for an empty batch size), as in tensordict."""
        return self.batch_size[0] if self.batch_dims else 0

    def __iter__(self) -> Iterator[TensorDictBase]:
        """Iterate over the first batch dim."""
        if not self.batch_dims:
            raise TypeError(
                "iteration over a 0-d TensorDict: use keys(), values() or items() to iterate over its entries"
            )
        for i in range(self.batch_size[0]):
            yield self[i]

    def __bool__(self) -> bool:
        raise RuntimeError(
            "Converting a tensordict to boolean value is not permitted. Use len(td.keys()) to test for "
            "keys, td.is_empty() to test for leaves, or (a == b).all() / .any() to reduce a comparison."
        )

    # ------------------------------------------------------------------ get / set
    def _walk_to(self, path: tuple[str, ...], create: bool = False) -> TensorDictBase:
        """The node holding ``path[-1]``; missing levels are created when ``create``."""
        node: TensorDictBase = self
        for i, key in enumerate(path[:-1]):
            sub = node._get_str(key, MISSING)
            if sub is MISSING:
                if not create:
                    raise _errors.missing_key(path[: i + 1], node._keys_str())
                if node.is_locked:
                    raise _errors.locked()
                sub = node._new_node({})
                node._set_str(key, sub, inplace=False, validated=True)
                sub = node._get_str(key)  # a backend may store a different object (a lazy stack splits it)
            elif not is_td(sub):  # tensordict raises KeyError when writing, ValueError when reading
                raise KeyError(str(_errors.key_through_leaf(path, i + 1, sub)))
            node = sub
        return node

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """Value at ``key`` (nested keys allowed), or ``default`` (None) when missing.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": {"b": torch.zeros(2)}}, batch_size=[2])
            >>> td.get(("a", "b")).shape
            torch.Size([2])
            >>> td.get("missing") is None
            True
        """
        return self._get(key, default)

    def _get(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """Lookup that raises KeyError (naming the full path) unless ``default`` is given."""
        if type(key) is str:
            out = self._get_str(key, MISSING)
            if out is MISSING:
                if default is NO_DEFAULT:
                    raise _errors.missing_key((key,), self._keys_str())
                return default
            return out
        path = unravel_key_to_tuple(key)
        node: Any = self
        for i, k in enumerate(path):
            if not is_td(node):  # a wrong key shape, not a missing key: raise even with a default
                raise _errors.key_through_leaf(path, i, node)
            nxt = node._get_str(k, MISSING)
            if nxt is MISSING:
                if default is NO_DEFAULT:
                    raise _errors.missing_key(path[: i + 1], node._keys_str())
                return default
            node = nxt
        return node

    def __getitem__(self, index: Any) -> Any:
        """``td[key]`` (a non-tensor leaf gives its value) or ``td[batch_index]``."""
        if type(index) is str:
            out = self._get_str(index, MISSING)
            if type(out) is _Tensor:
                return out
            if out is MISSING:
                raise _errors.missing_key((index,), self._keys_str())
            return _nontensor.value_of(out)
        if is_key(index):
            return _nontensor.value_of(self._get(index))
        return _index.getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        if is_key(index):
            self.set(index, value)
        else:
            _index.setitem(self, index, value)

    def __delitem__(self, key: NestedKey) -> None:
        self.del_(key)

    def _has_str(self, key: str) -> bool:
        """True when this level holds ``key`` (a backend may answer without reading the value)."""
        return self._get_str(key, MISSING) is not MISSING

    def __contains__(self, key: Any) -> bool:
        if type(key) is str:
            return self._has_str(key)
        if isinstance(key, tuple):
            path = unravel_key_to_tuple(key)
            node = self._parent_of(path) if len(path) > 1 else self
            return node is not None and node._has_str(path[-1])
        raise RuntimeError("key must be a NestedKey (a str or a possibly tuple of str).")

    def set(self, key: NestedKey, item: Any, inplace: bool = False, *, non_blocking: bool = False,
            **kwargs: Any) -> TensorDictBase:
        """Store ``item`` under ``key``, creating missing nested levels.

        Args:
            key: a string or a tuple of strings.
            item: a tensor, a TensorDict, a (nested) dict, an array or a number.
            inplace: when the key exists, copy into the existing tensor instead of replacing it.
            non_blocking: passed to device moves.
            **kwargs: accepted for tensordict compatibility and ignored.

        Returns:
            self.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict(batch_size=[2])
            >>> td.set(("a", "b"), torch.ones(2, 3))["a", "b"].shape
            torch.Size([2, 3])
        """
        path = (key,) if type(key) is str else unravel_key_to_tuple(key)
        node = self._parent_of(path) if len(path) > 1 else self
        if node is None:  # missing levels: validate against the deepest existing one, then create
            deepest = self._deepest(path)
            if deepest.is_locked:
                raise _errors.locked()
            item = deepest._validate(item, path, deepest, non_blocking)
            node = self._walk_to(path, create=True)
            node._set_str(path[-1], item, inplace=False, validated=True)
            return self
        name = path[-1]
        exists = node._has_str(name)
        if node.is_locked and not (inplace and exists):
            raise _errors.locked()
        node._set_str(name, node._validate(item, path, node, non_blocking), inplace=inplace and exists,
                      validated=True)
        return self

    def _deepest(self, path: tuple[str, ...]) -> TensorDictBase:
        """The deepest existing node along ``path[:-1]`` (KeyError when the path runs through a leaf)."""
        node: TensorDictBase = self
        for i, key in enumerate(path[:-1]):
            sub = node._get_str(key, MISSING)
            if sub is MISSING:
                return node
            if not is_td(sub):
                raise KeyError(str(_errors.key_through_leaf(path, i + 1, sub)))
            node = sub
        return node

    def set_(self, key: NestedKey, item: Any) -> TensorDictBase:
        """Copy ``item`` into the existing leaf at ``key`` (allowed on locked TensorDicts).

        Raises:
            KeyError: if ``key`` is not present.
        """
        path = unravel_key_to_tuple(key)
        node = self._walk_to(path)
        current = node._get_str(path[-1], MISSING)
        if current is MISSING:
            raise _errors.missing_key(path, node._keys_str())
        value = node._validate(item, path, node)
        _check_inplace_shape(path, value, current)
        node._set_str(path[-1], value, inplace=True, validated=True)
        return self

    def _validate(self, value: Any, path: tuple[str, ...], node: Any = None, non_blocking: bool = False) -> Any:
        """Turn ``value`` into a leaf that fits ``node``'s batch size and device."""
        node = self if node is None else node
        bs = node.batch_size
        if isinstance(value, _Tensor):
            if value.shape[: len(bs)] != bs:
                raise _errors.batch_mismatch(bs, path, value.shape)
            device = node.device
            if device is not None and value.device != device:
                value = value.to(device, non_blocking=non_blocking)
            return value
        if is_td(value):
            vbs = value.batch_size
            if vbs[: len(bs)] != bs:
                if len(vbs) < len(bs):
                    value = value.clone(False)
                    value.batch_size = bs
                else:
                    raise _errors.batch_mismatch(bs, path, vbs)
            device = node.device
            if device is not None and value.device != device:
                value = value.to(device, non_blocking=non_blocking)
            return value
        if isinstance(value, Mapping):
            return self._dense_cls(value, batch_size=bs, device=node.device, names=node._maybe_names(),
                                   _path=path)
        if isinstance(value, (int, float, bool, complex, np.ndarray, np.generic, tuple)):
            return node._validate(torch.as_tensor(value, device=node.device), path, node)
        if isinstance(value, list):
            try:
                tensor = torch.as_tensor(value, device=node.device)
            except (TypeError, ValueError, RuntimeError):  # strings, ragged lists: one value per element
                if not bs or len(value) != bs[0]:
                    raise _errors.batch_mismatch(bs, path, torch.Size([len(value)])) from None
                try:
                    stack = _nontensor.NonTensorStack.from_list(value, depth=len(bs))
                except RuntimeError:
                    raise _errors.batch_mismatch(bs, path, torch.Size([len(value)])) from None
                return node._validate(stack, path, node)
            return node._validate(tensor, path, node)
        return _nontensor.wrap(value, bs, node.device)

    def del_(self, key: NestedKey) -> TensorDictBase:
        """Delete ``key``; returns self."""
        path = unravel_key_to_tuple(key)
        node = self._walk_to(path)
        if node.is_locked:
            raise _errors.locked()
        if not node._has_str(path[-1]):
            raise _errors.missing_key(path, node._keys_str())
        node._del_str(path[-1])
        return self

    def pop(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """Remove ``key`` and return its value (``default`` when given and missing)."""
        out = self._get(key, MISSING)
        if out is MISSING:
            if default is NO_DEFAULT:
                raise _errors.missing_key(unravel_key_to_tuple(key), self._keys_str())
            return default
        self.del_(key)
        return out

    def popitem(self) -> tuple[str, Any]:
        """Remove and return the last inserted ``(key, value)`` of this level."""
        keys = list(self._keys_str())
        if not keys:
            raise KeyError("popitem(): tensordict is empty")
        key = keys[-1]
        return key, self.pop(key)

    def setdefault(self, key: NestedKey, default: Any, inplace: bool = False) -> Any:
        """Return the value at ``key``, setting it to ``default`` first when missing."""
        out = self._get(key, MISSING)
        if out is MISSING:
            self.set(key, default, inplace=inplace)
            out = self._get(key)
        return out

    def clear(self) -> TensorDictBase:
        """Remove every key."""
        if self.is_locked:
            raise _errors.locked()
        for key in list(self._keys_str()):
            self._del_str(key)
        return self

    def update(self, input_dict_or_td: Any, clone: bool = False, inplace: bool = False, *,
               non_blocking: bool = False, keys_to_update: Sequence[NestedKey] | None = None,
               is_leaf: Callable[[type], bool] | None = None, update_batch_size: bool = False,
               ignore_lock: bool = False) -> TensorDictBase:
        """Write every entry of a mapping or TensorDict into this one (nested entries merge).

        All values are validated before anything is written, so a bad entry leaves ``self`` unchanged.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.zeros(2)}, batch_size=[2])
            >>> td.update({"b": torch.ones(2)}).sorted_keys
            ['a', 'b']
        """
        if update_batch_size and is_td(input_dict_or_td):
            self.batch_size = input_dict_or_td.batch_size
        wanted = None if keys_to_update is None else {unravel_key_to_tuple(k) for k in keys_to_update}
        plan: list[tuple[tuple[str, ...], Any]] = []
        self._plan_update(input_dict_or_td, (), wanted, clone, plan, is_leaf)
        checked = []
        for path, value in plan:  # validate everything first: no half-applied update
            node = self._parent_of(path)
            if node is None:  # missing levels: set() creates them with this root's batch facts
                if self.is_locked:
                    raise _errors.locked()
                checked.append((None, path, self._validate(value, path, self), False))
                continue
            exists = node._has_str(path[-1])
            if node.is_locked and not (inplace and exists) and not ignore_lock:
                raise _errors.locked()
            checked.append((node, path, node._validate(value, path, node, non_blocking), exists))
        for node, path, value, exists in checked:
            if node is None:
                self.set(path, value, non_blocking=non_blocking)
            else:
                node._set_str(path[-1], value, inplace=inplace and exists, validated=True)
        return self

    def _parent_of(self, path: tuple[str, ...]) -> Any:
        """The existing node that holds ``path[-1]``, or None when a level is missing."""
        node: Any = self
        for key in path[:-1]:
            node = node._get_str(key, MISSING)
            if node is MISSING or not is_td(node):
                return None
        return node

    def _plan_update(self, source: Any, prefix: tuple[str, ...], wanted: Any, clone: bool,
                     plan: list[Any], is_leaf: Any) -> None:
        for key, value in source_items(source, "update"):
            path = (*prefix, *unravel_key_to_tuple(key))
            nested = is_td(value) or isinstance(value, Mapping)
            if nested and (is_leaf is None or not is_leaf(type(value))):
                target = self.get(path, None)
                if target is not None and is_td(target):
                    self._plan_update(value, path, wanted, clone, plan, is_leaf)
                    continue
            if wanted is not None and not any(path[: len(w)] == w for w in wanted):
                continue
            if clone and (isinstance(value, _Tensor) or is_td(value)):
                value = value.clone()
            plan.append((path, value))

    def update_(self, input_dict_or_td: Any, clone: bool = False, *, non_blocking: bool = False,
                keys_to_update: Sequence[NestedKey] | None = None) -> TensorDictBase:
        """Copy every entry into the existing leaves; every key must already exist."""
        wanted = None if keys_to_update is None else {unravel_key_to_tuple(k) for k in keys_to_update}
        pairs = []
        for path, value in _leaf_items(input_dict_or_td, ()):
            if wanted is not None and not any(path[: len(w)] == w for w in wanted):
                continue
            node = self._walk_to(path)
            current = node._get_str(path[-1], MISSING)
            if current is MISSING:
                raise _errors.missing_key(path, node._keys_str())
            value = node._validate(value, path, node, non_blocking)
            _check_inplace_shape(path, value, current)
            pairs.append((node, path, value))
        for node, path, value in pairs:
            node._set_str(path[-1], value.clone() if clone else value, inplace=True, validated=True)
        return self

    # ------------------------------------------------------------------ keys
    def keys(self, include_nested: bool = False, leaves_only: bool = False,
             is_leaf: Callable[[type], bool] | None = None, *, sort: bool = False) -> Any:
        """Keys of this TensorDict.

        Args:
            include_nested: also yield nested keys as tuples.
            leaves_only: skip keys whose value is a TensorDict.
            is_leaf: predicate on a value's type deciding what counts as a leaf.
            sort: sort the keys (tuples sorted by their joined form).

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.zeros(1), "n": {"b": torch.zeros(1)}}, batch_size=[1])
            >>> list(td.keys(include_nested=True, leaves_only=True))
            ['a', ('n', 'b')]
        """
        if not include_nested and not leaves_only and not sort:
            return self._keys_str()
        out: list[NestedKey] = []
        _collect_keys(self, (), include_nested, leaves_only, is_leaf, out)
        if sort:
            out.sort(key=lambda k: k if type(k) is str else ".".join(k))
        return out

    def _nested_items(self, include_nested: bool, leaves_only: bool, is_leaf: Any,
                      prefix: tuple[str, ...] = (), pre_order: bool = False) -> Iterator[tuple[tuple[str, ...], Any]]:
        # keys() lists a node after its children, items() before them (as tensordict does)
        for key, value in self._items_str():
            path = (*prefix, key)
            is_node = is_td(value) and (is_leaf is None or not is_leaf(type(value)))
            if pre_order and not (is_node and leaves_only):
                yield path, value
            if is_node and include_nested:
                yield from value._nested_items(include_nested, leaves_only, is_leaf, path, pre_order)
            if not pre_order and not (is_node and leaves_only):
                yield path, value

    def items(self, include_nested: bool = False, leaves_only: bool = False,
              is_leaf: Callable[[type], bool] | None = None, *, sort: bool = False) -> Iterator[Any]:
        """``(key, value)`` pairs; arguments as in :meth:`keys`."""
        if not include_nested and not leaves_only and not sort:
            yield from self._items_str()
            return
        if sort:
            for key in self.keys(include_nested, leaves_only, is_leaf, sort=sort):
                yield key, self._get(key)
            return
        for path, value in self._nested_items(include_nested, leaves_only, is_leaf, pre_order=True):
            yield key_of(path), value

    def values(self, include_nested: bool = False, leaves_only: bool = False,
               is_leaf: Callable[[type], bool] | None = None, *, sort: bool = False) -> Iterator[Any]:
        """Values; arguments as in :meth:`keys`."""
        for _, value in self.items(include_nested, leaves_only, is_leaf, sort=sort):
            yield value

    def entry_class(self, key: NestedKey) -> type:
        """Type of the value at ``key``."""
        return type(self._get(key))

    def get_item_shape(self, key: NestedKey) -> torch.Size:
        """Full shape of the leaf (or batch size of the nested TensorDict) at ``key``."""
        value = self._get(key)
        shape: torch.Size = value.batch_size if is_td(value) else value.shape
        return shape

    def is_empty(self) -> bool:
        """True when the tree holds no leaf (nested empty TensorDicts don't count)."""
        return not any(True for _ in named_leaves(self))

    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> TensorDictBase:
        """A TensorDict with only the given keys (sharing the leaves), in the order given.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.zeros(1), "b": torch.zeros(1)}, batch_size=[1])
            >>> td.select("a").sorted_keys
            ['a']
        """
        out = {}
        for key in keys:  # the common call, first-level keys only
            if type(key) is not str:
                break
            value = self._get_str(key, MISSING)
            if value is not MISSING:
                out[key] = value
            elif strict:
                raise _errors.missing_key((key,), self._keys_str())
        else:
            result = self._new_node(out)
            return self._replace_with(result) if inplace else result
        groups: dict[str, Any] = {}  # first-level key -> None (whole entry) or list of sub-keys
        for key in keys:
            path = (key,) if type(key) is str else unravel_key_to_tuple(key)
            if len(path) == 1:
                groups[path[0]] = None
            elif groups.get(path[0], ()) is not None:
                groups.setdefault(path[0], []).append(path[1:])
        out = {}
        for key, sub in groups.items():
            value = self._get_str(key, MISSING)
            if value is MISSING:
                if strict:
                    raise _errors.missing_key((key,), self._keys_str())
                continue
            if sub is not None:
                if not is_td(value):
                    if strict:
                        raise _errors.key_through_leaf((key, *sub[0]), 1, value)
                    continue
                try:
                    value = value.select(*sub, strict=strict)
                except KeyError:
                    for path in sub:  # re-raise with the full key path
                        self._get((key, *path))
                    raise
            out[key] = value
        result = self._new_node(out)
        return self._replace_with(result) if inplace else result

    def _walk_keys(self, path: tuple[str, ...]) -> Any:
        try:
            return self._walk_to(path)._keys_str()
        except KeyError:
            return self._keys_str()

    def _empty_like(self) -> TensorDictBase:
        return self._new_node({})

    def _new_node(self, source: dict[str, Any]) -> TensorDictBase:
        """An in-memory node over ``source`` with this one's batch size, device and names (no validation)."""
        node: TensorDictBase = self._dense_cls._new_unsafe(source, self.batch_size, self.device, self._maybe_names())
        return node

    def empty(self, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT,
              names: Any = None) -> TensorDictBase:
        """A TensorDict with this one's batch facts and no leaves.

        ``recurse`` keeps the nested nodes, emptied, and the non-tensor leaves as they are (as tensordict).

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
            >>> list(td.empty().keys()), list(td.empty(recurse=True).keys())
            ([], ['n'])
        """
        bs = self.batch_size if batch_size is None else _as_size(batch_size)
        dev = self.device if device is NO_DEFAULT else _as_device(device)
        source: dict[str, Any] = {}
        if recurse:
            nd = self.batch_dims
            for key, value in self._items_str():
                if not is_td(value):
                    continue
                sub = None if batch_size is None else _Size((*bs, *value.batch_size[nd:]))
                if type(value) in NON_TENSOR_TYPES:
                    source[key] = value if sub is None else value._follow(sub)
                else:
                    source[key] = value.empty(True, batch_size=sub)
        kept = self._maybe_names() if batch_size is None else None
        out: TensorDictBase = self._dense_cls._new_unsafe(source, bs, dev, names if names is not None else kept)
        return out

    def _set_path_unsafe(self, path: tuple[str, ...], value: Any, like: Any) -> None:
        node: Any = self
        for key in path[:-1]:
            sub = node._get_str(key, MISSING)
            like = like._get_str(key)
            if sub is MISSING:
                sub = self._dense_cls._new_unsafe({}, like.batch_size, like.device, like._maybe_names())
                node._set_str(key, sub, inplace=False, validated=True)
            node = sub
        node._set_str(path[-1], value, inplace=False, validated=True)

    def _replace_with(self, other: TensorDictBase) -> TensorDictBase:
        if self.is_locked:
            raise _errors.locked()
        for key in list(self._keys_str()):
            if other._get_str(key, MISSING) is MISSING:
                self._del_str(key)
        for key, value in other._items_str():
            self._set_str(key, value, inplace=False, validated=True)
        return self

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> TensorDictBase:
        """A TensorDict without the given keys (missing keys are ignored); nested nodes are new objects."""
        for key in keys:
            if type(key) is not str:
                break
        else:  # the common call, first-level keys only
            result = self._new_node({k: v for k, v in self._items_str() if k not in keys})
            return self._replace_with(result) if inplace else result
        top: set[str] = set()
        nested: dict[str, list[tuple[str, ...]]] = {}
        for key in keys:
            path = (key,) if type(key) is str else unravel_key_to_tuple(key)
            if len(path) == 1:
                top.add(path[0])
            else:
                nested.setdefault(path[0], []).append(path[1:])
        out = {}
        for key, value in self._items_str():
            if key in top:
                continue
            if key in nested and is_td(value):  # untouched sub-trees are shared, as in tensordict
                value = value.exclude(*nested[key])
            out[key] = value
        result = self._new_node(out)
        return self._replace_with(result) if inplace else result

    def _copy_tree(self) -> TensorDictBase:
        """New tree objects (every level) over the same leaves."""
        out = {k: v._copy_tree() if type(v) is not _Tensor and is_td(v) else v for k, v in self._items_str()}
        return self._new_node(out)

    def split_keys(self, *key_sets: Sequence[NestedKey], inplace: bool = False, default: Any = None,
                   strict: bool = True, reproduce_struct: bool = False) -> tuple[TensorDictBase, ...]:
        """Split into one TensorDict per key set, plus one with the remaining keys."""
        outs = [self.select(*ks, strict=strict) for ks in key_sets]
        taken = [unravel_key_to_tuple(k) for ks in key_sets for k in ks]
        rest = self.exclude(*taken)
        if inplace:
            self._replace_with(rest)
        return (*outs, rest)

    def flatten_keys(self, separator: str = ".", inplace: bool = False,
                     is_leaf: Callable[[type], bool] | None = None) -> TensorDictBase:
        """Turn nested keys into flat ``separator``-joined keys.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": {"b": torch.zeros(1)}}, batch_size=[1])
            >>> td.flatten_keys().sorted_keys
            ['a.b']
        """
        out: dict[str, Any] = {}
        _flat_items(self, "", separator, is_leaf, out)
        result = self._new_node(out)
        return self._replace_with(result) if inplace else result

    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> TensorDictBase:
        """Inverse of :meth:`flatten_keys`: ``"a.b"`` becomes ``("a", "b")``."""
        out = self._empty_like()
        for key, value in self._items_str():
            if is_td(value):
                value = value.unflatten_keys(separator)
            out._set_path_unsafe(tuple(key.split(separator)), value, _Creator(self))
        return self._replace_with(out) if inplace else out

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> TensorDictBase:
        """Move the value at ``old_key`` to ``new_key``."""
        if self.is_locked:
            raise _errors.locked()
        if safe and new_key in self:
            raise KeyError(f"key {_errors.fmt_path(new_key)} already present in TensorDict.")
        value = self._get(old_key)
        if unravel_key_to_tuple(old_key) == unravel_key_to_tuple(new_key):
            return self
        self.set(new_key, value)  # a failing set leaves everything as it was
        self.del_(old_key)
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> TensorDictBase:
        """Fill the leaf (or every leaf of the nested TensorDict) at ``key`` with ``value``."""
        target = self._get(key)
        if is_td(target):
            target.apply_(lambda x: x.fill_(value))
        else:
            target.fill_(value)
        return self

    # ------------------------------------------------------------------ batch size helpers
    def auto_batch_size_(self, batch_dims: int | None = None) -> TensorDictBase:
        """Set the batch size to the longest leading shape shared by every leaf (nested ones first).

        Examples:
            >>> from tensorbatch import TensorDict
            >>> TensorDict({"a": torch.zeros(3, 4), "b": torch.zeros(3, 4, 5)}).auto_batch_size_().batch_size
            torch.Size([3, 4])
        """
        for value in self._values_str():
            if is_td(value) and not _nontensor.is_non_tensor(value):
                value.auto_batch_size_(batch_dims)
        # non-tensor leaves follow the batch size; they do not decide it (as in tensordict)
        shapes = [v.batch_size if is_td(v) else v.shape for v in self._values_str() if not _nontensor.is_non_tensor(v)]
        common: list[int] = []
        if shapes:
            limit = min(len(s) for s in shapes)
            if batch_dims is not None:
                limit = min(limit, batch_dims)
            for i in range(limit):
                if any(s[i] != shapes[0][i] for s in shapes):
                    break
                common.append(shapes[0][i])
        size = _Size(common)
        for key, value in list(self._items_str()):
            if _nontensor.is_non_tensor(value) and value.batch_size[: len(size)] != size:
                self._set_str(key, value._follow(size), inplace=False, validated=True)
        self.batch_size = size
        return self

    # ------------------------------------------------------------------ apply
    def apply(self, fn: Callable[..., Any], *others: Any, batch_size: Sequence[int] | None = None,
              device: Any = NO_DEFAULT, names: Any = NO_DEFAULT, inplace: bool = False,
              default: Any = NO_DEFAULT, filter_empty: bool | None = None, propagate_lock: bool = False,
              call_on_nested: bool = False, out: TensorDictBase | None = None,
              **constructor_kwargs: Any) -> TensorDictBase | None:
        """Apply ``fn`` to every leaf (with the matching leaves of ``others``) into a new TensorDict.

        A leaf for which ``fn`` returns None is dropped; if every leaf is dropped, None is returned.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.ones(2)}, batch_size=[2])
            >>> td.apply(lambda x, y: x + y, td)["a"]
            tensor([2., 2.])
        """
        is_leaf = None
        if call_on_nested:
            def is_leaf(cls: type) -> bool:
                return True
        dev = _as_device(device) if device is not NO_DEFAULT else NO_DEFAULT
        result = apply_leaves(  # in place too: all results first, then the writes (no half-applied state)
            self, fn, *others, batch_size=batch_size, names=names, device=dev, inplace=False,
            is_leaf=is_leaf, filter_empty=True if filter_empty is None else filter_empty, default=default,
            what="applying fn", check=True,  # a user function may change leading dims: refuse that
        )
        if not len(result._keys_str()) and filter_empty is not False and not self.is_empty():
            return None
        if inplace:
            return self.update_(result)
        if out is not None:
            out.update(result, inplace=True)
            return out
        if propagate_lock and self.is_locked:
            result.lock_()
        return result

    def apply_(self, fn: Callable[..., Any], *others: Any, **kwargs: Any) -> TensorDictBase:
        """Apply ``fn`` to every leaf and write the results into the existing leaves."""
        return self.apply(fn, *others, inplace=True, **kwargs)  # type: ignore[return-value]

    def named_apply(self, fn: Callable[..., Any], *others: Any, nested_keys: bool = False,
                    batch_size: Sequence[int] | None = None, device: Any = NO_DEFAULT,
                    names: Any = NO_DEFAULT, inplace: bool = False, default: Any = NO_DEFAULT,
                    filter_empty: bool | None = None, propagate_lock: bool = False,
                    **constructor_kwargs: Any) -> TensorDictBase | None:
        """Like :meth:`apply`, with the key as first argument of ``fn``.

        The key is the leaf's own name, or its full path when ``nested_keys`` is True.
        """
        paths = iter([key_of(p) if nested_keys else p[-1] for p, _ in named_leaves(self)])

        def keyed(value: Any, *rest: Any) -> Any:
            return fn(next(paths), value, *rest)

        return self.apply(keyed, *others, batch_size=batch_size, device=device, names=names,
                          inplace=inplace, default=default, filter_empty=filter_empty,
                          propagate_lock=propagate_lock)

    def _map(self, fn: Callable[[Any], Any], what: str, batch_size: Any = None,
             names: Any = NO_DEFAULT, device: Any = NO_DEFAULT, follow: bool = False) -> TensorDictBase:
        """Internal leaf map without user-facing options (``follow``: a batch op, see traverse)."""
        if batch_size is not None and type(batch_size) is not _Size:
            batch_size = _Size(batch_size)
        return map_leaves(self, fn, what=what, batch_size=batch_size, names=names, device=device, follow=follow)

    # ------------------------------------------------------------------ device, dtype, copies
    def to(self, *args: Any, **kwargs: Any) -> TensorDictBase:
        """Move and/or cast every leaf: ``to(device)``, ``to(dtype)``, ``to(other_td)``, ``to(device, dtype)``.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> TensorDict({"a": torch.ones(2)}, batch_size=[2]).to(torch.float64)["a"].dtype
            torch.float64
        """
        if len(args) == 1 and not kwargs and type(args[0]) is torch.dtype:  # the common cast, kept cheap
            cast: TensorDictBase = _pointwise.cast(self, args[0])
            return cast
        non_blocking = kwargs.pop("non_blocking", False)
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        batch_size = kwargs.pop("batch_size", None)
        for arg in args:
            if isinstance(arg, torch.dtype):
                dtype = arg
            elif is_td(arg) or isinstance(arg, _Tensor):
                device = arg.device
            elif arg is not None:
                device = arg
        if kwargs:
            raise TypeError(f"to() got unexpected arguments {sorted(kwargs)}")
        result: TensorDictBase = self
        if device is not None and dtype is None and batch_size is None:  # a consolidated one moves one buffer
            moved = _persistence.consolidated_to(self, _as_device(device), non_blocking)
            if moved is not None:
                return moved  # type: ignore[no-any-return]
        if device is not None:
            device = _as_device(device)
            result = result._map(lambda x: x.to(device, non_blocking=non_blocking), "moving to device",
                                 device=device)
        if dtype is not None:
            result = _pointwise.cast(result, dtype)
        if batch_size is not None:
            result = result.clone(False) if result is self else result
            result.batch_size = batch_size
        return result

    def cpu(self, **kwargs: Any) -> TensorDictBase:
        """Move every leaf to the CPU."""
        return self.to("cpu", **kwargs)

    def cuda(self, device: Any = None, **kwargs: Any) -> TensorDictBase:
        """Move every leaf to a CUDA device."""
        if device is None:
            device = "cuda"
        elif isinstance(device, int):
            device = f"cuda:{device}"
        return self.to(device, **kwargs)

    def clone(self, recurse: bool = True, **kwargs: Any) -> TensorDictBase:
        """A copy; ``recurse=False`` copies the structure only and shares the leaves.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.ones(2)}, batch_size=[2])
            >>> td.clone(False)["a"] is td["a"], td.clone()["a"] is td["a"]
            (True, False)
        """
        if recurse:
            cloned: TensorDictBase = _pointwise.map_dense(self, _FOREACH_CLONE, torch.clone, "cloning", cpu=True)
            return cloned
        return self._copy_tree()

    def copy(self) -> TensorDictBase:
        """Shallow copy (``clone(recurse=False)``)."""
        return self.clone(False)

    def __copy__(self) -> TensorDictBase:
        return self.clone(False)

    def __deepcopy__(self, memo: Any) -> TensorDictBase:
        return self.clone()

    def replace(self, *args: Any, **kwargs: Any) -> TensorDictBase:
        """A shallow copy with some entries replaced: ``self.copy().update(...)``; ``self`` if none are given.

        Nested TensorDicts are merged (as ``update`` does); this TensorDict does not change.

        Args:
            *args: at most one dict or TensorDict of entries to write.
            **kwargs: top-level entries, by key (merged into a copy of the positional argument).

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
            >>> out = td.replace({"n": {"c": torch.ones(2)}}, a=torch.ones(2))
            >>> list(out.keys(True, True)), td["a"].sum().item()
            (['a', ('n', 'b'), ('n', 'c')], 0.0)
        """
        if len(args) > 1:
            raise TypeError(f"replace() takes at most one positional argument (a dict or TensorDict), got {len(args)}")
        entries: Any = args[0] if args else {}
        if not is_td(entries) and not isinstance(entries, Mapping):
            raise TypeError(f"replace() expects a dict or a TensorDict, got {type(entries).__name__}")
        if kwargs:
            entries = entries.copy().update(kwargs) if is_td(entries) else {**entries, **kwargs}
        if not len(entries):
            return self
        return self.copy().update(entries)

    def copy_at_(self, tensordict: Any, idx: Any, non_blocking: bool = False) -> TensorDictBase:
        """Copy ``tensordict``'s values into this one's leaves at ``idx`` (see :meth:`update_at_`)."""
        out: TensorDictBase = self.update_at_(tensordict, idx, non_blocking=non_blocking)
        return out

    def copy_(self, tensordict: Any, non_blocking: bool = False) -> TensorDictBase:
        """Copy the values of ``tensordict`` into this one's leaves."""
        return self.update_(tensordict, non_blocking=non_blocking)

    def detach(self) -> TensorDictBase:
        """Detached copy of every leaf (shares storage)."""
        return self._map(torch.Tensor.detach, "detaching")

    def detach_(self) -> TensorDictBase:
        """Detach every leaf in place."""
        for leaf in flat_leaves(self):
            leaf.detach_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> TensorDictBase:
        """Set ``requires_grad`` on every leaf."""
        for leaf in flat_leaves(self):
            leaf.requires_grad_(requires_grad)
        return self

    @property
    def requires_grad(self) -> bool:
        """True when any leaf requires grad."""
        return any(leaf.requires_grad for leaf in flat_leaves(self))

    def zero_(self) -> TensorDictBase:
        """Fill every leaf with zeros in place."""
        leaves = flat_leaves(self)
        if leaves:
            torch._foreach_zero_(leaves)
        return self

    def zero_grad(self, set_to_none: bool = True) -> TensorDictBase:
        """Reset the ``grad`` of every leaf."""
        for leaf in flat_leaves(self):
            if leaf.grad is not None:
                if set_to_none:
                    leaf.grad = None
                else:
                    leaf.grad.zero_()
        return self

    @property
    def data(self) -> TensorDictBase:
        """A TensorDict of the leaves' ``.data``."""
        return self._map(lambda x: x.data, "reading data")

    @property
    def grad(self) -> TensorDictBase | None:
        """A TensorDict of the leaves' gradients (leaves without grad are dropped)."""
        return self._map(lambda x: x.grad, "reading grad")

    def contiguous(self) -> TensorDictBase:
        """Contiguous copy of every leaf."""
        return self._map(torch.Tensor.contiguous, "making contiguous")

    def is_contiguous(self) -> bool:
        """True when every leaf is contiguous."""
        return all(leaf.is_contiguous() for leaf in flat_leaves(self))

    def _new_leaves(self, size: Any, make: Callable[[Any, tuple[int, ...]], Any], what: str) -> TensorDictBase:
        if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)):
            size = tuple(size[0])
        size = _Size(size)
        nd = self.batch_dims
        return self._map(lambda x: make(x, (*size, *x.shape[nd:])), what, batch_size=size)

    def new_zeros(self, *size: Any, **kwargs: Any) -> TensorDictBase:
        """A TensorDict of batch size ``size`` filled with zeros (leaf feature shapes kept)."""
        return self._new_leaves(size, lambda x, s: x.new_zeros(s, **kwargs), "new_zeros")

    def new_ones(self, *size: Any, **kwargs: Any) -> TensorDictBase:
        """A TensorDict of batch size ``size`` filled with ones."""
        return self._new_leaves(size, lambda x, s: x.new_ones(s, **kwargs), "new_ones")

    def new_empty(self, *size: Any, **kwargs: Any) -> TensorDictBase:
        """A TensorDict of batch size ``size`` with uninitialised leaves."""
        return self._new_leaves(size, lambda x, s: x.new_empty(s, **kwargs), "new_empty")

    def new_full(self, size: Any, fill_value: Any, **kwargs: Any) -> TensorDictBase:
        """A TensorDict of batch size ``size`` filled with ``fill_value``."""
        return self._new_leaves((size,), lambda x, s: x.new_full(s, fill_value, **kwargs), "new_full")

    def new_tensor(self, data: Any, **kwargs: Any) -> TensorDictBase:
        """Every leaf replaced by ``x.new_tensor(d)``: ``d`` is ``data``'s matching leaf, or ``data`` itself.

        The result's batch size is the shape of ``data`` (its batch size for a TensorDict).
        """
        if is_td(data):
            out = self.apply(lambda x, d: x.new_tensor(d, **kwargs), data, batch_size=data.batch_size)
            assert out is not None  # apply gives None only with filter_empty
            return out
        data = torch.as_tensor(data)
        return self._map(lambda x: x.new_tensor(data.detach(), **kwargs), "new_tensor", batch_size=data.shape,
                         device=data.device if "device" not in kwargs else _as_device(kwargs["device"]))

    # ------------------------------------------------------------------ lock
    def lock_(self) -> TensorDictBase:
        """Lock this TensorDict and its nested ones: no key may be added or removed."""
        self._set_lock(True)
        for value in self._values_str():
            if is_td(value):
                value.lock_()
        return self

    def unlock_(self) -> TensorDictBase:
        """Unlock this TensorDict and its nested ones."""
        self._set_lock(False)
        for value in self._values_str():
            if is_td(value):
                value.unlock_()
        return self

    # ------------------------------------------------------------------ comparisons & checks
    def all(self, dim: int | None = None) -> bool | TensorDictBase:
        """True when every leaf is all-true; with ``dim``, a TensorDict reduced along that batch dim."""
        if dim is None:
            return all(bool(leaf.all()) for leaf in flat_leaves(self))
        _check_reduce_dim(self, dim)
        out: bool | TensorDictBase = _reduce.reduce(self, "all", dim=dim)
        return out

    def any(self, dim: int | None = None) -> bool | TensorDictBase:
        """True when any leaf has a true element; with ``dim``, reduced along that batch dim."""
        if dim is None:
            return any(bool(leaf.any()) for leaf in flat_leaves(self))
        _check_reduce_dim(self, dim)
        out: bool | TensorDictBase = _reduce.reduce(self, "any", dim=dim)
        return out

    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        """True when every leaf is close to the matching leaf (or value) of ``other``."""
        others = _pointwise.leaves_of(other, self)
        return all(torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
                   for a, b in zip(flat_leaves(self), others, strict=True))

    # ------------------------------------------------------------------ non-tensor leaves
    def set_non_tensor(self, key: NestedKey, value: Any) -> TensorDictBase:
        """Store any Python object (even a dict or a number) as a non-tensor leaf at ``key``.

        Examples:
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict(batch_size=[2]).set_non_tensor("cfg", {"lr": 0.1})
            >>> td["cfg"]
            {'lr': 0.1}
        """
        return self.set(key, _nontensor.wrap(value, self.batch_size, self.device))

    def get_non_tensor(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """The value of the non-tensor leaf at ``key`` (other leaves are returned as they are)."""
        return _nontensor.value_of(self._get(key, default))

    def is_non_tensor(self, key: NestedKey) -> bool:
        """True when the leaf at ``key`` is a non-tensor leaf."""
        return _nontensor.is_non_tensor(self._get(key))

    def non_tensor_items(self, include_nested: bool = False) -> Iterator[tuple[NestedKey, Any]]:
        """``(key, leaf)`` for each non-tensor leaf (nested ones with tuple keys when asked)."""
        for path, value in named_leaves(self, include_nested=include_nested,
                                        is_leaf=_nontensor.is_non_tensor_type):
            if _nontensor.is_non_tensor(value):
                yield (path if len(path) > 1 else path[0]), value

    def filter_non_tensor_data(self) -> TensorDictBase:
        """A shallow copy without the non-tensor leaves (nested nodes are kept, possibly empty)."""
        out = {key: value.filter_non_tensor_data() if is_td(value) else value
               for key, value in self._items_str() if not _nontensor.is_non_tensor(value)}
        return self._new_node(out)

    def tolist(self, *, convert_tensors: bool = False) -> Any:
        """Nested lists over the batch dims of per-element dicts (``td[i, j].to_dict()``)."""
        if not self.batch_dims:
            return self.to_dict(convert_tensors=convert_tensors)
        return [td.tolist(convert_tensors=convert_tensors) for td in self.unbind(0)]

    def to_padded_tensor(self, padding: float = 0.0, mask_key: NestedKey | None = None) -> TensorDictBase:
        """Nested-tensor leaves become padded tensors (:func:`torch.nested.to_padded_tensor`).

        A ragged batch dim (``-1``, from ``densify(layout=torch.jagged)``) takes the padded length.

        Args:
            padding: the fill value.
            mask_key: where to write a bool mask of the valid batch elements (needs a ragged batch dim).
        """
        nested = next((x for x in flat_leaves(self) if isinstance(x, _Tensor) and x.is_nested), None)
        bs = self.batch_size
        if nested is not None and -1 in bs:
            padded_shape = torch.nested.to_padded_tensor(nested, padding).shape
            bs = _Size([padded_shape[i] if n == -1 else n for i, n in enumerate(bs)])
        out = self._map(lambda x: torch.nested.to_padded_tensor(x, padding) if x.is_nested else x,
                        "padding nested tensors", batch_size=bs)
        if mask_key is not None:
            if nested is None or -1 not in self.batch_size:
                raise RuntimeError("to_padded_tensor(mask_key=...) needs a ragged batch dim (-1) and a nested leaf")
            lengths = nested.offsets().diff()  # type: ignore[attr-defined]  # a jagged nested tensor
            out.set(mask_key, torch.arange(bs[1], device=lengths.device) < lengths[:, None])
        return out

    # ------------------------------------------------------------------ conversions
    def to_dict(self, *, retain_none: bool = True, convert_tensors: bool = False) -> dict[str, Any]:
        """A plain nested ``dict`` of the leaves (non-tensor leaves give their values)."""
        return {
            key: (value.tolist() if convert_tensors else value) if type(value) is _Tensor
            else _nontensor.value_of(value) if _nontensor.is_non_tensor(value)
            else value.to_dict(retain_none=retain_none, convert_tensors=convert_tensors) if is_td(value)
            else value
            for key, value in self._items_str()
        }

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDictBase:
        """An in-memory TensorDict copy of this one."""
        return self.clone()

    def state_dict(self, destination: Any = None, prefix: str = "", keep_vars: bool = False,
                   flatten: bool = True) -> dict[str, Any]:
        """The leaves as a dict: flat ``"a.b"`` keys by default, nested dicts with ``flatten=False``."""
        out: dict[str, Any] = collections.OrderedDict() if destination is None else destination
        if flatten or destination is not None or prefix:
            for path, leaf in named_leaves(self):
                out[prefix + ".".join(path)] = leaf if keep_vars else leaf.detach()
            return out
        for path, leaf in named_leaves(self):
            if len(path) == 1:
                out[path[0]] = leaf if keep_vars else leaf.detach()
            else:
                node = out
                for key in path[:-1]:
                    node = node.setdefault(key, collections.OrderedDict())
                node[path[-1]] = leaf if keep_vars else leaf.detach()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False,
                        from_flatten: bool = False) -> TensorDictBase:
        """Load a dict produced by :meth:`state_dict` (copies into existing leaves, adds new ones)."""
        flat = {".".join(p): v for p, v in _leaf_items(state_dict, ())}
        source = self._dense_cls._new_unsafe(flat, self.batch_size, None, None).unflatten_keys(".")
        if strict:
            mine = {p for p, _ in named_leaves(self)}
            theirs = {p for p, _ in named_leaves(source)}
            if mine != theirs:  # tensordict raises RuntimeError here
                err = _errors.key_sets_differ((), [".".join(p) for p in mine], [".".join(p) for p in theirs])
                raise RuntimeError(f"load_state_dict(strict=True): {err.args[0]}")
        self.update(source, inplace=not assign)
        return self

    def __reduce__(self) -> Any:
        return (self._dense_cls._from_state, (self.to_dict(), self.batch_size, self.device,
                                             self._maybe_names(), self.is_locked))

    # ------------------------------------------------------------------ repr
    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}(batch_size={list(self.batch_size)}, device={self.device})"]
        _tree_lines(self, "", lines)
        return "\n".join(lines)

    # ------------------------------------------------------------------ torch function protocol
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _torch_function.dispatch(func, types, args, kwargs)

    # ------------------------------------------------------------------ names
    def refine_names(self, *names: Any) -> TensorDictBase:
        """Name the batch dims in place (``...`` keeps existing names)."""
        current = self.names
        if len(names) == 1 and names[0] is Ellipsis:
            return self
        new = list(current)
        if Ellipsis in names:
            i = names.index(Ellipsis)
            head, tail = names[:i], names[i + 1:]
            new[: len(head)] = head
            if tail:
                new[-len(tail):] = tail
        else:
            new = list(names)
        self.names = new
        return self

    def rename(self, *names: Any, **rename_map: Any) -> TensorDictBase:
        """A shallow copy with renamed batch dims."""
        out = self.clone(False)
        return out.rename_(*names, **rename_map)

    def rename_(self, *names: Any, **rename_map: Any) -> TensorDictBase:
        """Rename batch dims in place, positionally or by ``old=new``."""
        if names:
            self.names = list(names)
        else:
            self.names = [rename_map.get(n, n) if n is not None else None for n in self.names]
        return self

    # generic ops attached from _ops (one owner per concern)
    view = _shape.view
    reshape = _shape.reshape
    permute = _shape.permute
    transpose = _shape.transpose
    unsqueeze = _shape.unsqueeze
    squeeze = _shape.squeeze
    flatten = _shape.flatten
    unflatten = _shape.unflatten
    expand = _shape.expand
    expand_as = _shape.expand_as
    unbind = _shape.unbind
    split = _shape.split
    chunk = _shape.chunk
    repeat = _shape.repeat
    repeat_interleave = _shape.repeat_interleave
    gather = _shape.gather
    get_at = _index.get_at
    set_at_ = _index.set_at_
    update_at_ = _index.update_at_
    masked_fill = _index.masked_fill
    masked_fill_ = _index.masked_fill_
    masked_select = _index.masked_select
    where = _index.where
    sum = _reduce.make("sum")
    mean = _reduce.make("mean")
    nansum = _reduce.make("nansum")
    nanmean = _reduce.make("nanmean")
    prod = _reduce.make("prod")
    std = _reduce.make("std")
    var = _reduce.make("var")
    max = _reduce.make("max")
    min = _reduce.make("min")
    amax = _reduce.make("amax")
    amin = _reduce.make("amin")
    norm = _reduce.make("norm")

    @classmethod
    def stack(cls, input: Sequence[TensorDictBase], dim: int = 0, *, out: Any = None) -> TensorDictBase:
        """Stack TensorDicts along a new batch dim (see :func:`torch.stack`)."""
        stacked: TensorDictBase = _torch_function.stack(input, dim, out=out)
        return stacked

    @classmethod
    def cat(cls, input: Sequence[TensorDictBase], dim: int = 0, *, out: Any = None) -> TensorDictBase:
        """Concatenate TensorDicts along an existing batch dim (see :func:`torch.cat`)."""
        joined: TensorDictBase = _torch_function.cat(input, dim, out=out)
        return joined


def _collect_keys(td: TensorDictBase, prefix: tuple[str, ...], include_nested: bool, leaves_only: bool,
                  is_leaf: Any, out: list[Any]) -> None:
    """Keys in post-order (a node after its children), as tensordict's ``keys()`` lists them."""
    for key, value in td._items_str():
        if type(value) is _Tensor:
            out.append((*prefix, key) if prefix else key)
            continue
        is_node = is_td(value) and (is_leaf is None or not is_leaf(type(value)))
        if is_node and include_nested:
            _collect_keys(value, (*prefix, key), include_nested, leaves_only, is_leaf, out)
        if not (is_node and leaves_only):
            out.append((*prefix, key) if prefix else key)


def _flat_items(td: TensorDictBase, prefix: str, separator: str, is_leaf: Any, out: dict[str, Any]) -> None:
    """Leaves under ``separator``-joined keys (non-tensor leaves and ``is_leaf`` types count as leaves)."""
    for key, value in td._items_str():
        if type(value) is _Tensor or not is_td(value) or type(value) in NON_TENSOR_TYPES or (
                is_leaf is not None and is_leaf(type(value))):
            out[prefix + key] = value
        else:
            _flat_items(value, prefix + key + separator, separator, is_leaf, out)


def _check_inplace_shape(path: tuple[str, ...], value: Any, current: Any) -> None:
    """Raise if ``value`` cannot be copied into the existing leaf ``current``."""
    if isinstance(current, _Tensor) and isinstance(value, _Tensor) and value.shape != current.shape:
        try:
            ok = torch.broadcast_shapes(value.shape, current.shape) == current.shape  # type: ignore[no-untyped-call]
        except RuntimeError:
            ok = False
        if not ok:
            raise _errors.InplaceWriteError(
                f"cannot write a value of shape {_errors.fmt_shape(value.shape)} in place into "
                f"{_errors.fmt_path(path)} of shape {_errors.fmt_shape(current.shape)}"
            )


def _check_reduce_dim(td: TensorDictBase, dim: int) -> None:
    if not -td.batch_dims <= dim < td.batch_dims:
        raise RuntimeError(
            f"dim {dim} must be in [-batch_dims, batch_dims) for batch_size {list(td.batch_size)}"
        )


def _leaf_items(source: Any, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(path, leaf)`` pairs of a TensorDict or a nested mapping."""
    for key, value in source_items(source, "update_"):
        path = (*prefix, *unravel_key_to_tuple(key))
        if is_td(value) or isinstance(value, Mapping):
            yield from _leaf_items(value, path)
        else:
            yield path, value


class _Creator:
    """Stands in for a 'like' tree when creating levels: every level copies the root's batch facts."""

    __slots__ = ("_root",)

    def __init__(self, root: TensorDictBase) -> None:
        self._root = root

    def _get_str(self, key: str) -> Any:
        return self

    @property
    def batch_size(self) -> torch.Size:
        return self._root.batch_size

    @property
    def device(self) -> Any:
        return self._root.device

    def _maybe_names(self) -> Any:
        return self._root._maybe_names()


def _leaf_repr(value: Any) -> str:
    if _nontensor.is_non_tensor(value):
        return repr(value)
    if isinstance(value, _Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"Tensor(shape={list(value.shape)}, dtype={dtype}, device={value.device})"
    return repr(value)


def _tree_lines(td: TensorDictBase, indent: str, lines: list[str]) -> None:
    items = list(td._items_str())
    for i, (key, value) in enumerate(items):
        last = i == len(items) - 1
        branch, extend = ("`-- ", "    ") if last else ("|-- ", "|   ")
        if is_td(value) and not _nontensor.is_non_tensor(value):
            lines.append(f"{indent}{branch}{key}: {type(value).__name__}(batch_size={list(value.batch_size)})")
            _tree_lines(value, indent + extend, lines)
        else:
            lines.append(f"{indent}{branch}{key}: {_leaf_repr(value)}")


_pointwise.install(TensorDictBase)

# Non-tensor leaves subclass TensorDictBase, so they are imported after it (used at call time only).
from . import (  # noqa: E402
    _convert,
    _nontensor,
)

_convert.install(TensorDictBase)

from ._io import methods as _persistence  # noqa: E402  (memmap, save, load, share_memory_, ...)

_persistence.install(TensorDictBase)
