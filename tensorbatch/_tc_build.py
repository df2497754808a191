"""Building a TensorClass subclass: its fields' specs and descriptors, the generated ``__init__``, pytree.

Split from ``tensorclass.py`` (its size budget). A ``_Spec`` says how one field is stored and read back;
``_build_class`` (run by ``TensorClass.__init_subclass__``) makes a new subclass a dataclass, gives each field
its descriptor (``_Absent`` / ``_Field``) and the class its ``__init__`` (generated, or the user's own wrapped);
``_init`` is the body of every generated ``__init__`` (a hot path). This module sits below ``tensorclass.py``:
that module hands it the ``TensorClass`` class once defined (``install``), never a late import.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree

from . import _delegation, _lazy
from ._base.coerce import as_device as _as_device
from ._base.coerce import as_size as _as_size
from ._compat import broadcasting_one_tuple, dynamo_compiling, register_pytree_node
from ._nontensor import wrap as _wrap_non_tensor
from ._ops import pointwise as _pointwise
from ._ops.traverse import MISSING, NON_TENSOR_TYPES, is_td, vmap_placeholders
from ._tc_values import prepare as _prepare
from ._td import TensorDict
from .base import TensorDictBase
from .typed import resolve_annotations, strip_optional

if TYPE_CHECKING:
    from .tensorclass import TensorClass

_Tensor = torch.Tensor
_Size = torch.Size
# TensorClass and the setters of its slots: tensorclass.py (a layer above this one) sets them on import (install)
TENSOR_CLASS: Any = None
_SET_TD: Any = None
_SET_EXTRAS: Any = None
_SET_DICT: Any = None


def install(tensor_class: type) -> None:
    """Hand this module the ``TensorClass`` class (tensorclass.py calls it once, before any subclass is built)."""
    global TENSOR_CLASS, _SET_TD, _SET_EXTRAS, _SET_DICT
    TENSOR_CLASS = tensor_class
    _SET_TD = tensor_class.__dict__["_tensordict"].__set__
    _SET_EXTRAS = tensor_class.__dict__["_non_tensordict"].__set__
    _SET_DICT = tensor_class.__dict__["__dict__"].__set__


_CASTABLE = (int, float, bool, str)
_INIT_KEYWORDS = ("self", "batch_size", "device", "names", "non_blocking", "lock")


class _Default:
    """Marks an argument left out of a generated ``__init__`` call (its field takes its default)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


_DEFAULT: Any = _Default()
_setattr = object.__setattr__  # sets a slot past TensorClass.__setattr__ (dynamo traces it)


@dataclasses.dataclass(frozen=True)
class _Spec:
    """How one field is stored and read back."""

    name: str
    tensor: bool  # annotated as a Tensor: numbers and arrays become tensors (unless nocast)
    nested: Any  # a TensorClass / TypedTensorDict class values are read back as, or None
    raw: bool  # the stored value is what a read returns (a tensor or a plain TensorDict)
    cast: Any  # the class autocast converts to, or None
    default: Any  # dataclasses.MISSING when none
    factory: Any  # dataclasses.MISSING when none
    forward: str | None = None  # an unresolved forward reference ("Inner"): the class named so, once seen
    number: type | None = None  # int, float or bool when the field is annotated so (tensordict 0.15's 0-d tensors)

    def learn(self, value_type: type) -> None:
        """Resolve the forward reference to ``value_type`` when that is the class it names.

        A class defined in a function (or after this one) cannot be looked up by name when the
        tensorclass is built; the first value of a class with that name written to the field tells.
        """
        if self.forward == value_type.__name__ and self.nested is None:
            object.__setattr__(self, "nested", value_type)  # a cache filled once (the spec is frozen otherwise)

    @property
    def has_default(self) -> bool:
        return self.default is not dataclasses.MISSING or self.factory is not dataclasses.MISSING

    def default_value(self) -> Any:
        return self.factory() if self.factory is not dataclasses.MISSING else self.default


class _Absent:
    """Non-data descriptor of a tensor field, read only when the instance dict lacks the field.

    The instance dict (the TensorDict's own) wins when it holds the field; this runs for another
    backend, or when the field is None.
    """

    __slots__ = ("spec",)

    def __init__(self, spec: _Spec) -> None:
        self.spec = spec

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:  # class access: the default, as for a dataclass field
            if self.spec.default is not dataclasses.MISSING:
                return self.spec.default
            raise AttributeError(f"type object {owner.__name__!r} has no attribute {self.spec.name!r}")
        return _read(obj, self.spec)


class _Field(_Absent):
    """Data descriptor of a field whose stored value needs work when read (non-tensor, nested class)."""

    __slots__ = ()

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return _Absent.__get__(self, obj, owner)
        value = obj.__dict__.get(self.spec.name, MISSING)  # the in-memory TensorDict's dict, when it is one
        if value is not MISSING and type(value) in NON_TENSOR_TYPES:
            return value._value()
        return _read(obj, self.spec)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__setattr__(self.spec.name, value)


