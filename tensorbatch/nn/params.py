"""TensorDictParams: a TensorDict whose leaves are the registered parameters and buffers of an ``nn.Module``.

It IS-A TensorDictBase delegating to the TensorDict it wraps (``_param_td``), with the base API
forwarded from the one list in ``_delegation.py``. Results of forwarded methods are plain TensorDicts,
as in tensordict; ``clone``/``to``/``cpu``/``cuda`` (and deep copies) give a new TensorDictParams whose
leaves are parameters and buffers like the ones they replace. Writes that add or replace entries
convert the new tensors (float16/32/64 to ``nn.Parameter``, others to buffers; ``no_convert=True``: all
to buffers) and register them again; in-place value writes go to the leaves' ``.data``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils import _pytree

from .. import _compat, _delegation
from .._ops.traverse import NO_DEFAULT, is_td, named_leaves, named_nodes, vmap_placeholders
from .._td import TensorDict
from ..base import TensorDictBase

_Parameter = nn.Parameter
_FLOATS = (torch.float16, torch.float32, torch.float64)


def _convert(value: Any, no_convert: Any) -> Any:
    """A new leaf as a parameter or a buffer (a plain tensor); batched tensors stay as they are."""
    if not isinstance(value, torch.Tensor) or isinstance(value, _Parameter) or _compat.is_batched(value):
        return value
    if not no_convert and value.dtype in _FLOATS:
        return _Parameter(value)
    return value


def _like(new: Any, old: Any) -> Any:
    """``new`` (a converted copy of ``old``) as a parameter when ``old`` was one and it can still be one."""
    if new is old or not isinstance(old, _Parameter) or not (new.is_floating_point() or new.is_complex()):
        return new
    return _Parameter(new.detach(), requires_grad=old.requires_grad)


def _rewrapped(new: TensorDictBase, old: TensorDictBase) -> Any:
    """``new`` (a converted copy of ``old``'s tree) with each leaf a parameter where ``old``'s was.

    A tensor under several keys of ``old`` (tied weights) is one tensor in the result too: the copy of its
    first occurrence.
    """
    out = new if type(new) is TensorDict else new.to_tensordict()
    copies: dict[int, Any] = {}  # id of a leaf of old -> its copy in out
    for path, node in named_nodes(out):
        src = old.get(path) if path else old
        for key, value in list(node._items_str()):
            if isinstance(value, torch.Tensor):
                before = src._get_str(key, None)
                if before is None:
                    continue
                copy_ = copies.get(id(before))
                if copy_ is None:
                    copy_ = copies[id(before)] = _like(value, before)
                node._tensordict[key] = copy_
    return out


class TensorDictParams(TensorDictBase, nn.Module):  # type: ignore[misc]  # apply, float...: TensorDictBase's
    """A TensorDict whose leaves are registered as the parameters and buffers of an ``nn.Module``.

    Set as an attribute of a module, its entries are seen by ``parameters()``, ``state_dict()``,
    ``load_state_dict()``, ``.to()`` and so by an optimizer; parameter names are the nested keys joined
    with ``"."``. It wraps the TensorDict given (no copy) and turns its tensors into parameters in place.

    Args:
        parameters: a TensorDict (or a dict) of tensors; or pass the entries as keyword arguments.
        no_convert: register tensors that are not parameters as buffers (default: float16/32/64 tensors
            become ``nn.Parameter``, the others buffers).
        lock: lock the wrapped TensorDict (writes through the TensorDictParams still work).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import TensorDictParams
        >>> params = TensorDictParams(TensorDict.from_module(nn.Linear(3, 4)))
        >>> holder = nn.Module()
        >>> holder.params = params
        >>> [name for name, _ in holder.named_parameters()]
        ['params.weight', 'params.bias']
        >>> params["scale"] = torch.ones(())  # converted and registered
        >>> type(params["scale"]).__name__, len(list(holder.parameters()))
        ('Parameter', 3)
    """

    _wrapped_attr: ClassVar[str] = "_param_td"
    _param_td: TensorDictBase

    def __init__(self, parameters: Any = None, *, no_convert: Any = False, lock: bool = False, **kwargs: Any) -> None:
        nn.Module.__init__(self)
        if parameters is None:
            parameters = kwargs
        elif kwargs:
            raise TypeError(f"parameters cannot be passed along with extra keyword arguments, got {list(kwargs)}")
        if isinstance(parameters, TensorDictParams):
            parameters, no_convert = parameters._param_td, "skip"
        elif isinstance(parameters, dict):
            parameters = TensorDict(parameters)
        elif not is_td(parameters):
            raise TypeError(f"TensorDictParams expects a TensorDict or a dict, got {type(parameters).__name__}")
        parameters = _delegation.unwrap(parameters)
        if parameters._stacked_members() is not None:
            raise RuntimeError("Using a LazyStackedTensorDict within a TensorDictParams isn't permitted.")
        self._param_td = parameters
        self.no_convert = no_convert
        self._locked = False
        self._keys_of: dict[str, tuple[str, ...]] = {}
        if lock:
            parameters.lock_()
        self._sync(convert=no_convert != "skip")

    @classmethod
    def _from_td(cls, td: TensorDictBase, no_convert: Any = "skip") -> TensorDictParams:
        out = cls(td, no_convert="skip")
        out.no_convert = no_convert
        return out

    # ------------------------------------------------------------------ registration
    def _sync(self, convert: bool = True) -> None:
        """Convert new tensors to parameters/buffers, then register every leaf again, in the keys' order."""
        if convert:
            buffers = {id(b) for b in self._buffers.values()}
            for _, node in named_nodes(self._param_td):
                for key, value in list(node._items_str()):
                    if isinstance(value, torch.Tensor) and id(value) not in buffers:
                        new = _convert(value, self.no_convert)
                        if new is not value:
                            node._set_str(key, new, inplace=False, validated=True)
        self._parameters.clear()
        self._buffers.clear()
        self._keys_of.clear()
        for path, value in named_leaves(self._param_td):  # (parameters() gives an optimizer this order)
            if not isinstance(value, torch.Tensor):
                continue
            name = ".".join(path)
            self._keys_of[name] = path
            if isinstance(value, _Parameter):
                self._parameters[name] = value
            else:
                self._buffers[name] = value

    def _write(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A forwarded write that may add or replace entries: unlock the content if needed, then sync."""
        if self._locked:
            raise RuntimeError(
                "Cannot modify locked TensorDict. For in-place modification, consider using "
                "the `set_()` method and make sure the key is present."
            )
        for value in (*args, *kwargs.values()):
            if value is self:
                raise ValueError("a TensorDictParams cannot hold itself")
        td = self._param_td
        relock = td.is_locked
        if relock:
            td.unlock_()
        try:
            out = getattr(td, name)(
                *(_delegation.unwrap(a) for a in args), **{k: _delegation.unwrap(v) for k, v in kwargs.items()}
            )
        finally:
            if relock:
                td.lock_()
        self._sync()
        return self if out is td else out

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> Any:
        """``nn.Module._apply`` (``module.to()``, ``.float()``...), then the TensorDict takes the new tensors."""
        out = nn.Module._apply(self, fn, recurse)  # type: ignore[no-untyped-call]
        td = self._param_td
        for name, value in (*self._parameters.items(), *self._buffers.items()):
            path = self._keys_of[name]
            if td.get(path) is not value:
                td._walk_to(path)._set_str(path[-1], value, inplace=False, validated=True)
        for _, node in named_nodes(td):  # a node with a device follows its leaves (to("cuda"), to_empty...)
            if node.device is not None:
                node.auto_device_()
        return out

    # ------------------------------------------------------------------ primitives (delegated)
    @property
    def batch_size(self) -> torch.Size:
        """The leading dimensions shared by every leaf."""
        return self._param_td.batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._param_td.batch_size = value

    def _change_batch_size(self, new_size: torch.Size) -> None:
        self._param_td._change_batch_size(new_size)

    @property
    def device(self) -> torch.device | None:
        """The device of every leaf, or None."""
        return self._param_td.device

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        return self._param_td._get_str(key, default)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool) -> None:
        self._write("_set_str", key, value, inplace=inplace, validated=validated)

    def _del_str(self, key: str) -> None:
        self._write("_del_str", key)

    def _keys_str(self) -> Any:
        return self._param_td._keys_str()

    def _items_str(self) -> Any:
        return self._param_td._items_str()

    def _values_str(self) -> Any:
        return self._param_td._values_str()

    @property
    def is_locked(self) -> bool:
        """True when no key may be added or removed through this TensorDictParams."""
        return self._locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        (self.lock_ if value else self.unlock_)()

    def _set_lock(self, value: bool) -> None:
        self._locked = value

    def _maybe_names(self) -> tuple[Any, ...] | None:
        return self._param_td._maybe_names()

    # locking and ``with`` blocks act on this object (its own lock flag), not on the wrapped TensorDict
    lock_ = TensorDictBase.lock_
    unlock_ = TensorDictBase.unlock_
    __enter__ = TensorDictBase.__enter__
    __exit__ = TensorDictBase.__exit__
    clear_refs_for_compile_ = TensorDictBase.clear_refs_for_compile_

    # ------------------------------------------------------------------ wrapping
    def _wrap_like(self, td: Any) -> Any:
        return td  # forwarded methods give plain TensorDicts, as in tensordict

    @classmethod
    def _wrap_new(cls, td: Any) -> Any:
        return td

    def __getitem__(self, index: Any) -> Any:
        return self._param_td[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self._write("__setitem__", index, value)

    def __repr__(self) -> str:
        return f"TensorDictParams(params={self._param_td!r})"

    __hash__ = nn.Module.__hash__  # type: ignore[assignment]  # a module: kept in sets by named_modules

    def __reduce__(self) -> Any:
        return (_rebuild, (self._param_td, self.no_convert, self.training))

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDictBase:
        """A plain in-memory TensorDict copy of the entries."""
        out: TensorDictBase = self._param_td.to_tensordict()
        return out

    def _converted(self, new: TensorDictBase) -> TensorDictParams:
        return TensorDictParams._from_td(_rewrapped(new, self._param_td), self.no_convert)

    def clone(self, recurse: bool = True, **kwargs: Any) -> Any:
        """A TensorDictParams of cloned parameters and buffers (a shallow copy with ``recurse=False``)."""
        return self._converted(self._param_td.clone(recurse, **kwargs))

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """A TensorDictParams of converted parameters and buffers (``self`` when nothing changes)."""
        new = self._param_td.to(*args, **kwargs)
        return self if new is self._param_td else self._converted(new)

    def cpu(self, **kwargs: Any) -> Any:
        """``to("cpu")``."""
        return self.to("cpu", **kwargs)

    def cuda(self, device: Any = None, **kwargs: Any) -> Any:
        """``to("cuda")``."""
        return self.to(
            torch.device("cuda")
            if device is None
            else torch.device("cuda", device)
            if isinstance(device, int)
            else device,
            **kwargs,
        )

    def __deepcopy__(self, memo: Any = None) -> TensorDictParams:
        td = copy.deepcopy(self._param_td, memo)
        return self._converted(td)

    # module state: nn.Module's (keys "0.weight", as a module's)
    state_dict = nn.Module.state_dict  # type: ignore[assignment]
    load_state_dict = nn.Module.load_state_dict  # type: ignore[assignment]

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        # parameters and buffers in the keys' order (nn.Module's lists every parameter first)
        params, buffers = self._parameters, self._buffers
        for name in self._keys_of:
            value = params[name] if name in params else buffers[name]
            if value is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = value if keep_vars else value.detach()

    def _load_from_state_dict(
        self,
        state_dict: Any,
        prefix: str,
        local_metadata: Any,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # nn.Module takes "0.weight" for submodule "0": the names here are flat, so unexpected keys are found here
        nn.Module._load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, [], error_msgs)
        if strict:
            known = self._keys_of
            unexpected_keys.extend(k for k in state_dict if k.startswith(prefix) and k[len(prefix) :] not in known)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _delegation.torch_function(func, args, kwargs)


def _rebuild(td: Any, no_convert: Any, training: bool) -> TensorDictParams:
    out = TensorDictParams._from_td(td, no_convert)
    out.train(training)
    return out


_delegation.install(TensorDictParams, "_param_td")


def _writer(name: str) -> Any:
    def method(self: TensorDictParams, *args: Any, **kwargs: Any) -> Any:
        return self._write(name, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``TensorDict.{name}``; new tensors become parameters or buffers, registered again."
    return method


def _on_data(name: str) -> Any:
    def method(self: TensorDictParams, *args: Any, **kwargs: Any) -> Any:
        getattr(self._param_td.data, name)(*(_delegation.unwrap(a) for a in args), **kwargs)
        return self

    method.__name__ = name
    method.__doc__ = f"``TensorDict.{name}`` on the leaves' ``.data`` (no autograd record)."
    return method


# writes that may add, remove or replace entries
for _name in (
    "set",
    "update",
    "setdefault",
    "set_non_tensor",
    "pop",
    "popitem",
    "del_",
    "__delitem__",
    "clear",
    "rename_key_",
):
    setattr(TensorDictParams, _name, _writer(_name))
# in-place writes of values
for _name in ("zero_", "fill_", "set_", "set_at_", "update_", "update_at_", "apply_", "copy_"):
    setattr(TensorDictParams, _name, _on_data(_name))
del _name

_delegation.WRAPPER_TYPES.add(TensorDictParams)


def _flatten(obj: TensorDictParams) -> tuple[list[Any], Any]:
    return [obj._param_td], obj.no_convert


def _flatten_with_keys(obj: TensorDictParams) -> tuple[list[tuple[Any, Any]], Any]:
    return [(_pytree.GetAttrKey("_param_td"), obj._param_td)], obj.no_convert


def _unflatten(values: Any, context: Any) -> Any:
    # the TensorDict itself, as tensordict gives inside vmap, when dynamo traces (it cannot trace nn.Module's
    # __init__, which it wraps once anything is compiled: torch.compile(vmap(f))(params) would fail) and for
    # vmap's tree of in_dims/out_dims (no module built to broadcast them)
    td = next(iter(values))
    if _compat.dynamo_compiling() or not is_td(td):
        return td
    if vmap_placeholders(td):
        return (td,) if _compat.broadcasting_one_tuple() else td
    return TensorDictParams._from_td(td, context)


_compat.register_pytree_node(TensorDictParams, _flatten, _unflatten, _flatten_with_keys, None, None)
