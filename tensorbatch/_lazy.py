"""LazyStackedTensorDict: a stack that keeps its members apart until a leaf is asked for.

Members may have different key sets (only common keys are visible) and different leaf shapes
(reading such a key needs ``as_padded_tensor``, ``as_nested_tensor`` or ``as_list``). Reads
stack the members' leaves; writes are split along the stack dim and go to the members.

Value operations (the pointwise table, casts, apply, clone, select/exclude, ...) run per member
and give a lazy stack again, so heterogeneous stacks support them; in-place ones compute every
member's result before writing any (no half-applied update). Shape operations give a lazy stack
too (tensorbatch/_lazy_shape.py: a table of how each op moves the stack dim). Reductions use the
generic path, which reads stacked leaves and gives an in-memory TensorDict.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from . import _errors, _lazy_shape, _options
from . import _lazy_deprecated as _deprecated
from ._base import locks as _locks
from ._base.coerce import as_size as _as_size
from ._base.coerce import checked_names as _checked_names
from ._base.export import node_facts, tree_lines
from ._base.keys import KeyList, NestedKeysView
from ._base.keys import _member as key_member
from ._base.transfer import accelerators_of, settle
from ._compat import allow_in_weights_only_load
from ._keys import NestedKey, is_key, key_tuple
from ._nontensor import stack_non_tensor, value_of
from ._ops import pointwise as _pointwise
from ._ops.index import check_mask, normalize
from ._ops.meta import TENSOR, LeafMeta
from ._ops.shape import _dim
from ._ops.torch_function import _columns
from ._ops.traverse import (
    COLLECTION_TYPES,
    GET_DEFAULT,
    MISSING,
    NO_DEFAULT,
    NON_TENSOR_TYPES,
    REWRAP_TYPES,
    apply_leaves,
    flat_leaves,
    from_leaves,
    is_node,
    is_td,
    leaf_shape,
    named_leaves,
    named_nodes,
    unset_default,
)
from ._unbatched import UnbatchedTensor, check_shared
from .base import TensorDictBase

_Tensor = torch.Tensor
_Size = torch.Size
# A lazy stack of one TensorClass's instances as an instance of that class (as tensordict reads it), or None
# when the members are not such instances: tensorbatch/_tc_build.py (a layer above) installs it on import.
STACK_AS_CLASS: Callable[[list[Any], int, str | None], Any] | None = None


def _check_members(tds: Sequence[Any], what: str) -> torch.Size:
    """Check the members and return their common batch size (``-1`` in dims where they differ)."""
    if COLLECTION_TYPES.issuperset(map(type, tds)):  # the common case: TensorDicts of one batch size
        sizes = [td.batch_size for td in tds]
        if sizes.count(sizes[0]) == len(sizes):
            return sizes[0]  # type: ignore[no-any-return]
    first = tds[0].batch_size if is_td(tds[0]) else None
    ragged = False
    for i, td in enumerate(tds):
        if not is_td(td):
            raise TypeError(f"{what} expects TensorDicts, got a {type(td).__name__}")
        size = td.batch_size
        if size != first:
            if len(size) != len(first):  # type: ignore[arg-type]
                raise RuntimeError(
                    f"{what}: member {i} has batch_size {_errors.fmt_shape(size)} but member 0 has "
                    f"{_errors.fmt_shape(first)}; all members must have the same number of batch dims"
                )
            ragged = True
    if not ragged:
        return first  # type: ignore[return-value]
    sizes = [td.batch_size for td in tds]  # a dim where members differ reads -1, as in tensordict
    return _Size([dim[0] if len(set(dim)) == 1 else -1 for dim in zip(*sizes, strict=True)])


def _check_same_batch(first: Any, tds: list[Any], what: str) -> None:
    """New members must match the existing ones' batch size (ValueError, as tensordict, also for other dims)."""
    for td in tds:
        if is_td(td) and td.batch_size != first.batch_size:
            raise ValueError(
                f"{what}: the new member has batch_size {_errors.fmt_shape(td.batch_size)} but the members have "
                f"{_errors.fmt_shape(first.batch_size)}"
            )
    _check_members([first, *tds], what)


