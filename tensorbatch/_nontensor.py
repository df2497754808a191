"""Non-tensor leaves: Python objects (strings, dicts, None, ...) that follow the batch.

``NonTensorData`` holds one value shared by every element of its batch; ``NonTensorStack`` holds
one value per element. Both are tensor collections with no keys, so value operations (arithmetic,
casts, reductions, apply) walk past them and keep them, while batch operations (index, reshape,
permute, unbind, stack, ...) move them with the batch.

The one mechanism for batch operations: a non-tensor leaf shows the traversal an int64
*positions* tensor whose shape is its batch size (``_positions``); the traversal applies the
leaf function (``x[idx]``, ``x.reshape(...)``, ...) to it and rebuilds the leaf from the result
(``_from_positions``). For ``NonTensorData`` the positions are a zero-stride view (no memory);
for ``NonTensorStack`` each position points into its list of values. Stack and cat merge the
value lists (:func:`stack_non_tensor`); identical values collapse to one ``NonTensorData``.

A stack remembers what it was stacked from in the strides of its positions (tensordict's stack is a
stack of members): a dim of stride 0 is a dim of its members (``NonTensorData``: one value along it),
any other dim a stack dim. Taking every stack dim away (an index, ``squeeze``, ``unbind``) leaves one
member: a ``NonTensorData`` again. ``expand`` and ``unsqueeze`` stack copies of a ``NonTensorData``
(tensordict's), so the dims they add make it a stack (:meth:`_NonTensor._follow_op`).
"""

from __future__ import annotations

import copy
import operator
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Literal, Self, SupportsIndex

import torch
from torch.utils import _pytree

from . import _options
from ._base.coerce import as_device as _as_device
from ._base.coerce import as_size as _as_size
from ._base.coerce import checked_names as _checked_names
from ._compat import allow_in_weights_only_load
from ._keys import is_key
from ._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES, is_non_tensor, is_non_tensor_type, value_of
from .base import TensorDictBase

_Size = torch.Size


def _same(a: Any, b: Any) -> bool:
    """Value equality that never raises (tensors and arrays compare by identity)."""
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, torch.Tensor):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


class LinkedList(list[Any]):
    """The values of a ``NonTensorStack`` as a list that writes item assignments back into the stack.

    ``td[key]`` gives one for a ``NonTensorStack`` leaf (nested lists, also linked, for more batch dims).
    ``values[i] = v`` writes ``v`` into the stack first (an error leaves both unchanged), then into the
    list. Changing the length (``append``, ``extend``, ``insert``, ``pop``, ``remove``, ``clear``, ``del``,
    ``+=``, ``*=``) changes the list only and unlinks it. Copies and pickles are plain, unlinked lists of
    this type; :meth:`tolist` gives plain nested lists. The link is weak: a list outliving its stack
    is a plain list.

    Args:
        iterable: the items.
        td: the ``NonTensorStack`` to write into (None: an unlinked list).

    Examples:
        >>> from tensorbatch import NonTensorStack, TensorDict
        >>> td = TensorDict({"names": NonTensorStack("a", "b", "c")}, batch_size=[3])
        >>> values = td["names"]
        >>> values[0] = "z"
        >>> td.get("names").tolist(), values
        (['z', 'b', 'c'], LinkedList(['z', 'b', 'c']))
    """

    def __init__(self, iterable: Iterable[Any] = (), *, td: Any = None, _at: tuple[int, ...] = ()) -> None:
        super().__init__(iterable)
        self._link: Any = None if td is None else weakref.ref(td)
        self._at = _at  # the index of this list's row in the stack (nested lists of more batch dims)

    def _target(self) -> Any:
        return None if self._link is None else self._link()

    def __setitem__(self, index: Any, value: Any) -> None:
        stack = self._target()
        if stack is not None:
            if isinstance(index, slice):
                value = list(value)
                if len(value) != len(range(len(self))[index]):
                    raise ValueError(
                        f"cannot assign {len(value)} values to {len(range(len(self))[index])} items of "
                        "a LinkedList: that would change the length of the stack it writes into"
                    )
            else:
                list.__getitem__(self, index)  # the list's own IndexError
                index = index % len(self)
            stack[(*self._at, index)] = value
        super().__setitem__(index, value)

    def tolist(self) -> list[Any]:
        """A plain list (nested lists for nested linked lists), not linked to anything."""
        return [item.tolist() if isinstance(item, LinkedList) else item for item in self]

    def _unlink(self) -> None:
        self._link = None

    def append(self, value: Any) -> None:
        """Append ``value`` (the list is unlinked)."""
        self._unlink()
        super().append(value)

    def extend(self, values: Iterable[Any]) -> None:
        """Extend with ``values`` (the list is unlinked)."""
        self._unlink()
        super().extend(values)

    def insert(self, index: SupportsIndex, value: Any) -> None:
        """Insert ``value`` before ``index`` (the list is unlinked)."""
        self._unlink()
        super().insert(index, value)

    def pop(self, index: SupportsIndex = -1) -> Any:
        """Remove and return the item at ``index`` (the list is unlinked)."""
        self._unlink()
        return super().pop(index)

    def remove(self, value: Any) -> None:
        """Remove the first item equal to ``value`` (the list is unlinked)."""
        self._unlink()
        super().remove(value)

    def clear(self) -> None:
        """Remove every item (the list is unlinked)."""
        self._unlink()
        super().clear()

    def __delitem__(self, index: Any) -> None:
        self._unlink()
        super().__delitem__(index)

    def __iadd__(self, other: Iterable[Any]) -> Self:  # type: ignore[misc]
        self._unlink()
        return super().__iadd__(other)

    def __imul__(self, n: SupportsIndex) -> Self:
        self._unlink()
        return super().__imul__(n)

    def __eq__(self, other: object) -> bool:
        return list(self) == other

    def __ne__(self, other: object) -> bool:
        return list(self) != other

    def __repr__(self) -> str:
        return f"LinkedList({list.__repr__(self)})"

    def __reduce__(self) -> Any:
        return type(self), (list(self),)


