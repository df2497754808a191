"""Reading and writing entries: get/set/update/pop/del, one path resolver, value validation.

Functions here are TensorDictBase methods: ``base.py`` attaches them to the class.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from .. import _errors, _options
from .._keys import NestedKey, is_key, key_tuple
from .._list_leaf import read_list
from .._ops import index as _index
from .._ops import ragged
from .._ops.traverse import (
    GET_DEFAULT,
    MISSING,
    NO_DEFAULT,
    is_non_tensor,
    is_td,
    leaf_shape,
    source_leaves,
    unset_default,
    value_of,
)
from .._unbatched import UnbatchedTensor
from .coerce import checked_names

if TYPE_CHECKING:
    from ..base import TensorDictBase

_Tensor = torch.Tensor
_Size = torch.Size


def _locate(self: TensorDictBase, path: tuple[str, ...]) -> tuple[TensorDictBase, int, Any]:
    """The one path resolver: walk ``path[:-1]`` as far as it goes.

    Returns ``(node, walked, stop)``: the deepest node reached, how many keys were walked, and what
    stopped the walk (``MISSING`` for an absent key, the leaf found where a node was expected, or
    ``None`` when ``node`` holds ``path[-1]``). Callers decide what a stop means for them.
    """
    node: TensorDictBase = self
    for i, key in enumerate(path[:-1]):
        sub = node._get_str(key, MISSING)
        if sub is MISSING or not is_td(sub):
            return node, i, sub
        node = sub
    return node, len(path) - 1, None


def _walk_to(self: TensorDictBase, path: tuple[str, ...], create: bool = False) -> TensorDictBase:
    """The node holding ``path[-1]``; missing levels are created when ``create``."""
    node, walked, stop = self._locate(path)
    if walked == len(path) - 1:
        return node
    if stop is not MISSING:  # tensordict raises KeyError when writing, ValueError when reading
        raise KeyError(str(_errors.key_through_leaf(path, walked + 1, stop)))
    if not create:
        raise _errors.missing_key(path[: walked + 1], node._keys_str())
    if node.is_locked:
        raise _errors.locked()
    for key in path[walked:-1]:
        sub = node._new_node({})
        node._set_str(key, sub, inplace=False, validated=True)
        node = node._get_str(key)  # a backend may store a different object (a lazy stack splits it)
    return node


def get(
    self: TensorDictBase,
    key: NestedKey,
    default: Any = GET_DEFAULT,
    *,
    as_padded_tensor: bool = False,
    as_nested_tensor: bool = False,
    as_list: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
    layout: Any = None,
) -> Any:
    """Value at ``key`` (nested keys allowed), or ``default`` when missing.

    Without a default a missing key gives ``None`` (or raises ``KeyError`` after
    ``set_get_defaults_to_none(False)``). The keyword arguments shape what a lazy stack returns
    (``LazyStackedTensorDict.get``); here, as in tensordict, they change nothing (``as_list`` and
    ``as_nested_tensor`` warn: tensordict 0.17 will return a list or a nested tensor).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> td.get(("a", "b")).shape
        torch.Size([2])
        >>> td.get("missing") is None
        True
    """
    if as_list or as_nested_tensor:
        what = "as_list" if as_list else "as_nested_tensor"
        warnings.warn(
            f"{type(self).__name__}.get(key, {what}=True) returns the stored tensor today; tensordict "
            f"0.17 will return {'a list' if as_list else 'a nested tensor'}, as a lazy stack does. "
            f"Drop {what}=True to keep the tensor.",
            FutureWarning,
            stacklevel=2,
        )
    return self._get(key, default)


def _get(self: TensorDictBase, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
    """Lookup that raises KeyError (naming the full path) unless ``default`` is given."""
    if type(key) is str:
        out = self._get_str(key, MISSING)
        if out is MISSING:
            return _absent(default, (key,), self)
        return out
    path = key_tuple(key)
    node: Any = self
    try:  # the happy path without the resolver's bookkeeping; any stop is sorted out below
        for k in path:
            node = node._get_str(k, MISSING)
        if node is not MISSING:
            return node
    except AttributeError:  # a leaf (or MISSING) where a node was expected
        pass
    node, walked, stop = self._locate(path)
    if walked < len(path) - 1:
        if stop is not MISSING:  # a wrong key shape, not a missing key: raise even with a default
            raise _errors.key_through_leaf(path, walked + 1, stop)
        return _absent(default, path[: walked + 1], node)
    out = node._get_str(path[-1], MISSING)
    if out is MISSING:
        return _absent(default, path, node)
    return out


def _absent(default: Any, path: tuple[str, ...], node: Any) -> Any:
    """What a lookup of the missing ``path`` gives: ``default``, else KeyError naming what ``node`` holds."""
    if default is GET_DEFAULT:
        default = unset_default()
    if default is NO_DEFAULT:
        raise _errors.missing_key(path, node._keys_str())
    return default


def __getitem__(self: TensorDictBase, index: Any) -> Any:
    """``td[key]`` (a non-tensor leaf gives its value) or ``td[batch_index]``."""
    if type(index) is str:
        out = self._get_str(index, MISSING)
        if type(out) is _Tensor:
            return out
        if out is MISSING:
            raise _errors.missing_key((index,), self._keys_str())
        return value_of(out)
    if is_key(index):
        return value_of(self._get(index))
    return _index.getitem(self, index)


def __getitems__(self: TensorDictBase, indices: Any) -> Any:
    """``self[indices]``: the batch a ``torch.utils.data.DataLoader`` fetches (torch passes the list of its indices).

    The batch is the TensorDict of those rows (a lazy stack gives a lazy stack), so a DataLoader with
    ``collate_fn=lambda x: x`` or torch's default collate yields one TensorDict per batch, as in tensordict.
    In a DataLoader worker, a batch whose leaves are not in memory (a lazy view of an HDF5 file) is read
    there, in one batched row read: sent as it is, it would pickle as the file name and the main process
    would read it again.

    Examples:
        >>> import torch
        >>> from torch.utils.data import DataLoader
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(x=torch.arange(10), batch_size=[10])
        >>> [batch["x"].tolist() for batch in DataLoader(td, batch_size=4, collate_fn=lambda b: b)]
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """
    out = self[indices]
    return out._materialize() if get_worker_info() is not None else out


def __setitem__(self: TensorDictBase, index: Any, value: Any) -> None:
    if is_key(index):
        self.set(index, value)
    else:
        _index.setitem(self, index, value)


def __delitem__(self: TensorDictBase, key: NestedKey) -> None:
    self.del_(key)


def _has_str(self: TensorDictBase, key: str) -> bool:
    """True when this level holds ``key`` (a backend may answer without reading the value)."""
    return self._get_str(key, MISSING) is not MISSING


def __contains__(self: TensorDictBase, key: Any) -> bool:
    if type(key) is str:
        return self._has_str(key)
    if isinstance(key, tuple):
        path = key_tuple(key)
        node = self._parent_of(path) if len(path) > 1 else self
        return node is not None and node._has_str(path[-1])
    raise RuntimeError("key must be a NestedKey (a str or a possibly tuple of str).")


def set_entry(
    self: TensorDictBase, key: NestedKey, item: Any, inplace: bool = False, *, non_blocking: bool = False, **kwargs: Any
) -> TensorDictBase:
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
    path = (key,) if type(key) is str else key_tuple(key)
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
    node._set_str(name, node._validate(item, path, node, non_blocking), inplace=inplace and exists, validated=True)
    return self


def _deepest(self: TensorDictBase, path: tuple[str, ...]) -> TensorDictBase:
    """The deepest existing node along ``path[:-1]`` (KeyError when the path runs through a leaf)."""
    node, walked, stop = self._locate(path)
    if walked < len(path) - 1 and stop is not MISSING:
        raise KeyError(str(_errors.key_through_leaf(path, walked + 1, stop)))
    return node


def set_(self: TensorDictBase, key: NestedKey, item: Any, *, non_blocking: bool = False) -> TensorDictBase:
    """Copy ``item`` into the existing leaf at ``key`` (allowed on locked TensorDicts).

    Args:
        key: a string or a tuple of strings naming an existing entry.
        item: the value to copy; it is broadcast to the entry's shape.
        non_blocking: passed to device moves.

    Returns:
        self.

    Raises:
        KeyError: if ``key`` is not present.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> x = torch.zeros(2)
        >>> td = TensorDict({"x": x}, batch_size=[2])
        >>> td.set_("x", torch.ones(2))["x"] is x, x.tolist()
        (True, [1.0, 1.0])
    """
    if type(key) is str:  # the common call: no path to walk
        path: tuple[str, ...] = (key,)
        node = self
    else:
        path = key_tuple(key)
        node = self._walk_to(path)
    current = node._get_str(path[-1], MISSING)
    try:
        fast = (
            type(item) is _Tensor
            and type(current) is _Tensor
            and item.shape == current.shape
            and ((device := node.device) is None or item.device == device)
        )
    except RuntimeError:  # a strided nested tensor has no .shape: the checked path
        fast = False
    if fast:  # the leaf's own shape fits the batch size too: nothing to convert or check
        node._set_str(path[-1], item, inplace=True, validated=True)
        return self
    if current is MISSING:
        raise _errors.missing_key(path, node._keys_str())
    value = node._validate(_into(item, current), path, node, non_blocking)
    _check_inplace_shape(path, value, current)
    node._set_str(path[-1], value, inplace=True, validated=True)
    return self


def _validate(
    self: TensorDictBase, value: Any, path: tuple[str, ...], node: Any = None, non_blocking: bool = False
) -> Any:
    """Turn ``value`` into a leaf that fits ``node``'s batch size and device."""
    node = self if node is None else node
    bs = node.batch_size
    if isinstance(value, _Tensor):
        if type(value) is not _Tensor and isinstance(value, UnbatchedTensor):  # any shape: stamped with bs
            device = node.device
            if device is not None and value.device != device:
                value = value.to(device, non_blocking=non_blocking)
            return value._with_batch_size(bs)
        try:
            shape = value.shape
        except RuntimeError:  # a strided nested tensor: its sizes, -1 where they vary
            shape = ragged.shape(value)
        if shape[: len(bs)] != bs:
            raise _errors.batch_mismatch(bs, path, shape)
        device = node.device
        if device is not None and value.device != device:
            value = value.to(device, non_blocking=non_blocking)
        return value
    if is_non_tensor(value) and node._maybe_names() is not None:
        value = _named_leaf(value, node, path)  # it takes the names of its node's dims (as tensordict)
    if is_td(value):
        vbs = value.batch_size
        if vbs[: len(bs)] != bs:
            if len(vbs) < len(bs):
                value = value.clone(False)
                value.batch_size = bs
            else:
                raise _errors.batch_mismatch(bs, path, vbs)
        if getattr(type(value), "_named_by_copy", False) and node._maybe_names() is not None:
            value = _named_node(value, node, path)
        device = node.device
        if device is not None and value.device != device:
            value = value.to(device, non_blocking=non_blocking)
        return value
    if isinstance(value, Mapping):
        return self._dense_cls(value, batch_size=bs, device=node.device, names=node._maybe_names(), _path=path)
    if isinstance(value, (int, float, bool, complex, np.ndarray, np.generic, tuple)):
        try:
            tensor = torch.as_tensor(value, device=node.device)
        except (TypeError, ValueError, RuntimeError):
            if type(value) is not tuple or (array := np.asarray(value)).dtype.kind in "biufc":
                raise
            return node._non_tensor_cls._new(array, bs, node.device)._named(node._maybe_names())  # (tensordict's)
        return node._validate(tensor, path, node)
    if isinstance(value, list):
        if not _options.LIST_TO_STACK:  # set_list_to_stack(False): numpy's array of it, as tensordict
            array = _list_as_array(value)
            if isinstance(array, np.ndarray) and array.dtype.kind in "biufc":
                return node._validate(array, path, node)
            return node._non_tensor_cls._new(array, bs, node.device)._named(node._maybe_names())
        return _list_leaf(node, value, path)
    return node._non_tensor_cls._new(value, bs, node.device)._named(node._maybe_names())


