"""LazyStackedTensorDict members that tensordict 0.15 deprecates (removal in 0.17), kept for old code.

Each warns with a ``DeprecationWarning`` naming its replacement, as the reference does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from ._keys import NestedKey, key_tuple
from ._ops.traverse import MISSING, NO_DEFAULT


def _warn(name: str, replacement: str | None) -> None:
    instead = f" Use {replacement} instead." if replacement else ""
    warnings.warn(
        f"LazyStackedTensorDict.{name} is deprecated (tensordict 0.15) and will be removed in 0.17.{instead}",
        DeprecationWarning,
        stacklevel=3,
    )


def valid_keys(
    self: Any,
    include_nested: bool = False,
    leaves_only: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    *,
    sort: bool = False,
) -> Any:
    """Deprecated: :meth:`keys`, which takes the same arguments.

    Examples:
        >>> import torch, warnings
        >>> from tensorbatch import TensorDict, lazy_stack
        >>> with warnings.catch_warnings(record=True):
        ...     list(lazy_stack([TensorDict(a=torch.zeros(2))] * 2).valid_keys())
        ['a']
    """
    _warn("valid_keys()", "keys()")
    return self.keys(include_nested, leaves_only, is_leaf, sort=sort)


def hook_in(self: Any) -> None:
    """Deprecated: the callable applied to written values under ``torch.vmap`` (always ``None`` here).

    vmap sees lazy stacks through pytree (see the README), so there is no hook.
    """
    _warn("hook_in", None)
    return None


def hook_out(self: Any) -> None:
    """Deprecated: the callable applied to read values under ``torch.vmap`` (always ``None`` here)."""
    _warn("hook_out", None)
    return None


def get_nestedtensor(
    self: Any, key: NestedKey, default: Any = NO_DEFAULT, *, layout: torch.layout | None = None
) -> Any:
    """Deprecated: the members' values at ``key`` as one nested tensor (``torch.strided`` unless ``layout``).

    Use ``get(key, as_nested_tensor=True)`` (``torch.jagged`` by default). A member lacking ``key`` takes a
    tensor ``default`` as its value; any other ``default`` is returned as it is; without one, ``KeyError``.

    Raises:
        RuntimeError: when the stack dim is not 0 (nested tensors nest along their first dim).

    Examples:
        >>> import torch, warnings
        >>> from tensorbatch import TensorDict, lazy_stack
        >>> s = lazy_stack([TensorDict(a=torch.zeros(4)), TensorDict(a=torch.ones(5))])
        >>> with warnings.catch_warnings(record=True):
        ...     [t.tolist() for t in s.get_nestedtensor("a").unbind()]
        [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]]
    """
    _warn("get_nestedtensor()", "get(key, as_nested_tensor=True)")
    if self.stack_dim != 0:
        raise RuntimeError(
            f"get_nestedtensor: nested tensors nest along their first dim, so the stack dim must be "
            f"0 (it is {self.stack_dim})"
        )
    path = key_tuple(key)
    values = [td._get(path, MISSING) for td in self.tensordicts]
    for i, value in enumerate(values):
        if value is not MISSING:
            continue
        if default is NO_DEFAULT:
            self.tensordicts[i]._get(path)  # raises the KeyError naming the missing key
        if not isinstance(default, torch.Tensor):
            return default
        values[i] = default
    return torch.nested.nested_tensor(values, layout=layout or torch.strided)
