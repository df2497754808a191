"""TypedTensorDict: a TensorDictBase subclass whose schema is its class annotations.

An instance delegates the backend primitives to the TensorDict it wraps (``_source``), so it works
over any backend, live: writes go to the wrapped storage. Direct construction builds an in-memory
TensorDict. The rest of the API is forwarded from the one list in :mod:`tensorbatch._delegation`,
with TensorDict results re-wrapped in the subclass.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import typing
from collections.abc import MutableMapping
from typing import Any, ClassVar

import torch
from torch.utils import _pytree

from . import _delegation
from ._base.coerce import as_device as _as_device
from ._base.coerce import as_size as _as_size
from ._compat import allow_in_weights_only_load, broadcasting_one_tuple, dynamo_compiling, register_pytree_node
from ._keys import is_key
from ._ops.traverse import MISSING, NO_DEFAULT, REWRAP_TYPES, is_td, vmap_placeholders
from ._td import TensorDict
from .base import TensorDictBase

_Tensor = torch.Tensor
_Size = torch.Size
_new = object.__new__
_setattr = object.__setattr__  # sets a slot past TypedTensorDict.__setattr__ (dynamo traces it)
OPTIONS = ("shadow", "frozen", "autocast", "nocast", "tensor_only")


def resolve_annotations(cls: type) -> dict[str, Any]:
    """The annotations ``cls`` declares itself, with strings evaluated in its module (kept when they fail)."""
    raw = inspect.get_annotations(cls)
    module = sys.modules.get(cls.__module__)
    globalns = dict(vars(module)) if module is not None else {}
    localns = {cls.__name__: cls}
    out = {}
    for name, ann in raw.items():
        for _ in range(2):  # twice: "'Name'" (a quoted annotation under ``from __future__ import annotations``)
            if isinstance(ann, str):
                with contextlib.suppress(Exception):  # an unresolvable forward reference stays a string
                    ann = eval(ann, globalns, localns)  # the same lookup typing.get_type_hints performs
        out[name] = ann
    return out


def strip_optional(tp: Any) -> Any:
    """``T`` for ``Optional[T]`` / ``T | None``; ``tp`` otherwise."""
    if typing.get_origin(tp) in (typing.Union, type(int | None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _is_classvar(tp: Any) -> bool:
    return tp is ClassVar or typing.get_origin(tp) is ClassVar or (isinstance(tp, str) and tp.startswith("ClassVar"))


def _is_not_required(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.NotRequired or (isinstance(tp, str) and tp.startswith("NotRequired"))


def _nested_class(tp: Any) -> Any:
    """The wrapper class a field's value is read back as (a TypedTensorDict or TensorClass type), or None."""
    tp = strip_optional(tp)
    if typing.get_origin(tp) is typing.NotRequired:
        tp = strip_optional(typing.get_args(tp)[0])
    if isinstance(tp, type) and tp in _delegation.WRAPPER_TYPES:
        return tp
    return None


def _read(self: Any, name: str, value: Any, default: Any, wrap: Any) -> Any:
    if value is MISSING:
        if default is not NO_DEFAULT:
            return default
        raise AttributeError(f"'{type(self).__name__}' has field {name!r} declared but not set")
    if wrap is not None and is_td(value) and type(value) is not wrap:
        return wrap._wrap_new(value)
    return value


def _write_field(self: Any, name: str, value: Any) -> None:
    source = self._source
    value = _delegation.unwrap(value)
    if source.is_locked:
        raise _delegation.locked_field(self, name)
    if type(source) is TensorDict:
        source[name] = value  # the in-memory fast path (validates the batch size)
    else:
        source.set(name, value)


def _field_property(name: str, default: Any, wrap: Any) -> property:
    """Attribute access to a field that needs work when read (non-tensor values, nested classes)."""

    def fget(self: Any) -> Any:
        return _read(self, name, self._source._get_str(name, MISSING), default, wrap)

    def fset(self: Any, value: Any) -> None:
        _write_field(self, name, value)

    return property(fget, fset, doc=f"The field {name!r} (read from and written to the wrapped TensorDict).")


