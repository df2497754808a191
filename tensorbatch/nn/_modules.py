"""Parameters as TensorDicts: ``from_module``, ``from_modules`` and ``to_module``.

Attached to :class:`~tensorbatch.TensorDictBase` from here (``base.py`` imports no feature). A module's
tree of parameters and buffers maps to nested TensorDicts, one per submodule, keyed by the names
``nn.Module`` gives them; the leaves are the module's own tensors (no copy).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils import _pytree

from .. import _compat
from .._nontensor import NonTensorData
from .._ops.traverse import is_node, is_non_tensor, is_td, named_leaves, value_of
from .._td import TensorDict
from ..base import TensorDictBase

_NO_DIMS = torch.Size(())
_Parameter = nn.Parameter
_Tensor = torch.Tensor
_RESTORE = "restore"  # the preserve mode of a with block's exit: each old value back in its slot as it was
_EXTRA_STATE = "_extra_state"  # the state-dict name of what a module's get_extra_state() returns


# ----------------------------------------------------------------------------------- extra state
def _is_extra_state(module: nn.Module, key: str) -> bool:
    """``key`` names the module's extra state (its class defines ``get_extra_state``)."""
    return (
        key == _EXTRA_STATE
        and type(module).get_extra_state is not nn.Module.get_extra_state
        and key not in module._parameters
        and key not in module._buffers
    )


def _extra_entry(state: Any) -> Any:
    """What ``get_extra_state()`` returned as an entry that ``to_dict()`` gives back unchanged.

    A dict becomes a nested TensorDict, tensors and TensorDicts stay, any other object is a ``NonTensorData``
    (a plain ``set`` would turn an int into a tensor).
    """
    if isinstance(state, dict):
        return TensorDict({key: _extra_entry(value) for key, value in state.items()})
    if isinstance(state, torch.Tensor) or is_td(state):
        return state
    return NonTensorData(state)


def _extra_value(entry: Any) -> Any:
    """An extra-state entry back as ``set_extra_state`` takes it."""
    if is_non_tensor(entry):
        return value_of(entry)
    return entry.to_dict() if is_td(entry) else entry


def _swap_extra_state(module: nn.Module, entry: Any) -> Any:
    # the old state's tensors are cloned: set_extra_state may copy into the ones it holds
    old = _pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, module.get_extra_state())
    module.set_extra_state(_extra_value(entry))
    return _extra_entry(old)


# ----------------------------------------------------------------------------------- from_module
def _tree(module: nn.Module, filter_empty: bool) -> TensorDict | None:
    entries: dict[str, Any] = {}
    for name, param in module._parameters.items():
        if param is not None:
            entries[name] = param
    for name, buffer in module._buffers.items():
        if buffer is not None:
            entries[name] = buffer
    for name, child in module._modules.items():
        if child is None:
            continue
        # a TensorDictParams is already a TensorDict of parameters: it is the entry itself
        sub = child if is_td(child) else _tree(child, filter_empty)
        if sub is not None:
            entries[name] = sub
    if filter_empty and not entries:
        return None
    return TensorDict._new_unsafe(entries, _NO_DIMS)


def _state_dict_tree(module: nn.Module, filter_empty: bool) -> TensorDict:
    """The module's ``state_dict()`` (its hooks run) unflattened along the submodule names."""
    out = TensorDict()
    if not filter_empty:
        for name, _ in module.named_modules(remove_duplicate=False):
            node: Any = out
            for part in name.split(".") if name else ():
                if part not in node:
                    node.set(part, TensorDict())
                node = node.get(part)
    for name, value in module.state_dict(keep_vars=False).items():
        path = tuple(name.split("."))
        out.set(path, _extra_entry(value) if path[-1] == _EXTRA_STATE else value)
    return out