class LazyStackedTensorDict(TensorDictBase):
    """A lazy stack of TensorDicts along ``stack_dim``.

    Dim names live where the dims do: the stack dim's name on the stack, the other dims' names on the
    members (setting ``names`` on the stack names the members). A dim whose members disagree on its
    name reads as unnamed.

    Args:
        *tensordicts: the members, all with the same batch size.
        stack_dim: where the stack dim goes in the batch size.
        batch_size: the expected batch size (required when there are no members).
        names: names of every batch dim (the members are named too).
        stack_dim_name: name of the stack dim alone.

    Examples:
        >>> import torch
        >>> from tensorbatch import LazyStackedTensorDict, TensorDict
        >>> a = TensorDict({"x": torch.zeros(3, 2)}, [3])
        >>> b = TensorDict({"x": torch.ones(3, 4)}, [3])
        >>> s = LazyStackedTensorDict(a, b)
        >>> s.batch_size
        torch.Size([2, 3])
        >>> s[1] is b
        True
        >>> s.get("x", as_padded_tensor=True).shape
        torch.Size([2, 3, 4])
    """

    __slots__ = ("__weakref__", "_batch_size", "_is_locked", "_stack_dim", "_stack_name", "_tds")
    _named_by_copy = True  # (see TensorDictBase._named_by_copy)

    def __init__(
        self,
        *tensordicts: Any,
        stack_dim: int = 0,
        batch_size: Any = None,
        names: Sequence[str | None] | None = None,
        stack_dim_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        tds = list(tensordicts)
        self._stack_name: str | None = None
        if not tds:
            if batch_size is None:
                raise RuntimeError("LazyStackedTensorDict needs members or a batch_size")
            bs = _as_size(batch_size)
            if bs[stack_dim] != 0:
                raise RuntimeError(f"an empty LazyStackedTensorDict needs size 0 at stack_dim, got {list(bs)}")
            self._tds: list[Any] = []
            self._stack_dim, self._batch_size, self._is_locked = stack_dim % len(bs), bs, False
        else:
            member_bs = _check_members(tds, "LazyStackedTensorDict")
            nd = len(member_bs)
            if not -nd - 1 <= stack_dim <= nd:
                raise _errors.StackDimError(f"stack_dim {stack_dim} is out of range for members with {nd} batch dims")
            self._init(tds, stack_dim % (nd + 1), member_bs)
            if batch_size is not None and _as_size(batch_size) != self._batch_size:
                raise RuntimeError(
                    f"batch_size {list(_as_size(batch_size))} does not match the stack's {list(self._batch_size)}"
                )
        if names is not None:
            self.names = names
        if stack_dim_name is not None:
            if stack_dim_name in self.names:
                raise ValueError(f"stack_dim_name {stack_dim_name!r} is already the name of a member dim: {self.names}")
            self._stack_name = stack_dim_name

    def _init(self, tds: list[Any], stack_dim: int, member_bs: torch.Size | None = None) -> None:
        if member_bs is None:
            member_bs = _check_members(tds, "LazyStackedTensorDict") if tds else _Size([])
        bs = _Size((*member_bs[:stack_dim], len(tds), *member_bs[stack_dim:]))
        self._tds, self._stack_dim, self._batch_size, self._is_locked = tds, stack_dim, bs, False

    @classmethod
    def _new(
        cls, tds: list[Any], stack_dim: int, member_bs: torch.Size | None = None, stack_name: str | None = None
    ) -> LazyStackedTensorDict:
        out = cls.__new__(cls)
        out._init(tds, stack_dim, member_bs)
        out._stack_name = stack_name
        return out

    @classmethod
    def from_dict(  # type: ignore[override]  # tensordict's signature for lazy stacks
        cls,
        input_dict: Any,
        *other: Any,
        auto_batch_size: bool = False,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        stack_dim_name: str | None = None,
        stack_dim: int = 0,
        names: Any = None,
    ) -> LazyStackedTensorDict:
        """A lazy stack of one TensorDict per dict: a list of dicts, or a dict of them keyed ``"0"``, ``"1"``...

        ``batch_size``, ``device``, ``batch_dims`` and ``auto_batch_size`` build each member (as
        :meth:`TensorDict.from_dict`); ``other`` dicts are more members; ``stack_dim_name`` names the stack dim,
        ``names`` (exclusive with it) names every dim of the result.

        Examples:
            >>> import torch
            >>> from tensorbatch import LazyStackedTensorDict
            >>> s = LazyStackedTensorDict.from_dict([{"a": torch.zeros(3)}, {"a": torch.zeros(4)}], stack_dim_name="t")
            >>> s.batch_size, s.names, s.get_item_shape("a")
            (torch.Size([2]), ['t'], torch.Size([2, -1]))
        """
        if names is not None and stack_dim_name is not None:
            raise ValueError("names and stack_dim_name are exclusive.")
        dicts = (
            [input_dict[str(i)] for i in range(len(input_dict))]
            if isinstance(input_dict, Mapping)
            else list(input_dict)
        )
        dense = cls._dense_cls
        members = [
            dense.from_dict(
                d, batch_size=batch_size, device=device, batch_dims=batch_dims, auto_batch_size=auto_batch_size
            )
            for d in [*dicts, *other]
        ]
        out = cls(*members, stack_dim=stack_dim, stack_dim_name=stack_dim_name)
        if names is not None:
            out.names = names
        return out

    def _member_bs(self) -> torch.Size:
        d = self._stack_dim
        return _Size((*self._batch_size[:d], *self._batch_size[d + 1 :]))

    # ------------------------------------------------------------------ facts
    @property
    def tensordicts(self) -> list[Any]:
        """The members (a live list)."""
        return self._tds

    @property
    def stack_dim(self) -> int:
        """The batch dim along which the members are stacked."""
        return self._stack_dim

    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._change_batch_size(_as_size(value))

    def _change_batch_size(self, new_size: torch.Size) -> None:
        d = self._stack_dim
        if len(new_size) <= d or new_size[d] != len(self._tds):
            raise RuntimeError(
                f"cannot set batch_size {list(new_size)} on a lazy stack of {len(self._tds)} members along dim {d}"
            )
        member = _Size((*new_size[:d], *new_size[d + 1 :]))
        old = [td.batch_size for td in self._tds]
        try:
            for td in self._tds:
                td.batch_size = member
        except Exception:
            for td, size in zip(self._tds, old, strict=False):  # undo: no half-applied change
                if td.batch_size != size:
                    td.batch_size = size
            raise
        if len(new_size) != len(self._batch_size):  # as a TensorDict: a new number of dims drops the names
            self._stack_name = None
        self._batch_size = new_size

    @property
    def device(self) -> torch.device | None:
        devices = {td.device for td in self._tds}
        return devices.pop() if len(devices) == 1 else None

    @property
    def is_locked(self) -> bool:
        return self._is_locked or any(td.is_locked for td in self._tds)

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        self.lock_() if value else self.unlock_()

    def _set_lock(self, value: bool) -> None:
        self._is_locked = value  # this node's own flag: lock_() walks the members too

    def _restack(self, members: list[Any]) -> LazyStackedTensorDict:
        """A lazy stack like this one of ``members`` (the traversal's results for this stack's members)."""
        return LazyStackedTensorDict._new(members, self._stack_dim, stack_name=self._stack_name)

    def _ragged(self) -> bool:
        """True when the members' batch sizes or leaf shapes differ (the stack cannot be read dense)."""
        if -1 in self._batch_size:
            return True
        for key in self._keys_str():
            values = [td._get_str(key) for td in self._tds]
            first = values[0]
            if isinstance(first, _Tensor):
                if any(not isinstance(v, _Tensor) or leaf_shape(v) != leaf_shape(first) for v in values):
                    return True
            elif (
                is_node(first)
                and all(is_node(v) for v in values)
                and type(first) not in NON_TENSOR_TYPES
                and LazyStackedTensorDict._new(values, self._stack_dim)._ragged()
            ):
                return True
        return False

    def _stacked_members(self) -> tuple[int, list[Any]]:
        """Storage hook: the members, stacked along the stack dim (walks over what is stored visit them)."""
        return self._stack_dim, self._tds

    def _maybe_names(self) -> tuple[str | None, ...] | None:
        member = _common_names(self._tds)
        if member is None and self._stack_name is None:
            return None
        if member is None:
            member = (None,) * (len(self._batch_size) - 1)
        d = self._stack_dim
        return (*member[:d], self._stack_name, *member[d:])

    @property
    def names(self) -> list[str | None]:
        """Names of the batch dims: the stack dim's own, the members' (where they agree) for the others.

        Setting them names the stack dim and every member's dims; ``None`` clears them all.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict, lazy_stack
            >>> s = lazy_stack([TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(2)])
            >>> s.refine_names("x", "y").names
            ['x', 'y']
            >>> s[0].names, s[:, 0].names
            (['y'], ['x'])
        """
        names = self._maybe_names()
        return list(names) if names is not None else [None] * len(self._batch_size)

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        d = self._stack_dim
        member: tuple[str | None, ...] | None = None
        if value is not None:
            value = _checked_names(value, self._batch_size)
            member = (*value[:d], *value[d + 1 :])
            if not self._tds and any(n is not None for n in member):
                raise ValueError(
                    f"names {list(value)}: a lazy stack without members can only name its stack dim (dim {d})"
                )
        old = [td._maybe_names() for td in self._tds]
        for i, td in enumerate(self._tds):
            try:
                td.names = member
            except Exception as err:
                for done, names in zip(self._tds[:i], old, strict=False):  # undo: no half-named stack
                    done.names = names
                err.add_note(f"while naming member {i} ({type(td).__name__}) of a lazy stack: nothing was renamed")
                raise
        self._stack_name = None if value is None else value[d]

    # ------------------------------------------------------------------ primitives
    def _keys_str(self) -> list[str]:
        if not self._tds:
            return []
        first, rest = self._tds[0], self._tds[1:]
        return [k for k in first._keys_str() if all(td._get_str(k, MISSING) is not MISSING for td in rest)]

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        *,
        sort: bool = False,
    ) -> Any:
        """The keys every member has (in the first member's order); reads no leaf.

        With ``include_nested`` or ``leaves_only``, a live view (as a TensorDict's).
        """
        if include_nested or leaves_only:
            return NestedKeysView(lambda: self._common_keys(include_nested, leaves_only, is_leaf, sort))
        return _TopKeys(self._common_keys(include_nested, leaves_only, is_leaf, sort), self)

    def _common_keys(
        self, include_nested: bool, leaves_only: bool, is_leaf: Callable[[type], bool] | None, sort: bool
    ) -> list[Any]:
        if not self._tds:
            return []
        # (comprehensions: one walk of each member's key view, where list() would ask its len() first)
        lists = [[k for k in td.keys(include_nested, leaves_only, is_leaf, sort=sort)] for td in self._tds]
        common = set(lists[0]).intersection(*lists[1:])
        return [k for k in lists[0] if k in common]

    def _has_str(self, key: str) -> bool:
        return bool(self._tds) and all(td._has_str(key) for td in self._tds)

    def is_empty(self) -> bool:
        """True when no key is common to every member and a leaf."""
        return not self.keys(True, True)

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> LazyStackedTensorDict:
        """Rename a key in every member (checked in all of them first)."""
        for td in self._tds:
            if key_tuple(old_key) not in td:
                raise self._missing(old_key) if type(old_key) is str else KeyError(old_key)
            if safe and new_key in td:
                raise KeyError(f"key {new_key!r} already exists in a member; rename_key_(safe=True) refuses")
        if self.is_locked:
            raise _errors.locked()
        for td in self._tds:
            td.rename_key_(old_key, new_key, safe=safe)
        return self

    def all(self, dim: Any = None) -> Any:
        """True when every leaf of every member is all-True (``dim`` reduces the dense stack)."""
        if dim is not None:
            return TensorDictBase.all(self, dim)
        return all(td.all() for td in self._tds)

    def any(self, dim: Any = None) -> Any:
        """True when some leaf of some member has a True (``dim`` reduces the dense stack)."""
        if dim is not None:
            return TensorDictBase.any(self, dim)
        return any(td.any() for td in self._tds)

    def _items_str(self) -> Any:
        return ((k, self._get_str(k)) for k in self._keys_str())

    def _values_str(self) -> Any:
        return (self._get_str(k) for k in self._keys_str())

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        values = []
        for td in self._tds:
            value = td._get_str(key, MISSING)
            if value is MISSING:
                if default is NO_DEFAULT:
                    raise self._missing(key)
                return default
            values.append(value)
        return _stack_values(key, values, self._stack_dim, self._stack_name)

    def _missing(self, key: str) -> KeyError:
        """KeyError for a key some (or all) members lack, naming them."""
        lacking = [i for i, td in enumerate(self._tds) if td._get_str(key, MISSING) is MISSING]
        err = _errors.missing_key((key,), self._keys_str(), "LazyStackedTensorDict")  # tensordict's wording
        if len(lacking) == len(self._tds):
            return err
        return KeyError(
            f"{err.args[0]}: it is missing from members {lacking} of the lazy stack (of "
            f"{len(self._tds)}); only keys every member has can be read"
        )

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        pieces = _unbind(value, self._stack_dim)
        for td, piece in zip(self._tds, pieces, strict=True):
            exists = td._get_str(key, MISSING) is not MISSING
            td._set_str(key, piece, inplace=inplace and exists, validated=True)

    def _del_str(self, key: str) -> None:
        for td in self._tds:
            td._del_str(key)

    def del_(self, key: NestedKey) -> LazyStackedTensorDict:
        """Delete ``key``; a key only some members hold is deleted from those (none: ``KeyError``)."""
        path = key_tuple(key)
        if self.is_locked:
            raise _errors.locked()
        if path in self:  # every member holds it: the stack's own deletion (a stored stack deletes it once)
            TensorDictBase.del_(self, path)
            return self
        found = False
        for td in self._tds:
            if path in td:  # (asked member by member: a member listed twice has it the first time only)
                td.del_(path)
                found = True
        if not found:
            TensorDictBase.del_(self, path)  # raises, naming the key
        return self

    # ------------------------------------------------------------------ reading
    def get(
        self,
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
        """Value at ``key``; leaves whose shapes differ across members need one of the ``as_*`` forms.

        Args:
            key: a string or tuple of strings.
            default: returned when the key is missing (from any member).
            as_padded_tensor: pad every member's leaf to the largest shape (with ``padding_value``) and stack
                them, the members first (whatever the stack dim, as tensordict).
            as_nested_tensor: a ``torch.nested`` tensor of the members' leaves (the members first).
            as_list: the members' values as a list.
            padding_value: the fill for ``as_padded_tensor``.
            padding_side: ``"right"`` or ``"left"`` padding.
            layout: the nested-tensor layout (``torch.jagged`` by default, or ``torch.strided``).
        """
        if not (as_padded_tensor or as_nested_tensor or as_list):
            return self._get(key, default)
        path = key_tuple(key)
        values = [td._get(path, MISSING) for td in self._tds]
        if any(v is MISSING for v in values):
            if default is GET_DEFAULT:
                default = unset_default()
            if default is NO_DEFAULT:
                raise KeyError(f"key {path!r} is missing from member {[v is MISSING for v in values].index(True)}")
            return default
        if as_list:
            return values
        if as_nested_tensor:
            return torch.nested.nested_tensor(values, layout=layout or torch.jagged)
        return _pad_stack(values, 0, padding_value, padding_side)

    def get_item_shape(self, key: NestedKey) -> torch.Size:
        """Shape of the entry at ``key`` as stacked, ``-1`` in the dims where the members' entries differ.

        Members whose entries differ in their number of dims give ``torch.Size([-1])`` (as tensordict).
        Nothing is stacked when the members differ.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict, lazy_stack
            >>> s = lazy_stack([TensorDict(a=torch.zeros(3, 2)), TensorDict(a=torch.zeros(4, 2))])
            >>> s.get_item_shape("a")
            torch.Size([2, -1, 2])
        """
        path = key_tuple(key)
        shapes = []
        for td in self._tds:
            if path not in td:
                break
            shapes.append(td.get_item_shape(path))
        if not shapes or len(shapes) < len(self._tds) or all(s == shapes[0] for s in shapes):
            return TensorDictBase.get_item_shape(self, path)  # the stacked entry's (or the KeyError naming it)
        if len({len(s) for s in shapes}) > 1:
            return _Size([-1])
        dims = [size[0] if len(set(size)) == 1 else -1 for size in zip(*shapes, strict=True)]
        return _Size([*dims[: self._stack_dim], len(self._tds), *dims[self._stack_dim :]])

    # deprecated in tensordict 0.15 (removal in 0.17): tensorbatch/_lazy_deprecated.py
    valid_keys = _deprecated.valid_keys
    hook_in = property(_deprecated.hook_in)
    hook_out = property(_deprecated.hook_out)
    get_nestedtensor = _deprecated.get_nestedtensor

    def __getitem__(self, index: Any) -> Any:
        """``s[key]`` or a batch index: along the stack dim it picks members, elsewhere it indexes them."""
        if type(index) is str:
            return value_of(self._get_str(index))  # a missing key names the members that lack it
        if is_key(index):
            return TensorDictBase.__getitem__(self, index)
        plan = self._split_index(index)
        if plan is None:
            return _lazy_shape.getitem(self, index)
        picked, rest, new_dim = plan
        if new_dim is None:  # an int at the stack dim: one member
            member = self._tds[picked[0]]
            return member[rest] if rest else member
        members = [self._tds[i][rest] if rest else self._tds[i] for i in picked]
        if not members:
            return TensorDictBase.__getitem__(self, index)
        out = LazyStackedTensorDict._new(members, new_dim, None if rest else self._member_bs(), self._stack_name)
        if rest and self.is_locked:  # indexed members are new TensorDicts: locked as tensordict's are
            out.lock_()
        return out

    def _split_index(self, index: Any) -> tuple[list[int], tuple[Any, ...], int | None] | None:
        """``(member positions, index for each member, stack dim of the result or None)``.

        None when the index is not a plain per-dim index (None, masks over several dims, advanced
        indices before the stack dim): the generic path handles those.
        """
        if type(index) is int and self._stack_dim == 0:  # s[i]: one member
            n = len(self._tds)
            if not -n <= index < n:
                raise IndexError(f"index {index} is out of bounds for a lazy stack of {n} members")
            return [index % n], (), None
        if index is Ellipsis:
            index = (Ellipsis,)
        conv, _, _ = normalize(self, index, with_names=False)
        d = self._stack_dim
        items = list(conv) + [slice(None)] * (len(self._batch_size) - len(conv))
        if any(i is None for i in items) or len(items) != len(self._batch_size):
            return None
        tensors = [i for i in items if isinstance(i, _Tensor)]
        for item in tensors:
            if item.dtype == torch.bool and item.ndim != 1:
                return None
        at = items[d]
        # one 1-d index tensor off the stack dim, beside slices only, stays in its place: each member takes it
        alone = (
            len(tensors) == 1
            and tensors[0] is not at
            and tensors[0].ndim == 1
            and all(isinstance(i, slice) for i in items if i is not tensors[0])
        )
        if not alone:
            for item in items[:d]:
                if not isinstance(item, (int, slice)):
                    return None
        rest = tuple(items[:d] + items[d + 1 :])
        if all(isinstance(i, slice) and i == slice(None) for i in rest):
            rest = ()
        positions = list(range(len(self._tds)))
        if isinstance(at, int):
            return [positions[at]], rest, None
        if not alone and any(isinstance(i, _Tensor) for i in rest):  # advanced indices on both sides: torch's
            return None
        new_dim = sum(1 for i in items[:d] if not isinstance(i, int))
        if isinstance(at, slice):
            return positions[at], rest, new_dim
        at = torch.as_tensor(at)
        if at.dtype.is_floating_point or at.dtype.is_complex:
            raise IndexError(f"tensors used as indices must be long, int, byte or bool tensors, got {at.dtype}")
        if at.dtype == torch.bool:
            at = at.nonzero().squeeze(-1)
        if at.ndim != 1:
            return None
        picked = at.tolist()
        n = len(positions)
        for i in picked:
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for the stack dim {d} of size {n}")
        return [positions[i] for i in picked], rest, new_dim

    def unsqueeze(self, dim: int) -> Any:
        """Insert a dim of size 1 in every member: a lazy stack, as tensordict."""
        nd = self.batch_dims
        if not -nd - 1 <= dim <= nd:
            return TensorDictBase.unsqueeze(self, dim)  # raises
        new, d = dim % (nd + 1), self._stack_dim
        member_dim, stack_dim = (new, d + 1) if new <= d else (new - 1, d)
        return LazyStackedTensorDict._new(
            [td.unsqueeze(member_dim) for td in self._tds], stack_dim, None, self._stack_name
        )

    def squeeze(self, dim: int | None = None) -> Any:
        """Remove dims of size 1 from every member: a lazy stack (the member itself when the stack has one)."""
        bs, d = self._batch_size, self._stack_dim
        if dim is None:
            dims = [i for i, size in enumerate(bs) if size == 1]
        else:
            i = _dim(self, dim)
            dims = [i] if bs[i] == 1 else []
        if not dims:
            return self
        member_dims = sorted((i if i < d else i - 1 for i in dims if i != d), reverse=True)
        members = []
        for td in self._tds:
            for member_dim in member_dims:
                td = td.squeeze(member_dim)
            members.append(td)
        if d in dims:  # a single member
            return members[0]
        return LazyStackedTensorDict._new(members, d - sum(1 for i in dims if i < d), None, self._stack_name)

    # ------------------------------------------------------------------ member-wise writes
    def apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        batch_size: Any = None,
        inplace: bool = False,
        out: Any = None,
        **kwargs: Any,
    ) -> Any:
        """``apply`` on every member (a new batch size uses the dense path, as tensordict does)."""
        if batch_size is not None:
            return TensorDictBase.apply(self, fn, *others, batch_size=batch_size, inplace=inplace, out=out, **kwargs)
        if inplace:
            return self.apply_(fn, *others, **kwargs)
        result = _per_member("apply")(self, fn, *others, **kwargs)
        if out is not None and result is not None:
            out.update_(result)
            return out
        return result

    @property
    def grad(self) -> Any:
        """The members' gradients, as a lazy stack."""
        return LazyStackedTensorDict._new([td.grad for td in self._tds], self._stack_dim, None, self._stack_name)

    @property
    def data(self) -> Any:
        """The members' ``.data``, as a lazy stack."""
        return LazyStackedTensorDict._new([td.data for td in self._tds], self._stack_dim, None, self._stack_name)

    def zero_grad(self, set_to_none: bool = True) -> LazyStackedTensorDict:
        """Reset the members' gradients."""
        for td in self._tds:
            td.zero_grad(set_to_none)
        return self

    def zero_(self) -> LazyStackedTensorDict:
        """Zero every member's leaves."""
        for td in self._tds:
            td.zero_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> LazyStackedTensorDict:
        """Set ``requires_grad`` on every member's leaves."""
        for td in self._tds:
            td.requires_grad_(requires_grad)
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> LazyStackedTensorDict:
        """Fill the leaf (or nested TensorDict) at ``key`` in every member."""
        for td in self._tds:
            td.fill_(key, value)
        return self

    def masked_fill_(self, mask: _Tensor, value: Any) -> LazyStackedTensorDict:
        """Fill where ``mask`` (over the batch dims) is True, in every member (all filled, then written)."""
        check_mask(self, mask, RuntimeError)  # the members see only their slice of the mask
        full = mask.reshape(*mask.shape, *[1] * (self.batch_dims - mask.ndim)).expand(self.batch_size)
        return _MASKED_FILL_(self, full, value)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ writing at an index
    def __setitem__(self, index: Any, value: Any) -> None:
        if is_key(index):
            TensorDictBase.__setitem__(self, index, value)
            return
        common = None
        if not is_td(value) and not isinstance(value, dict):  # a number or tensor: only the common keys
            common = self.keys(True, True)
            if all(set(td.keys(True, True)) == set(common) for td in self._tds):
                common = None

        def write(td: Any, idx: Any, piece: Any) -> None:
            (td if common is None else td.select(*common))[idx or Ellipsis] = piece

        self._distribute(index, value, write)

    def set_at_(self, key: NestedKey, value: Any, index: Any) -> LazyStackedTensorDict:
        """Write ``value`` into the leaf at ``key`` at ``index``, in the members."""
        self._distribute(index, value, lambda td, idx, piece: td.set_at_(key, piece, idx if idx else Ellipsis))
        return self

    def update_at_(self, input_dict_or_td: Any, index: Any, clone: bool = False, **kwargs: Any) -> Any:
        """Write every entry of ``input_dict_or_td`` at ``index``, in the members."""
        self._distribute(
            index, input_dict_or_td, lambda td, idx, piece: td.update_at_(piece, idx if idx else Ellipsis, clone=clone)
        )
        return self

    def _distribute(self, index: Any, value: Any, write: Callable[[Any, tuple[Any, ...], Any], Any]) -> None:
        plan = self._split_index(index)
        if plan is None:
            self._distribute_elements(index, value, write)
            return
        picked, rest, new_dim = plan
        if new_dim is None:
            write(self._tds[picked[0]], rest, value)
            return
        target = torch.zeros((), dtype=torch.bool).expand(self._batch_size)[index].shape
        if isinstance(value, dict):
            value = self._dense_cls(value, batch_size=target)
        pieces = _pieces(value, new_dim, len(picked), target)
        for i, piece in zip(picked, pieces, strict=True):
            write(self._tds[i], rest, piece)

    def _distribute_elements(self, index: Any, value: Any, write: Callable[[Any, Any, Any], Any]) -> None:
        """Any index: find (member, element) for every selected element, then write member by member."""
        bs, d, n = self._batch_size, self._stack_dim, len(self._tds)
        member_bs = self._tds[0].batch_size
        shape = [n if i == d else 1 for i in range(len(bs))]
        member = torch.arange(n).view(shape).expand(bs)[index]
        element = torch.arange(member_bs.numel()).view(member_bs).unsqueeze(d).expand(bs)[index]
        target = member.shape
        if isinstance(value, dict):
            value = self._dense_cls(value, batch_size=target)
        flat = None
        if is_td(value):
            flat = (value if value.batch_size == target else value.expand(target)).reshape(-1)
        elif isinstance(value, _Tensor) and value.ndim:
            if value.shape[: len(target)] != target:
                raise RuntimeError(
                    f"cannot write a value of shape {_errors.fmt_shape(value.shape)} at an index selecting "
                    f"shape {_errors.fmt_shape(target)} of a lazy stack"
                )
            flat = value.reshape(-1, *value.shape[len(target) :])
        member, element = member.reshape(-1), element.reshape(-1)
        for i, td in enumerate(self._tds):
            sel = member == i
            if bool(sel.any()):
                where = tuple(torch.unravel_index(element[sel], member_bs))
                write(td, where, value if flat is None else flat[sel])

    # ------------------------------------------------------------------ members
    def insert(self, index: int, tensordict: Any) -> None:
        """Insert a member at ``index`` (batch size and lock rules apply)."""
        if self._is_locked:
            raise _errors.locked()
        if self._tds:
            _check_same_batch(self._tds[0], [tensordict], "insert")
        tds = list(self._tds)
        tds.insert(index, tensordict)
        self._tds[:] = tds
        self._init(self._tds, self._stack_dim)

    def append(self, tensordict: Any) -> None:
        """Add a member at the end."""
        self.insert(len(self._tds), tensordict)

    def extend(self, tensordict: Sequence[Any]) -> None:
        """Add members at the end: each of a sequence of TensorDicts, or each row of one along its first dim."""
        if self._is_locked:
            raise _errors.locked()
        tds = list(tensordict)
        if tds and self._tds:
            _check_same_batch(self._tds[0], tds, "extend")
        if tds:
            _check_members([*(self._tds[:1]), *tds], "extend")
            self._tds.extend(tds)
            self._init(self._tds, self._stack_dim)

    def empty(self, recurse: bool = False, *, batch_size: Any = None, **kwargs: Any) -> Any:
        """A lazy stack of the members' ``empty()`` (a dense one when ``batch_size`` is given)."""
        if batch_size is not None:
            return self._dense_cls(batch_size=batch_size, device=self.device)
        return LazyStackedTensorDict._new(
            [td.empty(recurse, **kwargs) for td in self._tds], self._stack_dim, stack_name=self._stack_name
        )

    def to_tensordict(self, *, retain_none: bool | None = None) -> Any:
        """A dense in-memory TensorDict of the common keys (their leaf shapes must agree), TensorDicts all the way.

        The TensorClasses held in the members give TensorDicts, as tensordict's.
        """
        dense = self._dense_copy()
        for _, node in named_nodes(dense):
            if type(node) in REWRAP_TYPES:
                return from_leaves(dense, flat_leaves(dense), keep_non_tensor=True)
        return dense

    def _dense_copy(self) -> Any:
        """A dense in-memory copy of the common keys: the TensorClasses held in the members stay instances."""
        return apply_leaves(self, _same, is_leaf=NON_TENSOR_TYPES.__contains__, what="densifying a lazy stack")

    def _take_result(self, other: Any) -> LazyStackedTensorDict:
        """The in-place form of an op (``roll(..., inplace=True)``): each member takes its slice of ``other``.

        The members keep their batch size, so an op that changes the batch size cannot run in place.
        """
        if any(node.is_locked for _, node in named_nodes(self)):
            raise _errors.locked()
        if other.batch_size != self._batch_size:
            raise NotImplementedError(  # (a RuntimeError, as torch's own refusals)
                f"an in-place op changing the batch size {list(self._batch_size)} to {list(other.batch_size)} is "
                "not supported on a lazy stack (its leaves live in its members): call to_tensordict() first or "
                "use inplace=False"
            )
        for member, piece in zip(self._tds, other.unbind(self._stack_dim), strict=True):
            member._take_result(piece)
        return self

    def softmax(self, dim: int, dtype: torch.dtype | None = None) -> Any:
        """Softmax along a batch dim, member by member (along the stack dim: computed dense, split into members)."""
        nd = len(self._batch_size)
        if type(dim) is not int or not -nd <= dim < nd or dim % nd == self._stack_dim:
            return TensorDictBase.softmax(self, dim, dtype).to_lazystack(self._stack_dim)
        d = dim % nd
        member_dim = d if d < self._stack_dim else d - 1
        return LazyStackedTensorDict._new(
            [td.softmax(member_dim, dtype) for td in self._tds], self._stack_dim, stack_name=self._stack_name
        )

    def data_ptr(self, *, storage: bool = False) -> Any:
        """The members' :meth:`~TensorDictBase.data_ptr`, under keys ``"0"``, ``"1"``... (as tensordict)."""
        return self._dense_cls({str(i): td.data_ptr(storage=storage) for i, td in enumerate(self._tds)}, batch_size=[])

    def contiguous(self, *, canonical: bool = False, inplace: bool = False) -> Any:
        """A dense in-memory TensorDict of the common keys, its leaves contiguous (as tensordict's lazy stack).

        A lazy stack cannot be made contiguous in place (its leaves live in its members).
        """
        if inplace:
            raise NotImplementedError(
                "contiguous(inplace=True) is not supported on a lazy stack: its leaves are "
                "its members' (use contiguous() for a dense TensorDict)"
            )
        dense = self._dense_copy()  # the TensorClasses held stay instances, as tensordict's
        return dense.contiguous(canonical=True) if canonical else dense

    def densify(self, layout: Any = torch.strided) -> Any:
        """A dense TensorDict of the members' keys (as tensordict: a key only some members hold too).

        Tensor leaves of one shape are stacked; leaves whose shapes differ become nested tensors of
        ``layout`` (``torch.strided`` or ``torch.jagged``, stack dim 0 only: else ``NotImplementedError``).
        A member lacking a tensor key gets an empty entry there (zero rows). Nested lazy stacks are
        densified too; the batch size reads ``-1`` in a dim where the members' batch sizes differ.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict, lazy_stack
            >>> s = lazy_stack([TensorDict(a=torch.zeros(3), batch_size=[3]),
            ...                 TensorDict(a=torch.ones(4), batch_size=[4])])
            >>> td = s.densify(layout=torch.jagged)
            >>> td.batch_size, td["a"].is_nested
            (torch.Size([2, -1]), True)
            >>> td.to_padded_tensor(padding=-1.0)["a"]
            tensor([[ 0.,  0.,  0., -1.],
                    [ 1.,  1.,  1.,  1.]])
        """
        if layout is not torch.strided and layout is not torch.jagged:
            raise ValueError(f"densify: layout must be torch.strided or torch.jagged, got {layout}")
        if not self._tds:
            return self.to_tensordict()
        keys: dict[str, None] = {}
        for td in self._tds:
            keys.update(dict.fromkeys(td._keys_str()))
        out = {}
        for key in keys:
            values = [td._get_str(key, None) for td in self._tds]
            if all(v is None or isinstance(v, _Tensor) for v in values):
                out[key] = self._dense_leaf(key, values, layout)
                continue
            value = self._get_str(key, None)
            out[key] = self._non_tensor_cls(None) if value is None else value.densify(layout=layout)
        return self._dense_cls._new_unsafe(out, self._batch_size, self.device, self._maybe_names())

    def _dense_leaf(self, key: str, values: list[Any], layout: Any) -> Any:
        """The members' tensors at ``key`` (None where a member lacks it) as one tensor, nested if they differ."""
        present = [v for v in values if v is not None]
        if len(present) < len(values):
            first = present[0].shape
            if not first:
                raise RuntimeError(
                    f"cannot densify the key {key!r} that only some members hold: its entries have "
                    "no dim to leave empty (shape [])"
                )
            rows = self.batch_dims - 1  # the members' batch dims: the first dim past them is left empty
            if len(first) > rows and all(v.shape[rows + 1 :] == first[rows + 1 :] for v in present):
                shape = (*first[:rows], 0, *first[rows + 1 :])
            else:
                shape = (*first[:-1], 0)
            empty = present[0].new_zeros(shape)
            values = [empty if v is None else v for v in values]
        if all(v.shape == values[0].shape for v in values[1:]):
            return _stack_values(key, values, self._stack_dim)
        if self._stack_dim != 0:
            raise NotImplementedError(
                f"densify: the members' leaves at key {key!r} differ in shape and the stack "
                f"dim is {self._stack_dim}: nested tensors need stack dim 0"
            )
        return torch.nested.nested_tensor(values, layout=layout)

    def __reduce__(self) -> Any:
        return (_rebuild, (self._tds, self._stack_dim, self._batch_size, self._stack_name, self._is_locked))

    def _meta_items(self) -> Any:
        """Each common key once, stacking no leaf.

        A tensor leaf stands as a view of its first member's leaf expanded to the stacked shape (members of
        one shape) or as its :class:`LeafMeta`, ``-1`` in the dims where the members differ (tensordict's
        convention); nodes are lazy stacks, non-tensor leaves stacked.

        The print options that read the values (``compact=False``) get the real stack.
        """
        if not self._tds:
            return iter(())
        exact = not _options.REPR["compact"]
        d, n = self._stack_dim, len(self._tds)
        metas = [dict(td._meta_items()) for td in self._tds]
        out: list[tuple[str, Any]] = []
        for key in self._keys_str():
            values = [m[key] for m in metas]
            first = values[0]
            if isinstance(first, UnbatchedTensor):  # one entry for the whole stack, not stacked (its shape)
                out.append((key, first))
                continue
            if not isinstance(first, (_Tensor, LeafMeta)) or getattr(first, "is_nested", False):
                out.append(
                    (key, _stack_values(key, values, d, self._stack_name) if not isinstance(first, _Tensor) else first)
                )
                continue
            shapes = [v.shape for v in values]
            uniform = all(s == shapes[0] for s in shapes)
            if uniform and isinstance(first, _Tensor) and all(isinstance(v, _Tensor) for v in values):
                if exact:
                    out.append((key, _stack_values(key, values, d)))
                else:
                    out.append((key, first.unsqueeze(d).expand(*first.shape[:d], n, *first.shape[d:])))
                continue
            dims = (
                [s[0] if len(set(s)) == 1 else -1 for s in zip(*shapes, strict=False)]
                if len({len(s) for s in shapes}) == 1
                else [-1] * len(shapes[0])
            )
            out.append((key, LeafMeta(torch.Size([*dims[:d], n, *dims[d:]]), first.dtype, TENSOR)))
        return iter(out)

    def __repr__(self) -> str:
        """A tree as a TensorDict's (the print options apply), then the keys only some members hold."""
        lines = [f"LazyStackedTensorDict({node_facts(self, True, self._stack_dim)})"]
        tree_lines(self, "", lines)
        common = set(self._keys_str())
        for i, td in enumerate(self._tds):
            extra = [k for k in td._keys_str() if k not in common]
            if extra:
                lines.append(f"(only in member {i}: {extra})")
        return "\n".join(lines)


