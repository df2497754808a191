"""The one declared list of what typed wrappers forward to the TensorDict they wrap.

:class:`~tensorbatch.TensorClass` (HAS-A TensorDict, in ``_tensordict``) and
:class:`~tensorbatch.TypedTensorDict` (IS-A TensorDictBase delegating to ``_source``) forward the
public API of :class:`~tensorbatch.TensorDictBase` from these three sets:

* ``FORWARD``: the backend's result is returned as it is (values, keys, sizes, nested TensorDicts
  read by key); a result that *is* the backend (``td.lock_()``) becomes the wrapper itself.
* ``FORWARD_RETURNS_WRAPPED``: TensorDict results (or tuples of them) come back wrapped in the
  wrapper's class (``tc.clone()`` is a ``MyTC``); the backend itself becomes the wrapper.
* ``EXCLUDED``: never generated; each wrapper implements the name itself (a TypedTensorDict may
  inherit TensorDictBase's generic version), with the reason given here.

``tests/test_delegation.py`` asserts that ``public_methods(TensorDictBase)`` is exactly the union,
so a new base method cannot silently miss the wrappers. A wrapper class that defines a listed name
in its own body keeps its definition (an explicit override).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from . import _stacks as _stacks  # the wrappers forward these methods: installed before install() reads them
from . import functional as _functional  # noqa: F401  # (pad)
from ._base import values as _values
from ._ops import pointwise as _pointwise
from ._ops import torch_function as _torch_function
from ._ops.traverse import NON_TENSOR_TYPES, is_td
from ._td import TensorDict
from .base import TensorDictBase

_Tensor = torch.Tensor
_TORCH_STACK = torch.stack

# ----------------------------------------------------------------------------------- the lists
FORWARD: set[str] = set(
    {  # (a set: a storage registered later adds its to_X/from_X: ``forward``)
        # batch facts (properties; a forwarded property also forwards assignment)
        "batch_size",
        "batch_dims",
        "device",
        "dtype",
        "depth",
        "is_locked",
        "names",
        "ndim",
        "requires_grad",
        "shape",
        "sorted_keys",
        "dim",
        "ndimension",
        "numel",
        "size",
        "__len__",
        "__bool__",
        # the end of a ``with`` block on the result of lock_/unlock_/to_module (undoes it)
        "__exit__",
        # keys and values: nested TensorDicts read by key are the backend's own, never re-wrapped
        "keys",
        "items",
        "values",
        "get",
        "get_at",
        "get_item_shape",
        "get_non_tensor",
        "entry_class",
        "is_non_tensor",
        "non_tensor_items",
        "pop",
        "popitem",
        "setdefault",
        "__contains__",
        "__delitem__",
        # queries and exports
        "allclose",
        "is_contiguous",
        "is_empty",
        "state_dict",
        "to_dict",
        "to_namedtuple",
        "to_pytree",
        "to_struct_array",
        "tolist",
        "is_memmap",
        "is_shared",
        "saved_path",
        "is_consolidated",
        "to_h5",  # writes an HDF5 file: the PersistentTensorDict over it
        "from_h5",  # opens an HDF5 file (classmethod): the PersistentTensorDict over it
        "to_store",  # uploads to a Redis-compatible server: the TensorDictStore over it
        "to_pandas",
        "to_arrow",
        "to_csv",
        "to_json",
        "to_parquet",  # tables (tabular.py)
        # torch.distributed transfers into the backend (None, a tag or Works)
        "send",
        "isend",
        "recv",
        "irecv",
        "init_remote",
        "reduce",
        "all_reduce",
        # memory-mapped leaves created in place (the new MemoryMappedTensor is returned)
        "make_memmap",
        "make_memmap_from_storage",
        "make_memmap_from_tensor",
        # sizes, pointers, device and dtype facts, exports to numpy or one tensor, autograd
        "bytes",
        "param_count",
        "data_ptr",
        "is_cpu",
        "is_cuda",
        "is_meta",
        "is_floating_point",
        "numpy",
        "cat_from_tensordict",
        "stack_from_tensordict",
        "backward",
        "pack",  # (the tensor and its PackLayout; TensorClass defines its own, recording its class in the layout)
        # constructors of plain TensorDicts (classmethods)
        "from_any",
        "from_dataclass",
        "from_dict",
        "from_namedtuple",
        "from_pytree",
        "from_struct_array",
        "from_tuple",
        "from_pandas",
        "from_arrow",
        "from_csv",
        "from_json",
        "from_parquet",
        "from_schema",  # zero-filled leaves from (shape, dtype) pairs, in memory or in a storage backend
    }
)

FORWARD_RETURNS_WRAPPED: frozenset[str] = _pointwise.NAMES | frozenset(
    {  # the table's methods, and:
        # writes (they return the backend, hence the wrapper)
        "set",
        "set_",
        "set_at_",
        "set_non_tensor",
        "update",
        "update_",
        "update_at_",
        "copy_at_",
        "del_",
        "clear",
        "rename_key_",
        "fill_",
        "zero_",
        "zero_grad",
        "apply_",
        "copy_",
        "detach_",
        "requires_grad_",
        "empty",
        "masked_fill_",
        "lock_",
        "unlock_",
        "__enter__",
        "clear_refs_for_compile_",
        "load_state_dict",
        "auto_batch_size_",
        "refine_names",
        "rename_",
        "clear_device_",
        # new TensorDicts of the same schema
        "apply",
        "named_apply",
        "clone",
        "copy",
        "replace",
        "__copy__",
        "__deepcopy__",
        "to",
        "attrs",
        "cpu",
        "cuda",
        "detach",
        "__getitems__",  # a DataLoader's batch fetch (the backend's rows, read in a worker when stored)
        "contiguous",
        "data",
        "grad",
        "select",
        "exclude",
        "flatten_keys",
        "unflatten_keys",
        "split_keys",
        "filter_non_tensor_data",
        "to_padded_tensor",
        "rename",
        "masked_fill",
        "masked_select",
        "where",
        "new_empty",
        "new_full",
        "new_ones",
        "new_tensor",
        "new_zeros",
        # shape operations
        "view",
        "reshape",
        "permute",
        "transpose",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "expand",
        "expand_as",
        "unbind",
        "split",
        "chunk",
        "repeat",
        "repeat_interleave",
        "gather",
        "flip",
        "fliplr",
        "flipud",
        "roll",
        "movedim",
        "moveaxis",
        "swapaxes",
        "swapdims",
        "narrow",
        "tile",
        "tensor_split",
        "rot90",
        "broadcast_to",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "pad",
        "to_lazystack",
        "densify",
        # structure edits and leaf conversions (the in-place ones return the backend, hence the wrapper)
        "rename_keys",
        "separates",
        "create_nested",
        "filter_empty_",
        "cat_tensors",
        "stack_tensors",
        "as_tensor",
        "type",
        "auto_device_",
        "record_stream",
        # reductions (a TensorDict with a ``dim``, a bool or a tensor without)
        "all",
        "any",
        "sum",
        "mean",
        "nansum",
        "nanmean",
        "prod",
        "std",
        "var",
        "max",
        "min",
        "amax",
        "amin",
        "norm",
        "logsumexp",
        "softmax",
        "cummax",
        "cummin",
        "quantile",
        # persistence (``memmap_``/``share_memory_`` return the backend, hence the wrapper)
        "memmap",
        "memmap_",
        "memmap_like",
        "save",
        "dumps",
        "load_memmap_",
        "memmap_refresh_",
        "share_memory_",
        "pin_memory",
        "pin_memory_",
        "load_",
        "consolidate",
        # process-pool maps (map_iter yields the chunks' results)
        "map",
        "map_iter",
        # classmethods building a TensorDict (from several, or from a saved folder or file)
        "stack",
        "cat",
        "load_memmap",
        "load",
        "from_consolidated",
        "lazy_stack",
        "maybe_dense_stack",
        "from_list",
        "fromkeys",
        "from_dict_instance",
        # torch.distributed: TensorDicts received from other ranks (from_remote_init builds the class)
        "broadcast",
        "all_gather",
        "gather_and_stack",
        "from_remote_init",
        "scatter",
        # parameters as TensorDicts (tensorbatch/nn): the swap returned by to_module, and the classmethods
        "to_module",
        "from_module",
        "from_modules",
    }
)

EXCLUDED: dict[str, str] = {
    "__init_subclass__": "class machinery: each wrapper collects its fields here",
    "__init__": "each wrapper builds itself (TensorCollection's refuses TensorCollection itself only)",
    "__torch_function__": "unwraps the wrappers, dispatches through the one table, re-wraps (torch_function)",
    "__getitem__": "a key gives the backend's value as is, a batch index a wrapped result",
    "__setitem__": "unwraps wrapper values; a TensorClass refuses string keys (use the attribute)",
    "__iter__": "iterates over the first batch dim, yielding wrapped elements",
    "__reduce__": "pickles the wrapper class together with its backend",
    "__repr__": "shows the wrapper class and its fields",
    "to_tensordict": "converts out of the wrapper: always a plain in-memory TensorDict",
}

PRIMITIVES: tuple[str, ...] = (
    "_get_str",
    "_set_str",
    "_del_str",
    "_keys_str",
    "_items_str",
    "_values_str",
    "_has_str",
    "_change_batch_size",
    "_set_lock",
    "_maybe_names",
    "_get",
    "_walk_to",
    "_validate",
    "_copy_tree",
    "_map",
    "_parent_of",
    "_deepest",
    "_meta_items",
)
"""Private members a TensorClass forwards so that a TensorDict can hold one as a nested value."""


def public_methods(cls: type) -> frozenset[str]:
    """Public callables and properties of ``cls``, plus the dunders it defines beyond ``object``'s.

    Examples:
        >>> from tensorbatch import TensorDictBase
        >>> {"clone", "__add__", "batch_size"} <= public_methods(TensorDictBase)
        True
        >>> "_set_str" in public_methods(TensorDictBase)  # private: not forwarded
        False
    """
    out = set()
    for name in dir(cls):
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), object)
        if owner is object:
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, (classmethod, staticmethod, property)) or callable(value):
            out.add(name)
    return frozenset(out)


# ----------------------------------------------------------------------------------- wrapping
WRAPPER_TYPES: set[type] = set()
"""Every wrapper class (TensorClass and TypedTensorDict subclasses): arguments of these types are unwrapped."""


def unwrap(value: Any) -> Any:
    """The backend of a wrapper (recursively), anything else unchanged."""
    while type(value) in WRAPPER_TYPES:
        value = getattr(value, value._wrapped_attr)
    return value


def storage_of(td: Any) -> dict[str, Any] | None:
    """The ``dict`` holding an in-memory backend's entries (through wrappers), or None for other backends."""
    td = unwrap(td)
    return td._tensordict if type(td) is TensorDict else None


