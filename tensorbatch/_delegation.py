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
import operator
from collections.abc import Callable
from typing import Any

from ._ops import pointwise as _pointwise
from ._ops import torch_function as _torch_function
from ._ops.traverse import NON_TENSOR_TYPES, is_td

# ----------------------------------------------------------------------------------- the lists
_POINTWISE_ALIASES = ("true_divide", "multiply", "subtract", "divide")


def _pointwise_names() -> frozenset[str]:
    """Every method and operator the pointwise table installs on TensorDictBase."""
    names = set(_pointwise.UNARY) | {f"{n}_" for n, inplace in _pointwise.UNARY.items() if inplace}
    names |= set(_pointwise.BINARY) | {f"{n}_" for n, (_, inplace) in _pointwise.BINARY.items() if inplace}
    names |= set(_pointwise.EXTRA) | set(_pointwise.CASTS) | set(_pointwise.OPERATORS) | set(_pointwise.REFLECTED)
    return frozenset(names | set(_POINTWISE_ALIASES))


FORWARD: frozenset[str] = frozenset({
    # batch facts (properties; a forwarded property also forwards assignment)
    "batch_size", "batch_dims", "device", "dtype", "depth", "is_locked", "names", "ndim", "requires_grad",
    "shape", "sorted_keys",
    "dim", "ndimension", "numel", "size", "__len__", "__bool__",
    # keys and values: nested TensorDicts read by key are the backend's own, never re-wrapped
    "keys", "items", "values", "get", "get_at", "get_item_shape", "get_non_tensor", "entry_class",
    "is_non_tensor", "non_tensor_items", "pop", "popitem", "setdefault", "__contains__", "__delitem__",
    # queries and exports
    "allclose", "is_contiguous", "is_empty", "state_dict", "to_dict", "to_namedtuple", "to_pytree",
    "to_struct_array", "tolist", "is_memmap", "is_shared", "saved_path",
    # constructors of plain TensorDicts (classmethods)
    "from_any", "from_dataclass", "from_namedtuple", "from_pytree", "from_struct_array", "from_tuple",
})

FORWARD_RETURNS_WRAPPED: frozenset[str] = _pointwise_names() | frozenset({
    # writes (they return the backend, hence the wrapper)
    "set", "set_", "set_at_", "set_non_tensor", "update", "update_", "update_at_", "del_", "clear",
    "rename_key_", "fill_", "zero_", "zero_grad", "apply_", "copy_", "detach_", "requires_grad_",
    "masked_fill_", "lock_", "unlock_", "load_state_dict", "auto_batch_size_", "refine_names", "rename_",
    # new TensorDicts of the same schema
    "apply", "named_apply", "clone", "copy", "__copy__", "__deepcopy__", "to", "cpu", "cuda", "detach",
    "contiguous", "data", "grad", "select", "exclude", "flatten_keys", "unflatten_keys", "split_keys",
    "filter_non_tensor_data", "to_padded_tensor", "rename", "masked_fill", "masked_select", "where",
    "new_empty", "new_full", "new_ones", "new_tensor", "new_zeros",
    # shape operations
    "view", "reshape", "permute", "transpose", "unsqueeze", "squeeze", "flatten", "unflatten", "expand",
    "expand_as", "unbind", "split", "chunk", "repeat", "repeat_interleave", "gather",
    # reductions (a TensorDict with a ``dim``, a bool or a tensor without)
    "all", "any", "sum", "mean", "nansum", "nanmean", "prod", "std", "var", "max", "min", "amax", "amin",
    "norm",
    # persistence (``memmap_``/``share_memory_`` return the backend, hence the wrapper)
    "memmap", "memmap_", "memmap_like", "save", "dumps", "load_memmap_", "share_memory_", "pin_memory",
    # classmethods building a TensorDict (from several, or from a saved folder)
    "stack", "cat", "load_memmap", "load",
})

EXCLUDED: dict[str, str] = {
    "__init_subclass__": "class machinery: each wrapper collects its fields here",
    "__torch_function__": "unwraps the wrappers, dispatches through the one table, re-wraps (torch_function)",
    "__getitem__": "a key gives the backend's value as is, a batch index a wrapped result",
    "__setitem__": "unwraps wrapper values; a TensorClass refuses string keys (use the attribute)",
    "__iter__": "iterates over the first batch dim, yielding wrapped elements",
    "__reduce__": "pickles the wrapper class together with its backend",
    "__repr__": "shows the wrapper class and its fields",
    "to_tensordict": "converts out of the wrapper: always a plain in-memory TensorDict",
}

PRIMITIVES: tuple[str, ...] = (
    "_get_str", "_set_str", "_del_str", "_keys_str", "_items_str", "_values_str", "_has_str",
    "_change_batch_size", "_set_lock", "_maybe_names", "_get", "_walk_to", "_validate", "_copy_tree",
    "_nested_items", "_map", "_parent_of", "_deepest",
)
"""Private members a TensorClass forwards so that a TensorDict can hold one as a nested value."""


