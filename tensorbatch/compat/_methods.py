"""Private TensorDict methods that TorchRL 0.14 calls, attached to tensorbatch's classes while the switch is on.

:func:`attach` adds them (and lets ``_set_str`` take tensordict's ``non_blocking`` keyword); :func:`detach`
restores the classes as they were. tensorbatch's own code never calls them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .._ops.traverse import NO_DEFAULT

_MISSING = object()
_saved: list[tuple[type, str, Any]] = []  # (class, name, previous value or _MISSING), in attach order


def _fast_apply(
    self: Any,
    fn: Callable[..., Any],
    *others: Any,
    batch_size: Any = None,
    device: Any = NO_DEFAULT,
    names: Any = NO_DEFAULT,
    inplace: bool = False,
    call_on_nested: bool = False,
    default: Any = NO_DEFAULT,
    named: bool = False,
    nested_keys: bool = False,
    filter_empty: bool | None = False,
    is_leaf: Callable[[type], bool] | None = None,
    propagate_lock: bool = False,
    out: Any = None,
    num_threads: int = 0,
    checked: bool = True,
    **constructor_kwargs: Any,
) -> Any:
    """The unchecked ``apply`` of tensordict: tensorbatch's ``apply``.

    The same keywords; ``num_threads`` and ``checked`` are accepted and have no effect.
    """
    if constructor_kwargs:
        raise TypeError(f"_fast_apply got unexpected keyword arguments {sorted(constructor_kwargs)}")
    return self.apply(
        fn,
        *others,
        batch_size=batch_size,
        device=device,
        names=names,
        inplace=inplace,
        call_on_nested=call_on_nested,
        default=default,
        named=named,
        nested_keys=nested_keys,
        filter_empty=filter_empty,
        is_leaf=is_leaf,
        propagate_lock=propagate_lock,
        out=out,
    )


def _has_names(self: Any) -> bool:
    """True when some batch dim has a name."""
    return any(name is not None for name in self.names)


def _stack_onto_(self: Any, list_item: list[Any], dim: int) -> Any:
    """Write ``torch.stack(list_item, dim)`` into this TensorDict's existing leaves."""
    stacked: Any = torch.stack(list_item, dim)
    keys = [k for k in self.keys(True, True) if k in stacked.keys(True, True)]
    return self.update_(stacked.select(*keys))


def _has_exclusive_keys(self: Any) -> bool:
    """True when the members of a lazy stack do not all hold the same keys."""
    keys = {frozenset(td.keys(True, True)) for td in self.tensordicts}
    return len(keys) > 1


def _accept_non_blocking(set_str: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(set_str)
    def _set_str(
        self: Any,
        key: str,
        value: Any,
        *,
        inplace: bool,
        validated: bool,
        non_blocking: bool = False,
        ignore_lock: bool = False,
    ) -> None:
        set_str(self, key, value, inplace=inplace, validated=validated)

    _set_str.__tensorbatch_compat__ = True  # type: ignore[attr-defined]
    return _set_str


def _subclasses(cls: type) -> Iterator[type]:
    seen: set[type] = set()
    todo = [cls]
    while todo:
        klass = todo.pop()
        if klass not in seen:
            seen.add(klass)
            yield klass
            todo.extend(klass.__subclasses__())


def _put(cls: type, name: str, value: Any) -> None:
    _saved.append((cls, name, cls.__dict__.get(name, _MISSING)))
    setattr(cls, name, value)


def attach() -> None:
    """Add the private methods to TensorDictBase (and LazyStackedTensorDict), once."""
    if _saved:
        return
    from .._lazy import LazyStackedTensorDict
    from ..base import TensorDictBase

    for name, method in (
        ("_fast_apply", _fast_apply),
        ("_apply_nest", _fast_apply),
        ("_has_names", _has_names),
        ("_stack_onto_", _stack_onto_),
    ):
        if name not in TensorDictBase.__dict__:
            _put(TensorDictBase, name, method)
    _put(LazyStackedTensorDict, "_has_exclusive_keys", property(_has_exclusive_keys))
    for klass in list(_subclasses(TensorDictBase)):
        own = klass.__dict__.get("_set_str")
        if own is not None and not getattr(own, "__tensorbatch_compat__", False):
            _put(klass, "_set_str", _accept_non_blocking(own))


def detach() -> None:
    """Undo :func:`attach`."""
    while _saved:
        cls, name, old = _saved.pop()
        if old is _MISSING:
            delattr(cls, name)
        else:
            setattr(cls, name, old)
