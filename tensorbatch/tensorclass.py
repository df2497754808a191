"""TensorClass and ``@tensorclass``: dataclass-like typed containers over a TensorDict.

A TensorClass HAS-A TensorDict (``_tensordict``, any backend) that holds its tensor fields, nested
TensorDicts (nested TensorClasses are stored as their TensorDict and re-wrapped when read, by
annotation) and non-tensor values (as non-tensor leaves). ``None`` is stored as the absence of the
key. Batch operations are forwarded to the TensorDict from the one list in
:mod:`tensorbatch._delegation` and their results re-wrapped in the class; writes go to the
TensorDict, so a TensorClass over an existing backend stays live.

Reading a tensor field of an in-memory TensorDict is a plain instance-dict lookup: the instance's
``__dict__`` *is* the TensorDict's entry dict, so there is no Python call on that path. Other fields
go through small data descriptors.

How a subclass is built (field specs and descriptors, the generated ``__init__``, pytree registration) is in
:mod:`tensorbatch._tc_build`; ``from_dataclass`` and its ``inplace=True`` machinery are in
:mod:`tensorbatch._tc_dataclass`. Both sit below this module, which hands them ``TensorClass`` on import.
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import torch

from . import _compat, _convert, _delegation, _lazy, _tc_build, _tc_dataclass
from ._base import export as _export
from ._base import values as _values
from ._base.access import UPDATE_OPTIONS
from ._base.collection import TensorCollection
from ._base.export import leaf_repr, tree_lines
from ._compat import dynamo_compiling
from ._keys import is_key, key_tuple
from ._nontensor import MetaData as MetaData
from ._nontensor import NonTensorData as NonTensorData
from ._nontensor import NonTensorDataBase as NonTensorDataBase
from ._nontensor import NonTensorStack as NonTensorStack
from ._nontensor import is_non_tensor as is_non_tensor
from ._nontensor import value_of
from ._ops.traverse import (
    COLLECTION_TYPES,
    GET_DEFAULT,
    MISSING,
    NO_DEFAULT,
    NON_TENSOR_TYPES,
    REWRAP_TYPES,
    is_td,
    unset_default,
)
from ._tc_build import (
    _attach,
    _build_class,
    _class_attr,
    _default_cast_filter,
    _fix_class_cells,
    _forward_primitive,
    _read,
    _register_pytree,
    _set_slots,
    _Spec,
    _write,
)
from ._tc_dataclass import _impl_of
from ._tc_dataclass import from_dataclass as from_dataclass
from ._tc_registry import DEFINED as _DEFINED
from ._td import TensorDict
from .base import TensorDictBase
from .typed import TypedTensorDict

_Tensor = torch.Tensor
_new = object.__new__


@typing.dataclass_transform()
class TensorClass:
    """Base class of typed, batched containers: fields from annotations, the TensorDict API forwarded.

    Subclass it (or decorate a class with :func:`tensorclass`). Fields may be tensors, nested
    TensorDicts or TensorClasses, and non-tensor values (``str``, ``int``, ``Optional[...]``...), with
    defaults. The constructor takes the fields (positionally or by keyword) plus ``batch_size``,
    ``device`` and ``names``; tensor fields must start with ``batch_size``. Options, given as
    ``TensorClass["frozen", ...]`` or ``class A(TensorClass, frozen=True)`` (inherited):
    ``autocast`` casts values to the annotated types, ``nocast`` keeps numbers given to tensor fields
    as Python values, ``frozen`` locks the instance and refuses field assignment, ``cast_filter=fn`` (a keyword
    only) makes ``fn(key_path, leaf)`` the default ``cast_filter`` of the dtype casts (``to``, ``float``,
    ``bfloat16``...: ``cast_filter=None`` there casts every leaf), ``shadow`` allows
    field names that hide TensorClass attributes, ``skip_post_init_on_rebuild`` runs ``__post_init__`` only
    when an instance is built from its fields or by ``from_tensordict`` (by default, as in tensordict, it also
    runs on every instance an operation returns: indexing, arithmetic, stacking, ``clone``...).

    Note:
        As in tensordict 0.15, a number given to a field annotated ``int``/``float``/``bool`` becomes a 0-d
        tensor when the batch size is empty, with a ``FutureWarning`` (tensordict 0.17 will keep the Python
        value); the ``nocast`` option keeps Python values now.

    Note:
        ``torch.load`` (``weights_only=True``, torch's default) reads a saved instance only once its class is
        allowlisted, as with tensordict: ``torch.serialization.add_safe_globals([Sample])`` (tensorbatch's own
        rebuild functions are allowlisted at import; a pickle naming any other callable is refused).

    Examples:
        >>> import torch
        >>> from torch import Tensor
        >>> from tensorbatch import TensorClass
        >>> class Sample(TensorClass):
        ...     obs: Tensor
        ...     label: str = "none"
        >>> s = Sample(obs=torch.zeros(4, 3), batch_size=[4])
        >>> s.obs.shape, s.label, type(s[1:3]).__name__, s[1:3].batch_size
        (torch.Size([4, 3]), 'none', 'Sample', torch.Size([2]))
        >>> torch.stack([s, s]).batch_size
        torch.Size([2, 4])
    """

    __slots__ = ("__dict__", "__weakref__", "_non_tensordict", "_tensordict")
    _tensordict: TensorDictBase
    _non_tensordict: dict[str, Any]
    _wrapped_attr: ClassVar[str] = "_tensordict"
    _is_tensor_collection: ClassVar[bool] = True
    _tb_tensorclass: ClassVar[bool] = True  # not "_is_tensorclass": tensordict duck-types that name
    _dense_cls: ClassVar[Any] = TensorDict  # nodes a backend rebuilds from a TensorClass value
    _autocast: ClassVar[bool] = False
    __array_ufunc__ = None  # NumPy defers binary operators to us (as TensorDictBase)
    _nocast: ClassVar[bool] = False
    _frozen: ClassVar[bool] = False
    _shadow: ClassVar[bool] = False
    _tensor_only: ClassVar[bool] = False
    _skip_post_init_on_rebuild: ClassVar[bool] = False
    _cast_filter: ClassVar[Any] = None  # the class's cast_filter: the default of its dtype casts
    _fields_in_order: ClassVar[tuple[_Spec, ...]] = ()
    _plain_tensor: ClassVar[tuple[bool, ...]] = ()  # per field: a tensor value is stored as it is
    _post_init: ClassVar[Any] = None  # the class's __post_init__ (looked up once, at class creation)
    _field_specs: ClassVar[dict[str, _Spec]] = {}
    _option_classes: ClassVar[dict[tuple[type, tuple[str, ...]], type]] = {}
    __hash__ = None  # type: ignore[assignment]  # == is leaf-wise

    def __init_subclass__(
        cls,
        autocast: bool | None = None,
        nocast: bool | None = None,
        frozen: bool | None = None,
        shadow: bool | None = None,
        tensor_only: bool | None = None,
        skip_post_init_on_rebuild: bool | None = None,
        cast_filter: Callable[..., bool] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if cast_filter is not None:
            cls._cast_filter = staticmethod(cast_filter)
            _default_cast_filter(cls)
        given = {
            "autocast": autocast,
            "nocast": nocast,
            "frozen": frozen,
            "shadow": shadow,
            "tensor_only": tensor_only,
            "skip_post_init_on_rebuild": skip_post_init_on_rebuild,
        }
        for option, value in given.items():
            if value is not None:
                setattr(cls, f"_{option}", bool(value))
        if cls._autocast and cls._nocast:
            raise ValueError(f"{cls.__name__}: the autocast and nocast options exclude each other")
        _build_class(cls)
        COLLECTION_TYPES.add(cls)
        REWRAP_TYPES.add(cls)  # nested in a TensorDict, it is rebuilt as itself
        _delegation.WRAPPER_TYPES.add(cls)
        _register_pytree(cls)
        _DEFINED[f"{cls.__module__}.{cls.__qualname__}"] = cls

    def __class_getitem__(cls, item: Any) -> type:
        """A base class with the given options on: ``TensorClass["frozen", "autocast"]``."""
        options = tuple(item) if isinstance(item, tuple) else (item,)
        valid = ("autocast", "nocast", "frozen", "shadow", "tensor_only", "skip_post_init_on_rebuild")
        unknown = [o for o in options if o not in valid]
        if unknown:
            raise ValueError(f"unknown TensorClass option(s) {unknown}; valid options: {list(valid)}")
        key = (cls, options)
        if key not in TensorClass._option_classes:
            name = f"{cls.__name__}_{'_'.join(options)}"
            TensorClass._option_classes[key] = type(
                name, (cls,), {"__module__": cls.__module__}, **dict.fromkeys(options, True)
            )
        return TensorClass._option_classes[key]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"{type(self).__name__} declares no fields: subclass TensorClass and annotate them")

    # ------------------------------------------------------------------ building
    @classmethod
    def _from_backend(cls, td: Any, extras: dict[str, Any] | None = None, rebuild: bool = True) -> Any:
        """An instance over ``td``; a rebuild runs ``__post_init__``, as tensordict, unless skipped by the class.

        A rebuild is a result of an operation (not ``from_tensordict``); the class option
        ``skip_post_init_on_rebuild`` skips it there.
        """
        obj = _new(cls)
        _attach(obj, td, {} if extras is None else extras)
        post_init = cls._post_init
        if post_init is not None and not (rebuild and cls._skip_post_init_on_rebuild):
            post_init(obj)
        return obj

    @classmethod
    def _wrap_new(cls, td: Any) -> Any:
        return cls._from_backend(td)

    @classmethod
    def _check_new(cls, td: Any, name: str) -> None:
        """ValueError when a classmethod's TensorDict (``load_memmap`` of a folder...) holds keys that are no fields."""
        _check_fields(cls, set(td.keys()), f"{name}()", hint="load it as a TensorDict instead")

    @classmethod
    def fromkeys(cls, keys: Any, value: Any = 0) -> Any:
        """An instance (batch size ``[]``) with each field in ``keys`` set to ``value``, like :meth:`dict.fromkeys`.

        Raises:
            ValueError: naming the keys that are not fields of the class.
        """
        extra = sorted({key_tuple(k)[0] for k in keys} - set(cls._field_specs))
        if extra:
            raise ValueError(
                f"{cls.__name__}.fromkeys(): key(s) {extra} are not fields of {cls.__name__} (its "
                f"fields are {sorted(cls._field_specs)})"
            )
        return cls._from_backend(TensorDict.fromkeys(keys, value))

    def _wrap_like(self, td: Any) -> Any:
        extras = self._non_tensordict
        return type(self)._from_backend(td, dict(extras) if extras else None)

    @classmethod
    def from_dict(
        cls,
        input_dict: Mapping[Any, Any],
        *,
        auto_batch_size: bool | None = None,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
    ) -> Any:
        """An instance of this class from a dict of its fields (nested dicts become TensorDicts).

        A field the dict lacks, or gives as None, is None, also one that declares a default (a
        ``FutureWarning`` says so, as tensordict 0.15, whose 0.17 will fill the defaults). Other
        arguments as :meth:`TensorDict.from_dict`.

        Raises:
            ValueError: naming the keys that are not fields of the class.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorClass
            >>> class Point(TensorClass):
            ...     x: torch.Tensor
            >>> p = Point.from_dict({"x": torch.zeros(3, 2)}, auto_batch_size=True)
            >>> type(p).__name__, p.batch_size
            ('Point', torch.Size([3, 2]))
        """
        keys = {k[0] if isinstance(k, tuple) else k for k in input_dict}
        missing = [s.name for s in cls._fields_in_order if s.has_default and s.name not in keys]
        if missing and not dynamo_compiling():
            warnings.warn(
                f"{cls.__name__}.from_dict() sets the fields {missing} the input lacks to None, not to "
                "their declared defaults (tensordict 0.17 will fill the defaults, as the constructor "
                "does): pass them to choose their values",
                FutureWarning,
                stacklevel=2,
            )
        data = {k: v for k, v in input_dict.items() if v is not None or k not in cls._field_specs}
        td = TensorDict.from_dict(
            data, auto_batch_size=auto_batch_size, batch_size=batch_size, device=device, batch_dims=batch_dims
        )
        return cls.from_tensordict(td)

    @classmethod
    def from_tensordict(
        cls, tensordict: Any, non_tensordict: dict[str, Any] | None = None, safe: bool = True, *, check: bool = False
    ) -> Any:
        """Wrap a TensorDict of any backend in this class, without copying it (writes go through).

        Args:
            tensordict: the TensorDict holding the fields (fields it lacks read as None).
            non_tensordict: more field values kept beside the TensorDict (non-tensor values).
            safe: check that ``tensordict`` is a TensorDict whose keys are all fields of the class.
            check: also raise if a field without a default is missing (tensordict has no such check).

        Raises:
            RuntimeError: when ``safe`` and ``tensordict`` is not a TensorDict.
            ValueError: when ``safe`` and ``tensordict`` holds keys that are not fields.
            TypeError: when ``check`` and required fields are missing.

        Examples:
            >>> import torch
            >>> from torch import Tensor
            >>> from tensorbatch import TensorClass, TensorDict
            >>> class Pair(TensorClass):
            ...     a: Tensor
            ...     b: Tensor
            >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
            >>> pair = Pair.from_tensordict(td)
            >>> pair.a = torch.full((2,), 5.0)
            >>> td["a"]
            tensor([5., 5.])
        """
        if type(tensordict) in _delegation.WRAPPER_TYPES and not isinstance(tensordict, TypedTensorDict):
            tensordict = _delegation.unwrap(tensordict)
        if not is_td(tensordict):
            if safe:
                raise RuntimeError(f"Expected a TensorDictBase instance but got {type(tensordict)}")
            tensordict = TensorDict(dict(tensordict))
        if safe:
            extra = sorted(set(tensordict.keys()) - set(cls._field_specs))
            if extra:
                raise ValueError(
                    f"{cls.__name__}.from_tensordict(): key(s) {extra} of the TensorDict are not "
                    f"fields of {cls.__name__} (its fields are {sorted(cls._field_specs)})"
                )
        if check:
            missing = sorted(s.name for s in cls._fields_in_order if not s.has_default and s.name not in tensordict)
            if missing and not (non_tensordict and set(missing) <= set(non_tensordict)):
                raise TypeError(f"{cls.__name__}.from_tensordict() missing required field(s): {', '.join(missing)}")
        obj = cls._from_backend(tensordict, rebuild=False)  # (runs __post_init__ under every option)
        for name, value in (non_tensordict or {}).items():
            _add_extra(obj, name, value)
        return obj

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDictBase:
        """An in-memory TensorDict copy of the fields (never a TensorClass, whatever the backend).

        ``retain_none=True`` keeps the fields that hold ``None`` as non-tensor entries holding ``None``.
        """
        out = _delegation.to_dense(self._tensordict)
        for name, value in self._non_tensordict.items():
            if value is not None:
                out.set_non_tensor(name, value)
        if retain_none:
            for spec in type(self)._fields_in_order:
                if not out._has_str(spec.name) and getattr(self, spec.name) is None:
                    out.set_non_tensor(spec.name, None)
        return out  # type: ignore[no-any-return]

    def to_dict(
        self, *, retain_none: bool = True, convert_tensors: bool | Literal["numpy"] = False, tolist_first: bool = False
    ) -> dict[str, Any]:
        """:meth:`TensorDictBase.to_dict` of the fields; ``retain_none`` keeps the fields holding ``None``.

        Examples:
            >>> class Maybe(TensorClass):
            ...     x: torch.Tensor
            ...     y: torch.Tensor | None = None
            >>> Maybe(x=torch.zeros(2), batch_size=[2]).to_dict()
            {'x': tensor([0., 0.]), 'y': None}
        """
        out: dict[str, Any] = self._tensordict.to_dict(
            retain_none=retain_none, convert_tensors=convert_tensors, tolist_first=tolist_first
        )
        if retain_none and not tolist_first:
            _add_none_fields(self, out)
        return out

    def state_dict(
        self, destination: Any = None, prefix: str = "", keep_vars: bool = False, flatten: bool = True
    ) -> dict[str, Any]:
        """:meth:`TensorDictBase.state_dict` of the fields, with the class and non-tensor fields of each level.

        Each TensorClass level's ``_metadata`` also records its class name (``"_type"``) and its non-tensor
        fields (``"_non_tensor"``), which :meth:`load_state_dict` sets back, as tensordict's.

        Examples:
            >>> class Named(TensorClass):
            ...     x: torch.Tensor
            ...     name: str
            >>> sd = Named(x=torch.zeros(3), name="a", batch_size=[3]).state_dict()
            >>> list(sd), sd._metadata[""]["_non_tensor"]
            (['x'], {'name': 'a'})
            >>> Named(x=torch.ones(3), name="b", batch_size=[3]).load_state_dict(sd).name
            'a'
        """
        out = self._tensordict.state_dict(destination, prefix, keep_vars, flatten)
        _export.label_levels(self, out, prefix, nested=not (flatten or destination is not None or prefix))
        return out

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False, from_flatten: bool = False
    ) -> Any:
        """:meth:`TensorDictBase.load_state_dict` of the fields, then the non-tensor fields the state dict records."""
        self._tensordict.load_state_dict(state_dict, strict, assign, from_flatten)
        _export.restore_fields(self, state_dict)
        return self

    def _state_dict_meta(self) -> dict[str, Any]:
        """What a state dict records of this level besides its batch size and device (as tensordict)."""
        fields = {}
        for spec in type(self)._fields_in_order:
            value = getattr(self, spec.name)
            if not isinstance(value, _Tensor) and not is_td(value) and type(value) not in _delegation.WRAPPER_TYPES:
                fields[spec.name] = value
        return {"_type": type(self).__qualname__, "_non_tensor": fields}

    def pack(self, dim: int = -1, *, layout: Any = None) -> tuple[torch.Tensor, Any]:
        """:meth:`TensorDictBase.pack` of the fields; the layout rebuilds this class (``layout.unpack``)."""
        extra = next((name for name, value in self._non_tensordict.items() if value is not None), None)
        if extra is not None:
            raise TypeError(
                f"cannot pack the non-tensor entry {extra!r}: drop the non-tensor entries with "
                "filter_non_tensor_data() first"
            )
        flat, found = self._tensordict.pack(dim, layout=layout)
        return flat, dataclasses.replace(found, cls=type(self))

    @classmethod
    def fields(cls) -> tuple[dataclasses.Field[Any], ...]:
        """The dataclass fields of the class (as :func:`dataclasses.fields` gives them); deprecated.

        Warns ``DeprecationWarning``, as tensordict 0.15 does: call ``dataclasses.fields(cls)`` instead.
        """
        warnings.warn(
            f"{cls.__name__}.fields() is deprecated (tensordict removes TensorClass.fields in 0.17): call "
            f"dataclasses.fields(cls) instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return dataclasses.fields(cls)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ tensorclass extras (not on TensorDictBase)
    @classmethod
    def lazy_stack(cls, items: Any, dim: int = 0, *, out: Any = None, **kwargs: Any) -> Any:
        """A lazy stack of instances (their TensorDicts stay apart), as an instance of the class."""
        return cls._from_backend(_lazy.lazy_stack([_delegation.unwrap(x) for x in items], dim))

    @classmethod
    def maybe_dense_stack(cls, items: Any, dim: int = 0, *, out: Any = None, **kwargs: Any) -> Any:
        """A dense stack when the instances' TensorDicts allow one, else a lazy stack."""
        return cls._from_backend(_lazy.maybe_dense_stack([_delegation.unwrap(x) for x in items], dim))

    def load_(self, prefix: Any, *args: Any, **kwargs: Any) -> Any:
        """Load a saved folder into this instance (an alias of ``load_memmap_``)."""
        return _delegation.rewrap(self, self._tensordict, self._tensordict.load_memmap_(prefix, *args, **kwargs))

    # ------------------------------------------------------------------ attributes
    def __getattr__(self, name: str) -> Any:
        """Called only when the normal lookup fails: raises ``AttributeError`` naming the fields.

        A real method rather than none (as in tensordict), so that code can read ``MyClass.__getattr__`` and
        chain its own fallback after it. It also lets type checkers accept the generated forwarded methods.
        """
        specs = type(self)._field_specs
        spec = specs.get(name)
        if spec is not None and name not in ("_tensordict", "_non_tensordict"):  # called explicitly for a field
            return _read(self, spec)
        try:  # called explicitly (``MyClass.__getattr__(obj, "batch_size")``): the normal lookup's answer
            return object.__getattribute__(self, name)
        except AttributeError:
            pass
        raise AttributeError(
            f"{type(self).__name__!r} object has no attribute or field {name!r}. Its fields are {list(specs)}.",
            name=name,
            obj=self,
        )

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        spec = cls._field_specs.get(name)
        if spec is None:
            # slots and properties (batch_size, names); on the type, as Python looks it up (and dynamo traces)
            if hasattr(type(_class_attr(cls, name)), "__set__"):
                object.__setattr__(self, name, value)
                return
            raise AttributeError(
                f"Cannot set the attribute {name!r}: {cls.__name__} has no such field. "
                f"Its fields are {sorted(cls._field_specs)}."
            )
        if cls._frozen:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")  # dataclasses' words
        _write(self, spec, value)

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)

    def get(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """The value at ``key`` (a field name, or a nested key through nested fields), or ``default``.

        Non-tensor fields give their Python value, nested TensorClass fields an instance of their class.
        """
        default = args[0] if args else kwargs.get("default", GET_DEFAULT)
        path = (key,) if type(key) is str else key_tuple(key)
        spec = type(self)._field_specs.get(path[0])
        head = _read(self, spec) if spec is not None else value_of(self._tensordict.get(path[0], None))
        if head is None:
            if default is GET_DEFAULT:
                if spec is None and unset_default() is NO_DEFAULT:  # set_get_defaults_to_none(False)
                    raise AttributeError(
                        f"{type(self).__name__!r} object has no attribute or field {path[0]!r}. "
                        f"Its fields are {sorted(type(self)._field_specs)}."
                    )
                return None
            return default
        if len(path) == 1:
            return head
        if type(head) in _delegation.WRAPPER_TYPES and isinstance(head, TensorClass):
            return head.get(path[1:], default)
        if not is_td(head):
            raise KeyError(f"key {key!r}: {path[0]!r} holds a {type(head).__name__}, not a nested collection")
        return value_of(head.get(path[1:], default))

    def set(self, key: Any, value: Any, inplace: bool = False, non_blocking: bool = False, **kwargs: Any) -> Any:
        """Write a field (or a nested key through a nested field); returns self.

        Raises:
            AttributeError: when the first key is not a field of the class.
        """
        path = (key,) if type(key) is str else key_tuple(key)
        cls = type(self)
        spec = cls._field_specs.get(path[0])
        if spec is None:  # tensordict's words
            fields = sorted(cls._field_specs)
            if len(path) == 1:
                raise AttributeError(
                    f"Cannot set the attribute {path[0]!r}: {cls.__name__} has no such field. Its fields are {fields}."
                )
            raise AttributeError(
                f"{cls.__name__!r} object has no attribute or field {path[0]!r}. Its fields are {fields}."
            )
        if len(path) == 1:
            if cls._frozen and not inplace:
                raise dataclasses.FrozenInstanceError(f"cannot assign to field {path[0]!r}")
            _write(self, spec, value, inplace=inplace)
            return self
        head = _read(self, spec)
        if head is None:
            self._tensordict.set(path, _delegation.unwrap(value), inplace=inplace, non_blocking=non_blocking)
        else:
            head.set(path[1:], _delegation.unwrap(value), inplace=inplace, non_blocking=non_blocking)
        return self

    def update(self, input_dict_or_td: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Write the entries of ``input_dict_or_td`` into the fields (nested entries merge); returns self.

        A dict may only name fields of the class (a nested key starts with one), as tensordict's
        tensorclass; a locked instance refuses new keys with its ``RuntimeError`` first. A TensorDict
        holding other keys is written whole with a ``DeprecationWarning`` (as tensordict 0.15 does; it
        plans to refuse it in 0.17).

        Raises:
            ValueError: when a dict holds keys that are not fields of the class (nothing is written).
        """
        backend = self._tensordict
        entries = kwargs.keys() - UPDATE_OPTIONS  # keyword entries (update(x=...)) must be fields too
        if entries and not backend.is_locked:
            _check_fields(type(self), set(entries), "update()")
        if isinstance(input_dict_or_td, Mapping) and not is_td(input_dict_or_td) and not backend.is_locked:
            _check_fields(type(self), {key_tuple(k)[0] for k in input_dict_or_td}, "update()")
        elif is_td(input_dict_or_td):
            extra = sorted(set(_delegation.unwrap(input_dict_or_td).keys()) - type(self)._field_specs.keys())
            if extra:
                warnings.warn(
                    f"{type(self).__name__}.update() writes key(s) {extra} that are not fields "
                    f"(its fields are {sorted(type(self)._field_specs)}); tensordict deprecates this "
                    "and will refuse it in 0.17",
                    DeprecationWarning,
                    stacklevel=2,
                )
        return _delegation.rewrap(self, backend, backend.update(_delegation.unwrap(input_dict_or_td), *args, **kwargs))

    def flatten_keys(self, separator: str = ".", inplace: bool = False, is_leaf: Any = None) -> Any:
        """Turn nested keys into flat ``separator``-joined keys, as long as they are all fields of the class.

        A nested field (a TensorDict or TensorClass value) would become keys that are not fields, so
        such an instance refuses, as tensordict's tensorclass does: flatten its ``to_tensordict()``.

        Raises:
            ValueError: when the flat keys are not all fields of the class (nothing is changed).
        """
        backend = self._tensordict
        if inplace and backend.is_locked:  # the lock's RuntimeError first, as for any key change
            return _delegation.rewrap(self, backend, backend.flatten_keys(separator, True, is_leaf))
        flat = backend.flatten_keys(separator, False, is_leaf)
        _check_fields(
            type(self),
            set(flat.keys()),
            f"flatten_keys(separator={separator!r})",
            hint="flatten its to_tensordict() instead",
        )
        if inplace:
            return _delegation.rewrap(self, backend, backend.flatten_keys(separator, True, is_leaf))
        return _delegation.rewrap(self, backend, flat)

    # ------------------------------------------------------------------ excluded from forwarding
    def __getitem__(self, index: Any) -> Any:
        if is_key(index):
            raise ValueError(
                f"Invalid indexing arguments: {index!r}. A tensorclass is indexed along its batch "
                f"dimensions; to read a field, use the attribute or get({index!r})."
            )
        backend = self._tensordict
        td = backend._index_flat(index)
        if td is None:
            return _delegation.rewrap(self, backend, backend[index])
        obj = _new(type(self))  # _wrap_like(td), inlined
        extras = self._non_tensordict
        if dynamo_compiling():
            _set_slots(obj, td, dict(extras) if extras else {}, td._tensordict)
        else:  # _set_slots inlined (a hot path)
            _SET_TD(obj, td)
            _SET_EXTRAS(obj, dict(extras) if extras else {})
            _SET_DICT(obj, td._tensordict)
        cls = type(obj)
        if cls._post_init is not None and not cls._skip_post_init_on_rebuild:  # a rebuild, as _from_backend's
            cls._post_init(obj)
        return obj

    def __setitem__(self, index: Any, value: Any) -> None:
        if is_key(index):
            raise ValueError(
                f"Invalid indexing arguments: {index!r}. A tensorclass is indexed along its batch "
                f"dimensions; to write a field, use the attribute or set({index!r}, value)."
            )
        self._tensordict[index] = _delegation.unwrap(value)

    def __iter__(self) -> Any:
        if not self._tensordict.batch_dims:
            raise TypeError(f"iteration over a 0-d {type(self).__name__}: it has no batch dimension")
        for i in range(self._tensordict.batch_size[0]):
            yield self[i]

    def __repr__(self) -> str:
        td = self._tensordict
        lines = [f"{type(self).__name__}(batch_size={list(td.batch_size)}, device={td.device})"]
        names = [s.name for s in type(self)._fields_in_order]
        names += [k for k in td._keys_str() if k not in type(self)._field_specs]
        for i, name in enumerate(names):
            branch, extend = ("`-- ", "    ") if i == len(names) - 1 else ("|-- ", "|   ")
            value = td._get_str(name, MISSING)
            spec = type(self)._field_specs.get(name)
            if value is MISSING:
                lines.append(f"{branch}{name}: {self._non_tensordict.get(name)!r}")
            elif type(value) in NON_TENSOR_TYPES:
                lines.append(f"{branch}{name}: {value._value()!r}")
            elif is_td(value):
                kind = spec.nested if spec is not None and spec.nested is not None else type(value)
                lines.append(f"{branch}{name}: {kind.__name__}(batch_size={list(value.batch_size)})")
                tree_lines(value, extend, lines)
            else:
                lines.append(f"{branch}{name}: {leaf_repr(value)}")
        return "\n".join(lines)

    def __reduce__(self) -> Any:
        cls = type(self)  # (a class made a tensorclass in place is pickled by its name: the dataclass's)
        return _unpickle, (cls.__dict__.get("_tb_in_place_of", cls), self._tensordict, self._non_tensordict)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self.__reduce__()

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _delegation.torch_function(func, args, kwargs)


def _add_none_fields(obj: Any, out: dict[str, Any]) -> None:
    """Put the fields of ``obj`` (and of its nested TensorClasses) that hold ``None`` into its ``to_dict``."""
    for spec in type(obj)._fields_in_order:
        value = getattr(obj, spec.name)
        if value is None:
            out.setdefault(spec.name, None)
        elif is_tensorclass(value) and isinstance(out.get(spec.name), dict):
            _add_none_fields(value, out[spec.name])


def _unpickle(cls: Any, td: Any, extras: Any) -> Any:
    """Unpickle a TensorClass instance (what its ``__reduce__`` names, allowed in ``torch.load(weights_only=True)``).

    The pickle names the class itself, so a weights-only load of a user's class needs it allowlisted by the
    user (``torch.serialization.add_safe_globals([MyClass])``, as with tensordict). The arguments may be
    crafted: ``cls`` must be a TensorClass, ``td`` a TensorDict and ``extras`` a dict of its fields.

    Raises:
        TypeError: for a ``cls`` that is no TensorClass, a ``td`` that is no TensorDict, or ``extras`` that
            are no dict of fields of ``cls``.
    """
    if isinstance(cls, type):
        cls = _impl_of(cls)
    if not (isinstance(cls, type) and issubclass(cls, TensorClass) and cls._field_specs):
        raise TypeError(f"unpickling a TensorClass: expected a TensorClass with fields, got {cls!r}")
    if not is_td(td) or type(extras) is not dict or not extras.keys() <= cls._field_specs.keys():
        raise TypeError(
            f"unpickling a {cls.__name__}: malformed state (a {type(td).__name__} and the non-tensor "
            f"fields {sorted(map(str, extras)) if isinstance(extras, dict) else type(extras).__name__})"
        )
    return cls._from_backend(td, extras)


_compat.allow_in_weights_only_load(_unpickle)


def _check_fields(cls: Any, keys: set[str], what: str, hint: str = "write fields only") -> None:
    """ValueError naming the ``keys`` that are not fields of ``cls`` (the result of ``what`` would hold them)."""
    unknown = sorted(keys - cls._field_specs.keys())
    if unknown:
        raise ValueError(
            f"{cls.__name__}.{what}: key(s) {unknown} are not fields of {cls.__name__} (its fields are "
            f"{sorted(cls._field_specs)}); {hint}"
        )


def _add_extra(obj: Any, name: str, value: Any) -> None:
    """A ``non_tensordict`` entry of from_tensordict: tensors and collections go to the TensorDict."""
    spec = type(obj)._field_specs.get(name)
    if spec is None:
        raise ValueError(f"{type(obj).__name__}.from_tensordict(): non_tensordict key {name!r} is not a field")
    if isinstance(value, _Tensor) or is_td(value) or type(value) in _delegation.WRAPPER_TYPES:
        _write(obj, spec, value)
    else:
        obj._non_tensordict[name] = value


@typing.dataclass_transform()
def tensorclass(
    cls: Any = None,
    /,
    *,
    autocast: bool = False,
    frozen: bool = False,
    nocast: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
    skip_post_init_on_rebuild: bool = False,
    cast_filter: Callable[..., bool] | None = None,
) -> Any:
    """Decorator form of :class:`TensorClass`: ``@tensorclass`` or ``@tensorclass(frozen=True, ...)``.

    Note:
        Differs from tensordict: the decorated class is rebuilt as a subclass of TensorClass, so
        ``isinstance(obj, TensorClass)`` holds for it too.

    Examples:
        >>> import torch
        >>> from tensorbatch import tensorclass
        >>> @tensorclass
        ... class Point:
        ...     xy: torch.Tensor
        ...     tag: str = "p"
        ...     def norm(self):
        ...         return self.xy.norm(dim=-1)
        >>> Point(xy=torch.ones(5, 2), batch_size=[5]).norm().shape
        torch.Size([5])
    """
    options = {
        "autocast": autocast,
        "frozen": frozen,
        "nocast": nocast,
        "shadow": shadow,
        "tensor_only": tensor_only,
        "skip_post_init_on_rebuild": skip_post_init_on_rebuild,
        "cast_filter": cast_filter,
    }

    def build(klass: Any) -> Any:
        if isinstance(klass, type) and issubclass(klass, TensorClass) and not any(options.values()):
            return klass
        slots = set(klass.__dict__.get("__slots__", ()))
        namespace = {k: v for k, v in klass.__dict__.items() if k not in ("__dict__", "__weakref__", *slots)}
        bases = (
            klass.__bases__
            if any(issubclass(b, TensorClass) for b in klass.__bases__)
            else (*(b for b in klass.__bases__ if b is not object), TensorClass)
        )
        new = type(klass.__name__, bases, namespace, **{k: v for k, v in options.items() if v})
        _fix_class_cells(namespace.values(), klass, new)
        return new

    return build if cls is None else build(cls)


def defined_tensorclass(name: str) -> type | None:
    """The TensorClass subclass defined in this process as ``module.QualName``; None when none is.

    Loaders that find a class name in their data (a Redis store's ``__tensorclass__``) look it up here
    instead of importing the module the data names: importing runs that module's code.

    Examples:
        >>> import torch
        >>> class Pair(TensorClass):
        ...     x: torch.Tensor
        >>> defined_tensorclass(f"{Pair.__module__}.{Pair.__qualname__}") is Pair
        True
        >>> defined_tensorclass("os.System") is None
        True
    """
    return _DEFINED.get(name)


def is_tensorclass(obj: Any) -> bool:
    """True for TensorClass subclasses and their instances.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> is_tensorclass(TensorDict())
        False
    """
    klass = obj if isinstance(obj, type) else type(obj)
    return issubclass(klass, TensorClass) or "_tb_in_place_impl" in klass.__dict__


TensorCollection.register(TensorClass)


_SET_TD = TensorClass.__dict__["_tensordict"].__set__
_SET_EXTRAS = TensorClass.__dict__["_non_tensordict"].__set__
_SET_DICT = TensorClass.__dict__["__dict__"].__set__
_tc_build.install(TensorClass)  # the class-building helpers sit below this module
_tc_dataclass.TENSOR_CLASS = TensorClass
_tc_dataclass.IS_TENSORCLASS = is_tensorclass

for _name in _delegation.PRIMITIVES:
    setattr(TensorClass, _name, _forward_primitive(_name))
_delegation.install(TensorClass, "_tensordict")


def _saving(name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        backend: Any = self._tensordict  # (``_save_as_class``: attached by tensorbatch._io.methods)
        return backend._save_as_class(self, name, args, kwargs)

    method.__name__, method.__qualname__ = name, f"TensorClass.{name}"
    method.__doc__ = f"``TensorDict.{name}``; a folder names the class at its root, as tensordict writes it."
    return method


for _name in ("memmap", "memmap_", "memmap_like", "save", "dumps"):
    setattr(TensorClass, _name, _saving(_name))
_delegation.WRAPPER_TYPES.add(TensorClass)


# built after the forwarding above: its field names are checked against the full TensorClass API
class TensorAttrs(TensorClass):
    """A TensorClass holding the device, dtype and shape of one tensor (fields start with ``tgt_``).

    The ``tgt_`` prefix keeps the fields from hiding the class's own ``device`` and ``shape``.

    Args:
        tgt_device: the tensor's device.
        tgt_dtype: the tensor's dtype.
        tgt_shape: the tensor's shape.

    Examples:
        >>> import torch
        >>> attrs = TensorAttrs.from_tensor(torch.zeros(2, 3), fields=("dtype",))
        >>> attrs.tgt_dtype, attrs.tgt_shape
        (torch.float32, None)
    """

    tgt_device: Any = None
    tgt_dtype: Any = None
    tgt_shape: Any = None

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, *, fields: Any = ("device", "dtype", "shape")) -> TensorAttrs:
        """The attributes of ``tensor`` listed in ``fields`` (``"device"``, ``"dtype"``, ``"shape"``); others None."""
        values = {"device": tensor.device, "dtype": tensor.dtype, "shape": torch.Size(tensor.shape)}
        given: dict[str, Any] = {f"tgt_{name}": values[name] for name in fields}
        return cls(**given, batch_size=())  # type: ignore[call-arg]  # the generated __init__ takes batch_size


_values.TENSOR_ATTRS = TensorAttrs  # td.attrs() builds them, td.to(attrs) reads them (_base/values.py)

__all__ = [
    "MetaData",
    "NonTensorData",
    "NonTensorDataBase",
    "NonTensorStack",
    "TensorAttrs",
    "TensorClass",
    "from_dataclass",
    "is_tensorclass",
    "tensorclass",
]


_convert.AS_TENSORCLASS = from_dataclass  # TensorDict.from_dataclass(as_tensorclass=True)
