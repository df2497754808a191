"""TensorDictBase: the backend primitives and the generic API written once on top of them.

A backend implements the primitives (``batch_size``, ``device``, ``_get_str``, ``_set_str``,
``_del_str``, ``_keys_str``/``_items_str``/``_values_str``, ``_change_batch_size``, lock state)
and inherits everything else. Shape, index, reduction, pointwise and torch-function support live
in :mod:`tensorbatch._ops` and are attached here; this module imports no backend.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import torch

from ._base import access as _access
from ._base import construct as _construct
from ._base import export as _export
from ._base import keys as _keys_ops
from ._base import leaves as _leaves
from ._base import locks as _locks
from ._base import restructure as _restructure
from ._base import transfer as _transfer
from ._base import values as _values
from ._base.coerce import as_size as _as_size
from ._base.collection import TensorCollection
from ._base.storage import StorageHooks
from ._ops import index as _index
from ._ops import pointwise as _pointwise
from ._ops import reduce as _reduce
from ._ops import shape as _shape
from ._ops import torch_function as _torch_function
from ._ops.traverse import COLLECTION_TYPES, NO_DEFAULT, flat_leaves, named_leaves

_Tensor = torch.Tensor
_Size = torch.Size


class TensorDictBase(StorageHooks, TensorCollection):
    """Abstract base of every TensorDict type: a batched mapping from keys to tensors.

    Subclasses implement a handful of primitives; everything else is generic.
    """

    # ``_last_op``: what a ``with`` block on the result of lock_/unlock_/to_module undoes (see _base/locks.py)
    __slots__ = ("_last_op",)
    _is_tensor_collection: ClassVar[bool] = True
    # The in-memory class used for results of generic ops; set by ``_td.py`` (no import here).
    _dense_cls: ClassVar[Any] = None
    # The non-tensor leaf classes (NonTensorData, NonTensorStack); set by ``_nontensor.py`` (no import here).
    _non_tensor_cls: ClassVar[Any] = None
    _non_tensor_stack_cls: ClassVar[Any] = None
    _linked_list_cls: ClassVar[Any] = None  # LinkedList (``tolist(as_linked_list=True)``), set there too
    # In-memory types (TensorDict, lazy stacks): a value of one set into a named TensorDict is stored as a named
    # shallow copy, as tensordict's, instead of renaming the caller's object (see _base/access.py _named_node).
    _named_by_copy: ClassVar[bool] = False
    # NumPy defers binary operators to us (``np.float32(2) - td`` calls ``td.__rsub__``) instead of trying to
    # make an array of the TensorDict; a NumPy ufunc called on a TensorDict raises TypeError.
    __array_ufunc__ = None

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

    def _index_flat(self, index: Any) -> Any:
        """``self[index]`` as an in-memory TensorDict by a direct path (int, slice, short index tensor), or None.

        None sends the index to the generic indexing; the in-memory TensorDict answers most calls here, and
        the typed wrappers ask their backend through this hook before rewrapping.
        """
        return None

    def _adopt_device(self, device: torch.device | None) -> None:
        """Record ``device`` as this node's device (its leaves are there); a derived device ignores it."""

    def _stacked_members(self) -> tuple[int, list[TensorDictBase]] | None:
        """``(stack_dim, members)`` for a backend that keeps members apart (a lazy stack), else None.

        Features that store a TensorDict (``_io``) ask this instead of testing for a backend class.
        """
        return None

    def _reduce_consolidated(self) -> Any:
        """Pickle state of a consolidated TensorDict (one buffer), or None (``_io`` attaches the real hook)."""
        return None

    def _consolidated_to(self, device: torch.device | None, non_blocking: bool) -> TensorDictBase | None:
        """``to(device)`` by moving one consolidated buffer, or None (``_io`` attaches the real hook)."""
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

    # ------------------------------------------------------------------ torch function protocol
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _torch_function.dispatch(func, types, args, kwargs)

    # generic methods, one module per job (tensorbatch/_base/)
    # access: tensorbatch/_base/access.py
    _locate = _access._locate
    _walk_to = _access._walk_to
    get = _access.get
    _get = _access._get
    __getitem__ = _access.__getitem__
    __getitems__ = _access.__getitems__
    __setitem__ = _access.__setitem__
    __delitem__ = _access.__delitem__
    _has_str = _access._has_str
    __contains__ = _access.__contains__
    set = _access.set_entry
    _deepest = _access._deepest
    set_ = _access.set_
    _validate = _access._validate
    del_ = _access.del_
    pop = _access.pop
    popitem = _access.popitem
    setdefault = _access.setdefault
    clear = _access.clear
    update = _access.update
    _parent_of = _access._parent_of
    _plan_update = _access._plan_update
    update_ = _access.update_
    # keys: tensorbatch/_base/keys.py
    keys = _keys_ops.keys
    items = _keys_ops.items
    values = _keys_ops.values
    entry_class = _keys_ops.entry_class
    get_item_shape = _keys_ops.get_item_shape
    is_empty = _keys_ops.is_empty
    select = _keys_ops.select
    _empty_like = _keys_ops._empty_like
    _new_node = _keys_ops._new_node
    empty = _keys_ops.empty
    _replace_with = _keys_ops._replace_with
    exclude = _keys_ops.exclude
    _copy_tree = _keys_ops._copy_tree
    split_keys = _keys_ops.split_keys
    flatten_keys = _keys_ops.flatten_keys
    unflatten_keys = _keys_ops.unflatten_keys
    rename_key_ = _keys_ops.rename_key_
    # values: tensorbatch/_base/values.py
    fill_ = _values.fill_
    auto_batch_size_ = _values.auto_batch_size_
    apply = _values.apply
    apply_ = _values.apply_
    named_apply = _values.named_apply
    _map = _values._map
    to = _transfer.to
    attrs = _values.attrs
    cpu = _transfer.cpu
    cuda = _transfer.cuda
    clone = _values.clone
    copy = _values.copy
    __copy__ = _values.__copy__
    __deepcopy__ = _values.__deepcopy__
    replace = _values.replace
    copy_at_ = _values.copy_at_
    copy_ = _values.copy_
    detach = _values.detach
    detach_ = _values.detach_
    requires_grad_ = _values.requires_grad_
    requires_grad = property(_values.requires_grad)
    zero_ = _values.zero_
    zero_grad = _values.zero_grad
    data = property(_values.data)
    grad = property(_values.grad)
    contiguous = _values.contiguous
    is_contiguous = _values.is_contiguous
    _new_leaves = _values._new_leaves
    new_zeros = _values.new_zeros
    new_ones = _values.new_ones
    new_empty = _values.new_empty
    new_full = _values.new_full
    new_tensor = _values.new_tensor
    lock_ = _locks.lock_
    unlock_ = _locks.unlock_
    __enter__ = _locks.__enter__
    __exit__ = _locks.__exit__

    def _exit_plain(self) -> None:
        """Leave a plain ``with td:`` block (nothing to undo): nothing here; storage backends close."""

    clear_refs_for_compile_ = _locks.clear_refs_for_compile_
    all = _values.all_true
    any = _values.any_true
    allclose = _values.allclose
    # export: tensorbatch/_base/export.py
    set_non_tensor = _export.set_non_tensor
    get_non_tensor = _export.get_non_tensor
    is_non_tensor = _export.is_non_tensor
    non_tensor_items = _export.non_tensor_items
    filter_non_tensor_data = _export.filter_non_tensor_data
    tolist = _export.tolist
    to_padded_tensor = _export.to_padded_tensor
    to_dict = _export.to_dict
    to_tensordict = _export.to_tensordict
    state_dict = _export.state_dict
    load_state_dict = _export.load_state_dict
    __reduce__ = _export.__reduce__
    __repr__ = _export.__repr__
    refine_names = _export.refine_names
    rename = _export.rename
    rename_ = _export.rename_
    # restructure: tensorbatch/_base/restructure.py
    _take_result = _restructure._take_result
    rename_keys = _restructure.rename_keys
    separates = _restructure.separates
    create_nested = _restructure.create_nested
    filter_empty_ = _restructure.filter_empty_
    cat_tensors = _restructure.cat_tensors
    stack_tensors = _restructure.stack_tensors
    # leaves: tensorbatch/_base/leaves.py
    bytes = _leaves.nbytes
    param_count = _leaves.param_count
    data_ptr = _leaves.data_ptr
    is_cpu = property(_leaves.is_cpu)
    is_cuda = property(_leaves.is_cuda)
    is_meta = property(_leaves.is_meta)
    is_floating_point = _leaves.is_floating_point
    numpy = _leaves.numpy
    as_tensor = _leaves.as_tensor
    type = _leaves.cast_type
    auto_device_ = _leaves.auto_device_
    backward = _leaves.backward
    record_stream = _leaves.record_stream
    cat_from_tensordict = _leaves.cat_from_tensordict
    stack_from_tensordict = _leaves.stack_from_tensordict
    densify = _leaves.densify
    # construct: tensorbatch/_base/construct.py
    from_dict_instance = _construct.from_dict_instance
    clear_device_ = _construct.clear_device_

    @classmethod
    def fromkeys(cls, keys: Sequence[Any], value: Any = 0) -> Any:
        """A TensorDict (batch size ``[]``) with every key set to ``value``, like :meth:`dict.fromkeys`."""
        return _construct.fromkeys(cls, keys, value)

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
    flip = _shape.flip
    fliplr = _shape.fliplr
    flipud = _shape.flipud
    roll = _shape.roll
    movedim = _shape.movedim
    moveaxis = _shape.movedim
    swapaxes = _shape.swapaxes
    swapdims = _shape.swapaxes
    narrow = _shape.narrow
    tile = _shape.tile
    tensor_split = _shape.tensor_split
    rot90 = _shape.rot90
    broadcast_to = _shape.broadcast_to
    atleast_1d = _shape.atleast_1d
    atleast_2d = _shape.atleast_2d
    atleast_3d = _shape.atleast_3d
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
    logsumexp = _reduce.logsumexp
    softmax = _reduce.softmax
    cummax = _reduce.cummax
    cummin = _reduce.cummin
    quantile = _reduce.quantile

    @classmethod
    def stack(cls, input: Sequence[TensorDictBase], dim: int = 0, *, out: Any = None, **kwargs: Any) -> TensorDictBase:
        """Stack TensorDicts along a new batch dim (see :func:`torch.stack`; ``device``, ``strict``, ``contiguous``)."""
        stacked: TensorDictBase = _torch_function.stack(input, dim, out=out, **kwargs)
        return stacked

    @classmethod
    def cat(cls, input: Sequence[TensorDictBase], dim: int = 0, *, out: Any = None) -> TensorDictBase:
        """Concatenate TensorDicts along an existing batch dim (see :func:`torch.cat`)."""
        joined: TensorDictBase = _torch_function.cat(input, dim, out=out)
        return joined


_pointwise.install(TensorDictBase)
_locks.install_keep_lock(TensorDictBase)  # results of pointwise ops, casts, moves and shape views keep the lock


def _name_made_methods(cls: type[Any]) -> None:
    """Name the methods made by factories (the pointwise table, reductions, ``atleast_Nd``) as ``cls``'s own.

    Their ``__qualname__`` was the factory's (``_make_unary.<locals>.method``); as ``TensorDictBase.abs`` they read
    as what they are in reprs and tracebacks, and the API reference (mkdocstrings) finds them on the class.
    """
    for name, value in vars(cls).items():
        fn = getattr(value, "__func__", value)
        while callable(fn) and not name.startswith("__"):  # the method, then what it wraps (keep_lock's)
            if "<locals>" in getattr(fn, "__qualname__", ""):
                fn.__qualname__ = f"{cls.__qualname__}.{name}"
                fn.__module__ = cls.__module__
            fn = getattr(fn, "__wrapped__", None)


_name_made_methods(TensorDictBase)
del _name_made_methods  # not part of the module's API (nor of its stub)