def _common_names(tds: list[Any]) -> tuple[str | None, ...] | None:
    """The members' dim names: per dim, the name every member gives it (None where they disagree)."""
    names = [td._maybe_names() for td in tds]
    first = names[0] if names else None
    if all(n == first for n in names[1:]):  # the usual case: one naming (or none) for all
        return None if first is None else tuple(first)
    nd = tds[0].batch_dims
    full = [(None,) * nd if n is None else tuple(n) for n in names]
    common = tuple(col[0] if len(set(col)) == 1 else None for col in zip(*full, strict=True))
    return common if any(n is not None for n in common) else None


def _stack_values(key: str, values: list[Any], dim: int, stack_name: str | None = None) -> Any:
    """The stacked value of one key across the members (nested TensorDicts stay lazy)."""
    first = values[0]
    if isinstance(first, _Tensor):  # plain or memory-mapped leaves
        if type(first) is not _Tensor and isinstance(first, UnbatchedTensor):  # one entry, the first's data
            check_shared(values, "lazy stack", repr(key))
            return first._from_positions(torch.stack([v._positions() for v in values], dim))
        if first.is_nested:  # stacking would need a second ragged dim
            raise RuntimeError(
                f"cannot stack the members' leaves at key {key!r}: they are nested tensors. Read them with "
                "get(key, as_list=True)"
            )
        shape = first.shape
        if all(isinstance(v, _Tensor) and v.shape == shape for v in values):
            return torch.stack(values, dim)
        shapes = [list(v.shape) if isinstance(v, _Tensor) else type(v).__name__ for v in values]
        raise RuntimeError(
            f"cannot stack the members' leaves at key {key!r}: their shapes are {shapes}. Read them with "
            "get(key, as_padded_tensor=True), get(key, as_nested_tensor=True) or get(key, as_list=True)"
        )
    if type(first) in NON_TENSOR_TYPES and all(type(v) in NON_TENSOR_TYPES for v in values):
        return stack_non_tensor(values, dim)
    if is_td(first) and all(is_node(v) for v in values):
        if not isinstance(first, TensorDictBase) and STACK_AS_CLASS is not None:  # a wrapper (a TensorClass)
            held = STACK_AS_CLASS(values, dim, stack_name)
            if held is not None:
                return held
        return LazyStackedTensorDict._new(values, dim, stack_name=stack_name)
    raise RuntimeError(f"cannot stack the members' values at key {key!r}: types {[type(v).__name__ for v in values]}")