def public_methods(cls: type) -> frozenset[str]:
    """Public callables and properties of ``cls``, plus the dunders it defines beyond ``object``'s.

    Examples:
        >>> from tensorbatch import TensorDictBase
        >>> {"clone", "__add__", "batch_size"} <= public_methods(TensorDictBase)
        True
        >>> "__init__" in public_methods(TensorDictBase)
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


def _unwrap_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    if not any(type(a) in WRAPPER_TYPES for a in args):
        return args
    return tuple(unwrap(a) for a in args)


def _unwrap_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    if not any(type(v) in WRAPPER_TYPES for v in kwargs.values()):
        return kwargs
    return {k: unwrap(v) for k, v in kwargs.items()}


def rewrap(wrapper: Any, backend: Any, result: Any) -> Any:
    """``result`` of a backend call made for ``wrapper``: TensorDicts wrapped in its class.

    The backend itself maps to ``wrapper``; tuples, lists and named tuples are wrapped item by item.
    """
    if result is backend:
        return wrapper
    kind = type(result)
    if kind in WRAPPER_TYPES or kind in NON_TENSOR_TYPES:
        return result
    if is_td(result):
        return wrapper._wrap_like(result)
    if kind is tuple or kind is list:
        return kind(rewrap(wrapper, backend, r) for r in result)
    if isinstance(result, tuple) and any(is_td(r) for r in result):  # named tuples and torch.return_types
        items = [rewrap(wrapper, backend, r) for r in result]
        return kind(*items) if hasattr(kind, "_fields") else kind(items)
    return result


def _plain(name: str, get: Callable[[Any], Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        backend = get(self)
        result = getattr(backend, name)(*_unwrap_args(args), **_unwrap_kwargs(kwargs))
        return self if result is backend else result

    return method


def _wrapped(name: str, get: Callable[[Any], Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        backend = get(self)
        result = getattr(backend, name)(*_unwrap_args(args), **_unwrap_kwargs(kwargs))
        return rewrap(self, backend, result)

    return method


def _property(name: str, get: Callable[[Any], Any], wrap: bool) -> property:
    def fget(self: Any) -> Any:
        backend = get(self)
        result = getattr(backend, name)
        return rewrap(self, backend, result) if wrap else result

    def fset(self: Any, value: Any) -> None:
        setattr(get(self), name, unwrap(value))

    return property(fget, fset, doc=f"The wrapped TensorDict's ``{name}``.")


def _classmethod(name: str, wrap: bool) -> classmethod[Any, Any, Any]:
    def method(cls: Any, *args: Any, **kwargs: Any) -> Any:
        args = tuple(
            [unwrap(v) for v in a] if type(a) in (list, tuple) else unwrap(a) for a in args
        )
        result = getattr(_dense_cls(), name)(*args, **_unwrap_kwargs(kwargs))
        return cls._wrap_new(result) if wrap and is_td(result) else result

    method.__name__ = name
    return classmethod(method)


def _dense_cls() -> Any:
    from .base import TensorDictBase  # the base imports nothing of ours; resolved at call time

    return TensorDictBase._dense_cls


def install(cls: type, attr: str) -> None:
    """Attach a forwarder to ``cls`` for every listed name it does not define in its own body.

    Args:
        cls: the wrapper class (it defines ``_wrap_like(td)`` and, for classmethods, ``_wrap_new(td)``).
        attr: the attribute holding the backend (``"_tensordict"`` or ``"_source"``).
    """
    from .base import TensorDictBase

    get = operator.attrgetter(attr)
    for names, wrap in ((FORWARD, False), (FORWARD_RETURNS_WRAPPED, True)):
        for name in sorted(names):
            if name in cls.__dict__:
                continue
            static = inspect.getattr_static(TensorDictBase, name)
            forwarder: Any
            if isinstance(static, property):
                forwarder = _property(name, get, wrap)
            elif isinstance(static, classmethod):
                forwarder = _classmethod(name, wrap)
            else:
                forwarder = (_wrapped if wrap else _plain)(name, get)
                forwarder.__name__ = name
                forwarder.__qualname__ = f"{cls.__name__}.{name}"
                summary = (inspect.getdoc(static) or "").split("\n", 1)[0]
                forwarder.__doc__ = f"{summary}\n\nForwarded to the wrapped TensorDict."
            setattr(cls, name, forwarder)


def torch_function(func: Any, args: Any, kwargs: Any) -> Any:
    """``__torch_function__`` body for wrappers: unwrap, dispatch through the one table, re-wrap.

    The result takes the class of the first wrapper among the arguments; a result that is the
    backend of a wrapper argument (``out=``) is that wrapper.
    """
    wrappers: dict[int, Any] = {}

    def strip(value: Any) -> Any:
        if type(value) in WRAPPER_TYPES:
            inner = unwrap(value)
            wrappers.setdefault(id(inner), value)
            return inner
        if type(value) in (list, tuple):
            return type(value)(strip(v) for v in value)
        return value

    args = tuple(strip(a) for a in args)
    kwargs = {k: strip(v) for k, v in (kwargs or {}).items()}
    result = _torch_function.dispatch(func, (), args, kwargs)
    if result is NotImplemented or not wrappers:
        return result
    if id(result) in wrappers and is_td(result):
        return wrappers[id(result)]
    first = next(iter(wrappers.values()))
    return rewrap(first, unwrap(first), result)


__all__ = ["EXCLUDED", "FORWARD", "FORWARD_RETURNS_WRAPPED", "PRIMITIVES", "install", "public_methods"]
