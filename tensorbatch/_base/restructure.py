"""Edits of a tree's structure: rename, move out, create, drop empty nodes, merge leaves, and become.

Functions here are TensorDictBase methods: ``base.py`` attaches them to the class. Every edit
checks everything it can before it writes (a refused call leaves the container unchanged).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from .. import _errors
from .._keys import NestedKey, key_tuple
from .._ops.traverse import MISSING, NO_DEFAULT, is_td, named_nodes

if TYPE_CHECKING:
    from ..base import TensorDictBase


def _take_result(self: TensorDictBase, other: TensorDictBase) -> TensorDictBase:
    """Take ``other``'s entries, batch size, names and device: the in-place form of ops that build a new tree.

    Nested TensorDicts found in both keep their identity (each becomes its counterpart in turn); the
    old leaves are dropped, so their storage is released once nothing else holds it.

    Raises:
        RuntimeError: when any node is locked (nothing is changed).
    """
    if any(node.is_locked for _, node in named_nodes(self)):
        raise _errors.locked()
    _take_node(self, other)
    return self


def _take_node(node: Any, other: Any) -> None:
    kept = {}
    for key in list(node._keys_str()):
        old = node._get_str(key)
        if is_td(old) and type(old) is node._dense_cls and is_td(other._get_str(key, None)):
            kept[key] = old
        node._del_str(key)  # first: the node is empty, so any batch size fits it
    if node.batch_size != other.batch_size:
        node._change_batch_size(other.batch_size)
    if other.device != node.device:
        node._adopt_device(other.device)
    names = other._maybe_names()
    if names != node._maybe_names():
        node.names = list(names) if names is not None else None
    for key, value in other._items_str():
        old = kept.get(key)
        if old is not None:
            _take_node(old, value)
            value = old
        node._set_str(key, value, inplace=False, validated=True)


def rename_keys(self: TensorDictBase, mapping: Mapping[NestedKey, NestedKey], *, strict: bool = True) -> TensorDictBase:
    """A new TensorDict with keys renamed by ``mapping`` (old key -> new key); the leaves are shared.

    Renames happen together, so keys may swap (``{"a": "b", "b": "a"}``).

    Args:
        mapping: old key -> new key (nested keys allowed on both sides).
        strict: raise a KeyError for a missing old key; ``False`` skips it.

    Raises:
        KeyError: a missing old key (with ``strict``).
        ValueError: a new key that already holds a value not renamed away.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
        >>> td.rename_keys({"a": "b", "b": "a"})["a"]
        tensor([1., 1.])
    """
    pairs = [(key_tuple(old), key_tuple(new)) for old, new in mapping.items()]
    present = []
    for old, new in pairs:
        if self._get(old, MISSING) is MISSING:
            if strict:
                self._get(old)  # raises the KeyError naming the missing level
            continue
        present.append((old, new))
    moved = {old for old, _ in present}
    for _, new in present:
        if new not in moved and self._get(new, MISSING) is not MISSING:
            raise ValueError(
                f"rename_keys: the destination {_errors.fmt_path(new)} already holds a value that is not renamed away"
            )
    out = self._copy_tree()
    values = [out._get(old) for old, _ in present]
    for old, _ in present:
        out.del_(old)
    for (_, new), value in zip(present, values, strict=True):
        out.set(new, value)
    for old, _ in present:  # the nodes the renames emptied go too (as tensordict), deepest first
        for depth in range(len(old) - 1, 0, -1):
            node = out._get(old[:depth], None)
            if node is None or not is_td(node) or len(node._keys_str()):
                break
            out.del_(old[:depth])
    return out


def separates(
    self: TensorDictBase, *keys: NestedKey, default: Any = NO_DEFAULT, strict: bool = True, filter_empty: bool = True
) -> TensorDictBase:
    """Move ``keys`` out of this TensorDict into a new one (same batch size), which is returned.

    Args:
        keys: the keys to move.
        default: the value stored for a missing key (``None`` is stored as a ``NonTensorData(None)``).
        strict: raise a KeyError for a missing key when there is no default; ``False`` stores ``None`` for it.
        filter_empty: drop the nested nodes left empty here.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
        >>> td.separates("a").sorted_keys, td.sorted_keys
        (['a'], ['b'])
    """
    paths = [key_tuple(k) for k in keys]
    taken: list[tuple[tuple[str, ...], Any]] = []
    for path in paths:
        value = self._get(path, MISSING)
        if value is MISSING:
            if default is NO_DEFAULT and strict:
                self._get(path)  # raises the KeyError naming the missing level
            value = None if default is NO_DEFAULT else default  # (None: stored as a NonTensorData, as tensordict)
        taken.append((path, value))
    if taken and self.is_locked:
        raise _errors.locked()
    out = self.empty()
    for path, value in taken:
        out.set(path, value)
    for path, _ in taken:
        if self._get(path, MISSING) is not MISSING:
            self.del_(path)
    if filter_empty:
        filter_empty_(self)
    return out


def create_nested(self: TensorDictBase, key: NestedKey) -> TensorDictBase:
    """Store an empty TensorDict (this one's batch size and device) at ``key``, replacing what is there.

    Returns self.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(batch_size=[2]).create_nested(("a", "b"))
        >>> td["a", "b"].batch_size
        torch.Size([2])
    """
    path = key_tuple(key)
    parent = self._walk_to(path, create=True) if len(path) > 1 else self
    if parent.is_locked:
        raise _errors.locked()
    node = self._dense_cls._new_unsafe({}, parent.batch_size, parent.device, parent._maybe_names())
    parent._set_str(path[-1], node, inplace=False, validated=True)
    return self


def filter_empty_(self: TensorDictBase) -> TensorDictBase:
    """Remove the nested TensorDicts that hold no leaf, at any depth. Returns self.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a={"b": {}}, c=torch.zeros(2), batch_size=[2])
        >>> td.filter_empty_().sorted_keys
        ['c']
    """
    empty = [(path, node) for path, node in named_nodes(self, post_order=True) if path and node.is_empty()]
    if not empty:
        return self
    if self.is_locked or any(self._get(p[:-1]).is_locked for p, _ in empty if len(p) > 1):
        raise _errors.locked()
    for path, _ in empty:
        if self._get(path, MISSING) is not MISSING:
            self.del_(path)
    return self


def _merge_tensors(
    self: TensorDictBase, torch_fn: Any, keys: tuple[NestedKey, ...], out_key: NestedKey, dim: int, keep_entries: bool
) -> TensorDictBase:
    paths = [key_tuple(k) for k in keys]
    values = [self._get(p) for p in paths]  # a missing key raises first
    merged = torch_fn(values, dim)
    if not keep_entries:
        if self.is_locked:
            raise _errors.locked()
        self._validate(merged, key_tuple(out_key), self)  # a misfit refuses before any delete
        for path in dict.fromkeys(paths):
            self.del_(path)
    self.set(out_key, merged)
    return self


def cat_tensors(
    self: TensorDictBase, *keys: NestedKey, out_key: NestedKey, dim: int = 0, keep_entries: bool = False
) -> TensorDictBase:
    """Concatenate the tensors at ``keys`` along ``dim`` (a tensor dim) into ``out_key``. Returns self.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.zeros(2, 1), b=torch.ones(2, 2), batch_size=[2])
        >>> td.cat_tensors("a", "b", out_key="c", dim=-1)["c"].shape, td.sorted_keys
        (torch.Size([2, 3]), ['c'])
    """
    return _merge_tensors(self, torch.cat, keys, out_key, dim, keep_entries)


def stack_tensors(
    self: TensorDictBase, *keys: NestedKey, out_key: NestedKey, dim: int = 0, keep_entries: bool = False
) -> TensorDictBase:
    """Stack the tensors at ``keys`` along a new ``dim`` (a tensor dim) into ``out_key``. Returns self.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
        >>> td.stack_tensors("a", "b", out_key="c", dim=-1)["c"].shape
        torch.Size([2, 2])
    """
    return _merge_tensors(self, torch.stack, keys, out_key, dim, keep_entries)