def _linked(values: list[Any], stack: Any, at: tuple[int, ...], depth: int) -> LinkedList:
    """``values`` (``depth`` levels of nested lists: a stack's batch dims) as linked lists, each knowing its row."""
    if depth > 1:
        values = [_linked(v, stack, (*at, i), depth - 1) for i, v in enumerate(values)]
    return LinkedList(values, td=stack, _at=at)


class _NonTensor(TensorDictBase):
    """Shared behaviour of the two non-tensor leaf types: no keys, batch facts, equality."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        NON_TENSOR_TYPES.add(cls)

    @staticmethod
    def _stack_members(members: Sequence[_NonTensor], dim: int, cat: bool) -> _NonTensor:
        """``torch.stack``/``torch.cat`` of non-tensor leaves (the op table calls this, not the module)."""
        return stack_non_tensor(members, dim, cat=cat)

    # primitives: a node with no keys
    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        if default is NO_DEFAULT:
            raise KeyError(f"{type(self).__name__} has no keys (asked for {key!r})")
        return default

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        raise RuntimeError(f"cannot set key {key!r} on a {type(self).__name__}: it holds a non-tensor value")

    def _del_str(self, key: str) -> None:
        raise KeyError(key)

    def _keys_str(self) -> Any:
        return {}.keys()

    def _items_str(self) -> Any:
        return {}.items()

    def _values_str(self) -> Any:
        return {}.values()

    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size  # type: ignore[attr-defined, no-any-return]

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._change_batch_size(_as_size(value))

    @property
    def device(self) -> torch.device | None:
        return self._device  # type: ignore[attr-defined, no-any-return]

    @property
    def is_locked(self) -> bool:
        """Locked with the TensorDict holding it, or by ``memmap`` (as tensordict); it refuses nothing more."""
        return self._locked

    def _set_lock(self, value: bool) -> None:
        self._locked = value

    def _maybe_names(self) -> tuple[str | None, ...] | None:
        return self._names

    @property
    def names(self) -> list[str | None]:
        """The dim names of the batch (a TensorDict's names, given to the non-tensor leaves it holds, as tensordict)."""
        names = self._names
        return list(names) if names is not None else [None] * len(self.batch_size)

    @names.setter
    def names(self, value: Any) -> None:
        self._set_names(None if value is None else _checked_names(value, self.batch_size))

    def _set_names(self, names: tuple[str | None, ...] | None) -> None:
        self._names = names if names is not None and any(n is not None for n in names) else None

    def _named(self, names: Any) -> Self:
        """This (new) leaf with ``names`` (NO_DEFAULT or None: unnamed); returns it."""
        self._set_names(None if names is NO_DEFAULT or names is None else tuple(names))
        return self

    # the batch-op protocol (see module docstring)
    def _positions(self) -> torch.Tensor:
        raise NotImplementedError

    def _from_positions(self, positions: torch.Tensor) -> _NonTensor:
        raise NotImplementedError

    def _follow_op(self, positions: torch.Tensor, how: str) -> _NonTensor:
        """This leaf moved to ``positions`` by a batch op that ``traverse.NON_TENSOR_FOLLOW`` lists as ``how``.

        ``"stack"`` (``expand``, ``unsqueeze``): the dims the op adds are stack dims (for a ``NonTensorData``,
        a ``NonTensorStack`` of copies, unless :func:`stack_non_tensor` would keep one value: under
        ``set_capture_non_tensor_stack(True)`` and for a ``MetaData``); the others keep their kind.
        ``"regroup"`` (``view``, ``reshape``, ``flatten``...): a stack's dims all become stack dims.
        """
        if how == "regroup":
            if isinstance(self, NonTensorDataBase):
                return self._from_positions(positions)
            return self._from_positions(positions.clone(memory_format=torch.contiguous_format))
        old, new = self.batch_size, positions.shape
        if isinstance(self, NonTensorDataBase) and (
            len(new) == len(old) or _options.CAPTURE_NON_TENSOR_STACK or isinstance(self, MetaData)
        ):
            return self._from_positions(positions)
        strides = self._positions().stride()
        member = {j for j, i in _dims_kept(old, new) if not strides[i]}
        items, _ = _parts(self)
        return NonTensorStack._new(items, _member_dims(positions, member), self.device)

    def _follow(self, batch_size: Any, device: Any = NO_DEFAULT, names: Any = NO_DEFAULT) -> _NonTensor:
        """This leaf after a value operation: the batch may change, the values may not.

        ``names``: the new dim names (default: kept when the batch size is, else none).
        """
        out = self._follow_values(batch_size, device)
        if names is NO_DEFAULT:
            names = self._names if out.batch_size == self.batch_size else None
        return out._named(names)

    def _follow_values(self, batch_size: Any, device: Any) -> _NonTensor:
        raise NotImplementedError

    def tolist(
        self,
        *,
        convert_nodes: bool = True,
        convert_tensors: bool | Literal["numpy"] = False,
        tolist_first: bool = False,
        as_linked_list: bool = False,
    ) -> Any:
        """The values as nested lists shaped like the batch (one value for a 0-d batch).

        ``as_linked_list=True`` gives :class:`LinkedList` s whose item assignments write into this leaf
        (a ``NonTensorData`` holds one value: writing raises ``ValueError``). The other options are
        accepted for :meth:`TensorDictBase.tolist`'s sake and change nothing.
        """
        values = self._values()
        if as_linked_list and self.batch_dims:
            return _linked(values, self, (), self.batch_dims)
        return values

    def _values(self) -> Any:
        """The values as plain nested lists shaped like the batch (the value itself for a 0-d batch)."""
        raise NotImplementedError

    def _value(self) -> Any:
        """What ``td[key]`` returns for this leaf (a stack: its values as a :class:`LinkedList`)."""
        return self.tolist(as_linked_list=True)

    def _plain_value(self) -> Any:
        """The value(s) as plain Python objects (what ``to_dict`` gives)."""
        return self._values()

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str:
            return self._get_str(index)
        return self._from_positions(self._positions()[index])

    def __setitem__(self, index: Any, value: Any) -> None:
        """``leaf[index] = value`` writes the value(s) at a batch index (a ``NonTensorStack``, in place)."""
        if is_key(index):
            TensorDictBase.__setitem__(self, index, value)
            return
        self._assign(index, value)

    def update(self, input_dict_or_td: Any = None, *args: Any, **kwargs: Any) -> Any:
        """From another non-tensor leaf: take its value(s) in place (as :meth:`update_`); else TensorDict's update."""
        if is_non_tensor(input_dict_or_td):
            return self.update_(input_dict_or_td)
        return TensorDictBase.update(self, input_dict_or_td, *args, **kwargs)

    def update_(self, input_dict_or_td: Any = None, *args: Any, **kwargs: Any) -> Any:
        """From another non-tensor leaf: take its value(s) in place, as tensordict (a stack writes every element).

        Raises:
            RuntimeError: a ``NonTensorData`` given a ``NonTensorStack`` (call ``maybe_to_stack()`` first).
        """
        if not is_non_tensor(input_dict_or_td):
            return TensorDictBase.update_(self, input_dict_or_td, *args, **kwargs)
        if isinstance(self, NonTensorDataBase):
            if not isinstance(input_dict_or_td, NonTensorDataBase):
                raise RuntimeError(
                    "Cannot update a NonTensorDataBase with a NonTensorStack object: call maybe_to_stack() first"
                )
            self.data = input_dict_or_td.data
        else:
            self._assign(Ellipsis, input_dict_or_td)
        return self

    def copy_(self, tensordict: Any, non_blocking: bool = False) -> Any:
        """``update_`` (a non-tensor leaf takes another one's value(s) in place)."""
        return self.update_(tensordict, non_blocking=non_blocking)

    def _assign(self, index: Any, value: Any) -> None:
        raise ValueError(
            f"a {type(self).__name__} holds one value for its whole batch: it cannot take a value at "
            "an index; call maybe_to_stack() first for a NonTensorStack"
        )

    def __eq__(self, other: Any) -> Any:
        """Elementwise equality of the values: a bool tensor shaped like the batch."""
        mine = self.tolist()
        theirs = other.tolist() if isinstance(other, _NonTensor) else other
        return torch.tensor(_compare(mine, theirs, self.batch_dims), dtype=torch.bool).expand(self.batch_size)

    def __ne__(self, other: Any) -> Any:
        return ~(self == other)

    def __xor__(self, other: Any) -> Any:
        """With another non-tensor leaf: ``bool(x ^ y)`` value by value, a bool tensor shaped like the batch.

        As tensordict (values compared as ``==`` compares them); any other operand is taken leaf-wise.
        """
        if not isinstance(other, _NonTensor):
            return super().__xor__(other)  # (table-generated)
        return _truths(self, other, operator.xor)

    def __or__(self, other: Any) -> Any:
        """With another non-tensor leaf: ``bool(x | y)`` value by value, a bool tensor shaped like the batch."""
        if not isinstance(other, _NonTensor):
            return super().__or__(other)  # (table-generated)
        return _truths(self, other, operator.or_)

    def clone(self, recurse: bool = True, **kwargs: Any) -> _NonTensor:
        """A new leaf with copies of the values, as tensordict's.

        ``recurse=True``: ``copy.deepcopy`` of the values (a value that cannot be deep-copied raises the
        error ``deepcopy`` raises). ``recurse=False``: a ``NonTensorData`` shares its value; a stack holds
        new ``dict``/``list``/``tuple`` containers (at every level) over the same items, as
        ``TensorDict.clone(recurse=False)`` gives every non-tensor leaf.
        """
        if not recurse and isinstance(self, NonTensorDataBase):
            return self._follow(None)
        return self._copied(recurse)

    def copy(self) -> _NonTensor:
        """A shallow copy: the value(s) in new ``dict``/``list``/``tuple`` containers, their items shared."""
        return self._copied(False)

    def __copy__(self) -> _NonTensor:
        return self._copied(False)

    def _copy_tree(self, values: bool = False) -> _NonTensor:
        return self._copied(False) if values else self._follow(None)

    def _copied(self, deep: bool) -> _NonTensor:
        """This leaf holding copies of its values: deep copies (``clone()``) or new containers (``clone(False)``)."""
        raise NotImplementedError

    def _binary(self, fn: Any, other: Any) -> Any:
        """This leaf in ``td <op> other``: ``==``/``!=`` compare values, other ops keep the leaf."""
        if fn is torch.eq:
            return self == other
        if fn is torch.ne:
            return self != other
        return self

    __hash__ = None

    def _change_batch_size(self, new_size: torch.Size) -> None:
        if new_size[: len(self.batch_size)] != self.batch_size and not self._uniform():
            raise RuntimeError(
                f"cannot set batch_size {list(new_size)} on a NonTensorStack of batch_size {list(self.batch_size)}"
            )
        self._become(self._follow(new_size))

    def _uniform(self) -> bool:
        return True

    def _written(self, index: Any, value: Any) -> _NonTensor:
        """A copy of this leaf with ``value`` (an object or a non-tensor leaf) written at ``index``."""
        items, pos = _parts(self)
        items, pos = list(items), pos.clone()
        selected = pos[index].shape
        if isinstance(value, list) and selected and len(value) == selected[0]:  # one value per position
            value = NonTensorStack.from_list(value, depth=len(selected))
        if isinstance(value, _NonTensor):
            v_items, v_pos = _parts(value)
        else:
            v_items, v_pos = [value], torch.zeros((), dtype=torch.int64)
        pos[index] = v_pos + len(items)
        items.extend(v_items)
        if isinstance(self, NonTensorStack):  # a stack stays one, even if its values become equal (as tensordict)
            return NonTensorStack._new(items, pos, self.device)
        return _collapsed(items, pos, self.device)

    def _where(self, condition: torch.Tensor, other: Any) -> _NonTensor:
        """``where(condition, self, other)`` element-wise.

        ``other`` is a non-tensor leaf (its values are picked where ``condition`` is False) or anything
        else (this leaf is kept, as in tensordict).
        """
        if type(other) not in NON_TENSOR_TYPES:
            return self
        items, pos = _parts(self)
        o_items, o_pos = _parts(other)
        mask = condition.reshape(*condition.shape, *([1] * (pos.ndim - condition.ndim)))
        picked = torch.where(mask, pos, o_pos + len(items))
        return _collapsed([*items, *o_items], picked, self.device)._named(self._names)

    def _become(self, other: _NonTensor) -> None:
        raise NotImplementedError


def _truths(leaf: _NonTensor, other: _NonTensor, fn: Callable[[Any, Any], Any]) -> torch.Tensor:
    """The truth of ``fn`` of the two leaves' values, position by position: a bool tensor shaped like the batch."""

    def walk(mine: Any, theirs: Any, depth: int) -> Any:
        if depth == 0 or not isinstance(mine, list):
            return bool(fn(mine, theirs))
        if isinstance(theirs, list) and len(theirs) == len(mine):
            return [walk(a, b, depth - 1) for a, b in zip(mine, theirs, strict=True)]
        return [walk(a, theirs, depth - 1) for a in mine]

    values = walk(leaf.tolist(), other.tolist(), leaf.batch_dims)
    return torch.tensor(values, dtype=torch.bool).expand(leaf.batch_size)


def _compare(mine: Any, theirs: Any, depth: int) -> Any:
    if depth == 0 or not isinstance(mine, list):
        return _same(mine, theirs)
    if isinstance(theirs, list) and len(theirs) == len(mine):
        return [_compare(a, b, depth - 1) for a, b in zip(mine, theirs, strict=True)]
    return [_compare(a, theirs, depth - 1) for a in mine]


class NonTensorDataBase(_NonTensor):
    """The base of the leaves holding one non-tensor value for the whole batch: ``NonTensorData``, ``MetaData``.

    Indexing, reshaping, expanding and cloning keep the leaf's class and its value.
    """

    __slots__ = ("__weakref__", "_batch_size", "_device", "_locked", "_names", "data")
    data: Any  # a slot (a plain attribute) in place of TensorDictBase.data
    _names: tuple[str | None, ...] | None
    _locked: bool

    def __init__(self, data: Any, batch_size: Any = None, device: Any = None, names: Any = None) -> None:
        if isinstance(data, _NonTensor):
            data = data._plain_value()
        self.data = data
        self._batch_size = _as_size(batch_size)
        self._device = _as_device(device)
        self._names, self._locked = None, False
        if names is not None:
            self.names = names

    @classmethod
    def _new(cls, data: Any, batch_size: torch.Size, device: Any) -> Self:
        out = cls.__new__(cls)
        out.data, out._batch_size, out._device, out._names, out._locked = data, batch_size, device, None, False
        return out

    def _positions(self) -> torch.Tensor:
        return torch.zeros((), dtype=torch.int64).expand(self._batch_size)

    def _from_positions(self, positions: torch.Tensor) -> Self:
        return self._new(self.data, positions.shape, self._device)

    def _follow_values(self, batch_size: Any, device: Any) -> Self:
        bs = self._batch_size if batch_size is None else _Size(batch_size)
        dev = self._device if device is NO_DEFAULT else device
        return self._new(self.data, bs, dev)

    def _become(self, other: _NonTensor) -> None:
        if other.batch_size != self._batch_size:
            self._batch_size, self._names = other.batch_size, None

    def _copied(self, deep: bool) -> Self:
        data = copy.deepcopy(self.data) if deep else _new_containers(self.data)
        return self._new(data, self._batch_size, self._device)._named(self._names)

    def _value(self) -> Any:
        return self.data

    def _plain_value(self) -> Any:
        return self.data

    def maybe_to_stack(self) -> _NonTensor:
        """A ``NonTensorStack`` holding the value in every batch element (shared, not copied).

        Itself when it has no batch dims.

        Examples:
            >>> stack = NonTensorData("a", batch_size=[2]).maybe_to_stack()
            >>> type(stack).__name__, stack.tolist()
            ('NonTensorStack', ['a', 'a'])
        """
        if not self._batch_size:
            return self
        return NonTensorStack._new([self.data], torch.zeros(self._batch_size, dtype=torch.int64), self._device)

    def _values(self) -> Any:
        out: Any = self.data
        for size in reversed(self._batch_size):
            out = [out] * size if not isinstance(out, list) or size <= 1 else [list(out) for _ in range(size)]
        return out

    def __reduce__(self) -> Any:
        return (_rebuild_data, (type(self), self.data, self._batch_size, self._device, self._names))

    def __repr__(self) -> str:  # tensordict's form: the value's str, the batch size as a torch.Size
        return f"{type(self).__name__}(data={self.data}, batch_size={self._batch_size!r}, device={self._device})"


class NonTensorData(NonTensorDataBase):
    """One non-tensor value shared by every element of a batch.

    Args:
        data: any Python object.
        batch_size: the batch it follows.
        device: the device of the TensorDict holding it.

    Examples:
        >>> from tensorbatch import NonTensorData
        >>> nt = NonTensorData("hello", batch_size=[2])
        >>> nt.tolist()
        ['hello', 'hello']
        >>> nt[0].data
        'hello'
    """

    __slots__ = ()


class MetaData(NonTensorDataBase):
    """One Python object describing the whole batch (a configuration, a dataset name...).

    It behaves as :class:`NonTensorData`, except when stacked: items holding the same object (``is``,
    not ``==``) give one ``MetaData``, others a ``NonTensorStack``. Indexing, ``unsqueeze`` and the
    other shape operations keep a ``MetaData``. ``MetaData[cls]`` is a subclass whose constructor
    raises ``TypeError`` for a value that is no ``cls``.

    Args:
        data: any Python object.
        batch_size: the batch it describes.
        device: the device of the TensorDict holding it.

    Examples:
        >>> import torch
        >>> from tensorbatch import MetaData, TensorDict
        >>> config = {"lr": 0.1}
        >>> td = TensorDict(cfg=MetaData(config, batch_size=[2]), batch_size=[2])
        >>> type(td[0].get("cfg")).__name__, td[0]["cfg"] is config
        ('MetaData', True)
        >>> type(torch.stack([td, td]).get("cfg")).__name__
        'MetaData'
    """

    __slots__ = ()
    _typed: ClassVar[dict[Any, type]] = {}

    def __class_getitem__(cls, item: Any) -> type:
        if cls is not MetaData:
            raise TypeError(f"cannot give a value type to {cls.__name__}")
        if item not in MetaData._typed:
            name = f"MetaData[{getattr(item, '__name__', item)}]"

            def __init__(self: Any, data: Any, batch_size: Any = None, device: Any = None, names: Any = None) -> None:
                MetaData.__init__(self, data, batch_size, device, names)
                if not isinstance(self.data, item):
                    raise TypeError(
                        f"Expected data of type {getattr(item, '__name__', item)}, got "  # tensordict's
                        f"{type(self.data).__name__}"
                    )

            MetaData._typed[item] = type(
                name, (MetaData,), {"__slots__": (), "__init__": __init__, "__module__": __name__}
            )
        return MetaData._typed[item]


class NonTensorStack(_NonTensor):
    """One non-tensor value per batch element (what stacking different values gives).

    Args:
        *values: the values of the first batch dim (each a plain object, a ``NonTensorData`` or a
            ``NonTensorStack``); all members must have the same batch size.
        stack_dim: where the new dim goes (0 by default).

    Examples:
        >>> from tensorbatch import NonTensorStack
        >>> st = NonTensorStack("a", "b", "c")
        >>> st.batch_size
        torch.Size([3])
        >>> st.tolist()
        ['a', 'b', 'c']
        >>> st[1:].tolist()
        ['b', 'c']
    """

    __slots__ = ("__weakref__", "_batch_size", "_device", "_items", "_locked", "_names", "_pos")
    _batch_size: torch.Size
    _device: torch.device | None
    _items: list[Any]
    _names: tuple[str | None, ...] | None
    _locked: bool
    _pos: torch.Tensor

    def __init__(self, *values: Any, stack_dim: int = 0, batch_size: Any = None, device: Any = None) -> None:
        members = [v if isinstance(v, _NonTensor) else NonTensorData._new(v, _Size(()), None) for v in values]
        if not members:
            raise ValueError("NonTensorStack needs at least one value")
        built = stack_non_tensor(members, stack_dim, collapse=False)
        assert isinstance(built, NonTensorStack)
        self._items, self._pos = built._items, built._pos
        self._batch_size, self._device, self._names, self._locked = built._batch_size, _as_device(device), None, False
        if batch_size is not None and _as_size(batch_size) != self._batch_size:
            raise RuntimeError(f"batch_size {list(_as_size(batch_size))} does not match the {len(members)} values")

    @classmethod
    def from_list(  # type: ignore[override]  # tensordict's NonTensorStack.from_list takes values, not mappings
        cls, values: Sequence[Any], device: Any = None, depth: int | None = None
    ) -> NonTensorStack:
        """Build from (nested) lists: each list level becomes a batch dim, down to ``depth`` levels.

        Without ``depth``, nesting goes as deep as the lists are regular (a ragged level holds values).
        """
        if depth is None:
            depth = _regular_depth(values)
        if depth <= 1:
            return cls(*values, device=device)
        if not all(isinstance(v, list) for v in values):
            raise RuntimeError(f"expected {depth} levels of nested lists for the batch dims, got {values!r:.80}")
        return cls(*(cls.from_list(v, depth=depth - 1) for v in values), device=device)

    @classmethod
    def _new(cls, items: list[Any], positions: torch.Tensor, device: Any) -> NonTensorStack:
        out = cls.__new__(cls)
        out._items, out._pos, out._batch_size, out._device = items, positions, positions.shape, device
        out._names, out._locked = None, False
        return out

    def _positions(self) -> torch.Tensor:
        return self._pos

    @property
    def data(self) -> Any:
        """The value every element holds, when they all hold the same one (else use :meth:`tolist`).

        Raises:
            AttributeError: when the elements hold different values.

        Examples:
            >>> from tensorbatch import NonTensorStack
            >>> NonTensorStack("x", "x").data
            'x'
        """
        used = [self._items[i] for i in torch.unique(self._pos).tolist()]
        if used and all(_same(used[0], item) for item in used[1:]):
            return used[0]
        raise AttributeError(
            "a NonTensorStack whose elements hold different values has no single data: use tolist() to read them"
        )

    def _from_positions(self, positions: torch.Tensor) -> _NonTensor:
        if not positions.ndim:  # one element: its value (a stack stays a stack otherwise, as tensordict's)
            return NonTensorData._new(self._items[int(positions)], positions.shape, self._device)
        if positions.numel() and not any(positions.stride()):  # no stack dim left: one member
            return NonTensorData._new(self._items[int(positions.reshape(-1)[0])], positions.shape, self._device)
        return NonTensorStack._new(self._items, positions, self._device)

    def _uniform(self) -> bool:
        flat = self._pos.reshape(-1)
        return not flat.numel() or bool((flat == flat[0]).all())

    def _follow_values(self, batch_size: Any, device: Any) -> _NonTensor:
        dev = self._device if device is NO_DEFAULT else device
        if batch_size is None or _Size(batch_size) == self._batch_size:
            return NonTensorStack._new(self._items, self._pos, dev)
        if self._uniform():
            first = self._items[int(self._pos.reshape(-1)[0])] if self._pos.numel() else None
            return NonTensorData._new(first, _Size(batch_size), dev)
        raise RuntimeError(
            f"a NonTensorStack of batch_size {list(self._batch_size)} with different values cannot follow "
            f"this operation to batch_size {list(batch_size)}; exclude the key first"
        )

    def _become(self, other: _NonTensor) -> None:
        raise RuntimeError("cannot change the batch size of a NonTensorStack in place")

    def _copied(self, deep: bool) -> NonTensorStack:
        """One copy per member (tensordict copies each member of its stack), not shared between members."""
        pos = self._pos
        if not pos.numel():
            return NonTensorStack._new([], pos, self._device)
        member = {j for j in range(pos.ndim) if not pos.stride(j)}
        firsts = pos[tuple(0 if j in member else slice(None) for j in range(pos.ndim))]
        copy_one = copy.deepcopy if deep else _new_containers
        items = [copy_one(self._items[i]) for i in firsts.reshape(-1).tolist()]
        return NonTensorStack._new(
            items, _spread(torch.arange(len(items)).view(firsts.shape), pos.shape, member), self._device
        )._named(self._names)

    def maybe_to_stack(self) -> NonTensorStack:
        """A new stack of the same values (every element of a stack is already a stack element)."""
        return NonTensorStack._new(self._items, self._pos.clone(), self._device)

    def _values(self) -> Any:
        items = self._items
        pos: Any = self._pos.tolist()  # an int for a 0-d stack
        if not self._pos.ndim:
            return items[pos]
        return _pick(pos, items)

    def _assign(self, index: Any, value: Any) -> None:
        """Write ``value`` at ``index`` in place (the stack stays a stack, even if its values become equal)."""
        items, pos = _parts(self._written(index, value))
        self._items, self._pos = items, pos.clone(memory_format=torch.contiguous_format)

    def __reduce__(self) -> Any:
        return (_rebuild_stack, (self._items, self._pos, self._device, self._names))

    def __repr__(self) -> str:  # tensordict's form
        return (
            f"NonTensorStack(\n    {self.tolist()!r},\n    batch_size={self._batch_size!r},\n    device={self._device})"
        )


def _dims_kept(old: torch.Size, new: torch.Size) -> list[tuple[int, int]]:
    """``(new dim, old dim)`` for the dims of ``old`` that a stacking op (``expand``, ``unsqueeze``) keeps in ``new``.

    ``expand`` adds leading dims (it may also grow dims of size 1); ``unsqueeze`` inserts one dim of size
    1: the first place it fits (next to other dims of size 1, the shapes alone cannot tell which is new).
    """
    k = len(new) - len(old)
    if k != 1 or new[k:] == old:  # leading dims
        return [(i + k, i) for i in range(len(old))]
    at = 0
    while at < len(old) and new[at] == old[at]:
        at += 1
    while at and new[at - 1] == 1:
        at -= 1
    return [(j if j < at else j + 1, j) for j in range(len(old))]


def _member_dims(positions: torch.Tensor, member: set[int]) -> torch.Tensor:
    """``positions`` with stride 0 exactly on the dims in ``member`` (the stack's members' own dims)."""
    if not positions.numel() or all(bool(positions.stride(j)) != (j in member) for j in range(positions.ndim)):
        return positions
    index = tuple(0 if j in member else slice(None) for j in range(positions.ndim))
    return _spread(positions[index].clone(memory_format=torch.contiguous_format), positions.shape, member)


def _spread(base: torch.Tensor, shape: torch.Size, member: set[int]) -> torch.Tensor:
    """``base`` (contiguous, the dims of ``shape`` but ``member``) viewed as ``shape``: stride 0 on ``member``."""
    rest = iter(base.stride())
    strides = [0 if j in member else next(rest) for j in range(len(shape))]
    return base.as_strided(shape, strides)  # (base is fresh: offset 0)


def _new_containers(value: Any) -> Any:
    """``value`` with new pytree containers (``dict``, ``list``, ``tuple``...) at every level, the same items."""
    return value if _pytree.tree_is_leaf(value) else _pytree.tree_map(_same_item, value)


def _same_item(item: Any) -> Any:
    return item


def _regular_depth(values: Any) -> int:
    """How many leading levels of ``values`` are lists of equal lengths."""
    if not isinstance(values, list) or not values:
        return 0
    subs = [_regular_depth(v) if isinstance(v, list) else 0 for v in values]
    lengths = {len(v) if isinstance(v, list) else -1 for v in values}
    return 1 + (min(subs) if len(lengths) == 1 and -1 not in lengths else 0)


def _pick(pos: list[Any], items: list[Any]) -> list[Any]:
    if pos and isinstance(pos[0], list):
        return [_pick(p, items) for p in pos]
    return [items[i] for i in pos]


def _collapsed(items: list[Any], pos: torch.Tensor, device: Any) -> _NonTensor:
    """The leaf holding ``items[pos]``: one NonTensorData when every used value is the same.

    When all of ``items`` agree, no position is read (``torch.unique(...).tolist()`` is data-dependent:
    dynamo cannot trace it with ``fullgraph=True``).
    """
    if pos.numel() and all(_same(items[0], item) for item in items[1:]):
        return NonTensorData._new(items[0], pos.shape, device)
    used = torch.unique(pos).tolist()
    first = items[used[0]] if used else None
    if all(_same(first, items[i]) for i in used[1:]):
        return NonTensorData._new(first, pos.shape, device)
    return NonTensorStack._new(items, pos, device)


def _parts(nt: _NonTensor) -> tuple[list[Any], torch.Tensor]:
    if isinstance(nt, NonTensorStack):
        return nt._items, nt._pos
    assert isinstance(nt, NonTensorDataBase)
    return [nt.data], nt._positions()


def stack_non_tensor(
    members: Sequence[_NonTensor], dim: int, cat: bool = False, collapse: bool | None = None
) -> _NonTensor:
    """Stack (or concatenate) non-tensor leaves: one value when all agree, else a NonTensorStack.

    ``collapse`` defaults to the ``set_capture_non_tensor_stack`` mode for a stack (False by default, as
    tensordict) and to True for a concatenation (tensordict's ``cat`` keeps one value when all agree).
    """
    if collapse is None:
        collapse = cat or _options.CAPTURE_NON_TENSOR_STACK
    keep: type[NonTensorDataBase] = NonTensorData
    if all(isinstance(m, MetaData) for m in members) and all(m.data is members[0].data for m in members):
        collapse, keep = True, type(members[0])  # type: ignore[assignment]  # the same object: one MetaData

    if collapse and all(isinstance(m, NonTensorDataBase) for m in members):
        first = members[0].data
        if all(_same(first, m.data) for m in members[1:]):
            shape = (torch.cat if cat else torch.stack)([m._positions() for m in members], dim).shape
            return keep._new(first, shape, members[0].device)
    items: list[Any] = []
    positions = []
    own = set(range(members[0].batch_dims))  # the dims of stride 0 in every member: the members' own dims
    for m in members:
        its, pos = _parts(m)
        own.difference_update(i for i, stride in enumerate(pos.stride()) if stride)
        positions.append(pos + len(items))
        items.extend(its)
    pos = (torch.cat if cat else torch.stack)(positions, dim)
    if not cat:  # they stay the members' own dims (the new dim is a stack dim)
        d = dim % pos.ndim
        pos = _member_dims(pos, {i if i < d else i + 1 for i in own})
    out = NonTensorStack._new(items, pos, members[0].device)
    return out._from_positions(pos) if collapse else out


def wrap(value: Any, batch_size: torch.Size, device: Any) -> NonTensorData:
    """Wrap a plain Python object as a leaf of the given batch."""
    return NonTensorData._new(value, batch_size, device)


def _rebuild_data(cls: Any, data: Any, batch_size: Any, device: Any, names: Any = None) -> NonTensorDataBase:
    """Unpickle a ``NonTensorData``/``MetaData`` (allowed in ``torch.load(weights_only=True)``).

    Raises:
        TypeError: for a ``cls`` that is no ``NonTensorDataBase`` class (crafted arguments).
    """
    if not (isinstance(cls, type) and issubclass(cls, NonTensorDataBase)):
        raise TypeError(f"unpickling a NonTensorData: expected a NonTensorData or MetaData class, got {cls!r}")
    return cls(data, batch_size, device, names)


def _rebuild_stack(items: Any, positions: Any, device: Any, names: Any = None) -> NonTensorStack:
    """Unpickle a ``NonTensorStack``: its distinct values and, per element, the position of its value.

    Raises:
        TypeError: for crafted arguments: ``items`` no list, ``positions`` no integer tensor.
        IndexError: for a position outside ``items``.
    """
    if type(items) is not list or not isinstance(positions, torch.Tensor) or positions.dtype != torch.int64:
        raise TypeError(
            f"unpickling a NonTensorStack: malformed state (a {type(items).__name__} of values, "
            f"positions {positions!r})"
        )
    if positions.numel() and not (int(positions.min()) >= 0 and int(positions.max()) < len(items)):
        raise IndexError(f"unpickling a NonTensorStack: positions outside its {len(items)} values")
    out = NonTensorStack._new(items, positions.as_subclass(torch.Tensor), _as_device(device))
    if names is not None:
        out.names = names
    return out


TensorDictBase._non_tensor_cls = NonTensorData
TensorDictBase._non_tensor_stack_cls = NonTensorStack
TensorDictBase._linked_list_cls = LinkedList


allow_in_weights_only_load(NonTensorData, MetaData, _rebuild_data, _rebuild_stack)

__all__ = [
    "LinkedList",
    "MetaData",
    "NonTensorData",
    "NonTensorDataBase",
    "NonTensorStack",
    "is_non_tensor",
    "is_non_tensor_type",
    "stack_non_tensor",
    "value_of",
]