def from_module(
    cls: Any,
    module: nn.Module,
    as_module: bool = False,
    lock: bool = False,
    use_state_dict: bool = False,
    filter_empty: bool = True,
) -> Any:
    """A TensorDict of a module's parameters and buffers (the module's own tensors), nested by submodule.

    Args:
        cls: the class it is called on (TensorDict; wrappers wrap the result).
        module: the module to read.
        as_module: return a :class:`~tensorbatch.nn.TensorDictParams` (an ``nn.Module`` registering them).
        lock: lock the result.
        use_state_dict: read ``module.state_dict()`` instead (its hooks run; the leaves are detached copies;
            what ``get_extra_state()`` returns is the entry ``"_extra_state"``, its objects as ``NonTensorData``).
        filter_empty: submodules without parameters or buffers (``nn.ReLU``) get no entry; with False, an
            empty TensorDict.

    A :class:`~tensorbatch.nn.TensorDictParams` (the module, or a submodule) is its own entry: the same
    object (without ``use_state_dict``).

    Examples:
        >>> from torch import nn
        >>> from tensorbatch import TensorDict
        >>> module = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        >>> params = TensorDict.from_module(module)
        >>> params["0", "weight"] is module[0].weight, list(params.keys())
        (True, ['0'])
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"from_module expects an nn.Module, got {type(module).__name__}")
    if use_state_dict:
        td: Any = _state_dict_tree(module, filter_empty)
    elif is_td(module):  # a TensorDictParams is its own tree (its parameters' names are dotted keys)
        td = module
    else:
        td = _tree(module, filter_empty)
        if td is None:
            td = TensorDict()
    if as_module and td is not module:
        from .params import TensorDictParams

        td = TensorDictParams(td, no_convert=True)
    if lock:
        td.lock_()
    return td


def _stack_leaf(values: list[Any], expand_identical: bool) -> Any:
    first = values[0]
    if expand_identical and all(v is first for v in values):
        return first.expand(len(values), *first.shape)  # gradients reach the one shared tensor
    stacked = torch.stack([v.data if isinstance(v, torch.Tensor) else v for v in values])
    if isinstance(first, _Parameter):  # new parameters (the originals stay untouched by backward)
        return _Parameter(stacked, requires_grad=first.requires_grad)
    return stacked


def from_modules(
    cls: Any,
    *modules: nn.Module,
    as_module: bool = False,
    lock: bool = True,
    use_state_dict: bool = False,
    lazy_stack: bool = False,
    expand_identical: bool = False,
) -> Any:
    """The parameters of several modules of one structure, stacked along a new first dim (for ``torch.vmap``).

    Args:
        cls: the class it is called on (TensorDict; wrappers wrap the result).
        *modules: the modules.
        as_module: return a :class:`~tensorbatch.nn.TensorDictParams` (not with ``lazy_stack``).
        lock: lock the result (default True).
        use_state_dict: read each module's ``state_dict()``.
        lazy_stack: keep each module's own parameters in a lazy stack (backward then reaches them); by
            default the leaves are stacked into new parameters.
        expand_identical: a tensor shared by every module becomes an expanded view of it (no copy).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tensorbatch import TensorDict
        >>> modules = [nn.Linear(3, 4) for _ in range(2)]
        >>> params = TensorDict.from_modules(*modules)
        >>> params.batch_size, type(params["weight"]).__name__
        (torch.Size([2]), 'Parameter')
        >>> empty = nn.Linear(3, 4, device="meta")
        >>> def call(params, x):
        ...     with params.to_module(empty):
        ...         return empty(x)
        >>> torch.vmap(call, (0, None))(params, torch.randn(3)).shape
        torch.Size([2, 4])
    """
    if not modules:
        raise ValueError("from_modules needs at least one module")
    if lazy_stack and as_module:
        raise RuntimeError(
            "from_modules: lazy_stack and as_module are exclusive (a TensorDictParams cannot hold a lazy stack)"
        )
    tds = [from_module(cls, m, use_state_dict=use_state_dict) for m in modules]
    if lazy_stack:
        from .._lazy import lazy_stack as _lazy_stack

        out: Any = _lazy_stack(tds, 0)
    else:
        out = torch.stack(tds, 0)  # checks the keys and shapes agree, naming the key that differs
        first = tds[0]
        for path, _ in named_leaves(first):
            out.set(path, _stack_leaf([td.get(path) for td in tds], expand_identical))
        if as_module:
            from .params import TensorDictParams

            out = TensorDictParams(out, no_convert=True)
    if lock:
        out.lock_()
    return out


# ----------------------------------------------------------------------------------- to_module
def _check(td: Any, module: nn.Module, path: tuple[str, ...]) -> None:
    """Every key names a submodule (nested TensorDict) or a parameter, buffer or attribute (leaf)."""
    if is_td(module):  # a TensorDictParams: the keys name its entries
        params: Any = module
        for sub, _ in named_leaves(td):
            if params._keys_of.get(".".join(sub)) != sub:
                raise KeyError(f"to_module: key {(*path, *sub)!r} names no entry of {type(module).__name__}")
        return
    for key, value in td._items_str():
        if _is_extra_state(module, key):
            continue
        if is_td(value) and not isinstance(value, torch.Tensor):
            child = module._modules.get(key)
            if child is None:
                raise KeyError(f"to_module: key {(*path, key)!r} names no submodule of {type(module).__name__}")
            _check(value, child, (*path, key))
        elif key not in module._parameters and key not in module._buffers and key not in module.__dict__:
            raise KeyError(
                f"to_module: key {(*path, key)!r} names no parameter, buffer or attribute of {type(module).__name__}"
            )


def _flat_state(td: Any, prefix: str, out: dict[str, Any]) -> None:
    for key, value in td._items_str():
        if key == _EXTRA_STATE:
            out[prefix + key] = _extra_value(value)
        elif is_node(value):
            _flat_state(value, f"{prefix}{key}.", out)
        else:
            out[prefix + key] = value


def _through_load_hooks(td: Any, module: nn.Module) -> Any:
    """``td`` as the ``load_state_dict`` pre-hooks leave it (``td`` itself when the modules have none).

    The hooks of the module and of each submodule (parents first, a shared submodule once per name) get
    the values as one flat state dict with dotted names and the submodule's prefix, as in
    ``load_state_dict``; what they leave is nested again.
    """
    hooked = [
        (name, sub) for name, sub in module.named_modules(remove_duplicate=False) if sub._load_state_dict_pre_hooks
    ]
    if not hooked:
        return td
    state: dict[str, Any] = {}
    _flat_state(td, "", state)
    missing: list[str] = []
    unexpected: list[str] = []
    errors: list[str] = []
    for name, sub in hooked:
        for hook in sub._load_state_dict_pre_hooks.values():
            hook(state, f"{name}." if name else "", {}, True, missing, unexpected, errors)
    if errors:
        raise RuntimeError("to_module(use_state_dict=True): a load_state_dict pre-hook reported: " + "; ".join(errors))
    out = TensorDict()
    for key, value in state.items():
        path = tuple(key.split("."))
        out.set(path, _extra_entry(value) if path[-1] == _EXTRA_STATE else value)
    return out


def _tracks_gradients(value: Any) -> bool:
    # a batched (vmap) or gradient-tracking tensor goes in as it is, so gradients reach the TensorDict's leaf
    return bool(value.requires_grad) or _compat.is_batched(value)


def _is_parameter(value: Any) -> bool:
    """``isinstance(value, nn.Parameter)`` without its metaclass's Python check for the two common types."""
    kind = type(value)
    if kind is _Parameter:
        return True
    if kind is _Tensor:  # (what the metaclass answers for a plain tensor: marked as a parameter or not)
        return bool(getattr(value, "_is_param", False))
    return isinstance(value, _Parameter)