def _unbind(value: Any, dim: int) -> tuple[Any, ...]:
    """Split a validated value along the stack dim (non-tensor leaves split their positions)."""
    if type(value) in NON_TENSOR_TYPES or isinstance(value, UnbatchedTensor):
        return tuple(value._from_positions(p) for p in value._positions().unbind(dim))
    return tuple(value.unbind(dim))


def _pieces(value: Any, dim: int, n: int, target: torch.Size) -> list[Any]:
    """One piece of a written value per selected member (values without the dim are broadcast)."""
    if is_td(value):
        shape = value.batch_size
    elif isinstance(value, UnbatchedTensor):  # every member shares it
        return [value] * n
    elif isinstance(value, _Tensor):
        shape = value.shape
    else:
        return [value] * n
    lead = len(target) - len(shape)  # a value may leave out leading dims (it broadcasts)
    pos = dim - max(lead, 0)
    if lead > dim or len(shape) <= pos:
        return [value] * n
    if shape[pos] == n:
        return list(_unbind(value, pos))
    if shape[pos] == 1:
        return [_unbind(value, pos)[0]] * n
    raise RuntimeError(
        f"cannot write a value of shape {_errors.fmt_shape(shape)} into {n} members of a lazy stack "
        f"(selected shape {_errors.fmt_shape(target)})"
    )


