"""Dataclasses as tensorclasses: ``from_dataclass``, and the machinery of ``from_dataclass(cls, inplace=True)``.

Split from ``tensorclass.py`` (its size budget). A class's instance layout cannot change, so a dataclass made a
tensorclass in place keeps its class object and gets a TensorClass subclass of itself, of the same name, that
does the work (``_impl_of``). This module sits below ``tensorclass.py``, which hands it ``TensorClass`` and
``is_tensorclass`` on import (never a late import).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import typing
from collections.abc import Iterator
from typing import Any

import torch  # noqa: F401  # the docstring example's classes live here: their annotations name torch

from ._ops.traverse import MISSING
from ._tc_build import _class_attr

# TensorClass and is_tensorclass: tensorclass.py (a layer above this one) sets them on import
TENSOR_CLASS: Any = None
IS_TENSORCLASS: Any = None
_new = object.__new__


def from_dataclass(
    obj: Any,
    *,
    dest_cls: type | None = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
    frozen: bool = False,
    autocast: bool = False,
    nocast: bool = False,
    inplace: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
    device: Any = None,
) -> Any:
    """Turn a dataclass type into a TensorClass type, or a dataclass instance into a TensorClass instance.

    A type gives a new TensorClass named ``<name>_tc`` with the same fields (a TensorClass type is
    returned as it is). An instance gives an instance of ``dest_cls``, or of a new ``<name>_tc`` class,
    holding deep copies of its field values (``dataclasses.asdict``). ``TensorDict.from_dataclass``
    gives a TensorDict instead.

    ``inplace=True`` makes the dataclass type itself a tensorclass and returns it, as tensordict does.

    Note:
        Differs from tensordict: after ``inplace=True`` the instances are of a TensorClass subclass of the
        dataclass, of the same name (``isinstance`` holds, ``type(obj) is cls`` does not).

    Args:
        obj: a dataclass type or instance.
        dest_cls: for an instance, the TensorClass to build (the class options are then not used).
        auto_batch_size: for an instance, the largest batch size the entries share (not with ``batch_size``).
        batch_dims: with ``auto_batch_size``, at most this many batch dims.
        batch_size: for an instance, the batch size of the result.
        frozen: the class option of that name (see :class:`TensorClass`), as ``autocast``, ``nocast``,
            ``shadow`` and ``tensor_only``.
        autocast: see ``frozen``.
        nocast: see ``frozen``.
        inplace: for a type, change the type itself instead of building ``<name>_tc``.
        shadow: see ``frozen``.
        tensor_only: see ``frozen``.
        device: for an instance, the device of the result.

    Raises:
        TypeError: if ``obj`` is no dataclass, or ``auto_batch_size`` comes with ``batch_size``.

    Examples:
        >>> import dataclasses
        >>> import torch
        >>> from tensorbatch.tensorclass import from_dataclass, is_tensorclass
        >>> @dataclasses.dataclass
        ... class X:
        ...     a: torch.Tensor
        ...     tag: str = "x"
        >>> XC = from_dataclass(X)
        >>> XC.__name__, is_tensorclass(XC)
        ('X_tc', True)
        >>> x = from_dataclass(X(torch.zeros(3)), auto_batch_size=True)
        >>> type(x).__name__, x.batch_size, x.tag
        ('X_tc', torch.Size([3]), 'x')
    """
    options = {"frozen": frozen, "autocast": autocast, "nocast": nocast, "shadow": shadow, "tensor_only": tensor_only}
    if isinstance(obj, type):
        if IS_TENSORCLASS(obj):
            return obj
        if not dataclasses.is_dataclass(obj):
            raise TypeError(f"from_dataclass expects a dataclass type or instance, got the class {obj.__name__}")
        return _make_in_place(obj, options) if inplace else _tensorclass_of(obj, f"{obj.__name__}_tc", options)
    if not dataclasses.is_dataclass(obj):
        raise TypeError(f"from_dataclass expects a dataclass type or instance, got {type(obj).__name__}")
    if auto_batch_size and batch_size is not None:
        raise TypeError("from_dataclass: auto_batch_size=True and batch_size exclude each other")
    cls = dest_cls if dest_cls is not None else _tensorclass_of(type(obj), f"{type(obj).__name__}_tc", options)
    result = cls(**dataclasses.asdict(typing.cast(Any, obj)), batch_size=batch_size, device=device)
    return result.auto_batch_size_(batch_dims=batch_dims) if auto_batch_size else result


def _tensorclass_of(klass: type, name: str, options: dict[str, bool]) -> type:
    """A TensorClass with ``klass``'s dataclass fields (annotations and defaults) and the given options."""
    return type(name, (TENSOR_CLASS,), _fields_namespace(klass, name), **{k: v for k, v in options.items() if v})


def _fields_namespace(klass: type, name: str) -> dict[str, Any]:
    """A class namespace declaring ``klass``'s dataclass fields (annotations and defaults)."""
    namespace: dict[str, Any] = {"__annotations__": {}, "__module__": klass.__module__, "__qualname__": name}
    hints = typing.get_type_hints(klass)
    for f in dataclasses.fields(klass):
        namespace["__annotations__"][f.name] = hints.get(f.name, f.type)
        if f.default_factory is not dataclasses.MISSING:
            namespace[f.name] = dataclasses.field(default_factory=f.default_factory)
        elif f.default is not dataclasses.MISSING:
            namespace[f.name] = f.default
    return namespace


