"""Private names of tensordict that libraries built on it (TorchRL 0.14) import, per module.

They are served only by the alias modules (``tensordict.utils._zip_strict``), never by tensorbatch's own
modules. Each is tensorbatch's equivalent of tensordict's private helper, with the behaviour callers rely on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from .._compat import pytree_nodes
from .._keys import unravel_key, unravel_key_list, unravel_key_to_tuple
from .._ops.traverse import NON_TENSOR_TYPES
from ..utils import default_is_leaf, is_leaf_nontensor, is_tensor_collection, is_tensorclass

_zip_strict = functools.partial(zip, strict=True)


def _unravel_key_to_tuple(key: Any) -> tuple[str, ...]:
    """The key's parts as a flat tuple; ``()`` for anything that is not a nested key (callers test for it)."""
    try:
        return unravel_key_to_tuple(key)
    except (KeyError, TypeError, ValueError, RuntimeError):
        return ()


def _shape(tensor: Any, nested_shape: bool = False) -> torch.Size:
    """A tensor's shape, -1 for the ragged dims of a nested tensor; a TensorDict's batch size."""
    if not isinstance(tensor, torch.Tensor):
        return tensor.shape  # type: ignore[no-any-return]
    if not tensor.is_nested:
        return tensor.shape
    if nested_shape:
        return tensor._nested_tensor_size()  # type: ignore[return-value]  # tensordict returns this tensor
    sizes = []
    for dim in range(tensor.ndim):
        try:
            sizes.append(tensor.size(dim))
        except RuntimeError:  # a ragged dim
            sizes.append(-1)
    return torch.Size(sizes)


def _getitem_batch_size(batch_size: Sequence[int], index: Any) -> torch.Size:
    """The batch size that indexing a TensorDict of ``batch_size`` with ``index`` gives."""
    probe = torch.zeros((), dtype=torch.bool).expand(*batch_size)  # no data: indexing it gives the shape
    return probe[index].shape


def _maybe_correct_neg_dim(dim: int, shape: Sequence[int] | None, ndim: int | None = None) -> int:
    """``dim`` counted from the front; IndexError outside ``[0, ndim)``."""
    if ndim is None:
        ndim = len(shape)  # type: ignore[arg-type]
    new_dim = dim + ndim if dim < 0 else dim
    if not 0 <= new_dim < ndim:
        if shape is not None:
            raise IndexError(f"Incompatible dim {new_dim} for tensordict with shape {shape}.")
        raise IndexError(f"Incompatible dim {new_dim} for tensordict with batch dims {ndim}.")
    return new_dim


def _is_non_tensor(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple(NON_TENSOR_TYPES))


def _is_tensorclass(cls: type) -> bool:
    return is_tensorclass(cls)


class _LeafAsList:
    """tensordict's ``_NESTED_TENSORS_AS_LISTS``: a falsy ``is_leaf`` marker that callers compare by identity.

    Here it is ``default_is_leaf`` (lazy stacks are not listed member by member).
    """

    def __init__(self, predicate: Callable[[type], bool]) -> None:
        self._predicate = predicate

    def __bool__(self) -> bool:
        return False

    def __call__(self, cls: type) -> bool:
        return self._predicate(cls)


_NESTED_TENSORS_AS_LISTS = _LeafAsList(default_is_leaf)
_NESTED_TENSORS_AS_LISTS_NONTENSOR = _LeafAsList(is_leaf_nontensor)


class _exclude_td_from_pytree:  # (tensordict's name)
    """While active, TensorDict types are pytree leaves (torch's pytree does not flatten them)."""

    def __init__(self) -> None:
        self.nodes: dict[type, Any] = {}

    def __enter__(self) -> None:
        nodes = pytree_nodes()
        for cls in list(nodes):
            if is_tensor_collection(cls):
                self.nodes[cls] = nodes.pop(cls)

    def __exit__(self, *exc: Any) -> None:
        pytree_nodes().update(self.nodes)
        self.nodes.clear()

    def set(self) -> None:
        self.__enter__()

    def unset(self) -> None:
        self.__exit__(None, None, None)


def _utils() -> dict[str, Any]:
    return {
        "_zip_strict": _zip_strict,
        "_unravel_key_to_tuple": _unravel_key_to_tuple,
        "_shape": _shape,
        "_getitem_batch_size": _getitem_batch_size,
        "_maybe_correct_neg_dim": _maybe_correct_neg_dim,
        "_is_non_tensor": _is_non_tensor,
        "_is_tensorclass": _is_tensorclass,
    }


# Public names of tensordict.base that are re-exports there: tensorbatch.base imports no backend (DESIGN.md), so
# only the alias module carries them.
_BASE_REEXPORTS = (
    "from_any",
    "from_csv",
    "from_dict",
    "from_h5",
    "from_json",
    "from_namedtuple",
    "from_pandas",
    "from_parquet",
    "from_struct_array",
    "from_tuple",
    "get_defaults_to_none",
    "is_tensor_collection",
    "set_get_defaults_to_none",
)


def _base() -> dict[str, Any]:
    import tensorbatch

    from ..base import TensorDictBase

    return {
        **{name: getattr(tensorbatch, name) for name in _BASE_REEXPORTS},
        "_ACCEPTED_CLASSES": (torch.Tensor, TensorDictBase),
        "_NESTED_TENSORS_AS_LISTS": _NESTED_TENSORS_AS_LISTS,
        "_NESTED_TENSORS_AS_LISTS_NONTENSOR": _NESTED_TENSORS_AS_LISTS_NONTENSOR,
        "_default_is_leaf": default_is_leaf,
        "_is_leaf_nontensor": is_leaf_nontensor,
        "_is_tensor_collection": is_tensor_collection,
    }


def _functional() -> dict[str, Any]:
    from .._collate import collate  # (tensorbatch.functional cannot import it: _collate imports functional)

    return {"collate": collate}


def _c() -> dict[str, Any]:
    return {
        "unravel_keys": unravel_key,
        "unravel_key": unravel_key,
        "unravel_key_list": unravel_key_list,
        "_unravel_key_to_tuple": _unravel_key_to_tuple,
    }


def _functional_modules() -> dict[str, Any]:
    return {"_exclude_td_from_pytree": _exclude_td_from_pytree}


# tensordict module -> its compat-only names (built when the alias module is made)
OVERLAYS: dict[str, Callable[[], dict[str, Any]]] = {
    "tensordict.utils": _utils,
    "tensordict.base": _base,
    "tensordict.functional": _functional,
    "tensordict._C": _c,
    "tensordict.nn.functional_modules": _functional_modules,
}


def names_for(fullname: str) -> dict[str, Any]:
    """The compat-only names of the alias module ``fullname``."""
    build = OVERLAYS.get(fullname)
    return build() if build is not None else {}


def iter_overlay_names() -> Iterator[tuple[str, str]]:
    """``(module, name)`` for every compat-only name (for tests)."""
    for module, build in OVERLAYS.items():
        for name in build():
            yield module, name