def _read(obj: Any, spec: _Spec) -> Any:
    """A field's value: non-tensor leaves give their value, nested classes are re-wrapped, absent is None."""
    value = obj._tensordict._get_str(spec.name, MISSING)
    if value is MISSING:
        return obj._non_tensordict.get(spec.name)
    if type(value) in NON_TENSOR_TYPES:
        return value._value()
    nested = spec.nested
    if nested is not None and type(value) is not nested and is_td(value):
        return nested._wrap_new(_delegation.unwrap(value))
    if nested is None and type(value) is _lazy.LazyStackedTensorDict:
        return _stacked_instances(value)
    return value


def _stacked_instances(stack: Any) -> Any:
    """A lazy stack of instances of one TensorClass (a field annotated ``Any``) as that class, as tensordict."""
    held = stack_as_class(stack.tensordicts, stack.stack_dim, stack._stack_name)
    return stack if held is None else held


def stack_as_class(members: list[Any], dim: int, stack_name: str | None = None) -> Any:
    """Instances of one TensorClass lazily stacked along ``dim`` as an instance of it, or None for other members.

    The instance wraps a lazy stack of the members' TensorDicts (writes reach the members), as tensordict
    reads a lazy stack of them. The lazy stack's reads (``_lazy.STACK_AS_CLASS``) and ``Any`` fields use it.
    """
    kind = type(members[0]) if members else None
    if kind is None or not issubclass(kind, TENSOR_CLASS) or any(type(m) is not kind for m in members):
        return None
    tds = [m._tensordict for m in members]
    return kind._from_backend(_lazy.LazyStackedTensorDict._new(tds, dim, stack_name=stack_name))


_lazy.STACK_AS_CLASS = stack_as_class


def _write(obj: Any, spec: _Spec, value: Any, inplace: bool = False) -> None:
    td = obj._tensordict
    value, python = _prepare(type(obj), spec, value, spec.number is not None and not td.batch_size, td)
    name = spec.name
    extras = obj._non_tensordict
    if extras and name in extras:
        del extras[name]
    if td.is_locked and not (inplace and td._has_str(name)):
        raise _delegation.locked_field(obj, name)
    if value is None:
        if td._has_str(name):
            td.del_(name)
        return
    if python:
        td.set_non_tensor(name, value)
    elif type(td) is TensorDict and not inplace:
        td[name] = value  # the in-memory fast path (validates the batch size)
    else:
        td.set(name, value, inplace=inplace)


def _init(
    self: Any, values: tuple[Any, ...], batch_size: Any, device: Any, names: Any, non_blocking: Any, lock: bool
) -> None:
    """Body of every generated ``__init__``: one validated TensorDict from the field values."""
    cls = type(self)
    bs = batch_size if type(batch_size) is _Size else _as_size(batch_size)
    dev = None if device is None else _as_device(device)
    # unfit_keys' test, inline on purpose: the call and its second pass over the fields cost +10% of a
    # construction (callgrind instruction counts of the constructor benchmarks)
    n = len(bs)
    one = n == 1
    b0 = bs[0] if one else -1
    data: dict[str, Any] = {}
    fits = names is None  # every value so far a tensor the TensorDict would store as it is
    for spec, plain, value in zip(cls._fields_in_order, cls._plain_tensor, values, strict=True):
        if value is _DEFAULT:
            value = spec.default_value()
        if plain and type(value) is _Tensor:  # what _prepare returns unchanged: the common case
            if fits:
                shape = value.shape  # shape[:n] == bs, cheaper for the usual single batch dim
                if (shape[0] != b0 if one and shape else shape[:n] != bs) or (dev is not None and value.device != dev):
                    fits = False
            data[spec.name] = value
            continue
        value, python = _prepare(cls, spec, value, n == 0, bs)
        if value is not None:
            fits = False
            data[spec.name] = _wrap_non_tensor(value, bs, dev) if python else value
    if fits:  # the checks the TensorDict constructor makes, all passed: skip it
        td = TensorDict._new_unsafe(data, bs, dev)
    else:
        td = TensorDict(data, batch_size=bs, device=dev, names=names, non_blocking=non_blocking)
    if lock or cls._frozen:
        td.lock_()
    if dynamo_compiling():
        _set_slots(self, td, {}, td._tensordict)
    else:  # _set_slots inlined (a hot path)
        _SET_TD(self, td)
        _SET_EXTRAS(self, {})
        _SET_DICT(self, td._tensordict)  # tensor fields read straight from the TensorDict's own dict
    post_init = cls._post_init
    if post_init is not None:  # as a dataclass does
        post_init(self)