def _pad_stack(values: list[Any], dim: int, padding_value: float, side: str) -> torch.Tensor:
    ndim = values[0].ndim
    if any(v.ndim != ndim for v in values):
        raise RuntimeError(f"as_padded_tensor: leaves have different numbers of dims {[v.ndim for v in values]}")
    biggest = [max(v.shape[i] for v in values) for i in range(ndim)]
    padded = []
    for v in values:
        pad: list[int] = []
        for i in reversed(range(ndim)):
            extra = biggest[i] - v.shape[i]
            pad += [0, extra] if side == "right" else [extra, 0]
        padded.append(F.pad(v, pad, value=padding_value) if any(pad) else v)
    return torch.stack(padded, dim)


# ---------------------------------------------------------------------- per-member operations
def _split_arg(arg: Any, n: int, dim: int) -> list[Any]:
    if isinstance(arg, LazyStackedTensorDict) and arg._stack_dim == dim and len(arg._tds) == n:
        return list(arg._tds)
    if is_node(arg) and arg.batch_dims > dim:
        return list(arg.unbind(dim))
    if isinstance(arg, _Tensor) and arg.ndim > dim:
        if arg.shape[dim] == n:
            return list(arg.unbind(dim))
        if arg.shape[dim] == 1:  # broadcasts along the stack dim
            return [arg.select(dim, 0)] * n
    return [arg] * n


