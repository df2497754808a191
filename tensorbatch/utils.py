"""Public helpers (only those tensordict exposes; no dumping ground)."""

from __future__ import annotations

from typing import Any

import torch

from ._errors import fmt_path
from ._keys import NestedKey, unravel_key, unravel_key_list, unravel_key_to_tuple
from ._ops.traverse import flat_leaves_like, is_td, named_leaves

__all__ = [
    "NestedKey", "assert_allclose_td", "assert_close", "is_tensor_collection", "unravel_key",
    "unravel_key_list", "unravel_key_to_tuple",
]


def is_tensor_collection(obj: Any) -> bool:
    """True for TensorDict instances (and, later, TensorClass instances) or their types."""
    return getattr(obj if isinstance(obj, type) else type(obj), "_is_tensor_collection", False)


def assert_close(actual: Any, expected: Any, rtol: float | None = None, atol: float | None = None,
                 equal_nan: bool = True, msg: str = "") -> bool:
    """Assert that two TensorDicts have the same keys, batch size and close leaves.

    Raises:
        AssertionError: naming the first differing key path.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.ones(2)}, batch_size=[2])
        >>> assert_close(td, td.clone())
        True
    """
    if not is_td(actual) or not is_td(expected):
        raise TypeError(f"assert_close expects two TensorDicts, got {type(actual).__name__} and "
                        f"{type(expected).__name__}")
    if actual.batch_size != expected.batch_size:
        raise AssertionError(f"batch sizes differ: {list(actual.batch_size)} vs {list(expected.batch_size)}. {msg}")
    try:
        others = flat_leaves_like(expected, actual)
    except KeyError as err:
        raise AssertionError(f"key sets differ: {err}. {msg}") from None
    for (path, a), b in zip(named_leaves(actual), others, strict=True):
        try:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
        except AssertionError as err:
            raise AssertionError(f"values differ at key {fmt_path(path)}: {err} {msg}") from None
    return True


assert_allclose_td = assert_close