_RESERVED: dict[type, frozenset[str]] = {}


def reserved_names(cls: type) -> frozenset[str]:
    """The public attribute names of a wrapper base class (fields may not take them without ``shadow``).

    Computed on first use, once the class has its forwarded methods.
    """
    if cls not in _RESERVED:
        _RESERVED[cls] = frozenset(n for n in dir(cls) if not n.startswith("__"))
    return _RESERVED[cls]


def to_dense(td: Any) -> Any:
    """An in-memory TensorDict copy of any backend (a lazy stack's leaves are stacked)."""
    td = unwrap(td)
    if type(td) is TensorDict:
        return _values.clone_tensors(td)
    return td._map(lambda x: x.clone(), "cloning")


def locked_field(wrapper: Any, name: str) -> RuntimeError:
    """The RuntimeError of an assignment to a field of a locked (frozen, memory-mapped...) instance."""
    frozen = " (the class is frozen)" if type(wrapper)._frozen else ""
    return RuntimeError(
        f"cannot assign to field {name!r} of {type(wrapper).__name__}: its TensorDict is locked{frozen}. "
        f"To write into the existing tensor, use set_({name!r}, value)."
    )


def _strip(value: Any, seen: list[tuple[Any, Any]]) -> Any:
    if type(value) in WRAPPER_TYPES:
        inner = unwrap(value)
        seen.append((inner, value))
        return inner
    return value