# what @dataclass writes into a class that a TensorClass defines its own way
_DATACLASS_MEMBERS = (
    "__repr__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__setattr__", "__delattr__",
    "__getstate__", "__setstate__", "__replace__",
)  # fmt: skip


def _make_in_place(klass: type, options: dict[str, bool]) -> type:
    """Make the dataclass ``klass`` a tensorclass, keeping the class object and its bases (``inplace=True``).

    A class's instance layout cannot change, so the machinery lives in a TensorClass subclass of ``klass`` with
    its name: ``klass(...)`` builds instances of it (``isinstance(obj, klass)`` holds), its own methods and
    ``__post_init__`` are inherited, and the class-level API (``fields``, ``from_tensordict``, ...) is reachable
    from ``klass``. ``is_tensorclass(klass)`` is True; pickles name ``klass``; a subclass of ``klass`` is made
    a tensorclass the same way when it is defined.
    """
    if "__slots__" in klass.__dict__:
        raise TypeError(f"from_dataclass(inplace=True): {klass.__name__} has __slots__, which fix its layout")
    namespace = _fields_namespace(klass, klass.__qualname__)
    # a frozen dataclass keeps its own __setattr__ (fields refuse assignment, as in tensordict)
    keep = ("__setattr__", "__delattr__") if klass.__dataclass_params__.frozen else ()  # type: ignore[attr-defined]
    for name in _DATACLASS_MEMBERS:
        own = klass.__dict__.get(name, MISSING)
        if own is not MISSING and name not in keep and (own is None or _generated(own)):  # a user's own stays
            namespace[name] = _class_attr(TENSOR_CLASS, name)
    namespace["_tb_in_place_of"] = klass
    namespace["_tb_built_from"] = (klass.__dict__.get("__dataclass_fields__"), options)
    parents = tuple(_impl_of(b) for b in klass.__bases__ if "_tb_in_place_impl" in b.__dict__)
    if not parents:  # (a subclass inherits them); first: the class's own __init_subclass__ is not for the machinery
        _install_in_place_hooks(klass)
    with _unfrozen(klass):  # dataclasses refuses a non-frozen dataclass subclass of a frozen one
        impl = type(
            klass.__name__, (klass, *(parents or (TENSOR_CLASS,))), namespace, **{k: v for k, v in options.items() if v}
        )
    type.__setattr__(klass, "_tb_in_place_impl", impl)
    return klass


def _install_in_place_hooks(klass: type) -> None:
    """``klass(...)`` builds its machinery class's instances; subclasses convert; the class-level API."""
    own_hook = klass.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: Any, /, **kwargs: Any) -> None:
        user = not issubclass(cls, TENSOR_CLASS)  # a user's subclass, not a machinery class (which inherits)
        if own_hook is not None and user:
            own_hook.__get__(None, cls)(**kwargs)
        else:
            super(typing.cast(Any, klass), cls).__init_subclass__(**kwargs)
        if user:
            _make_in_place(cls, {})

    klass.__new__ = staticmethod(_new_in_place)  # type: ignore[assignment]
    klass.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
    for name, member in vars(TENSOR_CLASS).items():
        if isinstance(member, classmethod) and not name.startswith("__") and name not in klass.__dict__:
            setattr(klass, name, _ClassAPI(member))


def _new_in_place(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``__new__`` of a class made a tensorclass in place: an instance of its machinery class."""
    return _new(_impl_of(cls))


def _impl_of(klass: type) -> Any:
    """The machinery class of ``klass`` (made a tensorclass in place), or ``klass``.

    A subclass is converted when it is defined, before a ``@dataclasses.dataclass`` decorator gives it its
    own fields: the machinery is rebuilt, once, when the class's dataclass fields are no longer those it
    was built from.
    """
    impl = klass.__dict__.get("_tb_in_place_impl")
    if impl is None:
        return klass
    fields, options = impl.__dict__["_tb_built_from"]
    if fields is not klass.__dict__.get("__dataclass_fields__"):
        _make_in_place(klass, options)
        impl = klass.__dict__["_tb_in_place_impl"]
    return impl


@contextlib.contextmanager
def _unfrozen(klass: type) -> Iterator[None]:
    """Frozen dataclasses in ``klass``'s MRO read as not frozen meanwhile."""
    frozen = [
        (b, b.__dict__["__dataclass_params__"])
        for b in klass.__mro__
        if getattr(b.__dict__.get("__dataclass_params__"), "frozen", False)
    ]
    for b, params in frozen:
        unfrozen = copy.copy(params)
        unfrozen.frozen = False
        type.__setattr__(b, "__dataclass_params__", unfrozen)
    try:
        yield
    finally:
        for b, params in frozen:
            type.__setattr__(b, "__dataclass_params__", params)


def _generated(member: Any) -> bool:
    """True for a method that ``@dataclass`` wrote (its code was compiled from a string)."""
    code = getattr(inspect.unwrap(member), "__code__", None)
    return code is not None and code.co_filename == "<string>"


class _ClassAPI:
    """A TensorClass classmethod on a class made a tensorclass in place: bound to the class doing its work."""

    __slots__ = ("_member",)

    def __init__(self, member: classmethod[Any, Any, Any]) -> None:
        self._member = member

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        owner = type(obj) if owner is None else owner
        return self._member.__get__(obj, _impl_of(owner))