def _list_leaf(node: Any, value: list[Any], path: tuple[str, ...]) -> Any:
    """A list under ``set_list_to_stack(True)``: the tensor, stack or TensorDict it gives (``_list_leaf.py``).

    A stack made of a list is unnamed, as tensordict's. A list tensordict cannot read keeps a stack of
    its first levels, one per batch dim.
    """
    bs = node.batch_size
    leaf = read_list(value, node._non_tensor_stack_cls)
    if isinstance(leaf, _Tensor):
        return node._validate(leaf, path, node)
    if leaf is None:
        if not bs or len(value) != bs[0]:
            raise _errors.batch_mismatch(bs, path, torch.Size([len(value)]))
        try:
            leaf = node._non_tensor_stack_cls.from_list(value, depth=len(bs))
        except RuntimeError:
            raise _errors.batch_mismatch(bs, path, torch.Size([len(value)])) from None
    if leaf.batch_size[: len(bs)] != bs:
        raise _errors.batch_mismatch(bs, path, leaf.batch_size)
    out = node._validate(leaf, path, node)
    return out._named(None) if is_non_tensor(out) else out


def _list_as_array(value: list[Any]) -> Any:
    """A list under ``set_list_to_stack(False)``: ``np.asarray(value)`` (a tensor of it when it holds numbers).

    A list numpy cannot hold as it is stays a list (one non-tensor value): a ragged one (tensordict
    raises) and one of mixed types that numpy would turn into strings (``["a", 1]`` -> ``["a", "1"]``).
    """
    try:
        array = np.asarray(value)
    except ValueError:
        return value
    if array.dtype.kind in "US" and array.tolist() != value:
        return value
    return array