def _for_slot(value: Any, old: Any, parameter: bool) -> Any:
    """``value`` as ``preserve_module_state`` puts it into a parameter's slot holding ``old``, or a buffer's.

    A parameter's slot keeps a parameter with the old ``requires_grad`` (a batched or gradient-tracking
    tensor goes in as it is, so gradients reach it); a buffer's slot takes a plain tensor on a parameter's data.
    """
    if not isinstance(value, torch.Tensor):
        return value
    if not parameter:
        return value.detach().requires_grad_(value.requires_grad) if _is_parameter(value) else value
    if (
        old is not None
        and (not _is_parameter(value) or value.requires_grad != old.requires_grad)
        and not _tracks_gradients(value)
    ):
        return _Parameter(value, requires_grad=old.requires_grad)
    return value


def _put(
    module: nn.Module, name: str, value: Any, inplace: bool, preserve: bool | str, non_blocking: bool, keep: bool = True
) -> Any:
    """Write one leaf into ``module`` and return what it replaces (``preserve``: True, False or ``_RESTORE``).

    ``keep=False`` (no swap wanted): an in-place write makes no copy of the old values.
    """
    params = module._parameters
    if inplace:
        old: Any = params[name] if name in params else module._buffers.get(name, module.__dict__.get(name))
        saved = old.clone() if keep else old  # (as tensordict: a copy that keeps the graph to the old values)
        with torch.no_grad():
            old.copy_(value, non_blocking=non_blocking)
        return saved
    if name in params:
        old = params[name]
        if preserve is _RESTORE:  # (a frozen parameter that a gradient-tracking tensor replaced comes back)
            params[name] = value
            return old
        if not preserve and isinstance(value, torch.Tensor) and not _is_parameter(value):
            del params[name]  # the historical replacement: a plain tensor drops the registration
            module.__dict__[name] = value
            return old
        params[name] = _for_slot(value, old, True) if preserve else value
        return old
    buffers = module._buffers
    if name in buffers:
        old = buffers[name]
        buffers[name] = _for_slot(value, old, False) if preserve is True else value
        return old
    old = module.__dict__[name]
    if _is_parameter(value):  # a parameter put back where a plain tensor replaced it
        del module.__dict__[name]
        params[name] = value
    else:
        module.__dict__[name] = value
    return old


