"""Modules that read their inputs from a TensorDict and write their outputs to it.

:class:`TensorDictModuleBase` is the base (``in_keys``/``out_keys``, ``select_out_keys``);
:class:`TensorDictModule` wraps a callable on tensors; :class:`TensorDictModuleWrapper` forwards to a module
it holds; :class:`WrapModule` wraps a function of a TensorDict; :func:`dispatch` lets a module taking a
TensorDict be called with tensors (by in-key name) instead.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from collections.abc import Callable, MutableSequence
from textwrap import indent
from typing import Any

import torch
from torch import nn
from torch._C import _get_tracing_state
from torch.nn.modules.module import _has_any_global_hook as _torch_has_any_global_hook

from .._keys import NestedKey, unravel_key_list, unravel_key_to_tuple
from .._ops.traverse import NO_DEFAULT, NON_TENSOR_TYPES
from .._td import TensorDict
from ..base import TensorDictBase
from .utils import _DISPATCH, _SKIP_EXISTING, _set_skip_existing_None

__all__ = [
    "TensorDictModule",
    "TensorDictModuleBase",
    "TensorDictModuleWrapper",
    "WrapModule",
    "as_tensordict_module",
    "dispatch",
]

_Tensor = torch.Tensor
_module_call = nn.Module.__call__
_has_any_global_hook: Callable[[], Any] = _torch_has_any_global_hook
_PLAIN = (TensorDict,)
_ABSENT = object()  # backends whose _get_str/_set_str a module may call directly with a str key


def _is_collection(obj: Any) -> bool:
    return bool(getattr(type(obj), "_is_tensor_collection", False))


def _key_name(key: NestedKey, separator: str) -> str:
    """The keyword argument naming ``key`` in a dispatched call (nested keys joined by ``separator``)."""
    return separator.join(unravel_key_to_tuple(key))


class dispatch:
    """Let a function of a TensorDict be called with tensors instead.

    Decorate a ``forward(self, tensordict, ...)``: a call with a TensorDict (or TensorClass) runs as is; a
    call with tensors, positionally in ``in_keys`` order or by keyword (nested keys joined by
    ``separator``: ``("a", "b")`` is ``a_b``), builds a TensorDict of them, runs the function and returns
    the entries at ``out_keys`` (one tensor, or a tuple). ``source`` and ``dest`` are the names of the
    attributes holding the keys, or the key lists themselves.

    Args:
        separator: joins the parts of a nested key into a keyword name.
        source: the input keys, or the name of the attribute holding them.
        dest: the output keys, or the name of the attribute holding them.
        auto_batch_size: give the built TensorDict the batch dims its tensors share (else batch size ``[]``).

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import TensorDictModule
        >>> module = TensorDictModule(lambda x, y: x + y, in_keys=["x", ("nested", "y")], out_keys=["z"])
        >>> module(x=torch.ones(2), nested_y=torch.ones(2))
        tensor([2., 2.])
        >>> module(torch.ones(2), torch.zeros(2))
        tensor([1., 1.])
    """

    DEFAULT_SEPARATOR = "_"
    DEFAULT_SOURCE = "in_keys"
    DEFAULT_DEST = "out_keys"

    def __new__(
        cls,
        separator: Any = DEFAULT_SEPARATOR,
        source: str | list[NestedKey] = DEFAULT_SOURCE,
        dest: str | list[NestedKey] = DEFAULT_DEST,
        auto_batch_size: bool = True,
    ) -> Any:
        """The decorator; used bare (``@dispatch``), the decorated function itself."""
        if callable(separator):  # used bare, as @dispatch
            self = super().__new__(cls)
            self.__init__(cls.DEFAULT_SEPARATOR, source, dest, auto_batch_size)  # type: ignore[misc]
            return self(separator)
        return super().__new__(cls)

    def __init__(
        self,
        separator: str = DEFAULT_SEPARATOR,
        source: str | list[NestedKey] = DEFAULT_SOURCE,
        dest: str | list[NestedKey] = DEFAULT_DEST,
        auto_batch_size: bool = True,
    ) -> None:
        self.separator = separator
        self.source = source
        self.dest = dest
        self.auto_batch_size = auto_batch_size

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` taking keyword arguments (or a TensorDict) for its TensorDict input."""
        bound = getattr(func, "__self__", None) if inspect.ismethod(func) else None
        names = list(inspect.signature(func).parameters)
        is_method = bound is None and bool(names) and names[0] == "self"
        first = names[1] if is_method else (names[0] if names else None)
        if first is not None and first != "tensordict":
            raise RuntimeError(
                f"the first argument of the wrapped function must be named 'tensordict'. Got {first} instead."
            )
        if not _DISPATCH.get():
            return func

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # the common case first: a TensorDict goes straight through
            if is_method:
                if len(args) > 1 and _is_collection(args[1]):
                    return func(*args, **kwargs)
            elif args and _is_collection(args[0]):
                return func(*args, **kwargs)
            if not _DISPATCH.get():
                return func(*args, **kwargs)
            return self._dispatch(func, bound, is_method, args, kwargs)

        wrapper.__signature__ = _optional_signature(func)  # type: ignore[attr-defined]
        return wrapper

    def _keys(self, owner: Any, keys: str | list[NestedKey]) -> list[NestedKey]:
        if isinstance(keys, str):
            if owner is None:
                raise RuntimeError("The in keys must be passed to dispatch when func is not a method but a function.")
            return getattr(owner, keys)  # type: ignore[no-any-return]
        return keys

    def _dispatch(
        self, func: Callable[..., Any], bound: Any, is_method: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        owner, args = (args[0], args[1:]) if is_method else (bound, args)
        source = self._keys(owner, self.source)
        tensordict = None
        if args and _is_collection(args[0]):
            tensordict, args = args[0], args[1:]
        elif (
            not args
            and _is_collection(kwargs.get("tensordict"))
            and all(_key_name(key, self.separator) != "tensordict" for key in source)
        ):
            tensordict = kwargs.pop("tensordict")  # the positional call, by keyword
        if tensordict is not None:
            return func(owner, tensordict, *args, **kwargs) if is_method else func(tensordict, *args, **kwargs)
        dest = self._keys(owner, self.dest)
        values: dict[Any, Any] = {}
        for key in source:
            name = _key_name(key, self.separator)
            if args:
                if name in kwargs:
                    raise RuntimeError("Duplicated argument in args and kwargs.")
                values[key], args = args[0], args[1:]
            elif name in kwargs:
                values[key] = kwargs.pop(name)
        from ..functional import make_tensordict

        td = make_tensordict(
            values, batch_size=None if self.auto_batch_size else torch.Size([]), auto_batch_size=self.auto_batch_size
        )
        out = func(owner, td, *args, **kwargs) if is_method else func(td, *args, **kwargs)
        result = tuple(out[key] for key in dest if key != "_")  # "_" marks an output that is not kept
        return result[0] if len(result) == 1 else result


def _optional_signature(func: Callable[..., Any]) -> inspect.Signature:
    """``func``'s signature with its positional parameters optional (a dispatched call may leave them out)."""
    params = []
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) and param.default is param.empty:
            param = param.replace(default=None)
        params.append(param)
    return inspect.Signature(params)