class _TensorField:
    """Non-data descriptor of a ``Tensor`` field, read only when the instance dict lacks the field.

    Over an in-memory TensorDict the instance ``__dict__`` *is* the TensorDict's entry dict, so
    ``state.obs`` is one dict lookup (as fast as a dataclass attribute); this runs for the other
    backends and for a missing field. Writes go through ``TypedTensorDict.__setattr__``.
    """

    __slots__ = ("default", "name")

    def __init__(self, name: str, default: Any) -> None:
        self.name = name
        self.default = default

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        return _read(obj, self.name, obj._source._get_str(self.name, MISSING), self.default, None)


class TypedTensorDict(TensorDictBase):
    """A TensorDict whose fields are declared as class annotations.

    Subclasses declare fields like a ``TypedDict`` and get keyword construction with checks, attribute
    access (``state.x``), schema composition by inheritance, ``**state`` spreading, and typed access to
    an existing TensorDict of any backend with :meth:`from_tensordict` (no copy: writes go through).

    Options (``class S(TypedTensorDict["frozen"])`` or ``class S(TypedTensorDict, frozen=True)``, inherited):
    ``shadow`` lets a field hide a TensorDictBase attribute (else defining it raises AttributeError);
    ``frozen`` locks instances at construction. ``autocast``, ``nocast`` and ``tensor_only`` are accepted
    and have no effect.

    ``torch.load`` (``weights_only=True``, torch's default) reads a saved instance once its class is
    allowlisted, as with tensordict: ``torch.serialization.add_safe_globals([State])``.

    Args:
        _source: an optional mapping of field values (merged with ``fields``).
        batch_size: leading dims shared by every field.
        device: device of every field (None allows mixed devices).
        names: names of the batch dims.
        non_blocking: passed to device moves.
        lock: lock the instance.
        **fields: the field values; a missing required field or an unknown name raises TypeError.

    Examples:
        >>> import torch
        >>> from torch import Tensor
        >>> from tensorbatch import TensorDict, TypedTensorDict
        >>> class State(TypedTensorDict):
        ...     x: Tensor
        ...     y: Tensor
        >>> state = State(x=torch.zeros(4, 3), y=torch.zeros(4), batch_size=[4])
        >>> state.x.shape, type(state[1:]).__name__
        (torch.Size([4, 3]), 'State')
        >>> td = TensorDict(x=torch.zeros(2), y=torch.zeros(2), batch_size=[2])
        >>> State.from_tensordict(td).x += 1  # writes go to td
        >>> td["x"]
        tensor([1., 1.])
    """

    # ``__dict__``: the in-memory backend's entry dict (see _TensorField); ``_attrs``: plain attributes
    __slots__ = ("__dict__", "_attrs", "_source")
    _source: TensorDictBase
    _attrs: dict[str, Any]
    # Reductions, comparisons and logical ops give plain TensorDicts (as tensordict's TypedTensorDict): their
    # values do not follow the schema's types (a bool or a reduced batch where the fields say otherwise).
    _plain_results: ClassVar[frozenset[str]] = frozenset(
        {
            *("sum", "mean", "nansum", "nanmean", "prod", "std", "var", "max", "min", "amax", "amin"),
            *("all", "any", "quantile", "cummax", "cummin", "median"),
            *("eq", "ne", "lt", "le", "gt", "ge", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"),
            *("logical_and", "logical_or", "logical_xor"),
        }
    )
    _wrapped_attr: ClassVar[str] = "_source"
    _shadow: ClassVar[bool] = False
    _frozen: ClassVar[bool] = False
    _autocast: ClassVar[bool] = False
    _nocast: ClassVar[bool] = False
    _tensor_only: ClassVar[bool] = False
    __expected_keys__: ClassVar[frozenset[str]] = frozenset()
    __required_keys__: ClassVar[frozenset[str]] = frozenset()
    __optional_keys__: ClassVar[frozenset[str]] = frozenset()
    _tensor_fields: ClassVar[frozenset[str]] = frozenset()  # fields read through the instance dict
    _class_names: ClassVar[frozenset[str]] = frozenset()  # attributes a backend key must not shadow
    __field_defaults__: ClassVar[dict[str, Any]] = {}
    _option_classes: ClassVar[dict[tuple[type, tuple[str, ...]], type]] = {}

    def __init_subclass__(
        cls,
        shadow: bool | None = None,
        frozen: bool | None = None,
        autocast: bool | None = None,
        nocast: bool | None = None,
        tensor_only: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        given = {"shadow": shadow, "frozen": frozen, "autocast": autocast, "nocast": nocast, "tensor_only": tensor_only}
        for option, value in given.items():
            if value is not None:
                setattr(cls, f"_{option}", bool(value))
        _delegation.WRAPPER_TYPES.add(cls)
        REWRAP_TYPES.add(cls)  # nested in a TensorDict, it is rebuilt as itself
        _collect_fields(cls)
        _register_pytree(cls)

    def __class_getitem__(cls, item: Any) -> type:
        """A base class with the given options on: ``TypedTensorDict["shadow", "frozen"]``."""
        options = tuple(item) if isinstance(item, tuple) else (item,)
        unknown = [o for o in options if o not in OPTIONS]
        if unknown:
            raise ValueError(f"unknown TypedTensorDict option(s) {unknown}; valid options: {list(OPTIONS)}")
        key = (cls, options)
        if key not in TypedTensorDict._option_classes:
            name = f"{cls.__name__}_{'_'.join(options)}"
            meta: Any = type(cls)
            TypedTensorDict._option_classes[key] = meta(
                name, (cls,), {"__module__": cls.__module__}, **dict.fromkeys(options, True)
            )
        return TypedTensorDict._option_classes[key]

    def __init__(
        self,
        _source: Any = None,
        *,
        batch_size: Any = None,
        device: Any = None,
        names: Any = None,
        non_blocking: bool | None = None,
        lock: bool = False,
        **fields: Any,
    ) -> None:
        cls = type(self)
        if _source is None and names is None and not lock and fields.keys() == cls.__expected_keys__:
            # the common call: every field given as a keyword, no names. When every value is a tensor
            # that fits (the TensorDict constructor's own fast check), skip the constructor.
            bs = batch_size if type(batch_size) is _Size else _as_size(batch_size)
            dev = None if device is None else _as_device(device)
            # unfit_keys' test, inline on purpose: the call and its second pass over the fields cost
            # +5-10% of a construction (callgrind instruction counts of the constructor benchmarks)
            n = len(bs)
            one = n == 1
            b0 = bs[0] if one else -1
            for value in fields.values():
                if type(value) is not _Tensor:
                    break
                shape = value.shape  # shape[:n] == bs, cheaper for the usual single batch dim
                if (shape[0] != b0 if one and shape else shape[:n] != bs) or (dev is not None and value.device != dev):
                    break
            else:
                source = TensorDict._new_unsafe(fields, bs, dev)
                if cls._frozen:
                    source.lock_()
                if dynamo_compiling():
                    _set_slots(self, source, fields)
                else:  # _set_slots inlined (a hot path)
                    _SET_SOURCE(self, source)
                    _SET_DICT(self, fields)  # schema keys only: none shadows a class attribute
                return
        elif _source is not None:
            fields = {**dict(_source.items()), **fields}
        _check_keys(cls, fields.keys(), f"{cls.__name__}()")
        values = {k: _delegation.unwrap(v) for k, v in fields.items()}
        source = TensorDict(
            values,
            batch_size=batch_size,
            device=device,
            names=names,
            non_blocking=non_blocking,
            lock=lock or cls._frozen,
        )
        _set_slots(self, source, source._tensordict)  # schema keys only (checked above)

    # ------------------------------------------------------------------ wrapping
    @classmethod
    def from_tensordict(cls, td: Any, *, check: bool = True) -> Any:
        """Wrap an existing TensorDict of any backend in this class, without copying it.

        Args:
            td: the TensorDict (a TensorClass or TypedTensorDict is unwrapped to the TensorDict it wraps).
            check: raise if a required field is missing; ``check=False`` wraps an empty or partly
                filled TensorDict (a missing field then raises AttributeError when read).

        Raises:
            TypeError: when ``td`` is not a TensorDict, or (with ``check``) misses required fields.

        Examples:
            >>> import torch
            >>> from torch import Tensor
            >>> from tensorbatch import TensorDict, TypedTensorDict
            >>> class S(TypedTensorDict):
            ...     x: Tensor
            >>> S.from_tensordict(TensorDict())
            Traceback (most recent call last):
                ...
            TypeError: S.from_tensordict() missing required field(s): x
            >>> S.from_tensordict(TensorDict(), check=False).batch_size
            torch.Size([])
        """
        td = _delegation.unwrap(td)  # over a wrapper's own storage: one level of wrapping
        if not is_td(td):
            raise TypeError(f"{cls.__name__}.from_tensordict() expects a TensorDict, got {type(td).__name__}")
        if check:
            missing = cls.__required_keys__.difference(td.keys())
            if missing:
                raise TypeError(
                    f"{cls.__name__}.from_tensordict() missing required field(s): {', '.join(sorted(missing))}"
                )
        return cls._wrap(td)

    @classmethod
    def _wrap(cls, td: Any) -> Any:
        obj = _new(cls)
        _attach(obj, td, _delegation.storage_of(td))
        return obj

    _wrap_new = _wrap

    def _wrap_like(self, td: Any) -> Any:
        return type(self)._wrap(td)

    # ------------------------------------------------------------------ primitives (delegated)
    @property
    def batch_size(self) -> torch.Size:
        """The leading dimensions shared by every leaf."""
        return self._source.batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._source.batch_size = value

    def _change_batch_size(self, new_size: torch.Size) -> None:
        self._source._change_batch_size(new_size)

    @property
    def device(self) -> torch.device | None:
        """The device of every leaf, or None."""
        return self._source.device

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        return self._source._get_str(key, default)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        self._source._set_str(key, value, inplace=inplace, validated=validated)
        if key in type(self)._class_names:  # the new key would shadow a method: stop reading the dict
            _setattr(self, "__dict__", {})

    # ------------------------------------------------------------------ attributes
    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        if name in cls._tensor_fields:
            source = self._source
            if type(source) is TensorDict and type(value) is _Tensor and not source._is_locked:
                source[name] = value  # the in-memory fast path (validates the batch size)
            else:
                _write_field(self, name, value)
        elif hasattr(type(getattr(cls, name, None)), "__set__"):  # properties (fields, batch_size, ...), slots
            object.__setattr__(self, name, value)
        else:  # a plain attribute, kept apart from the backend's entries
            try:
                self._attrs[name] = value
            except AttributeError:
                _setattr(self, "_attrs", {name: value})

    def __getattr__(self, name: str) -> Any:  # only called when the normal lookup fails
        cls = type(self)
        if name in cls.__expected_keys__:  # a field not set: its descriptor raises the field's own error
            return getattr(cls, name).__get__(self, cls)
        if name != "_attrs":
            try:
                return self._attrs[name]
            except (AttributeError, KeyError):
                pass
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if name in type(self).__expected_keys__:
            raise AttributeError(f"cannot delete field {name!r} of {type(self).__name__}; use del td[{name!r}]")
        try:
            del self._attrs[name]
        except (AttributeError, KeyError):
            if not hasattr(type(getattr(type(self), name, None)), "__delete__"):
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None
            object.__delattr__(self, name)

    def _del_str(self, key: str) -> None:
        self._source._del_str(key)

    def _keys_str(self) -> Any:
        return self._source._keys_str()

    def _items_str(self) -> Any:
        return self._source._items_str()

    def _values_str(self) -> Any:
        return self._source._values_str()

    def _has_str(self, key: str) -> bool:
        return self._source._has_str(key)

    @property
    def is_locked(self) -> bool:
        """True when keys cannot be added or removed; assigning True or False locks or unlocks."""
        return self._source.is_locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        self.lock_() if value else self.unlock_()

    def _set_lock(self, value: bool) -> None:
        self._source._set_lock(value)

    def _maybe_names(self) -> tuple[Any, ...] | None:
        return self._source._maybe_names()

    # storage hooks (delegated: the backend knows its storage)
    def _meta_items(self) -> Any:
        return self._source._meta_items()

    def _read_index(self, index: Any) -> Any:
        return self._source._read_index(index)

    def _write_index(self, index: Any, value: Any) -> None:
        self._source._write_index(index, value)

    def _read_at(self, key: Any, index: Any, default: Any) -> Any:
        return self._source._read_at(key, index, default)

    def _set_at(self, key: Any, value: Any, index: Any) -> None:
        self._source._set_at(key, value, index)

    def _update_at(self, source: Any, index: Any, clone: bool, wanted: Any) -> None:
        self._source._update_at(source, index, clone, wanted)

    def _write_back(self, leaves: list[Any]) -> None:
        self._source._write_back(leaves)

    def _write_back_leaf(self, key: Any, leaf: Any) -> None:
        self._source._write_back_leaf(key, leaf)

    def _materialize(self) -> Any:
        return self._source._materialize()

    def _leaf_meta(self, key: str) -> Any:
        return self._source._leaf_meta(key)

    def _read_rows(self, plan: Any, keys: Any = None) -> Any:
        return self._source._read_rows(plan, keys)

    def _write_rows(self, plan: Any, values: Any) -> None:
        self._source._write_rows(plan, values)

    def _are_tensor_leaves(self, paths: Any) -> bool:
        return self._source._are_tensor_leaves(paths)

    def _alloc_leaf(self, key: str, shape: Any, dtype: torch.dtype) -> None:
        self._source._alloc_leaf(key, shape, dtype)

    # ------------------------------------------------------------------ excluded from forwarding
    def __getitem__(self, index: Any) -> Any:
        source = self._source
        if is_key(index):
            return source[index]
        td = source._index_flat(index)
        if td is None:
            return _delegation.rewrap(self, source, source[index])
        obj = _new(type(self))  # _wrap_like(td), inlined
        store = td._tensordict
        if dynamo_compiling():
            _attach(obj, td, store)
        else:  # _attach inlined (a hot path)
            _SET_SOURCE(obj, td)
            if type(obj)._class_names.isdisjoint(store):
                _SET_DICT(obj, store)
        return obj

    def __setitem__(self, index: Any, value: Any) -> None:
        self._source[index] = _delegation.unwrap(value)
        if is_key(index):
            _recheck(self)

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDictBase:
        """An in-memory TensorDict copy (never a wrapper, whatever the backend)."""
        out: TensorDictBase = _delegation.to_dense(self._source)
        return out

    def __reduce__(self) -> Any:
        return _unpickle, (type(self), self._source)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self.__reduce__()

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _delegation.torch_function(func, args, kwargs)


_SET_SOURCE = TypedTensorDict._source.__set__  # type: ignore[attr-defined]
_SET_DICT = TypedTensorDict.__dict__["__dict__"].__set__


def _attach(obj: Any, source: Any, store: dict[str, Any] | None) -> None:
    """Set ``obj``'s backend and make ``store`` (an in-memory backend's entry dict) the instance dict.

    Not when a key of ``store`` would shadow a class attribute: a key named like a method, outside the schema,
    must not hide the method; such a backend is read through the field descriptors instead.
    """
    _set_slots(obj, source, store if store is not None and type(obj)._class_names.isdisjoint(store) else None)


def _set_slots(obj: Any, source: Any, store: dict[str, Any] | None) -> None:
    """``obj._source = source`` and, unless None, ``obj.__dict__ = store``, past ``TypedTensorDict.__setattr__``.

    In eager with the slots' own setters (the cheapest call); under dynamo, which cannot trace those, with
    ``object.__setattr__``.
    """
    if dynamo_compiling():
        _setattr(obj, "_source", source)
        if store is not None:
            _setattr(obj, "__dict__", store)
        return
    _SET_SOURCE(obj, source)
    if store is not None:
        _SET_DICT(obj, store)


def _unpickle(cls: Any, source: Any) -> Any:
    """Unpickle a TypedTensorDict (what its ``__reduce__`` names, allowed in ``torch.load(weights_only=True)``).

    The pickle names the class itself, so a weights-only load of a user's class needs it allowlisted by the
    user (``torch.serialization.add_safe_globals([MyTyped])``, as with tensordict). The arguments may be
    crafted: ``cls`` must be a TypedTensorDict class and ``source`` a TensorDict.

    Raises:
        TypeError: for a ``cls`` that is no TypedTensorDict class or a ``source`` that is no TensorDict.
    """
    if not (isinstance(cls, type) and issubclass(cls, TypedTensorDict)) or not is_td(source):
        raise TypeError(
            f"unpickling a TypedTensorDict: expected a TypedTensorDict class and a TensorDict, got "
            f"{cls!r} and a {type(source).__name__}"
        )
    return cls._wrap(source)


allow_in_weights_only_load(_unpickle)


def _check_keys(cls: Any, keys: Any, call: str) -> None:
    """TypeError naming the missing required and the unknown fields."""
    keys = set(keys)
    missing = cls.__required_keys__ - keys
    if missing:
        raise TypeError(f"{call} missing required field(s): {', '.join(sorted(missing))}")
    extra = keys - cls.__expected_keys__
    if extra:
        raise TypeError(
            f"{call} got unexpected field(s): {', '.join(sorted(extra))}; "
            f"the fields of {cls.__name__} are {sorted(cls.__expected_keys__)}"
        )


def _collect_fields(cls: Any) -> None:
    """Set the schema of a new subclass (fields of its TypedTensorDict bases first) and its field properties."""
    fields: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        if base is TypedTensorDict or not issubclass(base, TypedTensorDict):
            continue
        defaults.update(base.__dict__.get("__field_defaults__", {}))
        for name, tp in resolve_annotations(base).items():
            if name.startswith("_") or _is_classvar(tp):
                continue
            fields[name] = tp
            default = base.__dict__.get(name, MISSING)
            if default is not MISSING and not isinstance(default, (property, _TensorField)):
                defaults[name] = default
    if not cls._shadow:
        taken = sorted(n for n in fields if n in _delegation.reserved_names(TypedTensorDict))
        if taken:
            raise AttributeError(
                f"field(s) {taken} of {cls.__name__} shadow TensorDictBase attributes; "
                f"use TypedTensorDict['shadow'] to allow it"
            )
    optional = {n for n, tp in fields.items() if n in defaults or _is_not_required(tp)}
    cls.__expected_keys__ = frozenset(fields)
    cls.__required_keys__ = frozenset(fields) - optional
    cls.__optional_keys__ = frozenset(optional)
    cls.__field_defaults__ = {n: v for n, v in defaults.items() if n in fields}
    reserved = _delegation.reserved_names(TypedTensorDict)
    tensor_fields = set()
    for name, tp in fields.items():
        default = defaults.get(name, NO_DEFAULT)
        if strip_optional(tp) is _Tensor and name not in reserved and not cls._nocast:
            tensor_fields.add(name)
            setattr(cls, name, _TensorField(name, default))
        else:
            setattr(cls, name, _field_property(name, default, _nested_class(tp)))
    cls._tensor_fields = frozenset(tensor_fields)
    cls._class_names = frozenset(n for n in dir(cls) if not n.startswith("__")) - cls.__expected_keys__


def _register_pytree(cls: type) -> None:
    """A TypedTensorDict is a pytree node with one child, its backend (vmap and compile see through it)."""

    def flatten(obj: Any) -> tuple[list[Any], Any]:
        return [obj._source], None

    def flatten_with_keys(obj: Any) -> tuple[list[tuple[Any, Any]], Any]:
        return [(_pytree.GetAttrKey("_source"), obj._source)], None

    def unflatten(values: Any, context: Any) -> Any:
        td = next(iter(values))
        out = cls._wrap(td)  # type: ignore[attr-defined]
        if vmap_placeholders(td) and not dynamo_compiling() and broadcasting_one_tuple():
            return (out,)  # vmap's out_dims=(0,) over one TypedTensorDict: as over one tensor
        return out

    register_pytree_node(cls, flatten, unflatten, flatten_with_keys, None, None)


_delegation.install(TypedTensorDict, "_source")
# Forwarded methods that can add keys to the backend: afterwards, a key named like a class attribute
# detaches the instance dict (see _attach). Keys added to the backend directly, not through the
# wrapper, are not seen: a TypedTensorDict over an in-memory TensorDict should not get such keys.
_ADDS_KEYS = (
    "set",
    "setdefault",
    "update",
    "set_non_tensor",
    "rename_key_",
    "flatten_keys",
    "unflatten_keys",
    "load_state_dict",
    "load_memmap_",
)


def _recheck(obj: Any) -> None:
    """After keys were added: stop reading the instance dict if a key now shadows a class attribute."""
    store = obj.__dict__
    if store and not type(obj)._class_names.isdisjoint(store):
        _setattr(obj, "__dict__", {})


def _rechecked(method: Any) -> Any:
    @functools.wraps(method)
    def rechecked(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        _recheck(self)
        return out

    return rechecked


for _name in _ADDS_KEYS:
    setattr(TypedTensorDict, _name, _rechecked(getattr(TypedTensorDict, _name)))
_delegation.WRAPPER_TYPES.add(TypedTensorDict)
MutableMapping.register(TypedTensorDict)

__all__ = ["TypedTensorDict"]