def _named_leaf(leaf: Any, node: Any, path: tuple[str, ...]) -> Any:
    """The non-tensor ``leaf`` with ``node``'s dim names for its first dims, as tensordict's ``refine_names``.

    ``leaf`` itself when it has them (or when its batch does not fit: refused by the caller), else a copy.
    A dim of ``leaf`` named otherwise than ``node``'s (unnamed there included) raises ``RuntimeError``.
    """
    bs = node.batch_size
    if leaf.batch_size[: len(bs)] != bs:
        return leaf  # (refused below)
    wanted = _wanted_names(leaf, node, path, "non-tensor leaf")
    return leaf if wanted is None else leaf._follow(None, NO_DEFAULT, checked_names(wanted, leaf.batch_size))


def _named_node(value: Any, node: Any, path: tuple[str, ...]) -> Any:
    """The TensorDict ``value`` set into the named ``node``, as tensordict stores it.

    ``value`` itself when its names agree, else a shallow copy with ``node``'s names for its first dims (the
    caller's object keeps its names).
    """
    wanted = _wanted_names(value, node, path, "TensorDict")
    if wanted is None:
        return value
    out = value.copy()
    out.names = wanted
    return out


def _wanted_names(value: Any, node: Any, path: tuple[str, ...], what: str) -> list[Any] | None:
    """``node``'s names then ``value``'s own for its further dims; None when ``value`` has them already.

    A dim of ``value`` named otherwise than ``node``'s (unnamed there included) raises ``RuntimeError``.
    """
    current = value.names
    wanted = [*node._maybe_names(), *current[len(node.batch_size) :]]
    if current == wanted:
        return None
    if any(name is not None and name != want for name, want in zip(current, wanted, strict=True)):
        raise RuntimeError(
            f"refine_names: cannot coerce TensorDict names {current} with {wanted}: the {what} "
            f"{_errors.fmt_path(path)} names the dims of its TensorDict otherwise"
        )
    return wanted


