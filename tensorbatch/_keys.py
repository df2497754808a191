"""Nested keys: a key is a ``str`` or a (possibly nested) tuple of ``str``."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, TypeAlias


class _NestedKeyType(type):
    """``isinstance(x, NestedKey)``: a ``str``, or a non-empty tuple of nested keys."""

    def __instancecheck__(cls, value: Any) -> bool:
        if type(value) is str:
            return True
        return type(value) is tuple and bool(value) and all(isinstance(v, cls) for v in value)


if TYPE_CHECKING:  # type checkers see the union, so that a plain str or tuple is a NestedKey for them
    NestedKey: TypeAlias = str | tuple[Any, ...]
else:

    class NestedKey(metaclass=_NestedKeyType):
        """A key of a TensorDict: a ``str``, or a tuple of nested keys (``("a", ("b",))`` is ``("a", "b")``).

        Use it in annotations and in ``isinstance`` checks.

        Examples:
            >>> from tensorbatch import NestedKey
            >>> isinstance("a", NestedKey), isinstance(("a", ("b",)), NestedKey)
            (True, True)
            >>> isinstance(("a", 1), NestedKey), isinstance((), NestedKey)
            (False, False)
        """


__all__ = [
    "KEY_SEPARATOR",
    "NestedKey",
    "key_tuple",
    "unravel_key",
    "unravel_key_list",
    "unravel_key_to_tuple",
    "unravel_keys",
]


ONLY_NESTED_KEYS = "Only NestedKeys are supported: "  # tensordict's phrase, which users match on


def key_tuple(key: NestedKey) -> tuple[str, ...]:
    """Return ``key`` as a flat tuple of strings, refusing anything that is not a key (the library's own check).

    Args:
        key: a string or a (possibly nested) tuple of strings.

    Returns:
        a non-empty tuple of strings.

    Raises:
        KeyError: if the key holds anything but strings, or is empty.

    Examples:
        >>> key_tuple(("a", ("b", "c")))
        ('a', 'b', 'c')
        >>> key_tuple("a")
        ('a',)
    """
    if type(key) is str:
        return (key,)
    if type(key) is tuple:
        if all(type(k) is str for k in key) and key:
            return key
        out: list[str] = []
        for k in key:
            out.extend(key_tuple(k))
        if not out:
            raise KeyError(
                f"{ONLY_NESTED_KEYS}keys must be a str or a non-empty (possibly nested) tuple of str, got ()"
            )
        return tuple(out)
    if isinstance(key, str):
        return (str(key),)
    raise KeyError(
        f"{ONLY_NESTED_KEYS}keys must be a str or a non-empty (possibly nested) tuple of str, "
        f"got {type(key).__name__} {key!r}"
    )


def _flat_parts(key: tuple[Any, ...], out: list[str]) -> bool:
    """Add the strings of a nested tuple key to ``out``; False at a part that is no str or non-empty tuple."""
    for part in key:
        if isinstance(part, str):
            out.append(part)
        elif not (isinstance(part, tuple) and part and _flat_parts(part, out)):
            return False
    return True


def unravel_key_to_tuple(key: Any) -> tuple[str, ...]:
    """Return ``key`` as a flat tuple of strings, or ``()`` when it is not a nested key.

    Examples:
        >>> unravel_key_to_tuple(("a", ("b", "c")))
        ('a', 'b', 'c')
        >>> unravel_key_to_tuple("a"), unravel_key_to_tuple(("a", 0)), unravel_key_to_tuple(0)
        (('a',), (), ())
    """
    if isinstance(key, str):
        return (key,)
    if not isinstance(key, tuple):
        return ()
    out: list[str] = []
    return tuple(out) if _flat_parts(key, out) else ()


def unravel_key(key: Any) -> Any:
    """Flatten a nested key; a one-element key becomes a plain string, a tuple that is no key ``()``.

    Raises:
        RuntimeError: if ``key`` is neither a str nor a tuple (as tensordict).

    Examples:
        >>> unravel_key(("a", ("b",)))
        ('a', 'b')
        >>> unravel_key(("a",)), unravel_key(("a", 0))
        ('a', ())
    """
    if isinstance(key, str):
        return key
    if not isinstance(key, tuple):
        raise RuntimeError("key should be a Sequence<NestedKey>")
    out: list[str] = []
    if not _flat_parts(key, out):
        return ()
    return out[0] if len(out) == 1 else tuple(out)


def unravel_key_list(keys: Any) -> list[NestedKey]:
    """Apply :func:`unravel_key` to each key of a list or tuple.

    Raises:
        TypeError: if ``keys`` is not a list or a tuple.
        RuntimeError: if one of them is not a nested key.

    Examples:
        >>> unravel_key_list(["a", ("b", ("c",))])
        ['a', ('b', 'c')]
    """
    if not isinstance(keys, (list, tuple)):
        raise TypeError(
            f"unravel_key_list(): incompatible function arguments: expected a list or a tuple of keys, got {type(keys)}"
        )
    out = []
    for key in keys:
        flat = unravel_key(key)
        if flat == ():
            raise RuntimeError("key should be a Sequence<NestedKey>")
        out.append(flat)
    return out


def unravel_keys(*keys: NestedKey) -> Any:
    """Unravel each key (deprecated in tensordict: use :func:`unravel_key` or :func:`unravel_key_list`).

    One key gives its unravelled form, several give a tuple of them.

    Examples:
        >>> import warnings
        >>> warnings.simplefilter("ignore", DeprecationWarning)
        >>> unravel_keys(("a", ("b",)), "c")
        (('a', 'b'), 'c')
    """
    warnings.warn(
        "unravel_keys is deprecated (tensordict removes it in 0.17): use unravel_key or unravel_key_list",
        DeprecationWarning,
        stacklevel=2,
    )
    if len(keys) == 1:
        return unravel_key(keys[0])
    return tuple(unravel_key(key) for key in keys)


KEY_SEPARATOR = "."
"""The separator ``flatten_keys``/``unflatten_keys`` (and the tabular exports) join nested keys with."""


def is_key(index: Any) -> bool:
    """True when ``index`` is a key (a str, or a non-empty tuple of keys), not a batch index.

    ``td["a", "b"]`` and ``td[("a", ("b", "c"))]`` read keys; ``td[(0, 1), :]`` indexes the batch.

    Examples:
        >>> is_key(("a", ("b", "c"))), is_key(((0, 1),)), is_key(())
        (True, False, False)
    """
    if type(index) is str:
        return True
    return type(index) is tuple and bool(index) and all(type(k) is str or is_key(k) for k in index)


def key_of(path: tuple[str, ...]) -> NestedKey:
    """Public form of a path: a string for one level, else the tuple."""
    return path[0] if len(path) == 1 else path