def _module_forward(func: Callable[..., Any]) -> Callable[..., Any]:
    """``dispatch(auto_batch_size=False)`` and ``_set_skip_existing_None()`` on a module's ``forward``, in one call.

    A call with a TensorDict and no skip-existing mode goes straight to ``func`` (the common case costs one
    frame); any other call goes through the two decorators.
    """
    slow = dispatch(auto_batch_size=False)(_set_skip_existing_None()(func))

    @functools.wraps(func)
    def forward(self: Any, tensordict: Any = None, *args: Any, **kwargs: Any) -> Any:
        # (the mode is read as a global, not through a closure cell: dynamo guards a closure cell that aliases a
        # global with a Python guard that copies the class dict on every call of a compiled module)
        if (
            not _SKIP_EXISTING.value
            and not _SKIP_EXISTING._threads
            and getattr(type(tensordict), "_is_tensor_collection", False)
        ):
            return func(self, tensordict, *args, **kwargs)
        if tensordict is None:  # a call by keywords only
            return slow(self, *args, **kwargs)
        return slow(self, tensordict, *args, **kwargs)

    forward.__signature__ = _optional_signature(func)  # type: ignore[attr-defined]
    return forward


class _OutKeyNotFoundError(ValueError, RuntimeError):
    """``select_out_keys`` was given a key the module does not write (both a ValueError and a RuntimeError)."""