def del_(self: TensorDictBase, key: NestedKey) -> TensorDictBase:
    """Delete ``key``; returns self (a key through a leaf raises ``ValueError``, as tensordict)."""
    path = key_tuple(key)
    _, walked, stop = self._locate(path)
    if walked != len(path) - 1 and stop is not MISSING:
        raise _errors.key_through_leaf(path, walked + 1, stop)
    node = self._walk_to(path)
    if node.is_locked:
        raise _errors.locked()
    if not node._has_str(path[-1]):
        raise _errors.missing_key(path, node._keys_str())
    node._del_str(path[-1])
    return self


def pop(self: TensorDictBase, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
    """Remove ``key`` and return its value (``default`` when given and missing)."""
    out = self._get(key, MISSING)
    if out is MISSING:
        if default is NO_DEFAULT:
            raise _errors.missing_key(key_tuple(key), self._keys_str())
        return default
    self.del_(key)
    return out


def popitem(self: TensorDictBase) -> tuple[str, Any]:
    """Remove and return the last inserted ``(key, value)`` of this level."""
    keys = list(self._keys_str())
    if not keys:
        raise KeyError("popitem(): tensordict is empty")
    key = keys[-1]
    return key, self.pop(key)


def setdefault(self: TensorDictBase, key: NestedKey, default: Any, inplace: bool = False) -> Any:
    """Return the value at ``key``, setting it to ``default`` first when missing."""
    out = self._get(key, MISSING)
    if out is MISSING:
        self.set(key, default, inplace=inplace)
        out = self._get(key)
    return out


def clear(self: TensorDictBase) -> TensorDictBase:
    """Remove every key."""
    if self.is_locked:
        raise _errors.locked()
    for key in list(self._keys_str()):
        self._del_str(key)
    return self


UPDATE_OPTIONS = frozenset(
    {"clone", "inplace", "non_blocking", "keys_to_update", "is_leaf", "update_batch_size", "ignore_lock"}
)
"""The keyword arguments of :func:`update` that are options; any other keyword is an entry to write."""


def update(
    self: TensorDictBase,
    input_dict_or_td: Any = None,
    clone: bool = False,
    inplace: bool = False,
    *,
    non_blocking: bool = False,
    keys_to_update: Sequence[NestedKey] | None = None,
    is_leaf: Callable[[type], bool] | None = None,
    update_batch_size: bool = False,
    ignore_lock: bool = False,
    **kwargs: Any,
) -> TensorDictBase:
    """Write every entry of a mapping or TensorDict, then the keyword entries, into this one (nested entries merge).

    All values are validated before anything is written, so a bad entry leaves ``self`` unchanged.
    Keyword entries (``td.update(a=tensor)``) are written after ``input_dict_or_td``'s, as tensordict does.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2)}, batch_size=[2])
        >>> td.update({"b": torch.ones(2)}).sorted_keys
        ['a', 'b']
    """
    if update_batch_size and is_td(input_dict_or_td):
        self.batch_size = input_dict_or_td.batch_size
    wanted = None if keys_to_update is None else {key_tuple(k) for k in keys_to_update}
    plan: list[tuple[tuple[str, ...], Any]] = []
    self._plan_update(input_dict_or_td, (), wanted, clone, plan, is_leaf)
    if kwargs:
        self._plan_update(kwargs, (), wanted, clone, plan, is_leaf)
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


def _parent_of(self: TensorDictBase, path: tuple[str, ...]) -> Any:
    """The existing node that holds ``path[-1]``, or None when a level is missing."""
    node, walked, _ = self._locate(path)
    return node if walked == len(path) - 1 else None


def _plan_update(
    self: TensorDictBase, source: Any, prefix: tuple[str, ...], wanted: Any, clone: bool, plan: list[Any], is_leaf: Any
) -> None:
    def merge(path: tuple[str, ...], value: Any) -> bool:  # a nested source merges into an existing node
        if is_leaf is not None and is_leaf(type(value)):
            return False
        target = self.get(path, None)
        return target is not None and is_td(target) and not is_non_tensor(target)

    for path, value in source_leaves(source, "update", merge, prefix):
        if wanted is not None and not any(path[: len(w)] == w for w in wanted):
            continue
        if clone and (isinstance(value, _Tensor) or is_td(value)):
            value = value.clone()
        plan.append((path, value))


def update_(
    self: TensorDictBase,
    input_dict_or_td: Any = None,
    clone: bool = False,
    *,
    non_blocking: bool = False,
    keys_to_update: Sequence[NestedKey] | None = None,
    **kwargs: Any,
) -> TensorDictBase:
    """Copy every entry into the existing leaves; every key must already exist.

    Keyword arguments are entries too, by top-level key (``td.update_(a=torch.zeros(2))``).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.ones(2), batch_size=[2]).update_(a=torch.zeros(2))["a"]
        tensor([0., 0.])
    """
    if kwargs or input_dict_or_td is None:
        given = {} if input_dict_or_td is None else dict(input_dict_or_td.items())
        input_dict_or_td = {**given, **kwargs}
    wanted = None if keys_to_update is None else {key_tuple(k) for k in keys_to_update}
    pairs = []
    for path, value in source_leaves(input_dict_or_td, "update_"):
        if wanted is not None and not any(path[: len(w)] == w for w in wanted):
            continue
        try:
            node = self._walk_to(path)
            current = node._get_str(path[-1], MISSING)
            if current is MISSING:
                raise _errors.missing_key(path, node._keys_str())
        except KeyError as err:
            raise _errors.not_in_dest(err, path) from None
        value = node._validate(_into(value, current), path, node, non_blocking)
        _check_inplace_shape(path, value, current)
        pairs.append((node, path, value))
    for node, path, value in pairs:
        node._set_str(path[-1], value.clone() if clone else value, inplace=True, validated=True)
    return self


def _into(value: Any, current: Any) -> Any:
    """``value`` to be copied into ``current``: into an unbatched entry, a plain tensor is unbatched data too."""
    if type(current) is not _Tensor and isinstance(current, UnbatchedTensor) and isinstance(value, _Tensor):
        return UnbatchedTensor(value)
    return value


def _check_inplace_shape(path: tuple[str, ...], value: Any, current: Any) -> None:
    """Raise if ``value`` cannot be copied into the existing leaf ``current``."""
    if isinstance(current, _Tensor) and isinstance(value, _Tensor) and (current.is_nested or value.is_nested):
        if not ragged.same_sizes(value, current):
            raise _errors.InplaceWriteError(
                f"Failed to update {path[-1]!r}: cannot write a value of shape {_errors.fmt_shape(leaf_shape(value))} "
                f"in place into the nested tensor {_errors.fmt_path(path)} of shape "
                f"{_errors.fmt_shape(leaf_shape(current))} (the components' sizes must match)"
            )
        return
    if isinstance(current, _Tensor) and isinstance(value, _Tensor) and value.shape != current.shape:
        try:
            ok = torch.broadcast_shapes(value.shape, current.shape) == current.shape  # type: ignore[no-untyped-call]
        except RuntimeError:
            ok = False
        if not ok:
            raise _errors.InplaceWriteError(  # "Failed to update 'b'": tensordict's phrase, users match on it
                f"Failed to update {path[-1]!r}: cannot write a value of shape {_errors.fmt_shape(value.shape)} "
                f"in place into {_errors.fmt_path(path)} of shape {_errors.fmt_shape(current.shape)}"
            )