def _write(
    td: Any,
    module: nn.Module,
    inplace: bool,
    preserve: bool | str,
    non_blocking: bool,
    memo: dict[int, Any],
    keep: bool = True,
) -> Any:
    if is_td(module):
        return _write_params(td, module, inplace, preserve, non_blocking, keep)
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if _is_extra_state(module, key):
            out[key] = _swap_extra_state(module, value)
        elif is_td(value) and not isinstance(value, torch.Tensor):
            child: Any = module._modules[key]
            swapped = memo.get(id(child))
            if swapped is None:  # a submodule used twice is written once (its first entry)
                swapped = memo[id(child)] = _write(value, child, inplace, preserve, non_blocking, memo, keep)
            out[key] = swapped
        else:
            out[key] = _put(module, key, value, inplace, preserve, non_blocking, keep)
    return out


def _write_params(
    td: Any, params: Any, inplace: bool, preserve: bool | str, non_blocking: bool, keep: bool = True
) -> TensorDict:
    """Write the leaves into the entries of a TensorDictParams (a module's, or the module); the swap is a TensorDict.

    Each entry keeps its registration (a parameter's stays in ``parameters()``, a buffer's in ``buffers()``);
    with ``preserve`` True the values are converted as in a module's slots (see ``_put``).
    """
    content, registered = params._param_td, params._parameters
    out = TensorDict()
    for path, value in named_leaves(td):
        node = content._walk_to(path)
        old = node._get_str(path[-1])
        if inplace:
            out.set(path, old.clone() if keep else old)
            with torch.no_grad():
                old.copy_(value, non_blocking=non_blocking)
            continue
        name = ".".join(path)
        slots = registered if name in registered else params._buffers
        if preserve is True:
            value = _for_slot(value, old, slots is registered)
        node._set_str(path[-1], value, inplace=False, validated=True)
        slots[name] = value
        out.set(path, old)
    return out


def _as_td(swap: Any) -> Any:
    if type(swap) is not dict:  # (a TensorDictParams's swap)
        return swap
    return TensorDict._new_unsafe({k: _as_td(v) for k, v in swap.items()}, _NO_DIMS)