def _attach(obj: Any, td: Any, extras: dict[str, Any]) -> None:
    # tensor fields read straight from the TensorDict's own dict
    _set_slots(obj, td, extras, td._tensordict if type(td) is TensorDict else _delegation.storage_of(td))


def _set_slots(obj: Any, td: Any, extras: dict[str, Any], store: dict[str, Any] | None) -> None:
    """Set ``obj``'s slots (and its ``__dict__`` to ``store`` unless None), past ``TensorClass.__setattr__``.

    In eager with the slots' own setters (the cheapest call); under dynamo, which cannot trace those, with
    ``object.__setattr__``.
    """
    if dynamo_compiling():
        _setattr(obj, "_tensordict", td)
        _setattr(obj, "_non_tensordict", extras)
        if store is not None:
            _setattr(obj, "__dict__", store)
        return
    _SET_TD(obj, td)
    _SET_EXTRAS(obj, extras)
    if store is not None:
        _SET_DICT(obj, store)


def _class_attr(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _field_kind(cls: type, field: dataclasses.Field[Any]) -> _Spec:
    tp = field.type
    if isinstance(tp, str):
        tp = resolve_annotations(_owner_of(cls, field.name)).get(field.name, tp)
    base = strip_optional(tp)
    tensor = (isinstance(base, type) and issubclass(base, _Tensor)) or (
        isinstance(base, str) and base.replace("torch.", "").split(" ")[0] == "Tensor"
    )
    # (the class itself is not registered yet while it is being built: a field may hold its own class)
    nested = base if isinstance(base, type) and (base in _delegation.WRAPPER_TYPES or base is cls) else None
    cast = _Tensor if tensor else (base if base in _CASTABLE else None)
    raw = tensor or (nested is None and isinstance(base, type) and issubclass(base, TensorDictBase))
    forward = base.strip("'\"") if isinstance(base, str) and base.strip("'\"").isidentifier() else None
    number = base if base in (int, float, bool) else None
    return _Spec(field.name, tensor, nested, raw, cast, field.default, field.default_factory, forward, number)


def _owner_of(cls: type, name: str) -> type:
    for klass in cls.__mro__:
        if name in inspect.get_annotations(klass):
            return klass
    return cls


# Members that a field of the same name replaces without ``shadow=True``, as in tensordict: ``data`` (the field
# of NonTensorData and of many user classes, TorchRL's among them) and ``fields``.
_FIELD_MAY_REPLACE = ("data", "fields")


def _build_class(cls: Any) -> None:
    """Turn a new subclass into a tensorclass: dataclass fields, field access, generated __init__."""
    own_init = "__init__" in cls.__dict__
    own_doc = cls.__dict__.get("__doc__")
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    specs = tuple(_field_kind(cls, f) for f in dataclasses.fields(cls))
    reserved = _delegation.reserved_names(TENSOR_CLASS)
    bad = sorted(s.name for s in specs if s.name in _INIT_KEYWORDS or s.name in ("_tensordict", "_non_tensordict"))
    if bad:
        raise AttributeError(f"field name(s) {bad} of {cls.__name__} are reserved by TensorClass")
    if not cls._shadow:
        taken = sorted(s.name for s in specs if s.name in reserved and s.name not in _FIELD_MAY_REPLACE)
        if taken:
            raise AttributeError(
                f"Attribute name(s) {taken} can't be used as fields of {cls.__name__}, as tensorclasses have "
                f"members of that name. To allow it, pass shadow=True (@tensorclass(shadow=True) or "
                f"TensorClass['shadow'])."
            )
    for spec in specs:
        if spec.name in cls.__dict__:
            delattr(cls, spec.name)
        inherited = _class_attr(cls, spec.name)  # a shadowed member needs a data descriptor to win
        raw = spec.raw and not cls._nocast and (inherited is None or type(inherited) is _Absent)
        setattr(cls, spec.name, _Absent(spec) if raw else _Field(spec))
    cls._fields_in_order = specs
    cls._plain_tensor = tuple(not cls._autocast or s.cast is None or s.cast is _Tensor for s in specs)
    cls._post_init = getattr(cls, "__post_init__", None)
    cls._field_specs = {s.name: s for s in specs}
    if not own_init:
        cls.__init__ = _make_init(cls, specs)
    elif not getattr(cls.__dict__["__init__"], "_tb_wrapped", False):
        cls.__init__ = _wrap_init(cls, cls.__dict__["__init__"])
    if own_doc is None:
        cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")


def _make_init(cls: Any, specs: tuple[_Spec, ...]) -> Callable[..., None]:
    """A real ``__init__(self, <fields>, *, batch_size=None, device=None, names=None, ...)`` (as dataclasses do)."""
    params, after_default = [], None
    namespace: dict[str, Any] = {"_init": _init, "_DEFAULT": _DEFAULT}
    for spec in specs:
        if spec.has_default:
            if spec.factory is dataclasses.MISSING:  # the default itself shows in the signature
                namespace[f"_default_{spec.name}"] = spec.default
                params.append(f"{spec.name}=_default_{spec.name}")
            else:
                params.append(f"{spec.name}=_DEFAULT")
            after_default = spec.name
        elif after_default is not None:
            raise TypeError(
                f"{cls.__name__}: non-default field {spec.name!r} follows field {after_default!r}, which has a default"
            )
        else:
            params.append(spec.name)
    fields = "".join(f"{s.name}, " for s in specs)
    src = (
        f"def __init__(self, {''.join(p + ', ' for p in params)}*, batch_size=None, device=None, names=None, "
        f"non_blocking=None, lock=False):\n"
        f"    _init(self, ({fields}), batch_size, device, names, non_blocking, lock)\n"
    )
    exec(src, namespace)  # the same technique dataclasses uses: a real signature, no *args parsing
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = f"Build a {cls.__name__} from its fields and batch facts."
    return init  # type: ignore[no-any-return]


_META = ("batch_size", "device", "names", "lock")


def _wrap_init(cls: Any, user_init: Callable[..., None]) -> Callable[..., None]:
    """A class's own ``__init__``, run on an empty TensorDict built from the batch keywords (as tensordict does).

    ``batch_size``, ``device``, ``names`` and ``lock`` are taken from the call's keywords, unless the
    user's ``__init__`` declares them (it then gets them, and may set ``self.batch_size`` itself).
    Fields the ``__init__`` leaves unset take their defaults.
    """
    params = list(inspect.signature(user_init).parameters.values())[1:]
    declared = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}

    @functools.wraps(user_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if _has_backend(self):
            user_init(self, *args, **kwargs)  # super().__init__() from a subclass: the container exists
            return
        meta = {k: kwargs.get(k) if k in declared else kwargs.pop(k, None) for k in _META}
        td = TensorDict(
            batch_size=meta["batch_size"] if meta["batch_size"] is not None else (),
            device=meta["device"],
            names=meta["names"],
        )
        _attach(self, td, {})
        user_init(self, *args, **kwargs)
        backend = self._tensordict
        for spec in type(self)._fields_in_order:
            if backend._has_str(spec.name) or spec.name in self._non_tensordict or not spec.has_default:
                continue
            default = spec.default_value()
            if default is not None:
                _write(self, spec, default)
        if meta["lock"] or type(self)._frozen:
            backend.lock_()

    __init__._tb_wrapped = True  # type: ignore[attr-defined]
    return __init__


def _has_backend(obj: Any) -> bool:
    try:
        obj._tensordict  # noqa: B018  # set once a constructor has run
    except AttributeError:
        return False
    return True


def _register_pytree(cls: type) -> None:
    """A TensorClass is a pytree node with one child, its TensorDict (vmap and compile see through it)."""

    def flatten(obj: Any) -> tuple[list[Any], Any]:
        return [obj._tensordict], tuple(obj._non_tensordict.items()) or None

    def flatten_with_keys(obj: Any) -> tuple[list[tuple[Any, Any]], Any]:
        values, context = flatten(obj)
        return [(_pytree.GetAttrKey("_tensordict"), values[0])], context

    def unflatten(values: Any, context: Any) -> Any:
        td = next(iter(values))
        out = cls._from_backend(td, dict(context or ()))  # type: ignore[attr-defined]
        if vmap_placeholders(td) and not dynamo_compiling() and broadcasting_one_tuple():
            return (out,)  # vmap's out_dims=(0,) over one TensorClass: as over one tensor
        return out

    register_pytree_node(cls, flatten, unflatten, flatten_with_keys, None, None)


def _forward_primitive(name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._tensordict, name)(*args, **kwargs)

    method.__name__ = name
    return method


def _default_cast_filter(cls: type[TensorClass]) -> None:
    """The dtype casts of ``cls`` take its ``cast_filter`` when the call gives none (``None`` given: every leaf)."""
    for name in ("to", "type", *_pointwise.CASTS):
        setattr(cls, name, _with_cast_filter(getattr(cls, name)))


def _with_cast_filter(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def cast(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cast_filter", type(self)._cast_filter)
        return method(self, *args, **kwargs)

    return cast


def _fix_class_cells(values: Any, old: type, new: type) -> None:
    """Point zero-argument ``super()`` in the methods at the rebuilt class (dataclasses(slots=True) does this)."""
    for value in values:
        func = getattr(value, "__func__", value)
        funcs = [value.fget, value.fset, value.fdel] if isinstance(value, property) else [func]
        for f in funcs:
            closure = getattr(f, "__closure__", None) or ()
            for cell in closure:
                try:
                    if cell.cell_contents is old:
                        cell.cell_contents = new
                except ValueError:  # an empty cell
                    continue