def _wrapper_of(result: Any, seen: list[tuple[Any, Any]]) -> Any:
    """The first wrapper whose backend is ``result``, or None.

    Found by identity, not by ``id()``: under torch.compile an ``id()`` is guarded on, and every new input
    would be compiled again.
    """
    for inner, wrapper in seen:
        if inner is result:
            return wrapper
    return None


def _call(self: Any, backend: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], wrap: bool) -> Any:
    """``backend.name(*args, **kwargs)`` with wrapper arguments unwrapped and the result mapped back."""
    seen: list[tuple[Any, Any]] = []
    if any(type(a) in WRAPPER_TYPES for a in args):
        args = tuple(_strip(a, seen) for a in args)
    if kwargs and any(type(v) in WRAPPER_TYPES for v in kwargs.values()):
        kwargs = {k: _strip(v, seen) for k, v in kwargs.items()}
    result = getattr(backend, name)(*args, **kwargs)
    if result is backend:
        return self
    if seen:  # ``out=other_wrapper``
        wrapper = _wrapper_of(result, seen)
        if wrapper is not None:
            return wrapper
    return rewrap(self, backend, result) if wrap else result


def rewrap(wrapper: Any, backend: Any, result: Any) -> Any:
    """``result`` of a backend call made for ``wrapper``: TensorDicts wrapped in its class.

    The backend itself maps to ``wrapper``; tuples, lists and named tuples are wrapped item by item.
    """
    if result is backend:
        return wrapper
    kind = type(result)
    if kind is TensorDict:  # the common results first: an in-memory TensorDict, a tensor
        return wrapper._wrap_like(result)
    if kind is _Tensor:
        return result
    if kind in NON_TENSOR_TYPES or getattr(kind, "_tb_tensorclass", False):
        return result
    if is_td(result):  # a TensorDict of any backend, a TypedTensorDict included
        return wrapper._wrap_like(result)
    if kind is tuple or kind is list:
        return kind(rewrap(wrapper, backend, r) for r in result)
    if inspect.isgenerator(result):
        return (rewrap(wrapper, backend, r) for r in result)
    if isinstance(result, tuple) and any(is_td(r) for r in result):  # named tuples and torch.return_types
        items = [rewrap(wrapper, backend, r) for r in result]
        return kind(*items) if hasattr(kind, "_fields") else kind(items)
    return result