def _same(value: Any) -> Any:
    return value


def _kind(dtype: torch.dtype) -> int:
    return 3 if dtype.is_complex else 2 if dtype.is_floating_point else 0 if dtype == torch.bool else 1


def _can_cast(src: torch.dtype, dst: torch.dtype) -> bool:
    """``torch.can_cast`` (no complex to real, float to integer, other to bool) in Python: dynamo traces it."""
    return _kind(src) <= _kind(dst)


def _check_castable(name: str, members: list[Any], results: list[Any]) -> None:
    """Refuse an in-place op whose result cannot be cast back into a leaf (before any write)."""
    for i, (td, out) in enumerate(zip(members, results, strict=True)):
        for path, leaf in named_leaves(td):
            new = out._get(path, None)
            if isinstance(leaf, _Tensor) and isinstance(new, _Tensor) and not _can_cast(new.dtype, leaf.dtype):
                raise RuntimeError(
                    f"{name}: result type {new.dtype} can't be cast to the desired output type {leaf.dtype} at "
                    f"key {_errors.fmt_path(path)} of member {i}: nothing was modified"
                )


def _per_member(name: str, inplace_of: str | None = None) -> Callable[..., Any]:
    """A method that runs ``name`` on every member (an in-place one: all results first, then writes)."""

    def method(self: LazyStackedTensorDict, *args: Any, **kwargs: Any) -> Any:
        n, d = len(self._tds), self._stack_dim
        split = [_split_arg(a, n, d) for a in args]
        split_kw = {k: _split_arg(v, n, d) for k, v in kwargs.items()}
        call = inplace_of or name
        results = []
        for i, td in enumerate(self._tds):
            try:
                out = getattr(td, call)(*(s[i] for s in split), **{k: v[i] for k, v in split_kw.items()})
            except Exception as err:
                if inplace_of is not None:
                    err.add_note(f"{name}: failed on member {i} of the lazy stack; nothing was modified")
                raise
            if out is NotImplemented:
                return NotImplemented
            results.append(out)
        if inplace_of is not None:
            if name != "apply_":  # apply_ casts like update_; the pointwise ops refuse, as torch does
                _check_castable(name, self._tds, results)
            for td, out in zip(self._tds, results, strict=True):
                td.update_(out)
            return self
        if all(r is None for r in results):  # apply(fn returning None everywhere)
            return None
        if all(r is td for r, td in zip(results, self._tds, strict=True)):  # each member in place: the stack
            return self
        if not all(is_td(r) for r in results):
            return results
        return LazyStackedTensorDict._new(results, d, stack_name=self._stack_name)

    method.__name__ = name
    method.__doc__ = f"``{name}`` on every member; see :class:`TensorDictBase`."
    return method


