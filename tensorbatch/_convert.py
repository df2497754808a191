"""Conversions between TensorDicts and other containers.

From: dicts, named tuples (and ``torch.return_types``), tuples, NumPy structured arrays, dataclass
instances and pytrees (lists/tuples/dicts). To: named tuples, pytrees and structured arrays.
:func:`install` attaches them to a TensorDict class under tensordict's names
(``TensorDict.from_namedtuple``, ``td.to_namedtuple()``...); the module-level functions build an
in-memory :class:`~tensorbatch.TensorDict`.

Non-tensor values (strings, None, arbitrary objects) become non-tensor leaves (``NonTensorData``).

Examples:
    >>> from tensorbatch import TensorDict, TensorDictBase
    >>> _ = install(TensorDictBase)  # idempotent: tensorbatch does it on import
    >>> import collections
    >>> Point = collections.namedtuple("Point", ["x", "y"])
    >>> TensorDict.from_namedtuple(Point(torch.zeros(2), torch.ones(2))).to_namedtuple()
    GenericDict(x=tensor([0., 0.]), y=tensor([1., 1.]))
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import numbers
import uuid
import warnings
from collections import UserDict
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ._base.coerce import as_size
from ._errors import batch_mismatch, fmt_path, fmt_shape, user_stacklevel
from ._keys import is_key
from ._nontensor import NonTensorData, NonTensorStack, is_non_tensor
from ._ops.traverse import MISSING, is_td, named_nodes, plain_value_of
from .base import TensorDictBase

__all__ = [
    "from_any",
    "from_dict",
    "from_namedtuple",
    "from_pytree",
    "from_struct_array",
    "from_tuple",
    "install",
]

_Tensor = torch.Tensor
_user_stacklevel = user_stacklevel  # (warnings that point at user code)
_PYTREE_TYPE = "_pytree_type"
_NON_NESTED = "<NON_NESTED>"


# ---------------------------------------------------------------------------------------- helpers
def _target(cls: Any) -> Any:
    """The class to build: ``cls`` when it is an in-memory TensorDict class, else the in-memory class."""
    dense = TensorDictBase._dense_cls
    return cls if isinstance(cls, type) and dense is not None and issubclass(cls, dense) else dense


def _is_collection(obj: Any) -> bool:
    return is_td(obj) or getattr(type(obj), "_is_tensor_collection", False)


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields") and hasattr(obj, "_asdict")


def _is_structseq(obj: Any) -> bool:
    """``torch.return_types`` results and other C struct sequences: named fields, no ``_asdict``."""
    cls = type(obj)
    return (
        cls.__bases__ == (tuple,)
        and isinstance(getattr(cls, "n_sequence_fields", None), int)
        and isinstance(getattr(cls, "n_fields", None), int)
    )


def _finish(op: str, result: Any, auto_batch_size: bool | None, batch_dims: int | None, batch_size: Any) -> Any:
    """Apply ``auto_batch_size`` (or warn that ``batch_dims`` was ignored without it)."""
    if auto_batch_size:
        result.auto_batch_size_(batch_dims)
    elif batch_dims is not None:
        _warn_batch_dims_ignored(op, result, batch_dims, batch_size)
    return result


def _check_conflict(op: str, auto_batch_size: bool | None, batch_size: Any) -> None:
    if auto_batch_size and batch_size is not None:
        raise TypeError(f"Conflicting batch sizes in {op}: batch_size and auto_batch_size cannot be both specified.")


def _nested_sizes(td: Any) -> list[torch.Size]:
    return [td.batch_size, *(v.batch_size for _, v in td.items(include_nested=True) if is_td(v))]


def _warn_batch_dims_ignored(op: str, result: Any, batch_dims: int, batch_size: Any) -> None:
    """FutureWarning, as tensordict 0.15 gives, when ``auto_batch_size`` would change the result."""
    if batch_size is None:
        try:
            expected = result.clone(False).auto_batch_size_(batch_dims)
        except Exception:
            expected = None
        if expected is not None and _nested_sizes(expected) == _nested_sizes(result):
            return
    advice = (
        "Drop batch_dims to keep today's result."
        if batch_size is not None
        else "Pass auto_batch_size=True to get that result now, or drop batch_dims."
    )
    warnings.warn(
        f"{op} ignores batch_dims={batch_dims} without auto_batch_size=True. tensordict 0.17 will turn "
        f"auto_batch_size on when batch_dims is given, as from_dict does. {advice}",
        FutureWarning,
        stacklevel=_user_stacklevel(),
    )


def _build(target: Any, source: dict[str, Any], batch_size: Any, device: Any, op: str) -> Any:
    try:
        return target(source, batch_size=batch_size, device=device)
    except Exception as err:
        err.add_note(f"while building the result of {op}")
        raise


# ------------------------------------------------------------------------------- from_* (private)
def _from_any(
    target: Any,
    obj: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    kw = {
        "auto_batch_size": auto_batch_size,
        "batch_dims": batch_dims,
        "device": device,
        "batch_size": batch_size,
    }
    if type(obj) is _Tensor or _is_collection(obj):
        return obj
    if isinstance(obj, dict | UserDict):
        result = _from_dict(target, dict(obj), **kw)
        if batch_dims is not None and not auto_batch_size:
            _warn_batch_dims_ignored("from_any", result, batch_dims, batch_size)
        return result
    if isinstance(obj, np.ndarray) and obj.dtype.names is not None:
        return _from_struct_array(target, obj, **kw)
    if isinstance(obj, tuple):
        if _is_namedtuple(obj):
            return _from_namedtuple(target, obj, **kw)
        if _is_structseq(obj):
            warnings.warn(
                f"from_any converts a {type(obj).__module__}.{type(obj).__name__} like a plain tuple, "
                f"with the keys {[str(i) for i in range(len(obj))]}. tensordict 0.17 will use its field "
                f"names {list(getattr(type(obj), '__match_args__', ()))}, as from_namedtuple does: call "
                "from_namedtuple "
                "for them.",
                FutureWarning,
                stacklevel=_user_stacklevel(),
            )
        return _from_tuple(target, obj, **kw)
    if isinstance(obj, list):
        return _from_list(obj)
    if dataclasses.is_dataclass(obj):
        # tensordict ignores a batch_dims that is not an int for dataclasses
        int_dims = batch_dims if isinstance(batch_dims, int) and not isinstance(batch_dims, bool) else None
        result = _from_dataclass(
            target,
            obj,
            auto_batch_size=auto_batch_size,
            batch_dims=int_dims if auto_batch_size else None,
            device=device,
            batch_size=batch_size,
        )
        if batch_dims is not None and not auto_batch_size:
            _warn_batch_dims_ignored("from_any", result, batch_dims, batch_size)
        return result
    return obj


def _numeric_list(obj: list[Any]) -> tuple[bool, Any, Any]:
    """``(ok, shape, number type)``: ok when ``obj`` nests numbers of one type regularly."""
    kinds: set[Any] = set()
    shapes: set[Any] = set()
    for item in obj:
        if isinstance(item, numbers.Number):
            kinds.add(type(item))
        elif isinstance(item, list):
            ok, shape, kind = _numeric_list(item)
            if not ok:
                return False, None, None
            if kind is not None:
                kinds.add(kind)
            shapes.add(shape)
        else:
            return False, None, None
        if len(kinds) > 1 or len(shapes) > 1:
            return False, None, None
    return True, (len(obj), *(next(iter(shapes)) if shapes else ())), next(iter(kinds), None)


def _from_list(obj: list[Any]) -> Any:
    if _numeric_list(obj)[0]:
        return torch.tensor(obj)
    return NonTensorStack.from_list(obj)


def _from_dict(
    target: Any,
    input_dict: Any,
    *,
    auto_batch_size: bool | None = None,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    names: Any = None,
) -> Any:
    if _is_collection(input_dict):
        return input_dict
    if batch_dims is not None and batch_size is not None:
        raise ValueError("Cannot pass both batch_size and batch_dims to `from_dict`.")
    source = {
        key: _from_any(target, value, device=device, batch_size=batch_size) for key, value in dict(input_dict).items()
    }
    out = _build(target, source, batch_size, device, "from_dict")
    if batch_size is None and (auto_batch_size or (auto_batch_size is None and batch_dims is not None)):
        out.auto_batch_size_(batch_dims)
    if names is not None:
        out.names = names
    return out


def _namedtuple_fields(obj: Any) -> dict[str, Any]:
    if _is_namedtuple(obj):
        return dict(obj._asdict())
    if _is_structseq(obj):
        return {name: getattr(obj, name) for name in type(obj).__match_args__}
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"from_namedtuple expects a named tuple, got {type(obj).__name__}")


def _from_namedtuple(
    target: Any,
    named_tuple: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    _check_conflict("from_namedtuple", auto_batch_size, batch_size)
    source = {
        key: _from_any(target, value, device=device, batch_size=batch_size)
        for key, value in _namedtuple_fields(named_tuple).items()
    }
    result = _build(target, source, batch_size, device, "from_namedtuple")
    return _finish("from_namedtuple", result, auto_batch_size, batch_dims, batch_size)


def _from_tuple(
    target: Any,
    obj: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    _check_conflict("from_tuple", auto_batch_size, batch_size)
    source = {str(i): _from_any(target, item, device=device, batch_size=batch_size) for i, item in enumerate(obj)}
    result = _build(target, source, batch_size, device, "from_tuple")
    return _finish("from_tuple", result, auto_batch_size, batch_dims, batch_size)


def _field_value(field: np.ndarray, target: Any, batch_size: Any) -> Any:
    """A tensor sharing memory with the field when torch can view it; nested fields become TensorDicts."""
    if field.dtype.names is not None:
        return _struct_source(field, target, field.shape)
    if field.dtype.kind in "USOV":  # strings and objects: one non-tensor leaf holding the array, as tensordict
        return NonTensorData(field, batch_size=batch_size)
    try:
        return torch.from_numpy(field)
    except (TypeError, ValueError):
        # the field's items are not aligned in the record (packed dtypes) or not in native byte order:
        # astype copies into a fresh array of native byte order
        return torch.from_numpy(field.astype(field.dtype.newbyteorder("=")))


def _struct_source(array: np.ndarray, target: Any, batch_size: Any) -> Any:
    source = {name: _field_value(array[name], target, batch_size) for name in array.dtype.names or ()}
    return _build(target, source, batch_size, None, "from_struct_array")


def _from_struct_array(
    target: Any,
    struct_array: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    if isinstance(struct_array, np.void):  # one record (``array[0]``): a 0-d array
        struct_array = np.asarray(struct_array)
    if not isinstance(struct_array, np.ndarray) or struct_array.dtype.names is None:
        got = type(struct_array).__name__ + (
            f" of dtype {struct_array.dtype}" if hasattr(struct_array, "dtype") else ""
        )
        raise TypeError(f"from_struct_array expects a NumPy structured array (a dtype with named fields), got {got}")
    _check_conflict("from_struct_array", auto_batch_size, batch_size)
    td = _struct_source(struct_array, target, struct_array.shape)
    if batch_size is not None:
        size = as_size(batch_size)
        for key, value in td.items():  # checked as the constructor checks, with its message (as tensordict)
            shape = value.batch_size if is_td(value) else value.shape
            if shape[: len(size)] != size:
                raise batch_mismatch(size, (key,), shape)
        td.batch_size = size
    if device is not None:
        td = td.to(device)
    return _finish("from_struct_array", td, auto_batch_size, batch_dims, batch_size)


AS_TENSORCLASS: Any = None  # tensorclass.from_dataclass, for from_dataclass(as_tensorclass=True)


def _from_dataclass(
    target: Any,
    obj: Any,
    *,
    dest_cls: Any = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    as_tensorclass: bool = False,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    if as_tensorclass:  # tensorclass.from_dataclass (set when that module is imported: it imports this one)
        return AS_TENSORCLASS(
            obj,
            dest_cls=dest_cls,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            batch_size=batch_size,
            device=device,
        )
    if not dataclasses.is_dataclass(obj):
        raise TypeError(f"from_dataclass expects a dataclass instance, got {type(obj).__name__}")
    fields = dataclasses.fields(obj)
    if isinstance(obj, type):
        unreadable = [f.name for f in fields if not hasattr(obj, f.name)]
        if unreadable:
            raise TypeError(
                f"from_dataclass() got the dataclass type {obj.__name__}, whose fields {unreadable} have no "
                "default that can be read from the class: pass an instance"
            )
        warnings.warn(
            f"The dataclass type {obj.__name__} was converted to a TensorDict of its field defaults; "
            "tensordict 0.17 will raise a TypeError instead. Pass an instance.",
            FutureWarning,
            stacklevel=_user_stacklevel(),
        )
    _check_conflict("from_dataclass", auto_batch_size, batch_size)
    source = {f.name: _from_any(target, getattr(obj, f.name), device=device, batch_size=batch_size) for f in fields}
    result = _build(target, source, batch_size, device, "from_dataclass")
    return _finish("from_dataclass", result, auto_batch_size, batch_dims, batch_size)


# ------------------------------------------------------------------------------------------ pytrees
def _pytree_field(value: Any) -> bool:
    """A named-tuple field that ``from_pytree`` (not ``from_any``) converts, so ``to_pytree`` rebuilds it."""

    def holds_sequence(d: dict[Any, Any]) -> bool:
        return any(
            holds_sequence(v) if isinstance(v, dict) else isinstance(v, list | tuple) and not _is_namedtuple(v)
            for v in d.values()
        )

    def holds_empty(v: Any) -> bool:
        if _is_namedtuple(v):
            v = v._asdict()
        elif not isinstance(v, dict):
            return False
        return not v or any(holds_empty(x) for x in v.values())

    return ((isinstance(value, dict) and not holds_sequence(value)) or _is_namedtuple(value)) and not holds_empty(value)


def _pytree_tuple_field(value: Any) -> bool:
    return (
        type(value) is tuple
        and bool(value)
        and all(isinstance(v, _Tensor | int | float) or _pytree_field(v) for v in value)
    )


def _from_pytree(
    target: Any,
    pytree: Any,
    *,
    batch_size: Any = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
) -> Any:
    if _is_collection(pytree) or isinstance(pytree, _Tensor):
        return pytree
    if _is_namedtuple(pytree):
        nested = {}
        for key, value in pytree._asdict().items():
            if _pytree_field(value) or _pytree_tuple_field(value):
                with contextlib.suppress(NotImplementedError):
                    nested[key] = _from_pytree(target, value)
        result = _from_namedtuple(target, pytree._replace(**nested))
        if batch_size is not None:
            result.batch_size = batch_size
        result.set(_PYTREE_TYPE, NonTensorData(type(pytree), batch_size=result.batch_size))
    elif isinstance(pytree, list | tuple):
        source = {str(i): _from_pytree(target, item) for i, item in enumerate(pytree)}
        source[_PYTREE_TYPE] = NonTensorData(type(pytree))
        result = _build(target, source, batch_size, None, "from_pytree")
    elif isinstance(pytree, dict):
        source = {}
        for key, item in pytree.items():
            if is_key(key):
                source[key] = _from_pytree(target, item)
            else:  # keys that are not strings live next to their value
                stored = key if isinstance(key, _Tensor) else NonTensorData(key)  # numbers stay numbers
                source[_NON_NESTED + str(uuid.uuid4())] = _build(
                    target, {"value": _from_pytree(target, item), "key": stored}, None, None, "from_pytree"
                )
        source[_PYTREE_TYPE] = NonTensorData(type(pytree))
        result = _build(target, source, batch_size, None, "from_pytree")
    elif isinstance(pytree, int | float | np.ndarray):
        return torch.as_tensor(pytree)
    else:
        raise NotImplementedError(f"from_pytree: unsupported type {type(pytree).__name__}")
    return _finish("from_pytree", result, auto_batch_size, batch_dims, None)


def _as_namedtuple(d: dict[str, Any], dest_cls: Any, root: bool) -> Any:
    values = {k: _as_namedtuple(v, dest_cls, False) if isinstance(v, dict) else v for k, v in d.items()}
    cls: Any = dest_cls
    if cls is not None and not root and hasattr(cls, "_fields"):  # nested: dest_cls only if it fits
        fields, defaults = set(cls._fields), set(getattr(cls, "_field_defaults", {}))
        if not (values.keys() <= fields and fields - values.keys() <= defaults):
            cls = None
    if cls is None:
        cls = _generic_dict(list(values))
    return cls(**values)


def _generic_dict(fields: list[str]) -> Any:
    """A new named-tuple class ``GenericDict`` with these fields (as tensordict makes one per call)."""
    return collections.namedtuple("GenericDict", fields)


def _to_pytree(td: Any) -> Any:
    built: dict[tuple[str, ...], Any] = {}
    for path, node in named_nodes(td, post_order=True):  # the nodes below first: a node is built from them
        built[path] = _pytree_node(node, path, built)
    return built[()]


def _pytree_node(td: Any, path: tuple[str, ...], built: dict[tuple[str, ...], Any]) -> Any:
    """The pytree of one node (the nodes below it already in ``built``, by path)."""
    kind = td._get_str(_PYTREE_TYPE, MISSING)
    if kind is MISSING:
        return td
    kind = plain_value_of(kind)
    items = {
        k: built[(*path, k)] if is_td(v) and not is_non_tensor(v) else v
        for k, v in td._items_str()
        if k != _PYTREE_TYPE
    }
    if hasattr(kind, "_fields") and hasattr(kind, "_asdict"):
        fields = {}
        for key, value in items.items():
            if is_non_tensor(value):
                value = plain_value_of(value)
            elif is_td(value):  # built by from_any (a dict holding a str...), not by from_pytree
                value = _as_namedtuple(value.to_dict(retain_none=False), kind, False)
            fields[key] = value
        return kind(**fields)
    if issubclass(kind, list | tuple):
        return kind([plain_value_of(items[str(i)]) for i in range(len(items))])
    if issubclass(kind, dict):
        out = {}
        for key, value in items.items():
            if key.startswith(_NON_NESTED):
                value_path = (*path, key, "value")
                key = plain_value_of(value._get_str("key"))
                key = tuple(key) if isinstance(key, list) else key
                value = built[value_path] if value_path in built else value._get_str("value")
            out[key] = plain_value_of(value)
        if kind is not dict:  # OrderedDict, defaultdict (rebuilt without its default_factory)
            typed = kind()
            typed.update(out)
            out = typed
        return out
    raise NotImplementedError(f"to_pytree: unknown container type {kind!r}")


# ----------------------------------------------------------------------------------- struct arrays
def _to_struct_array(td: Any) -> np.ndarray:
    built: dict[tuple[str, ...], np.ndarray] = {}
    for path, node in named_nodes(td, post_order=True):  # the nodes below first: their arrays are fields
        built[path] = _struct_node(node, path, built)
    return built[()]


def _struct_node(td: Any, prefix: tuple[str, ...], built: dict[tuple[str, ...], np.ndarray]) -> np.ndarray:
    items = list(td._items_str())
    if not items:
        raise ValueError(
            f"to_struct_array: the TensorDict{' at ' + fmt_path(prefix) if prefix else ''} has no entries; a "
            "structured array needs at least one field"
        )
    nd, batch = td.batch_dims, tuple(td.batch_size)
    arrays, fields = [], []
    for key, value in items:
        if is_td(value) and not is_non_tensor(value):
            array = built[(*prefix, key)]
        elif isinstance(value, _Tensor):
            try:
                array = value.detach().cpu().numpy()
            except TypeError as err:
                raise TypeError(
                    f"to_struct_array: the leaf {fmt_path((*prefix, key))} of dtype {value.dtype} "
                    f"and shape {fmt_shape(value.shape)} has no NumPy dtype ({err})"
                ) from None
        else:  # non-tensor data: its value (an array, a string...) as a field
            array = np.asarray(plain_value_of(value))
            if array.dtype.kind in "US":
                longest = max((len(str(s)) for s in array.flat), default=0)
                array = array.astype(f"U{max(10, longest)}")
        arrays.append(array)
        fields.append((key, array.dtype, array.shape[nd:]))
    out = np.empty(batch, dtype=fields)
    for (key, _, _), array in zip(fields, arrays, strict=True):
        out[key] = array
    return out


# -------------------------------------------------------------------- methods attached by install()
class _Conversions:
    """Holder of the conversion methods that :func:`install` attaches to a TensorDict class."""

    @classmethod
    def from_any(
        cls,
        obj: Any,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """Convert a dict, (named) tuple, structured array or dataclass instance to a TensorDict.

        Values inside are converted too. Tensors and TensorDicts are returned as they are, a list of
        numbers becomes a tensor, and any other object is returned unchanged.

        Args:
            obj: the object to convert.
            auto_batch_size: set the batch size to the longest leading shape the entries share.
            batch_dims: with ``auto_batch_size``, the most batch dims (ignored without it, with a
                FutureWarning when it would change the result).
            device: the device of the result.
            batch_size: the batch size of the result (nested TensorDicts get it too).

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict.from_any({"obs": torch.zeros(3, 4), "pair": (torch.ones(3), 1)})
            >>> list(td.keys(include_nested=True, leaves_only=True))
            ['obs', ('pair', '0'), ('pair', '1')]
        """
        return _from_any(
            _target(cls),
            obj,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_dict(
        cls,
        input_dict: Any,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        names: Any = None,
        *,
        auto_batch_size: bool | None = None,
    ) -> Any:
        """Build from a nested mapping, converting values with :meth:`from_any` (tuples, dataclasses...).

        ``batch_dims`` alone turns ``auto_batch_size`` on; ``batch_size`` wins over ``auto_batch_size``.
        A tensor collection is returned as it is.

        Raises:
            ValueError: if both ``batch_size`` and ``batch_dims`` are given.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict.from_dict({"a": torch.zeros(3, 4), "t": (torch.ones(3),)}, batch_dims=1)
            >>> td.batch_size, td["t", "0"].shape
            (torch.Size([3]), torch.Size([3]))
        """
        return _from_dict(
            _target(cls),
            input_dict,
            auto_batch_size=auto_batch_size,
            batch_size=batch_size,
            device=device,
            batch_dims=batch_dims,
            names=names,
        )

    @classmethod
    def from_namedtuple(
        cls,
        named_tuple: Any,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """Convert a named tuple (or a ``torch.return_types`` result) to a TensorDict keyed by field name.

        Fields are converted with :meth:`from_any`; keywords as there. :meth:`to_namedtuple` converts back.

        Raises:
            TypeError: if ``named_tuple`` is not a named tuple, or for conflicting batch-size keywords.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> sorted(TensorDict.from_namedtuple(torch.tensor([2, 0, 1]).max(0)).keys())
            ['indices', 'values']
        """
        return _from_namedtuple(
            _target(cls),
            named_tuple,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_tuple(
        cls,
        obj: Any,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """Convert a tuple to a TensorDict with the keys ``"0"``, ``"1"``...; keywords as :meth:`from_any`.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> TensorDict.from_tuple((torch.zeros(3, 4), torch.ones(3)), auto_batch_size=True).batch_size
            torch.Size([3])
        """
        return _from_tuple(
            _target(cls),
            obj,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_struct_array(
        cls,
        struct_array: np.ndarray,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """Convert a NumPy structured array to a TensorDict with one entry per field.

        The batch size is the array's shape. The leaves share memory with the array (zero-copy) unless
        a ``device`` other than the CPU is given, or a field is not aligned in the record (packed
        dtypes) or not in native byte order; those are copied. A string field becomes one non-tensor leaf
        holding the field's array.

        Raises:
            TypeError: if ``struct_array`` has no named fields, or for conflicting batch-size keywords.

        Examples:
            >>> import numpy as np
            >>> from tensorbatch import TensorDict
            >>> x = np.zeros(2, dtype=[("age", "i4"), ("weight", "f4")])
            >>> td = TensorDict.from_struct_array(x)
            >>> x["age"] += 1  # the TensorDict sees it
            >>> td.batch_size, td["age"]
            (torch.Size([2]), tensor([1, 1], dtype=torch.int32))
        """
        return _from_struct_array(
            _target(cls),
            struct_array,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_dataclass(
        cls,
        dataclass: Any,
        *,
        dest_cls: Any = None,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        as_tensorclass: bool = False,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """Convert a dataclass instance to a TensorDict with one entry per field (via :meth:`from_any`).

        ``as_tensorclass=True`` gives a TensorClass instance instead (:func:`tensorbatch.from_dataclass`).

        Raises:
            TypeError: if ``dataclass`` is not a dataclass, or for conflicting batch-size keywords.

        Examples:
            >>> import dataclasses, torch
            >>> from tensorbatch import TensorDict
            >>> @dataclasses.dataclass
            ... class Data:
            ...     obs: torch.Tensor
            >>> TensorDict.from_dataclass(Data(torch.zeros(3, 4)), auto_batch_size=True).batch_size
            torch.Size([3, 4])
        """
        return _from_dataclass(
            _target(cls),
            dataclass,
            dest_cls=dest_cls,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            as_tensorclass=as_tensorclass,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_pytree(
        cls,
        pytree: Any,
        *,
        batch_size: Any = None,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
    ) -> Any:
        """Convert a pytree of lists, tuples, named tuples and dicts to a TensorDict.

        Each container becomes a nested TensorDict with a ``"_pytree_type"`` entry holding its type, so
        :meth:`to_pytree` can rebuild it; list and tuple items get the keys ``"0"``, ``"1"``... Numbers
        and arrays become tensors.

        Raises:
            NotImplementedError: for an unsupported leaf type.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict.from_pytree({"obs": torch.zeros(3), "pair": (torch.zeros(3), torch.ones(3))})
            >>> sorted(td["pair"].keys())
            ['0', '1', '_pytree_type']
            >>> type(td.to_pytree()["pair"]).__name__
            'tuple'
        """
        return _from_pytree(
            _target(cls),
            pytree,
            batch_size=batch_size,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
        )

    def to_namedtuple(self, dest_cls: type | None = None) -> Any:
        """Convert to a named tuple, recursively (new ``GenericDict`` classes unless ``dest_cls`` is given).

        Args:
            dest_cls: the named-tuple class of the result; nested levels use it when it takes their keys.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2]).to_namedtuple()
            GenericDict(a=tensor([0., 0.]), n=GenericDict(b=tensor([1., 1.])))
        """
        return _as_namedtuple(self.to_dict(retain_none=False), dest_cls, True)  # type: ignore[attr-defined]

    def to_pytree(self) -> Any:
        """Rebuild the pytree that :meth:`from_pytree` converted (``self`` when there is none).

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> TensorDict.from_pytree([torch.zeros(2), {"a": torch.ones(1)}]).to_pytree()
            [tensor([0., 0.]), {'a': tensor([1.])}]
        """
        return _to_pytree(self)

    def to_struct_array(self) -> np.ndarray:
        """Convert to a NumPy structured array of shape ``batch_size`` (a copy), one field per entry.

        Nested TensorDicts become nested fields; feature dims become the field shapes.

        Raises:
            ValueError: if a (nested) TensorDict has no entries.
            TypeError: for a leaf dtype NumPy lacks (``bfloat16``...).

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.tensor([1, 2]), "b": torch.tensor([4.0, 5.0])}, batch_size=[2])
            >>> td.to_struct_array()
            array([(1, 4.), (2, 5.)], dtype=[('a', '<i8'), ('b', '<f4')])
        """
        return _to_struct_array(self)


_CLASS_METHODS = (
    "from_any",
    "from_dataclass",
    "from_dict",
    "from_namedtuple",
    "from_pytree",
    "from_struct_array",
    "from_tuple",
)
_METHODS = ("to_namedtuple", "to_pytree", "to_struct_array")


def install(cls: type) -> list[str]:
    """Attach the conversion (class)methods to ``cls``; idempotent.

    A name that ``cls`` already defines with another implementation is left alone.

    Returns:
        The names that were attached by this call.
    """
    added = []
    for name in (*_CLASS_METHODS, *_METHODS):
        ours = _Conversions.__dict__[name]
        if name not in cls.__dict__:
            setattr(cls, name, ours)
            added.append(name)
    return added


install(TensorDictBase)  # the conversion methods attach themselves: base.py imports no feature


# ------------------------------------------------------------------------------ module-level API
def from_any(
    obj: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """:meth:`TensorDict.from_any <_Conversions.from_any>` as a function.

    Examples:
        >>> import torch
        >>> from_any({"a": torch.zeros(3)}, auto_batch_size=True).batch_size
        torch.Size([3])
    """
    return _from_any(
        _target(None),
        obj,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
        batch_size=batch_size,
    )


def from_dict(
    d: Any,
    *,
    auto_batch_size: bool | None = None,
    batch_size: Any = None,
    device: Any = None,
    batch_dims: int | None = None,
    names: Any = None,
) -> Any:
    """Build from a nested mapping, converting values with :func:`from_any` (tuples, dataclasses...).

    ``batch_dims`` alone turns ``auto_batch_size`` on; ``batch_size`` wins over ``auto_batch_size``.

    Raises:
        ValueError: if both ``batch_size`` and ``batch_dims`` are given.

    Examples:
        >>> import torch
        >>> from_dict({"a": torch.zeros(3, 4), "t": (torch.zeros(3),)}, batch_dims=1).batch_size
        torch.Size([3])
    """
    return _from_dict(
        _target(None),
        d,
        auto_batch_size=auto_batch_size,
        batch_size=batch_size,
        device=device,
        batch_dims=batch_dims,
        names=names,
    )


def from_namedtuple(
    named_tuple: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """:meth:`TensorDict.from_namedtuple <_Conversions.from_namedtuple>` as a function.

    Examples:
        >>> import collections, torch
        >>> Point = collections.namedtuple("Point", ["x", "y"])
        >>> from_namedtuple(Point(torch.zeros(2), torch.ones(2)), auto_batch_size=True).batch_size
        torch.Size([2])
    """
    return _from_namedtuple(
        _target(None),
        named_tuple,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
        batch_size=batch_size,
    )


def from_tuple(
    obj: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """:meth:`TensorDict.from_tuple <_Conversions.from_tuple>` as a function.

    Examples:
        >>> import torch
        >>> sorted(from_tuple((torch.zeros(2), torch.ones(2))).keys())
        ['0', '1']
    """
    return _from_tuple(
        _target(None),
        obj,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
        batch_size=batch_size,
    )


def from_struct_array(
    struct_array: np.ndarray,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """:meth:`TensorDict.from_struct_array <_Conversions.from_struct_array>` as a function.

    Examples:
        >>> import numpy as np
        >>> from_struct_array(np.zeros(3, dtype=[("a", "f8")]))["a"].dtype
        torch.float64
    """
    return _from_struct_array(
        _target(None),
        struct_array,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
        batch_size=batch_size,
    )


def from_pytree(
    pytree: Any, *, batch_size: Any = None, auto_batch_size: bool = False, batch_dims: int | None = None
) -> Any:
    """:meth:`TensorDict.from_pytree <_Conversions.from_pytree>` as a function.

    Examples:
        >>> import torch
        >>> from_pytree(torch.zeros(2))  # a tensor is returned as it is
        tensor([0., 0.])
    """
    return _from_pytree(
        _target(None), pytree, batch_size=batch_size, auto_batch_size=auto_batch_size, batch_dims=batch_dims
    )