# (getattr(self, attr), not an operator.attrgetter: dynamo traces the one, not the other)
def _forwarder(name: str, attr: str, wrap: bool) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        # as_tensordict=True (select's, in tensordict) asks for the backend's TensorDict itself
        return _call(self, getattr(self, attr), name, args, kwargs, wrap and not kwargs.get("as_tensordict"))

    return method


def _property(name: str, attr: str, wrap: bool) -> property:
    def fget(self: Any) -> Any:
        backend = getattr(self, attr)
        result = getattr(backend, name)
        return rewrap(self, backend, result) if wrap else result

    def fset(self: Any, value: Any) -> None:
        setattr(getattr(self, attr), name, unwrap(value))

    return property(fget, fset, doc=f"The wrapped TensorDict's ``{name}``.")


def _classmethod(name: str, wrap: bool) -> classmethod[Any, Any, Any]:
    def method(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if name == "load_memmap" and type(kwargs.get("out")) in WRAPPER_TYPES:  # out= an instance: kept as is
            return getattr(TensorDictBase._dense_cls, name)(*args, **kwargs)
        args = tuple([unwrap(v) for v in a] if type(a) in (list, tuple) else unwrap(a) for a in args)
        result = getattr(TensorDictBase._dense_cls, name)(*args, **{k: unwrap(v) for k, v in kwargs.items()})
        if not wrap or not is_td(result) or getattr(type(result), "_tb_tensorclass", False):
            return result  # (load_memmap of a TensorClass's folder: the class it names, as tensordict)
        check = getattr(cls, "_check_new", None)
        if check is not None:  # (a TensorClass: the keys must be its fields)
            check(result, name)
        return cls._wrap_new(result)

    method.__name__ = name
    return classmethod(method)


_INSTALLED: list[tuple[type, str]] = []  # the wrapper classes installed so far, with their backend attribute


def forward(names: set[str]) -> None:
    """Add ``names`` to ``FORWARD`` and attach their forwarders to the wrapper classes installed already.

    How a storage registered after import (``tensorbatch.stored.register_storage``) reaches TensorClass and
    TypedTensorDict: its ``to_X``/``from_X`` are TensorDictBase methods like any other.
    """
    FORWARD.update(names)
    for cls, attr in _INSTALLED:
        install(cls, attr)


def install(cls: type, attr: str) -> None:
    """Attach a forwarder to ``cls`` for every listed name it does not define in its own body.

    Args:
        cls: the wrapper class (it defines ``_wrap_like(td)`` and, for classmethods, ``_wrap_new(td)``).
        attr: the attribute holding the backend (``"_tensordict"`` or ``"_source"``).
    """
    # names whose results the class leaves unwrapped (a TypedTensorDict's reductions and comparisons)
    plain: frozenset[str] = getattr(cls, "_plain_results", frozenset())
    for names, wrapped in ((FORWARD, False), (FORWARD_RETURNS_WRAPPED, True)):
        for name in sorted(names):
            if name in cls.__dict__:
                continue
            wrap = wrapped and name not in plain
            static = inspect.getattr_static(TensorDictBase, name, None)
            forwarder: Any
            if isinstance(static, property):
                forwarder = _property(name, attr, wrap)
            elif isinstance(static, classmethod):
                forwarder = _classmethod(name, wrap)
            else:
                forwarder = _forwarder(name, attr, wrap)
                forwarder.__name__ = name
                forwarder.__qualname__ = f"{cls.__name__}.{name}"
                summary = (inspect.getdoc(static) or "").split("\n", 1)[0]
                forwarder.__doc__ = f"{summary}\n\nForwarded to the wrapped TensorDict."
            setattr(cls, name, forwarder)
    if (cls, attr) not in _INSTALLED:
        _INSTALLED.append((cls, attr))


_ONLY_DENSE = frozenset({TensorDict})


def _stack_dense(args: Any, kwargs: Any) -> Any:
    """``torch.stack`` of wrappers of one class over in-memory TensorDicts, or None.

    Their backends go straight to the one stack implementation (which has its own in-memory path);
    this skips the generic unwrapping walk over the arguments. Anything else goes the generic way.
    """
    if kwargs:
        if len(args) != 1 or len(kwargs) != 1 or "dim" not in kwargs:
            return None
        dim = kwargs["dim"]
    else:
        if not 1 <= len(args) <= 2:
            return None
        dim = args[1] if len(args) == 2 else 0
    items = args[0]
    if type(dim) is not int or (type(items) is not list and type(items) is not tuple) or not items:
        return None
    kinds = set(map(type, items))
    if len(kinds) != 1:
        return None
    kind: Any = kinds.pop()
    if kind not in WRAPPER_TYPES:
        return None
    attr = kind._wrapped_attr
    tds = [getattr(item, attr) for item in items]
    if set(map(type, tds)) != _ONLY_DENSE:
        return None
    return items[0]._wrap_like(_torch_function.stack(tds, dim))


def torch_function(func: Any, args: Any, kwargs: Any) -> Any:
    """``__torch_function__`` body for wrappers: unwrap, dispatch through the one table, re-wrap.

    The result takes the class of the first wrapper among the arguments; a result that is the
    backend of a wrapper argument (``out=``) is that wrapper.
    """
    if func is _TORCH_STACK:
        result = _stack_dense(args, kwargs)
        if result is not None:
            return result
    wrappers: list[tuple[Any, Any]] = []

    def strip(value: Any) -> Any:
        if type(value) in (list, tuple):
            return type(value)(strip(v) for v in value)
        return _strip(value, wrappers)

    args = tuple(strip(a) for a in args)
    kwargs = {k: strip(v) for k, v in (kwargs or {}).items()}
    result = _torch_function.dispatch(func, (), args, kwargs)
    if result is NotImplemented or not wrappers:
        return result
    wrapper = _wrapper_of(result, wrappers)
    if wrapper is not None:
        return wrapper
    first = wrappers[0][1]
    if getattr(func, "__name__", None) in getattr(type(first), "_plain_results", ()):
        return result
    return rewrap(first, unwrap(first), result)


__all__ = [
    "EXCLUDED",
    "FORWARD",
    "FORWARD_RETURNS_WRAPPED",
    "PRIMITIVES",
    "forward",
    "install",
    "public_methods",
]