class _TopKeys(KeyList):
    """A lazy stack's ``keys()``: a nested key is found there with a FutureWarning, as in tensordict 0.15.

    (tensordict 0.17 returns False, as a TensorDict's ``keys()`` does.)
    """

    __slots__ = ("_stack",)

    def __init__(self, keys: list[str], stack: LazyStackedTensorDict) -> None:
        super().__init__(keys)
        self._stack = stack

    def __contains__(self, key: object) -> bool:
        if type(key) is not str:
            member = key_member(key)
            if type(member) is tuple:
                found = member in self._stack.keys(True)
                if found:
                    warnings.warn(
                        f"Finding the nested key {member} in LazyStackedTensorDict.keys() without "
                        "include_nested=True is deprecated (tensordict 0.17 returns False, as for a "
                        "TensorDict): use keys(include_nested=True)",
                        FutureWarning,
                        stacklevel=2,
                    )
                return found
        return super().__contains__(key)


_MEMBERS_TO = _per_member("to")


def _to(self: LazyStackedTensorDict, *args: Any, **kwargs: Any) -> Any:
    """``to`` on every member, with one synchronisation for them all (see :meth:`TensorDictBase.to`)."""
    if kwargs.get("non_blocking") is True or kwargs.get("inplace"):
        return _MEMBERS_TO(self, *args, **kwargs)
    sources = {d for td in self._tds for d in accelerators_of(td)}
    out = _MEMBERS_TO(self, *args, **{**kwargs, "non_blocking": True})
    if sources:  # wait for the devices that no longer hold the data (device-to-host copies)
        kept = {d for td in getattr(out, "_tds", ()) for d in accelerators_of(td)}
        settle(d for d in sources if d not in kept)
    return out


