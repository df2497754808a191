"""Error helpers. Messages say what failed, where (the key path), and expected vs got.

Our errors are the builtin types that tensordict raises (``KeyError``, ``RuntimeError``,
``ValueError``, ``IndexError``, ``TypeError``), so users' ``except`` clauses keep working.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

LOCKED_MSG = (
    "Cannot modify locked TensorDict. For in-place modification, consider using the `set_()` method "
    "and make sure the key is present."
)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_stacklevel(also: tuple[str, ...] = ()) -> int:
    """Stack level of the first frame outside tensorbatch (and the folders ``also``): warnings point at user code."""
    frame: Any = sys._getframe(1)
    level = 1
    skip = (_PACKAGE_DIR, *also)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    return level


def fmt_path(path: Any) -> str:
    """Format a key path the way users type it: ``'a'`` or ``('a', 'b')``."""
    if type(path) is tuple and len(path) == 1:
        path = path[0]
    return repr(path)


def fmt_shape(shape: Any) -> str:
    """Format a shape as a short list: ``[3, 4]``."""
    return str(list(shape))


def add_path_note(err: BaseException, what: str, path: tuple[str, ...]) -> None:
    """Attach ``while <what> at key <path>`` to an exception, once (at the innermost frame)."""
    if not getattr(err, "_tb_noted", False):
        err.add_note(f"while {what} at key {fmt_path(path)}")
        with contextlib.suppress(AttributeError):  # exceptions with __slots__
            err._tb_noted = True  # type: ignore[attr-defined]


def missing_key(path: tuple[str, ...], available: Iterable[str], cls_name: str = "TensorDict") -> KeyError:
    """KeyError for a key path that is not present.

    The message starts with tensordict's (``key "b" not found in TensorDict with keys [...]``, naming the
    missing level, which users match on); a nested path follows in full. Every string in it is in double
    quotes: a KeyError's ``str`` is the ``repr`` of its message, which would escape single quotes mixed in.
    """
    where = "" if len(path) == 1 else f" (key path ({', '.join(map(_dq, path))}))"
    keys = ", ".join(_dq(k) for k in sorted(map(str, available)))
    return KeyError(f"key {_dq(path[-1])} not found in {cls_name} with keys [{keys}]{where}")


def not_in_dest(err: KeyError, path: tuple[str, ...]) -> KeyError:
    """``update_``'s missing key: the missing-key message, then tensordict's sentence (users match on it)."""
    key = path[0] if len(path) == 1 else f"({', '.join(map(_dq, path))})"
    return KeyError(
        f"{err.args[0]}; The key {key} was not found in the dest tensordict (update_ writes existing keys only)"
    )


def _dq(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


_SCALAR_HINT = (
    " Python scalars are stored as 0-dim tensors: to store a scalar in a tensordict with a non-empty batch size, "
    "expand it to the batch size or wrap it in NonTensorData (in a tensorclass, the nocast option stores scalars "
    "as they are)."
)


def _size(shape: Any) -> str:
    """A shape as ``torch.Size`` prints it: ``torch.Size([3, 4])``."""
    return f"torch.Size({list(shape)})"


def batch_mismatch(batch_size: Any, path: tuple[str, ...], shape: Any) -> RuntimeError:
    """RuntimeError for a value whose leading dims do not match its node's batch size.

    tensordict's text, which users match on; where tensordict names the last key only, the full
    path stands in the same slot (``for key ('n', 'x')``). A 0-dim value gets tensordict's hint.
    """
    msg = (
        f"batch dimension mismatch, got self.batch_size={_size(batch_size)} and value.shape={_size(shape)} "
        f"for key {fmt_path(path)}. The leading dimensions of a value must match the batch size."
    )
    return RuntimeError(msg + _SCALAR_HINT if len(shape) == 0 else msg)


def batch_size_refused(batch_size: Any, path: tuple[str, ...], shape: Any, kind: str = "Tensor") -> RuntimeError:
    """The ``batch_size`` setter's refusal of the entry at ``path`` (of type name ``kind``): tensordict's text.

    tensordict names the entry by its last key; a nested one is named here by its full path.
    """
    name = path[0] if len(path) == 1 else fmt_path(path)
    return RuntimeError(
        f"the {kind} {name} has shape {_size(shape)} which is incompatible with the batch-size {_size(batch_size)}."
    )


def locked() -> RuntimeError:
    """RuntimeError for a structural write to a locked TensorDict."""
    return RuntimeError(LOCKED_MSG)


def key_sets_differ(path: tuple[str, ...], mine: Iterable[str], theirs: Iterable[str]) -> KeyError:
    """KeyError for binary operations whose operands have different keys."""
    a, b = set(mine), set(theirs)
    where = "" if not path else f" under {fmt_path(path)}"
    return KeyError(  # tensordict's sentences (sets printed sorted), and where in the tree
        f"keys in tensordicts mismatch{where}. The first TD has keys {_set_repr(a - b)} that the second does not "
        f"have. The second TD has keys {_set_repr(b - a)} that the first does not have."
    )


def _set_repr(keys: set[str]) -> str:
    return "{" + ", ".join(repr(k) for k in sorted(keys)) + "}" if keys else "set()"


class InplaceWriteError(RuntimeError, ValueError):
    """An in-place write whose value cannot fill the target (tensordict raises a Value+Runtime error)."""


class StackDimError(IndexError, RuntimeError):
    """A stack dim out of range: an IndexError as torch raises, and the RuntimeError tensordict raises."""


class NotAMappingError(TypeError, AttributeError):
    """A value given where a mapping or TensorDict is required.

    A TypeError, and an AttributeError too: tensordict lets ``value.items()`` fail there.
    """


def not_a_mapping(what: str, value: Any) -> NotAMappingError:
    """The error for a non-mapping ``value`` given to ``what``."""
    return NotAMappingError(f"{what} expects a mapping or a TensorDict, got {type(value).__name__}")


def key_through_leaf(path: tuple[str, ...], depth: int, leaf: Any) -> ValueError:
    """ValueError for a nested key that passes through a non-TensorDict value."""
    return ValueError(
        f"key {fmt_path(path)}: {fmt_path(path[:depth])} is a {type(leaf).__name__}, not a TensorDict, "
        f"so it has no entry {path[depth]!r}"
    )
