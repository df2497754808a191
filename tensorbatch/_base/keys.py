"""Keys and key-shaped results: keys/items/values, select/exclude, flatten/unflatten, empty.

Functions here are TensorDictBase methods: ``base.py`` attaches them to the class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, KeysView
from typing import TYPE_CHECKING, Any

import torch

from .. import _errors
from .._keys import NestedKey, key_of, key_tuple, unravel_key_to_tuple
from .._ops.meta import node_meta
from .._ops.traverse import (
    MISSING,
    NO_DEFAULT,
    NON_TENSOR_TYPES,
    copy_nodes,
    entry_keys,
    flat_into,
    is_node,
    is_td,
    map_leaves,
    named_entries,
    named_leaves,
    raise_collision,
)
from .coerce import as_device as _as_device
from .coerce import as_size as _as_size
from .locks import record as _record

if TYPE_CHECKING:
    from ..base import TensorDictBase

_Tensor = torch.Tensor
_Size = torch.Size


_NOT_A_KEY = (
    "TensorDict keys are always strings. Membership checks are only supported for strings or non-empty "
    "tuples of strings (for nested TensorDicts)"
)  # tensordict's words


def _member(key: Any) -> NestedKey:
    """The form ``key in td.keys(...)`` looks up: a str, or a flat tuple of two or more str."""
    if isinstance(key, str):
        return key
    path = unravel_key_to_tuple(key)
    if not path:
        raise TypeError(_NOT_A_KEY)
    return path[0] if len(path) == 1 else path


class StringKeys(KeysView):  # type: ignore[type-arg]
    """The keys of one level, as ``keys()`` returns them: a live view over the backend's listing.

    Membership also takes a key as a one-element tuple (``("a",) in td.keys()``); a nested key is
    never a key of one level; anything that is not a key raises ``TypeError`` (as tensordict).
    """

    __slots__ = ("_keys",)

    def __init__(self, keys: Any) -> None:
        self._keys = keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, index: Any) -> Any:
        return self._keys[index]

    def __contains__(self, key: object) -> bool:
        if type(key) is str:
            return key in self._keys
        key = _member(key)
        return type(key) is str and key in self._keys

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self._keys)})"


class KeyList(list):  # type: ignore[type-arg]
    """The keys ``keys(include_nested=..., leaves_only=...)`` lists; membership unravels the key first.

    ``("a", ("b",)) in td.keys(True)`` finds ``("a", "b")`` and ``("a",)`` finds ``"a"``.
    """

    __slots__ = ()

    def __contains__(self, key: object) -> bool:
        # (super(), not list.__contains__(self, ...): dynamo traces the former only)
        if type(key) is str:
            return super().__contains__(key)
        return super().__contains__(_member(key))


class NestedKeysView:
    """``keys(include_nested=..., leaves_only=..., sort=...)``: a live view, as tensordict's.

    Each use lists the keys the TensorDict has then (a key set later is seen). Membership unravels the key
    first (``("a", ("b",)) in td.keys(True)`` finds ``("a", "b")``, ``("a",)`` finds ``"a"``); it can also be
    indexed (``td.keys(True)[0]``, which tensordict's view refuses) and compares equal to a list of the same keys.
    """

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[], list[NestedKey]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[NestedKey]:
        return iter(self._make())

    def __len__(self) -> int:
        return len(self._make())

    def __bool__(self) -> bool:
        return bool(self._make())

    def __getitem__(self, index: Any) -> Any:
        return self._make()[index]

    def __contains__(self, key: object) -> bool:
        keys = self._make()
        return key in keys if type(key) is str else _member(key) in keys

    def __eq__(self, other: object) -> bool:
        return self._make() == (list(other) if isinstance(other, (NestedKeysView, tuple)) else other)

    __hash__ = None  # type: ignore[assignment]  # (as a list: it compares by contents)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._make()!r})"


def keys(
    self: TensorDictBase,
    include_nested: bool = False,
    leaves_only: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    *,
    sort: bool = False,
) -> Any:
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
        >>> ("a",) in td.keys(), ("n", ("b",)) in td.keys(True)
        (True, True)
    """
    if not include_nested and not leaves_only and not sort:
        return StringKeys(self._keys_str())
    return NestedKeysView(lambda: listed_keys(self, include_nested, leaves_only, is_leaf, sort))


def listed_keys(
    td: Any, include_nested: bool, leaves_only: bool, is_leaf: Callable[[type], bool] | None, sort: bool
) -> list[NestedKey]:
    """The keys ``td.keys(...)`` gives now, as a list (a view's contents)."""
    out: list[NestedKey] = entry_keys(td, include_nested, leaves_only, is_leaf)
    if sort:
        out.sort(key=lambda k: k if type(k) is str else ".".join(k))
    return out


def items(
    self: TensorDictBase,
    include_nested: bool = False,
    leaves_only: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    *,
    sort: bool = False,
) -> Iterable[Any]:
    """``(key, value)`` pairs; arguments as in :meth:`keys`.

    The plain call returns this level's own items view (for a TensorDict a live ``dict`` view, as
    tensordict's: it has a length, and adding or removing a key while iterating raises RuntimeError);
    the other calls return an iterator.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(1), "n": {"b": torch.zeros(1)}}, batch_size=[1])
        >>> len(td.items()), [k for k, _ in td.items(include_nested=True, leaves_only=True)]
        (2, ['a', ('n', 'b')])
    """
    if not include_nested and not leaves_only and not sort:
        view: Iterable[Any] = self._items_str()  # no generator frame: iterating is as cheap as the dict's own
        return view
    return _items(self, include_nested, leaves_only, is_leaf, sort)


def _items(self: TensorDictBase, include_nested: bool, leaves_only: bool, is_leaf: Any, sort: bool) -> Iterator[Any]:
    if sort:
        for key in self.keys(include_nested, leaves_only, is_leaf, sort=sort):
            yield key, self._get(key)
        return
    for path, value in named_entries(self, include_nested=include_nested, leaves_only=leaves_only, is_leaf=is_leaf):
        yield key_of(path), value


def values(
    self: TensorDictBase,
    include_nested: bool = False,
    leaves_only: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    *,
    sort: bool = False,
) -> Iterable[Any]:
    """Values; arguments as in :meth:`keys` (the plain call returns this level's values view, as :meth:`items`)."""
    if not include_nested and not leaves_only and not sort:
        view: Iterable[Any] = self._values_str()
        return view
    return (value for _, value in _items(self, include_nested, leaves_only, is_leaf, sort))


def entry_class(self: TensorDictBase, key: NestedKey) -> type:
    """Type of the value at ``key`` (a stored TensorDict answers for a tensor leaf from its metadata, unread)."""
    return type(self._get(key))


def get_item_shape(self: TensorDictBase, key: NestedKey) -> torch.Size:
    """Full shape of the leaf (or batch size of the nested TensorDict) at ``key``, from its metadata."""
    found = node_meta(self, key)
    if found is None:
        self._get(key)  # the KeyError naming the path
    return found[1].shape  # type: ignore[index]  # found when _get did not raise


def is_empty(self: TensorDictBase) -> bool:
    """True when the tree holds no leaf (nested empty TensorDicts don't count; non-tensor leaves do)."""
    if type(self) in NON_TENSOR_TYPES:  # a non-tensor leaf holds its value
        return False
    return not any(True for _ in named_leaves(self, is_leaf=NON_TENSOR_TYPES.__contains__))


def select(
    self: TensorDictBase, *keys: NestedKey, inplace: bool = False, strict: bool = True, as_tensordict: bool = False
) -> TensorDictBase:
    """A TensorDict with only the given keys (sharing the leaves), in the order given.

    ``as_tensordict=True`` makes a typed wrapper (a TensorClass) return the plain TensorDict; a
    TensorDict's result is one already.

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
        path = (key,) if type(key) is str else key_tuple(key)
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


def _empty_like(self: TensorDictBase) -> TensorDictBase:
    return self._new_node({})


def _new_node(self: TensorDictBase, source: dict[str, Any]) -> TensorDictBase:
    """An in-memory node over ``source`` with this one's batch size, device and names (no validation)."""
    node: TensorDictBase = self._dense_cls._new_unsafe(source, self.batch_size, self.device, self._maybe_names())
    return node


def empty(
    self: TensorDictBase, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT, names: Any = None
) -> TensorDictBase:
    """A TensorDict with this one's batch facts and no leaves.

    ``recurse`` keeps the nested nodes, emptied, and the non-tensor leaves as they are (as tensordict).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> list(td.empty().keys()), list(td.empty(recurse=True).keys())
        ([], ['n'])
    """
    bs = None if batch_size is None else _as_size(batch_size)
    dev = device if device is NO_DEFAULT else _as_device(device)
    if recurse:  # the nodes rebuilt without their leaves; non-tensor leaves follow the batch size
        return map_leaves(self, _drop, NO_DEFAULT, "emptying", bs, NO_DEFAULT if names is None else names, dev)
    kept = self._maybe_names() if bs is None else None
    out: TensorDictBase = self._dense_cls._new_unsafe(
        {},
        self.batch_size if bs is None else bs,
        self.device if dev is NO_DEFAULT else dev,
        names if names is not None else kept,
    )
    return out


def _drop(leaf: Any) -> None:
    """The leaf function of ``empty(recurse=True)``: every tensor leaf goes."""


def _replace_with(self: TensorDictBase, other: TensorDictBase) -> TensorDictBase:
    if self.is_locked:
        raise _errors.locked()
    for key in list(self._keys_str()):
        if other._get_str(key, MISSING) is MISSING:
            self._del_str(key)
    for key, value in other._items_str():
        self._set_str(key, value, inplace=False, validated=True)
    return self


def exclude(self: TensorDictBase, *keys: NestedKey, inplace: bool = False) -> TensorDictBase:
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
        path = (key,) if type(key) is str else key_tuple(key)
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


def _copy_tree(self: TensorDictBase, values: bool = False) -> TensorDictBase:
    """New tree objects (every level) over the same leaves (``values``: non-tensor values in new containers)."""
    return copy_nodes(self, values)


def split_keys(
    self: TensorDictBase,
    *key_sets: Any,
    inplace: bool = False,
    default: Any = None,
    strict: bool = True,
    reproduce_struct: bool = False,
) -> tuple[TensorDictBase, ...]:
    """Split into one TensorDict per key set, plus a last one with the entries no set took.

    The sets apply in order, each to what the earlier ones left: a list selects its keys, a dict selects
    its keys and renames each to its value, a callable ``fn(key, value) -> bool`` selects the tensor leaves
    it accepts (``key``: the leaf's path as a tuple; nested nodes and non-tensor data are not offered to
    it). Leaves are shared, not copied. Nested nodes left empty are dropped from the last TensorDict.

    Args:
        key_sets: lists, dicts or callables, as above.
        inplace: take the entries out of this TensorDict, which is returned last.
        default: with ``strict=False``, the value given to a missing key of a list or dict (None skips it).
        strict: a missing key of a list or dict raises KeyError.
        reproduce_struct: every result keeps the whole tree of nested nodes, empty ones included.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2), n={"c": torch.zeros(2, 3)}, batch_size=[2])
        >>> wide, rest = td.split_keys(lambda key, value: value.ndim == 2)
        >>> list(wide.keys(True, True)), list(rest.keys())
        ([('n', 'c')], ['a', 'b'])
        >>> renamed, rest = td.split_keys({"a": "x"}, inplace=True)
        >>> list(renamed.keys()), rest is td, sorted(td.keys())
        (['x'], True, ['b', 'n'])
    """
    rest = self if inplace else copy_nodes(self, True)  # (a shallow copy: new non-tensor containers, as tensordict)
    outs = []
    for ks in key_sets:
        out = self.empty(recurse=True).filter_non_tensor_data() if reproduce_struct else self.empty()
        if callable(ks) and not isinstance(ks, (list, tuple, dict, str)):
            chosen = [
                (p, v)
                for p, v in named_leaves(rest, include_nested=True, is_leaf=None)
                if isinstance(v, torch.Tensor) and ks(p, v)
            ]
            pairs: list[tuple[tuple[str, ...] | None, tuple[str, ...], Any]] = [(p, p, v) for p, v in chosen]
        else:
            pairs = []
            for old, new in ks.items() if isinstance(ks, dict) else ((k, k) for k in ks):
                value = rest._get(key_tuple(old), MISSING)
                if value is MISSING:
                    if strict:
                        rest._get(key_tuple(old))  # raises the KeyError naming the missing level
                    if default is None or default is NO_DEFAULT:
                        continue
                    pairs.append((None, key_tuple(new), default))
                    continue
                pairs.append((key_tuple(old), key_tuple(new), value))
        for old_path, new_path, value in pairs:
            out.set(new_path, value)
            if old_path is not None:
                rest.del_(old_path)
        outs.append(out)
    if not reproduce_struct:
        _drop_empty_nodes(rest)
    return (*outs, rest)


def _drop_empty_nodes(td: TensorDictBase) -> None:
    """Delete the nested nodes that hold no entries (deepest first: a node emptied so goes too)."""
    for key, value in list(td._items_str()):
        if is_td(value) and type(value) not in NON_TENSOR_TYPES:
            _drop_empty_nodes(value)
            if not value._keys_str():
                td.del_(key)


def flatten_keys(
    self: TensorDictBase, separator: str = ".", inplace: bool = False, is_leaf: Callable[[type], bool] | None = None
) -> TensorDictBase:
    """Turn nested keys into flat ``separator``-joined keys.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": {"b": torch.zeros(1)}}, batch_size=[1])
        >>> td.flatten_keys().sorted_keys
        ['a.b']
    """
    out: dict[str, Any] = {}
    if flat_into(self, "", separator, is_leaf, out) != len(out):  # fewer keys than leaves: a collision
        raise_collision(self, separator, is_leaf)
    result = self._new_node(out)
    if inplace:  # (a with block undoes it with unflatten_keys when no key held the separator)
        exact = not any(separator in part for key in self.keys(True, True) for part in key_tuple(key))
        return _record(self._replace_with(result), "flatten_keys", (separator,), _INPLACE, self, exact)
    return _record(result, "flatten_keys", (separator,), _NO_KWARGS, self)  # (a with block on it writes back)


def unflatten_keys(self: TensorDictBase, separator: str = ".", inplace: bool = False) -> TensorDictBase:
    """Inverse of :meth:`flatten_keys`: the key ``"a.b"`` becomes ``("a", "b")``.

    Only this level's keys are split (as tensordict: keys inside nested nodes stay as they are); a
    split key and a nested node of the same name merge, and a level created by splitting takes this
    node's batch facts. Nested nodes are new objects over the same leaves.

    Raises:
        KeyError: when a split key lands on a leaf (``"a"`` and ``"a.b"`` both present).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a.b": torch.zeros(1), "a": {"c": torch.ones(1)}}, batch_size=[1])
        >>> list(td.unflatten_keys().keys(include_nested=True, leaves_only=True))
        [('a', 'c'), ('a', 'b')]
    """
    out: TensorDictBase = _blank(self)
    for key, value in self._items_str():
        if type(value) is not _Tensor and is_node(value):
            value = value.copy()  # a new node (as tensordict): split keys may merge into it
        _put(out, key.split(separator), value, self)
    if inplace:
        return _record(self._replace_with(out), "unflatten_keys", (separator,), _INPLACE, self)
    return _record(out, "unflatten_keys", (separator,), _NO_KWARGS, self)  # (a with block on it writes back)


_NO_KWARGS: dict[str, Any] = {}  # (read only)
_INPLACE = {"inplace": True}


def _blank(node: Any) -> Any:
    """An empty in-memory node with the batch facts of ``node``."""
    return node._dense_cls._new_unsafe({}, node.batch_size, node.device, node._maybe_names())


def _put(out: Any, path: list[str], value: Any, facts: Any) -> None:
    """Store ``value`` at ``path`` below ``out``, creating missing levels with the batch facts of ``facts``.

    A node meeting a node merges (the entries already there join the new node).
    """
    for i, key in enumerate(path[:-1]):
        sub = out._get_str(key, MISSING)
        if sub is MISSING:
            sub = _blank(facts)
            out._set_str(key, sub, inplace=False, validated=True)
        elif type(sub) is _Tensor or not is_node(sub):
            raise _collision(path[: i + 1])
        out = sub
    there = out._get_str(path[-1], MISSING)
    if there is not MISSING:
        if type(there) is _Tensor or not is_node(there) or type(value) is _Tensor or not is_node(value):
            raise _collision(path)
        for key, item in there._items_str():
            _put(value, [key], item, facts)
    out._set_str(path[-1], value, inplace=False, validated=True)


def _collision(path: list[str]) -> KeyError:
    return KeyError(
        f"unflattening the keys would override the leaf {_errors.fmt_path(tuple(path))} "
        f"(Unflattening key(s) in tensordict will override an existing for unflattened key)"
    )


def rename_key_(self: TensorDictBase, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> TensorDictBase:
    """Move the value at ``old_key`` to ``new_key``."""
    if self.is_locked:
        raise _errors.locked()
    if safe and new_key in self:
        raise KeyError(f"key {_errors.fmt_path(new_key)} already present in TensorDict.")
    value = self._get(old_key)
    if key_tuple(old_key) == key_tuple(new_key):
        return self
    self.set(new_key, value)  # a failing set leaves everything as it was
    self.del_(old_key)
    return self