def to_module(
    self: TensorDictBase,
    module: nn.Module,
    *,
    inplace: bool | None = None,
    return_swap: bool = True,
    swap_dest: Any = None,
    use_state_dict: bool = False,
    non_blocking: bool = False,
    preserve_module_state: bool = True,
    memo: Any = None,
) -> Any:
    """Write the leaves into a module's parameters and buffers (nested keys are submodules).

    Args:
        self: the TensorDict of values.
        module: the module to write into (its structure as :meth:`from_module` gives it).
        inplace: copy into the module's existing tensors (they keep their identity) instead of replacing them.
        return_swap: return the values the module held before, as a TensorDict; used in a ``with`` block,
            it writes them back on exit (also when the block raises), each in its slot as it was (a frozen
            parameter comes back frozen, the same object; no load_state_dict hooks run).
        swap_dest: with ``return_swap``, a TensorDict to write the old values into and return.
        use_state_dict: pass the values through the ``load_state_dict`` pre-hooks of the module and its
            submodules first (as ``load_state_dict`` does, with dotted names), then write them as without it.
        non_blocking: asynchronous copies between devices (with ``inplace``).
        preserve_module_state: parameters stay registered parameters with their ``requires_grad``: a
            plain tensor is wrapped in a new ``nn.Parameter``, unless it tracks gradients or is batched by
            ``vmap`` (then it is registered as it is, so gradients reach it); buffers stay buffers: an
            ``nn.Parameter`` goes in as a plain tensor on its data. With False, a plain tensor replaces
            the parameter as a plain attribute, and a parameter goes into a buffer's slot as it is.
        memo: not accepted (RuntimeError), as in tensordict.

    An entry ``"_extra_state"`` (as ``from_module(use_state_dict=True)`` gives it) goes to the submodule's
    ``set_extra_state`` (as a dict when it is a TensorDict); the swap holds the old ``get_extra_state()``.
    A :class:`~tensorbatch.nn.TensorDictParams` (the module, or a submodule) takes the values into its
    entries, which stay registered as they were (its other entries are kept).

    Raises:
        KeyError: a key names no submodule, parameter, buffer, attribute or TensorDictParams entry (the module
            is unchanged).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tensorbatch import TensorDict
        >>> module = nn.Linear(3, 4)
        >>> zeros = TensorDict.from_module(module).detach().clone().zero_()
        >>> with zeros.to_module(module):
        ...     bool((module(torch.ones(2, 3)) == 0).all())
        True
        >>> bool((module.weight != 0).any())  # restored
        True
    """
    if memo is not None:
        raise RuntimeError("memo cannot be passed to the public to_module anymore.")
    if preserve_module_state is None:
        raise TypeError("to_module(..., preserve_module_state=None) is no longer supported: pass True or False")
    if use_state_dict:
        if inplace is not None:
            raise RuntimeError("inplace argument cannot be passed when use_state_dict=True.")
        values: Any = _through_load_hooks(self, module)
    else:
        values = self
    _check(values, module, ())  # every key first: a bad key leaves the module unchanged
    preserve = bool(preserve_module_state)
    swap = _write(values, module, bool(inplace), preserve, non_blocking, {}, return_swap)
    if not return_swap:
        return None
    swapped: Any = _as_td(swap)
    if swap_dest is not None:
        swap_dest.update(swapped)
        swapped = swap_dest

    def restore(old: Any) -> None:
        # the module's own tensors go back as they were: no state-dict hooks, no new parameters
        _check(old, module, ())
        _write(old, module, bool(inplace), _RESTORE if preserve else False, non_blocking, {}, False)

    swapped._last_op = restore
    return swapped


def install() -> None:
    """Attach the three methods to TensorDictBase."""
    setattr(TensorDictBase, "from_module", classmethod(from_module))  # noqa: B010  # base imports no feature
    setattr(TensorDictBase, "from_modules", classmethod(from_modules))  # noqa: B010
    setattr(TensorDictBase, "to_module", to_module)  # noqa: B010