class _OutKeysSelect:
    """The forward hook of ``select_out_keys``: drops the outputs that are not selected."""

    def __init__(self, out_keys: list[NestedKey]) -> None:
        self.out_keys = list(out_keys)
        self.module: Any = None
        self.source: list[NestedKey] = []

    def _init(self, module: Any) -> None:
        missing = [key for key in self.out_keys if key not in module.out_keys]
        if missing:
            raise _OutKeyNotFoundError(
                f"Can't select non existent keys: {missing}. The module out_keys are {module.out_keys}."
            )
        self.source = list(module.out_keys)
        setter = type(module).out_keys.fset
        if setter is None:
            raise RuntimeError(f"{type(module).__name__} does not support select_out_keys.")
        module._out_keys_apparent = self.out_keys
        self.module = module

    def __call__(self, module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
        if not _is_collection(output):  # a dispatched call: dispatch returned the selected keys
            return output
        in_keys = module.in_keys
        out_keys = module.out_keys
        dropped = [key for key in self.source if key not in out_keys and key not in in_keys]
        output.exclude(*dropped, inplace=True)
        for key in dropped:  # a nested output's parents go too when it leaves them empty
            if isinstance(key, str):
                continue
            for depth in range(len(key) - 1, 0, -1):
                parent = key[:depth] if depth > 1 else key[0]
                if parent in out_keys or parent in in_keys:
                    break
                value = output.get(parent, None)
                if not _is_collection(value) or not value.is_empty():
                    break
                del output[parent]
        return output

    def remove(self) -> None:
        if self.module is not None and self.module.out_keys == self.out_keys:
            self.module._out_keys_apparent = self.module._out_keys


class TensorDictModuleBase(nn.Module):
    """Base class of modules reading ``in_keys`` from a TensorDict and writing ``out_keys`` to it.

    Subclass it for a module whose ``forward`` takes and returns a TensorDict; give ``in_keys`` and
    ``out_keys`` as class attributes or set them in ``__init__``. ``select_out_keys`` keeps only some outputs.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import TensorDictModuleBase
        >>> class Double(TensorDictModuleBase):
        ...     in_keys = ["x"]
        ...     out_keys = ["y"]
        ...     def forward(self, tensordict):
        ...         return tensordict.set("y", tensordict["x"] * 2)
        >>> Double()(TensorDict(x=torch.ones(2)))["y"]
        tensor([2., 2.])
    """

    _in_keys: list[NestedKey]
    _out_keys: list[NestedKey]
    _out_keys_apparent: list[NestedKey]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """A new module; class attributes ``in_keys``/``out_keys`` become its keys."""
        # class attributes in_keys/out_keys become the properties' storage
        for name in ("in_keys", "out_keys"):
            value = cls.__dict__.get(name)
            if name in cls.__dict__ and not isinstance(value, property):
                keys = unravel_key_list(value)
                delattr(cls, name)
                setattr(cls, "_" + name, keys)
                if name == "out_keys":
                    cls._out_keys_apparent = keys
                setattr(cls, name, getattr(TensorDictModuleBase, name))
        return super().__new__(cls)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the module as ``nn.Module.__call__`` does: straight to ``forward`` when no hook is registered.

        Being this library's function, not torch's, ``torch.compile(module)`` compiles this frame (it skips
        torch's ``__call__`` and starts at ``forward``, leaving the hooks' dispatch to Python on every call);
        the checks read torch's state without naming the ``torch`` module, which dynamo would otherwise guard
        as an alias of the one the wrapped modules use, with a guard in Python.
        """
        if (
            self._compiled_call_impl is None  # (``module.compile()``)
            and not (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks)
            and not _has_any_global_hook()
            and _get_tracing_state() is None
        ):
            return self.forward(*args, **kwargs)
        return _module_call(self, *args, **kwargs)

    @staticmethod
    def is_tdmodule_compatible(module: Any) -> bool:
        """True when ``module`` has ``in_keys`` and ``out_keys`` (else a sequence wraps it in a WrapModule)."""
        return hasattr(module, "in_keys") and hasattr(module, "out_keys")

    @property
    def in_keys(self) -> list[NestedKey]:
        """The keys the module reads."""
        return self._in_keys

    @in_keys.setter
    def in_keys(self, value: list[NestedKey]) -> None:
        self._in_keys = unravel_key_list(value)

    @property
    def out_keys(self) -> list[NestedKey]:
        """The keys the module writes (only the selected ones after ``select_out_keys``)."""
        return self._out_keys_apparent

    @out_keys.setter
    def out_keys(self, value: list[NestedKey]) -> None:
        self._out_keys = self._out_keys_apparent = unravel_key_list(list(value))

    @property
    def out_keys_source(self) -> list[NestedKey]:
        """Every key the module writes, selected or not."""
        return self._out_keys

    def select_out_keys(self, *out_keys: NestedKey) -> TensorDictModuleBase:
        """Keep only ``out_keys`` in the module's output (the others are still computed, then dropped).

        Args:
            *out_keys: keys among ``out_keys``.

        Returns:
            self.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> from tensorbatch.nn import TensorDictModule
            >>> module = TensorDictModule(lambda x: (x + 1, x + 2), in_keys=["x"], out_keys=["y", "z"])
            >>> sorted(module.select_out_keys("z")(TensorDict(x=torch.zeros(1))).keys())
            ['x', 'z']
        """
        keys = unravel_key_list(list(out_keys))
        if len(keys) == 1 and keys[0] not in self.out_keys:
            message = f"Can't select non existent key: {keys[0]}. "
            if isinstance(keys[0], tuple) and keys[0] and keys[0][0] in self.out_keys:
                message += f"Are you passing the keys in a list? Try unpacking as: `{', '.join(keys[0])}`"
            raise _OutKeyNotFoundError(message)
        hook = _OutKeysSelect(keys)
        hook._init(self)
        self.register_forward_hook(hook, with_kwargs=True)
        return self

    def reset_out_keys(self) -> TensorDictModuleBase:
        """Undo ``select_out_keys``: every output is written again. Returns self."""
        for handle, hook in reversed(list(self._forward_hooks.items())):
            if isinstance(hook, _OutKeysSelect):
                hook.remove()
                del self._forward_hooks[handle]
        return self

    def reset_parameters_recursive(self, parameters: TensorDictBase | None = None) -> TensorDictBase | None:
        """Reset every submodule that has ``reset_parameters``.

        Args:
            parameters: parameters kept outside the module (``from_module``'s structure, batch size ``[]``):
                reset those instead, leaving the module alone.

        Returns:
            None, or the reset parameters (new leaves requiring grad) when ``parameters`` is given.
        """
        if parameters is None:
            if not self._reset_parameters(self):
                warnings.warn(
                    "reset_parameters_recursive was called without the parameters argument and did "
                    "not find any parameters to reset",
                    stacklevel=2,
                )
            return None
        if parameters.ndim:
            raise RuntimeError(
                "reset_parameters_recursive does not support batched TensorDicts, ensure "
                "`batch_size` is empty and the parameters shape match their original shape."
            )
        fresh: Any = parameters.apply(lambda x: x.detach().requires_grad_(), inplace=False)
        with fresh.to_module(self, preserve_module_state=False):
            self._reset_parameters(self)
        return fresh  # type: ignore[no-any-return]

    def _reset_parameters(self, module: nn.Module) -> bool:
        done = False
        for child in module.children():
            done |= self._reset_parameters(child)
            reset = getattr(child, "reset_parameters", None)
            if callable(reset):
                reset()
                done = True
        return done

    @property
    def __name__(self) -> str:
        cls: type = type(self)
        return cls.__name__

    def __repr__(self) -> str:
        entries = [f"{name}={module}" for name, module in self.named_children()]
        module = self.__dict__.get("module")
        if module is not None:
            entries.insert(0, f"module={module}")
        entries += [f"in_keys={self.in_keys}", f"out_keys={self.out_keys}"]
        fields = indent(",\n".join(entries), "    ")
        return f"{type(self).__name__}(\n{fields})"


def _fallback_getattr(self: nn.Module, name: str, holder: str) -> Any:
    """``nn.Module.__getattr__`` (parameters, buffers, submodules), then the held module's attribute."""
    d = self.__dict__
    for store in ("_parameters", "_buffers", "_modules"):
        entries = d.get(store)
        if entries and name in entries:
            return entries[name]
    if not name.startswith("_"):
        target = d["_modules"].get(holder) if holder in d.get("_modules", ()) else d.get(holder)
        if target is not None:
            return getattr(target, name)
    raise AttributeError(f"module {type(self).__name__} has no attribute named {name}.")


class TensorDictModule(TensorDictModuleBase):
    """Wrap a callable on tensors so that it reads ``in_keys`` from a TensorDict and writes ``out_keys``.

    Args:
        module: the callable (an ``nn.Module``, a function...).
        in_keys: the keys passed as positional arguments, in order; or a dict mapping keyword names to keys
            (``out_to_in_map=True``, the default) or keys to keyword names (``out_to_in_map=False``).
        out_keys: where the outputs are written, in order (``"_"`` drops an output).
        out_to_in_map: how a dict ``in_keys`` reads (see above).
        inplace: ``True`` writes into the input TensorDict; ``False`` into a new empty TensorDict;
            ``"empty"`` into ``tensordict.empty()`` (same batch size and device).
        method: call this method of ``module`` instead of the module itself.
        method_kwargs: extra keyword arguments of each call.
        strict: a missing input raises KeyError (else ``None`` is passed).
        get_kwargs: keyword arguments of each ``get`` (``as_padded_tensor=True`` for ragged lazy stacks).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import TensorDictModule
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> module = TensorDictModule(torch.nn.Linear(3, 2), in_keys=["obs"], out_keys=[("out", "action")])
        >>> td = module(TensorDict(obs=torch.randn(4, 3), batch_size=[4]))
        >>> td["out", "action"].shape
        torch.Size([4, 2])
        >>> module(torch.randn(4, 3)).shape
        torch.Size([4, 2])
    """

    _IN_KEY_ERR = "in_keys must be of type list, str or tuples of str, or dict."
    _OUT_KEY_ERR = "out_keys must be of type list, str or tuples of str."

    def __init__(
        self,
        module: Callable[..., Any],
        in_keys: NestedKey | list[NestedKey] | dict[Any, Any],
        out_keys: NestedKey | list[NestedKey],
        *,
        out_to_in_map: bool | None = None,
        inplace: bool | str | None = True,
        method: str | None = None,
        method_kwargs: dict[str, Any] | None = None,
        strict: bool = False,
        get_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if out_to_in_map is not None and not isinstance(in_keys, dict):
            warnings.warn("out_to_in_map is not None but is only used when in_key is a dictionary.", stacklevel=2)
        self._kwargs: list[str] | None = None
        if isinstance(in_keys, dict):
            pairs = list(in_keys.items()) if out_to_in_map is not False else [(v, k) for k, v in in_keys.items()]
            self._kwargs = [name for name, _ in pairs]
            in_keys = [key for _, key in pairs]
        elif isinstance(in_keys, (str, tuple)):
            in_keys = [in_keys]
        elif not isinstance(in_keys, MutableSequence):
            raise ValueError(self._IN_KEY_ERR)
        if isinstance(out_keys, (str, tuple)):
            out_keys = [out_keys]
        elif not isinstance(out_keys, MutableSequence):
            raise ValueError(self._OUT_KEY_ERR)
        try:
            in_list = unravel_key_list(list(in_keys))
        except Exception as err:
            raise ValueError(self._IN_KEY_ERR) from err
        try:
            out_list = unravel_key_list(list(out_keys))
        except Exception as err:
            raise ValueError(self._OUT_KEY_ERR) from err
        if type(module) is type or (method is None and not callable(module)):
            raise ValueError(
                f"Module {module} if type {type(module)} is not callable. Typical accepted types are "
                "nn.Module or TensorDictModule. If you need to call a specific method from your "
                "module, pass the `method` keyword argument to the TensorDictModule constructor."
            )
        if inplace not in (None, True, False, "empty"):
            raise ValueError(
                "The only accepted valued for inplace is `None`, `True`, `False`, or `'empty'`. Got "
                f"inplace={inplace} instead."
            )
        self.out_keys = out_list
        self.in_keys = in_list
        self.strict = strict
        if "_" in in_list:
            warnings.warn('key "_" is for ignoring output, it should not be used in input keys', stacklevel=2)
        self.module = module
        self.inplace = inplace
        self.method = method
        self.method_kwargs = method_kwargs if method_kwargs is not None else {}
        self._get_kwargs = get_kwargs if get_kwargs is not None else {}

    def _read(self, tensordict: Any, key: NestedKey, default: Any) -> Any:
        """The value at ``key`` as the module takes it (a non-tensor leaf's value; ``default`` when missing)."""
        if self._get_kwargs:
            value = tensordict.get(key, default, **self._get_kwargs)
        elif type(key) is str and type(tensordict) in _PLAIN:
            value = tensordict._get_str(key, default)
        else:
            value = tensordict.get(key, default)
        return value._value() if type(value) in NON_TENSOR_TYPES else value

    def _write_to_tensordict(
        self,
        tensordict: Any,
        tensors: tuple[Any, ...],
        tensordict_out: Any = None,
        out_keys: list[NestedKey] | None = None,
    ) -> Any:
        keys = self._out_keys if out_keys is None else out_keys
        if tensordict_out is None:
            if self.inplace is True:
                tensordict_out = tensordict
            elif self.inplace == "empty":
                tensordict_out = tensordict.empty()
            else:
                tensordict_out = TensorDict()
        if len(tensors) != len(keys):
            if len(tensors) > len(keys):
                raise RuntimeError(
                    f"There are more tensors (len(tensors)={len(tensors)}) than out_keys (out_keys={keys})."
                )
            raise RuntimeError("There are more out_keys than tensors.")
        plain = type(tensordict_out) in _PLAIN and not tensordict_out.is_locked
        for key, value in zip(keys, tensors, strict=True):
            if key == "_":
                continue
            if type(value) is not _Tensor and not isinstance(value, _Tensor):
                value = TensorDict.from_any(value)
            if plain and type(key) is str:  # set(key, value) without the nested-key resolution
                tensordict_out._set_str(key, tensordict_out._validate(value, (key,)), inplace=False, validated=True)
            else:
                tensordict_out.set(key, value)
        return tensordict_out

    def _call_module(self, tensors: tuple[Any, ...], **kwargs: Any) -> Any:
        if self.method_kwargs:
            kwargs.update(self.method_kwargs)
        d = self.__dict__
        module = d["_modules"]["module"] if "module" not in d else d["module"]
        if self.method is None:
            return module(*tensors, **kwargs)
        return getattr(module, self.method)(*tensors, **kwargs)

    @_module_forward
    def forward(self, tensordict: Any, *args: Any, tensordict_out: Any = None, **kwargs: Any) -> Any:
        """Read ``in_keys`` from ``tensordict``, call the module, write its outputs at ``out_keys``.

        Args:
            tensordict: the input TensorDict (or TensorClass).
            *args: not accepted (ValueError).
            tensordict_out: write the outputs there instead.
            **kwargs: passed to the module.

        Returns:
            The TensorDict the outputs were written to.
        """
        try:
            if args:
                raise ValueError("Got a non-empty list of extra agruments, when none was expected.")
            default = NO_DEFAULT if self.strict else None
            read = self._read
            if self._kwargs is not None:
                kwargs.update(
                    {
                        name: read(tensordict, key, default)
                        for name, key in zip(self._kwargs, self._in_keys, strict=True)
                    }
                )
                tensors: tuple[Any, ...] = ()
            elif type(tensordict) is TensorDict and not self._get_kwargs:  # the common case, without calls
                entries = tensordict._tensordict
                values = []
                for key in self._in_keys:
                    if type(key) is str and (value := entries.get(key, _ABSENT)) is not _ABSENT:
                        # (a tensor skips the set: compiled, dynamo then guards no set of types)
                        cls = value.__class__
                        values.append(value._value() if cls is not _Tensor and cls in NON_TENSOR_TYPES else value)
                    else:
                        values.append(read(tensordict, key, default))
                tensors = tuple(values)
            else:
                tensors = tuple([read(tensordict, key, default) for key in self._in_keys])
            try:
                out = self._call_module(tensors, **kwargs)
            except Exception as err:
                if any(t is None for t in tensors) and "None" in str(err):
                    missing = {key for key, t in zip(self.in_keys, tensors, strict=True) if t is None}
                    raise KeyError(
                        "Some tensors that are necessary for the module call may not have not been "
                        f"found in the input tensordict: the following inputs are None: {missing}."
                    ) from err
                raise
            if out.__class__ is not tuple:  # (not type(out): dynamo guards a tensor's type as an alias, in Python)
                if out.__class__ is _Tensor:
                    out = (out,)
                elif out is None:
                    out = ()
                else:
                    out = self._outputs_of(out)
            keys = self._out_keys
            if (
                tensordict_out is None
                and self.inplace is True
                and type(tensordict) is TensorDict
                and len(out) == len(keys)
            ):  # the common case: plain tensors written under str keys
                for key, value in zip(keys, out):  # noqa: B905  (lengths checked)
                    if type(key) is not str or value.__class__ is not _Tensor or key == "_":
                        break
                else:
                    for key, value in zip(keys, out):  # noqa: B905
                        tensordict._set_tensor_str(key, value)  # type: ignore[arg-type]  # (str, plain tensor: checked)
                    return tensordict
            return self._write_to_tensordict(tensordict, out, tensordict_out)
        except Exception as err:
            module = self.module
            if not isinstance(module, nn.Module):
                with contextlib.suppress(OSError, TypeError):
                    module = inspect.getsource(module)  # type: ignore[assignment]
            err.add_note(
                f"TensorDictModule failed with operation\n{indent(str(module), '    ')}\n"
                f"    in_keys={self.in_keys}\n    out_keys={self.out_keys}."
            )
            raise

    def _outputs_of(self, out: Any) -> tuple[Any, ...]:
        """The outputs as a tuple: a dict or TensorDict holding every out key gives its values in order."""
        if isinstance(out, (dict, TensorDictBase)):
            source = self.out_keys_source
            if all(key in out for key in source):
                if isinstance(out, dict):
                    out = dict(zip(unravel_key_list(list(out)), out.values(), strict=True))
                return tuple(out.get(key) for key in source)
        return (out,)

    @property
    def device(self) -> torch.device:
        """The device of the first parameter (deprecated in tensordict 0.15; ``cpu`` without parameters)."""
        warnings.warn(
            "TensorDictModule.device is deprecated and will be removed in TensorDict 0.17. Modules "
            "may contain parameters and buffers on multiple devices; inspect the relevant module state "
            "explicitly instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        for p in self.parameters():
            return p.device
        return torch.device("cpu")

    def __getattr__(self, name: str) -> Any:
        return _fallback_getattr(self, name, "module")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if not isinstance(self.module, nn.Module):
            state["module"] = _dumps(state["module"])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state.get("module"), _Pickled):
            state["module"] = state["module"].load()
        self.__dict__ = state


class _Pickled:
    """A callable pickled by cloudpickle (lambdas, local functions) when it is installed."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def load(self) -> Any:
        import cloudpickle  # type: ignore[import-untyped]

        return cloudpickle.loads(self.payload)


def _dumps(func: Any) -> Any:
    try:
        import cloudpickle
    except ImportError:  # plain pickle: works for module-level functions
        return func
    return _Pickled(cloudpickle.dumps(func))


class TensorDictModuleWrapper(TensorDictModuleBase):
    """A module that forwards calls and attribute reads to the TensorDict module it wraps.

    Args:
        td_module: the wrapped module.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import TensorDictModule, TensorDictModuleWrapper
        >>> inner = TensorDictModule(lambda x: x * 2, in_keys=["x"], out_keys=["y"])
        >>> wrapper = TensorDictModuleWrapper(inner)
        >>> wrapper.in_keys, wrapper(TensorDict(x=torch.ones(1)))["y"]
        (['x'], tensor([2.]))
    """

    def __init__(self, td_module: TensorDictModuleBase) -> None:
        super().__init__()
        self.td_module = td_module

    @property
    def out_keys(self) -> list[NestedKey]:
        """The wrapped module's output keys (or those selected on the wrapper)."""
        return self.__dict__.get("_out_keys_apparent", self.td_module.out_keys)  # type: ignore[no-any-return]

    @out_keys.setter
    def out_keys(self, value: list[NestedKey]) -> None:
        self.td_module.out_keys = value
        self._out_keys_apparent = self.td_module.out_keys

    @property
    def out_keys_source(self) -> list[NestedKey]:
        """The wrapped module's full output keys."""
        return self.td_module.out_keys_source

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            entries = d.get(store)
            if entries and name in entries:
                return entries[name]
        if name not in d and not name.startswith("__") and "td_module" in d.get("_modules", ()):
            return getattr(d["_modules"]["td_module"], name)
        raise AttributeError(f"attribute {name} not recognised in {type(self).__name__}")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped module."""
        return self.td_module(*args, **kwargs)


class WrapModule(TensorDictModuleBase):
    """A function of a TensorDict as a module (what a sequence makes of a callable without keys).

    Args:
        func: takes a TensorDict, returns a TensorDict.
        inplace: write the result into the input (``update``) when it is another TensorDict.
        in_keys: declared inputs (default none).
        out_keys: declared outputs (default none).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import WrapModule
        >>> module = WrapModule(lambda td: td.set("y", td["x"] + 1), in_keys=["x"], out_keys=["y"])
        >>> module(TensorDict(x=torch.zeros(1)))["y"]
        tensor([1.])
    """

    in_keys: list[NestedKey] = []  # noqa: RUF012  (made a property by TensorDictModuleBase.__new__)
    out_keys: list[NestedKey] = []  # noqa: RUF012

    def __init__(
        self,
        func: Callable[[Any], Any],
        *,
        inplace: bool = False,
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        self.func = func
        self.inplace = inplace
        if in_keys is not None:
            self.in_keys = in_keys
        if out_keys is not None:
            self.out_keys = out_keys

    def forward(self, data: Any) -> Any:
        """Call the function; with ``inplace``, write its result into ``data``."""
        result = self.func(data)
        if self.inplace and result is not data:
            return data.update(result)
        return result


class as_tensordict_module:
    """Decorator making a function (or method) on tensors a TensorDict module.

    Args:
        in_keys: the keys read, in argument order.
        out_keys: the keys written.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import as_tensordict_module
        >>> @as_tensordict_module(in_keys=["a", "b"], out_keys=["c"])
        ... def add(a, b):
        ...     return a + b
        >>> add(TensorDict(a=torch.ones(1), b=torch.ones(1)))["c"]
        tensor([2.])
    """

    def __init__(self, *, in_keys: list[NestedKey] | NestedKey, out_keys: list[NestedKey] | NestedKey) -> None:
        self.in_keys = [in_keys] if isinstance(in_keys, (str, tuple)) else in_keys
        self.out_keys = [out_keys] if isinstance(out_keys, (str, tuple)) else out_keys

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` run through one ``TensorDictModule``, made on first call (a method: shared by its instances)."""
        holder: list[TensorDictModule] = []
        is_method = inspect.ismethod(func) or (
            inspect.isfunction(func) and "self" in inspect.signature(func).parameters
        )
        if is_method:

            def call(*args: Any, _as_tensordict_module_self: Any, **kwargs: Any) -> Any:
                return func(_as_tensordict_module_self, *args, **kwargs)

            @functools.wraps(func)
            def method(_self: Any, *args: Any, **kwargs: Any) -> Any:
                if not holder:  # one module shared by every instance: the instance comes with each call
                    holder.append(TensorDictModule(call, in_keys=self.in_keys, out_keys=self.out_keys))
                return holder[0](*args, _as_tensordict_module_self=_self, **kwargs)

            return method

        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not holder:
                holder.append(TensorDictModule(func, in_keys=self.in_keys, out_keys=self.out_keys))
            return holder[0](*args, **kwargs)

        return wrapped