def _install() -> None:
    cls = LazyStackedTensorDict
    cls.to = _to  # type: ignore[method-assign,assignment]
    for name in (
        *_pointwise.METHODS,
        "named_apply",
        "clone",
        "detach",
        "select",
        "exclude",
        "type",
        "as_tensor",
        "rename_keys",
        "record_stream",
        "auto_device_",
    ):
        setattr(cls, name, _per_member(name))
    for name, twin in {**_pointwise.INPLACE, "apply_": "apply"}.items():
        setattr(cls, name, _per_member(name, inplace_of=twin))
    for dunder, method in _pointwise.OPERATORS.items():
        setattr(cls, dunder, _pointwise._operator(_per_member(dunder, _pointwise.INPLACE.get(method))))
    for dunder in _pointwise.REFLECTED:
        setattr(cls, dunder, _per_member(dunder))
    cls.__hash__ = None


_install()
_MASKED_FILL_ = _per_member("masked_fill_", inplace_of="masked_fill")


def lazy_stack(
    input: Sequence[Any], dim: int = 0, *, out: Any = None, stack_dim_name: str | None = None
) -> TensorDictBase:
    """Stack TensorDicts lazily along ``dim`` (members kept apart); ``stack_dim_name`` names the new dim.

    Non-tensor leaves (``NonTensorData``/``NonTensorStack``) stack to a ``NonTensorStack``, one value per
    element, even when the values are equal (its ``data`` is then that value).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict, lazy_stack
        >>> s = lazy_stack([TensorDict({"a": torch.zeros(2)}, [2]), TensorDict({"b": torch.ones(2)}, [2])])
        >>> s.batch_size, list(s.keys())
        (torch.Size([2, 2]), [])
        >>> lazy_stack([TensorDict({"a": torch.zeros(2)}, [2])] * 3, 1, stack_dim_name="s").names
        [None, 's']
    """
    tds = list(input)
    if not tds:
        raise RuntimeError("lazy_stack expects a non-empty sequence of TensorDicts")
    if all(type(td) in NON_TENSOR_TYPES for td in tds):  # non-tensor leaves stack to one leaf, value by value
        result: TensorDictBase = stack_non_tensor(tds, dim, collapse=False)
    else:
        result = LazyStackedTensorDict(*tds, stack_dim=dim, stack_dim_name=stack_dim_name)
    if out is not None:
        out.update_(result)
        return out  # type: ignore[no-any-return]  # ``out`` is the caller's TensorDict
    return result


def maybe_dense_stack(input: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
    """A dense stack when the members agree on keys and leaf shapes, else a lazy one.

    Level by level, as tensordict: where the keys and leaf shapes agree at the top, the stack is dense there
    and each sub-TensorDict is stacked the same way (a lazy stack where its own keys or shapes differ).
    """
    tds = list(input)
    try:
        if out is None and not _stackable(tds):  # dense where the keys and shapes agree, as tensordict
            top = _lazy_shape.dense_top(tds, dim)
            nd = tds[0].batch_dims if tds and is_td(tds[0]) else None
            if top is None and nd is not None and -nd - 1 <= dim <= nd:  # lazy stacks of one stack dim:
                top = _lazy_shape.join("stack", tds, dim % (nd + 1))  # a lazy stack of their members' stacks
            return lazy_stack(tds, dim) if top is None else top
        return torch.stack(tds, dim, out=out) if out is not None else torch.stack(tds, dim)
    except (RuntimeError, KeyError):
        return lazy_stack(tds, dim, out=out)


def _rebuild(tds: Any, stack_dim: Any, batch_size: Any, stack_name: Any, locked: Any) -> LazyStackedTensorDict:
    """Unpickle a lazy stack (what its ``__reduce__`` names, allowed in ``torch.load(weights_only=True)``).

    The arguments may be crafted: the members must be TensorDicts, and they go through the checking
    constructor.

    Raises:
        TypeError: for members that are no list of TensorDicts, or ``locked`` no bool.
    """
    if type(tds) is not list or not all(is_td(td) for td in tds) or type(locked) is not bool:
        raise TypeError(
            f"unpickling a LazyStackedTensorDict: malformed state (members "
            f"{[type(td).__name__ for td in tds] if isinstance(tds, list) else type(tds).__name__}, "
            f"locked={locked!r})"
        )
    out = LazyStackedTensorDict(*tds, stack_dim=stack_dim, batch_size=batch_size, stack_dim_name=stack_name)
    if locked:
        out.lock_()
    return out


allow_in_weights_only_load(_rebuild)


def _stackable(tds: list[Any]) -> bool:
    """True when every key and leaf shape agree (checked without stacking anything)."""
    try:
        cols = _columns(tds, "stack")
    except (RuntimeError, KeyError):
        return False
    for col in cols:
        first = col[0]
        if type(first) is _Tensor:
            shape = first.shape
            if not all(type(t) is _Tensor and t.shape == shape for t in col):
                return False
    return True


def dense_stack_tds(td_list: Sequence[Any] | LazyStackedTensorDict, dim: int | None = None) -> Any:
    """Stack a list of TensorDicts (or a lazy stack's members, along its stack dim) densely where possible.

    As :func:`maybe_dense_stack`: TensorDicts whose keys or leaf shapes differ give a lazy stack; lazy stacks
    held below the root stay lazy stacks (of their members' stacks), so TensorDicts holding lazy stacks of
    ragged members stack densely at the top. A TensorDict that is no lazy stack is returned as it is.

    Args:
        td_list: the TensorDicts, or a lazy stack (whose ``stack_dim`` is used: ``dim`` is then ignored).
        dim: the dim to stack along; required for a list.

    Raises:
        ValueError: for a list without ``dim``.

    Examples:
        >>> from tensorbatch import TensorDict, lazy_stack
        >>> ragged = lazy_stack([TensorDict(a=torch.zeros(3)), TensorDict(a=torch.zeros(4))])
        >>> out = dense_stack_tds([TensorDict(r=ragged), TensorDict(r=ragged.clone())], dim=0)
        >>> type(out).__name__, out.batch_size, type(out["r"]).__name__, out["r"].stack_dim
        ('TensorDict', torch.Size([2]), 'LazyStackedTensorDict', 1)
    """
    if isinstance(td_list, LazyStackedTensorDict):
        return maybe_dense_stack(list(td_list.tensordicts), td_list.stack_dim)
    if is_td(td_list):
        return td_list
    if dim is None:
        raise ValueError("dense_stack_tds: a list of TensorDicts needs dim= (the dim to stack them along)")
    return maybe_dense_stack(list(td_list), dim)


# (after maybe_dense_stack and _stackable, which the shape table is given)
_lazy_shape.install(LazyStackedTensorDict, maybe_dense_stack, _stackable)
_locks.install_keep_lock(LazyStackedTensorDict, drop=_lazy_shape.DROP_LOCK)
